package gateway

// With the large set in the DUT (Config.LargeSet): what linuxfp costs while nothing
// happens, and how soon an `ipset add` reaches its fast path. A set linuxfp had to re-read to
// notice a change would cost it CPU all the time, the more the larger the set; one whose
// changes it is told of costs nothing until one comes.

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Idle is linuxfp with the large set in the DUT.
type Idle struct {
	Ruleset string       `json:"ruleset"`
	Mode    harness.Mode `json:"mode"`
	// IPSetWatch: how linuxfp follows ipset changes (its status's ipset_watch).
	IPSetWatch string `json:"ipset_watch"`
	// Over Seconds with no traffic and no change: linuxfp's CPU time (utime + stime of
	// /proc/PID/stat, processCPU: ticks of 10 ms), as a share of one core, and what its status counted
	// meanwhile (ipset reads, events, applies: any is work with nothing to do).
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CoreShare  float64 `json:"core_share"`
	IPSetReads uint64  `json:"ipset_reads"`
	Events     uint64  `json:"events"`
	Applies    uint64  `json:"applies"`
	// AddToDrop: from the exit of `ipset add <dst>` to the first packet to dst that in0's filter
	// dropped, while gen streams to dst (a UDP packet every 100 us, fast-pathed before the add).
	// AddSamples were taken; AddTimeouts of them saw no drop within setAddWait. AddProblem:
	// why the samples stopped early.
	AddToDrop   *harness.Distribution `json:"add_to_drop_ms,omitempty"`
	AddSamples  int                   `json:"add_samples,omitempty"`
	AddTimeouts int                   `json:"add_timeouts,omitempty"`
	AddProblem  string                `json:"add_problem,omitempty"`
}

const (
	// setAddWait: how long a sample waits for the first drop after `ipset add`.
	setAddWait = 30 * time.Second
	// quietFor: linuxfp counts as settled after this long without an event, an ipset read or
	// an apply; quietWait bounds the wait.
	quietFor  = time.Second
	quietWait = 20 * time.Second
)

// measureIdle measures, in the first linuxfp mode of the run, with the DUT's current ruleset
// (the large set): linuxfp's CPU over cfg.Idle with no traffic and no change, then cfg.SetAdds
// `ipset add`s timed to the fast path's first drop.
func (g *gatewayRun) measureIdle(b *harness.Pipeline) error {
	var mode harness.Mode
	for _, m := range b.Cfg.Modes {
		if m.RunsLinuxfp() {
			mode = m
			break
		}
	}
	if mode == "" || (g.cfg.Idle <= 0 && g.cfg.SetAdds <= 0) {
		return nil
	}
	idle := &Idle{Ruleset: g.current.Name, Mode: mode}
	g.idle = idle
	return b.WithMode(mode, func() error {
		l := b.DUT.Lfp
		settle(l)
		if g.cfg.Idle > 0 {
			if err := idle.measureCPU(b, l, g.cfg.Idle); err != nil {
				return err
			}
			b.Log.Info("linuxfp idle", "ruleset", idle.Ruleset, "core_share", fmt.Sprintf("%.4f", idle.CoreShare),
				"ipset_reads", idle.IPSetReads, "events", idle.Events, "ipset_watch", idle.IPSetWatch)
		}
		var took []time.Duration
		for i := range g.cfg.SetAdds {
			d, ok, problem, err := g.setAdd(b, l, permittedAddr(i))
			if err != nil {
				return fmt.Errorf("ipset add, sample %d: %w", i+1, err)
			}
			if problem != "" {
				idle.AddProblem = problem
				b.Log.Warn("ipset add: no more samples", "problem", problem)
				break
			}
			idle.AddSamples++
			if !ok {
				idle.AddTimeouts++
				continue
			}
			took = append(took, d)
			b.Log.Info("ipset add reached the fast path", "sample", i+1, "took", d.Round(time.Microsecond))
		}
		if len(took) > 0 {
			d := harness.DistributionOf(took)
			idle.AddToDrop = &d
		}
		return nil
	})
}

// measureCPU reads linuxfp's CPU time and status counters around d of nothing: no traffic, no
// change, no status request.
func (idle *Idle) measureCPU(b *harness.Pipeline, l *testbed.Linuxfp, d time.Duration) error {
	st0, err := statusWithin(l, setAddWait)
	if err != nil {
		return err
	}
	idle.IPSetWatch = st0.IPSetWatch
	c0, err := harness.ProcessCPU(st0.PID)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := harness.SleepCtx(b.Ctx, d); err != nil {
		return err
	}
	c1, err := harness.ProcessCPU(st0.PID)
	if err != nil {
		return err
	}
	idle.Seconds = time.Since(t0).Seconds()
	st1, err := statusWithin(l, setAddWait)
	if err != nil {
		return err
	}
	idle.CPUSeconds = (c1 - c0).Seconds()
	idle.CoreShare = idle.CPUSeconds / idle.Seconds
	idle.IPSetReads = st1.IPSetReads - st0.IPSetReads
	idle.Events = st1.Events - st0.Events
	idle.Applies = st1.Applies - st0.Applies
	return nil
}

// setAdd is one sample: gen streams to dst (a destination the set lacks) until in0 fast-paths it,
// then `ipset add` puts dst into the set; it returns how long after the command's exit in0's
// filter first dropped a packet (ok: it did within setAddWait), and takes dst out again. A
// stream the fast path does not forward is a problem, not an error: no sample can be taken.
// linuxfp's status may be slow to answer while it applies a change to a large set: a request
// that fails is polled again until the sample's deadline.
func (g *gatewayRun) setAdd(b *harness.Pipeline, l *testbed.Linuxfp, dst netip.Addr) (took time.Duration, ok bool, problem string, err error) {
	var lastErr error
	in0 := func() *status.Interface {
		it, err := l.Interface("in0")
		if err != nil {
			lastErr = err
			return nil
		}
		return it
	}
	var it *status.Interface
	for t0 := time.Now(); it == nil; time.Sleep(10 * time.Millisecond) {
		if it = in0(); it == nil && time.Since(t0) > setAddWait {
			return 0, false, fmt.Sprintf("linuxfp's status: %v", lastErr), nil
		}
	}
	stop := harness.StartStream(b.TB.Gen, dst.String())
	defer stop()
	forwarded := it.Forwarded.Packets
	for t0 := time.Now(); it == nil || it.Forwarded.Packets <= forwarded; time.Sleep(time.Millisecond) {
		if time.Since(t0) > setAddWait {
			return 0, false, fmt.Sprintf("in0 fast-pathed none of a stream to %s within %s (status: %v)", dst, setAddWait, lastErr), nil
		}
		it = in0()
	}
	dropped := it.Dropped.Packets
	if _, err := b.TB.DUT.Run("ipset", "add", gatewaySet, dst.String()); err != nil {
		return 0, false, "", err
	}
	exit := time.Now()
	for time.Since(exit) < setAddWait {
		if it := in0(); it != nil && it.Dropped.Packets > dropped {
			took, ok = time.Since(exit), true
			break
		}
		time.Sleep(200 * time.Microsecond)
	}
	stop()
	if _, err := b.TB.DUT.Run("ipset", "del", gatewaySet, dst.String()); err != nil {
		return 0, false, "", err
	}
	settle(l)
	return took, ok, "", nil
}

// statusWithin asks linuxfp for its status until it answers, for up to d: it may be slow to
// while it applies a change with a large set.
func statusWithin(l *testbed.Linuxfp, d time.Duration) (*status.Status, error) {
	for t0 := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		st, err := l.Client.Status()
		if err == nil || time.Since(t0) > d {
			return st, err
		}
	}
}

// settle waits until linuxfp has been quiet (no event, ipset read or apply, not busy) for
// quietFor, at most quietWait. Not settling is no error, nor is a status request that fails
// meanwhile: what follows measures what linuxfp did.
func settle(l *testbed.Linuxfp) {
	var last *status.Status
	since := time.Now()
	for t0 := time.Now(); time.Since(t0) < quietWait; time.Sleep(50 * time.Millisecond) {
		st, err := l.Client.Status()
		if err != nil {
			since = time.Now()
			continue
		}
		if last == nil || st.Busy || st.Events != last.Events || st.IPSetReads != last.IPSetReads || st.Applies != last.Applies {
			since = time.Now()
		}
		last = st
		if time.Since(since) >= quietFor {
			return
		}
	}
}
