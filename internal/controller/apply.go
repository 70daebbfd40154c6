package controller

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/graph"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// steps is what brings the installed programs to a plan, by ifindex, in order.
type steps struct {
	// forget: the device is gone, or its ifindex is another device's now; the kernel detached
	// its program with it.
	forget []int
	// remove: the plan wants no program there.
	remove []int
	// install: a new program, or one whose spec changed (had: one is installed now).
	install []installStep
}

type installStep struct {
	idx int
	had bool
}

// stepsTo compares what is installed with the plan. It is the one place that decides whether an
// interface's program changes: an equal spec is left alone.
func stepsTo(installed map[int]dataplane.Installed, plan *graph.Plan) steps {
	var s steps
	for _, idx := range slices.Sorted(maps.Keys(installed)) {
		in, it := installed[idx], plan.Interfaces[idx]
		switch {
		case it == nil || it.Name != in.Spec.Name:
			s.forget = append(s.forget, idx)
		case it.Spec == nil:
			s.remove = append(s.remove, idx)
		}
	}
	for _, idx := range slices.Sorted(maps.Keys(plan.Interfaces)) {
		it := plan.Interfaces[idx]
		if it.Spec == nil {
			continue
		}
		before, had := installed[idx]
		if had && before.Spec == *it.Spec {
			continue
		}
		s.install = append(s.install, installStep{idx: idx, had: had})
	}
	return s
}

// apply brings the data plane to plan: removals first, then the data, then the programs. It
// returns how many programs it installed, replaced or removed, and whether the data plane
// follows the plan's data (synced: the fence may open). An interface whose program could not be
// installed has none (its packets are Linux's), so only a failed removal or map update leaves
// synced false (and the gate closed, for the latter).
func (c *Controller) apply(snap *observe.Snapshot, plan *graph.Plan) (programs int, synced bool, err error) {
	installed := c.dp.Installed()
	st := stepsTo(installed, plan)
	var errs []error
	// Removing first is the conservative order: a packet then goes to Linux.
	for _, idx := range st.forget {
		c.dp.Forget(idx)
		c.log.Info("interface gone; its program went with it", "interface", installed[idx].Spec.Name)
		programs++
	}
	for _, idx := range st.remove {
		it := plan.Interfaces[idx]
		if err := c.dp.Remove(idx); err != nil {
			errs = append(errs, err)
		}
		c.log.Info("removed fast path: packets go to Linux", "interface", it.Name, "why", strings.Join(it.Notes, "; "))
		programs++
	}
	synced = len(errs) == 0
	if err := c.dp.Sync(plan.Data); err != nil {
		errs = append(errs, fmt.Errorf("update maps: %w", err))
		synced = false
	}
	n, ierrs := c.install(snap, plan, st.install)
	return programs + n, synced, errors.Join(append(errs, ierrs...)...)
}

// install installs or replaces the programs of steps: loaded (verified) in parallel, one per
// CPU, as a change to a bridge or a burst of new interfaces may need several.
func (c *Controller) install(snap *observe.Snapshot, plan *graph.Plan, steps []installStep) (int, []error) {
	type job struct {
		installStep
		inst dataplane.Installed
		err  error
	}
	jobs := make([]*job, len(steps))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for i, s := range steps {
		j := &job{installStep: s}
		jobs[i] = j
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			j.inst, j.err = c.dp.Install(*plan.Interfaces[j.idx].Spec)
		}()
	}
	wg.Wait()
	programs := 0
	var errs []error
	var refused []int
	for _, j := range jobs {
		it := plan.Interfaces[j.idx]
		programs++
		if j.err != nil && interfaceGone(j.idx, j.err) {
			c.dp.Forget(j.idx)
			c.log.Info("interface gone; its program went with it", "interface", it.Name)
			it.Spec = nil
			continue
		}
		if j.err != nil {
			if c.refused.add(snap.Links[j.idx], j.err) {
				refused = append(refused, j.idx) // decided again below, knowing it
				continue
			}
			errs = append(errs, j.err)
			it.Notes = append(it.Notes, "install failed: "+j.err.Error())
			it.Spec = nil
			// The program it ran was made for a configuration Linux no longer has.
			if j.had {
				if err := c.dp.Remove(j.idx); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		verb := "installed"
		if j.had {
			verb = "replaced (atomic link update)"
		}
		c.log.Info(verb+" fast path", "interface", it.Name, "hook", it.Spec.Hook,
			"modules", strings.Join(it.Spec.Modules(), ","), "families", strings.Join(families(*it.Spec), ","),
			"program", j.inst.ProgramID, "notes", strings.Join(it.Notes, "; "))
	}
	if len(refused) > 0 {
		n, ferrs := c.fallBack(snap, plan, refused)
		programs += n
		errs = append(errs, ferrs...)
	}
	return programs, errs
}

// logDecisions logs, once per change, why an interface gets no program and whether it is a
// redirect target (installs and removals are logged where they happen).
func (c *Controller) logDecisions(plan *graph.Plan) {
	c.mu.Lock()
	old := c.plan
	c.mu.Unlock()
	for idx, it := range plan.Interfaces {
		var was *graph.Interface
		if old != nil {
			was = old.Interfaces[idx]
		}
		if it.Spec == nil && (was == nil || !slices.Equal(was.Notes, it.Notes)) {
			c.log.Info("not accelerated", "interface", it.Name, "why", strings.Join(it.Notes, "; "))
		}
		if it.Name == "lo" {
			continue // Linux's own: never an egress of forwarded packets
		}
		if was == nil || was.Egress != it.Egress || was.TCEgress != it.TCEgress || was.TCPeer != it.TCPeer {
			switch {
			case it.Egress:
				c.log.Info("egress ready for XDP redirect", "interface", it.Name)
			case it.TCEgress:
				// See graph.tcAfterXDP for who can send there.
				c.log.Info("egress ready for tc redirect only", "interface", it.Name, "peer", it.TCPeer, "why_not_xdp", it.EgressNote)
			default:
				c.log.Info("egress not a redirect target: its packets go to Linux", "interface", it.Name, "why", it.EgressNote)
			}
		}
	}
	// --hook xdp where no interface can take native XDP: say so once, not silently run idle.
	if c.cfg.Options.Hook == graph.HookXDP && !c.warnedNoXDP {
		accelerated := false
		for _, it := range plan.Interfaces {
			accelerated = accelerated || it.Spec != nil
		}
		if !accelerated && len(plan.Interfaces) > 1 {
			c.warnedNoXDP = true
			c.log.Warn("--hook xdp: no interface here can run native XDP, nothing is accelerated (--hook auto uses tc where XDP is missing)")
		}
	}
}

func families(s dataplane.Spec) []string {
	var f []string
	if s.Router4 {
		f = append(f, "ipv4")
	}
	if s.Router6 {
		f = append(f, "ipv6")
	}
	return f
}
