// Package scheduler holds a stand-in for the scheduler's probed method.
package scheduler

import (
	"context"
	"time"
)

// CycleState stands for framework.CycleState.
type CycleState struct{ n int }

// Framework stands for framework.Framework (an interface: two words).
type Framework interface{ Name() string }

// QueuedPodInfo stands for framework.QueuedPodInfo.
type QueuedPodInfo struct{ Attempts int }

// PodsToActivate stands for framework.PodsToActivate.
type PodsToActivate struct{ n int }

// Status stands for framework.Status.
type Status struct{ code int }

// ScheduleResult has a float before SuggestedHost: floats take float
// registers, so the host's string still starts at result word 0.
type ScheduleResult struct {
	Score          float64
	SuggestedHost  string
	EvaluatedNodes int
}

// Scheduler stands for the scheduler.
type Scheduler struct{ cycles int }

type named struct{}

func (named) Name() string { return "fixture" }

// SchedulingCycleFor calls schedulingCycle as the scheduler does.
func (sched *Scheduler) SchedulingCycleFor(ctx context.Context, start time.Time) (ScheduleResult, *QueuedPodInfo, *Status) {
	return sched.schedulingCycle(ctx, &CycleState{}, named{}, &QueuedPodInfo{}, start, &PodsToActivate{})
}

// schedulingCycle has the real one's signature: podInfo at word 6, the
// result's SuggestedHost at word 0.
//
//go:noinline
func (sched *Scheduler) schedulingCycle(ctx context.Context, state *CycleState, fwk Framework, podInfo *QueuedPodInfo, start time.Time, podsToActivate *PodsToActivate) (ScheduleResult, *QueuedPodInfo, *Status) {
	sched.cycles += state.n + podsToActivate.n + podInfo.Attempts
	if ctx == nil || start.IsZero() {
		return ScheduleResult{}, nil, &Status{code: 1}
	}
	return ScheduleResult{Score: 1, SuggestedHost: fwk.Name(), EvaluatedNodes: 1}, podInfo, nil
}
