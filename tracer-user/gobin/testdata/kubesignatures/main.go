// Command kubesignatures is tracer-gobin's stand-in for Kubernetes functions
// that podtrace probes (written for these tests; no Kubernetes code): its
// module is named k8s.io/kubernetes so that its functions carry the probed
// names, and their signatures differ from every real release's on purpose,
// to check where the generator places (or refuses) each argument.
package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/kubernetes/pkg/kubelet"
	"k8s.io/kubernetes/pkg/kubelet/volumemanager"
	"k8s.io/kubernetes/pkg/scheduler"
)

func main() {
	ctx := context.Background()
	pod := &kubelet.Pod{Name: "p"}
	kl := &kubelet.Kubelet{}
	terminal, err := kl.SyncPod(ctx, 1, "note", pod, nil, nil)
	kl.HandlePodAdditions([2]int{1, 2}, 0.5, []*kubelet.Pod{pod})
	vm := volumemanager.New()
	err2 := vm.WaitForAttachAndMount(ctx, pod)
	sched := &scheduler.Scheduler{}
	result, info, status := sched.SchedulingCycleFor(ctx, time.Now())
	fmt.Println(terminal, err, err2, result.SuggestedHost, info, status)
}
