package controller

import (
	"time"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// The fence (bpf/include/fence.h, dataplane/gate.go): the watchers count each configuration
// change in the data plane as Linux makes it, and the fast path hands a unit's packets to Linux
// until the data plane follows the count. update reads the count before it reads Linux's state,
// and opens the fence with it only once the data plane follows that state.

// openFence lets the fast path decide again what the changes counted up to seq had fenced, for
// a data plane brought to a state read from t0 on. Sysctl writes that matter are stored just
// after they are counted: only a read started late enough has seen them (SysctlSettled).
//
// The families' units open only up to the changes whose events were taken in (taken.go),
// unless full: the state was read whole, which covers every change counted before seq was read.
func (c *Controller) openFence(t0 time.Time, seq dataplane.FenceSeq, full bool) {
	if full {
		c.taken.all(seq)
	}
	c.taken.limit(&seq)
	if !t0.IsZero() && !c.w.SysctlSettled(t0, seq[dataplane.FenceSysctl]) {
		seq[dataplane.FenceSysctl] = c.dp.Done()[dataplane.FenceSysctl]
	}
	if err := c.dp.OpenFence(seq); err != nil {
		c.log.Error("open fence", "err", err)
	}
}

// sysctlOnly opens the fence's sysctl unit for the first n writes, none of which the fast path
// follows (see Watcher.OnSysctlOnly): no read is needed.
func (c *Controller) sysctlOnly(n uint64) {
	seq := c.dp.Done()
	seq[dataplane.FenceSysctl] = n
	c.openFence(time.Time{}, seq, false)
}

// fenceRecheck: how long the fence may stay closed after an apply before the controller reads
// everything again on its own (a wake-up may have been lost: a full ring buffer).
const fenceRecheck = 100 * time.Millisecond

// watchFence re-reads everything if the fence is still closed fenceRecheck after an apply that
// left it closed and no other apply came in between. The changes that closed it normally wake
// the controller themselves; this only bounds how long a lost wake-up keeps packets with Linux.
func (c *Controller) watchFence() {
	fenced, err := c.dp.Fenced()
	if err != nil || fenced == 0 {
		return
	}
	c.mu.Lock()
	seq := c.seq
	c.mu.Unlock()
	time.AfterFunc(fenceRecheck, func() {
		c.mu.Lock()
		idle := c.seq == seq
		c.mu.Unlock()
		if f, err := c.dp.Fenced(); idle && err == nil && f != 0 {
			c.w.Wake(observe.DirtyAll)
		}
	})
}

// Retries of a failed apply: from applyRetryMin, doubling up to applyRetryMax. An event retries
// at once.
const (
	applyRetryMin = time.Second
	applyRetryMax = time.Minute
)

// applyFailed records an apply that did not bring the data plane to Linux's configuration. The
// data plane has already handed what it could not apply to Linux (the gate, a removed
// program); the error is logged when the failure starts, and the apply is retried later.
func (c *Controller) applyFailed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Logged once per failure; status shows the latest error (a retry may fail differently).
	if c.applyErr == "" {
		c.applyErrSince = time.Now()
		c.log.Error("apply failed: what it governs goes to Linux until an apply succeeds",
			"families_to_linux", c.dp.Failed().String(), "err", err)
	} else if msg := err.Error(); msg != c.applyErr {
		c.log.Debug("apply failed again", "families_to_linux", c.dp.Failed().String(), "err", err)
	}
	c.applyErr = err.Error()
	c.applyRetry = min(max(2*c.applyRetry, applyRetryMin), applyRetryMax)
	if c.retryTimer != nil {
		c.retryTimer.Stop()
	}
	c.retryTimer = c.w.WakeAfter(c.applyRetry, observe.DirtyAll)
}

// applySucceeded: the data plane follows Linux's configuration again.
func (c *Controller) applySucceeded() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retryTimer != nil {
		c.retryTimer.Stop()
		c.retryTimer = nil
	}
	c.applyRetry = 0
	if c.applyErr != "" {
		c.log.Info("applied after a failure: the fast path follows Linux's configuration again",
			"failed_for", time.Since(c.applyErrSince).Round(time.Millisecond))
		c.applyErr = ""
	}
}
