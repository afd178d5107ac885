// Package volumemanager holds a stand-in for the volume manager's probed
// method, its Pod parameter renamed.
package volumemanager

import (
	"context"
	"errors"

	"k8s.io/kubernetes/pkg/kubelet"
)

type volumeManager struct{ waits int }

// New returns the stand-in volume manager.
func New() *volumeManager { return &volumeManager{} }

// WaitForAttachAndMount names its Pod p, not pod: the generator must refuse.
//
//go:noinline
func (vm *volumeManager) WaitForAttachAndMount(ctx context.Context, p *kubelet.Pod) error {
	vm.waits++
	if p == nil || ctx == nil {
		return errors.New("no pod")
	}
	return nil
}
