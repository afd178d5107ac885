// Package kubelet holds stand-ins for the kubelet's probed methods.
package kubelet

import "context"

// Pod stands for v1.Pod.
type Pod struct{ Name string }

// PodStatus stands for kubecontainer.PodStatus.
type PodStatus struct{ IP string }

// SyncPodType stands for kubetypes.SyncPodType.
type SyncPodType int

// Kubelet stands for the kubelet.
type Kubelet struct{ seen int }

// SyncPod has the real one's parameters (receiver, ctx, updateType, pod,
// mirrorPod, podStatus) with a string inserted before pod: pod moves from
// word 4 to word 6.
//
//go:noinline
func (kl *Kubelet) SyncPod(ctx context.Context, updateType SyncPodType, note string, pod, mirrorPod *Pod, podStatus *PodStatus) (isTerminal bool, err error) {
	kl.seen += len(note) + len(pod.Name) + int(updateType)
	if mirrorPod != nil || podStatus != nil || ctx == nil {
		return true, nil
	}
	return false, nil
}

// HandlePodAdditions takes pods after an array of two (never in registers:
// on the stack) and a float (a float register): pods stays at word 1.
//
//go:noinline
func (kl *Kubelet) HandlePodAdditions(weights [2]int, scale float64, pods []*Pod) {
	kl.seen += weights[0] + int(scale*10) + len(pods)
}
