// Package controller is `linuxfp run`: it follows Linux's state by events, rebuilds the graph and
// brings the data plane to it, and answers status queries.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linuxfp/linuxfp/internal/conntrack"
	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/graph"
	"github.com/linuxfp/linuxfp/internal/observe"
	"github.com/linuxfp/linuxfp/internal/status"
)

// Config configures Run.
type Config struct {
	Options graph.Options
	Log     *slog.Logger
	// Quiet and MaxDelay coalesce bursts of events: the data plane is rebuilt once no event
	// arrived for Quiet, or MaxDelay after the first one, whichever is first.
	Quiet    time.Duration
	MaxDelay time.Duration
}

// Controller holds the running state.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	dp      *dataplane.Dataplane
	obs     *observe.Observer
	w       *observe.Watcher
	started time.Time

	mu      sync.Mutex
	plan    *graph.Plan
	links   map[int]observe.Link
	backend string           // netfilter backend
	owned   map[int][]uint32 // every program id linuxfp installed, per ifindex (until it is gone)
	refused refusals         // hooks the kernel refused programs at (refused.go)
	events  uint64
	seq     uint64
	changes []status.Change

	readFailures int

	fdb          map[fdbKey]int // learned FDB entries the data plane may refresh (see refreshFDB)
	fdbRefreshes uint64
	// ct: ctnetlink, to mark the TCP connections the fast path takes liberal (see setLiberal).
	ct              *conntrack.Client
	ctLiberal       atomic.Uint64
	ctLiberalFailed atomic.Uint64
	// pollSets: the filter's rules use ipsets, which send no events: re-read them every second.
	lastFilter   *observe.FilterState
	pollSets     atomic.Bool
	setsReadTime atomic.Int64
	// busy: a reaction to events is being applied (status says so: benchmarks wait for it).
	busy atomic.Bool
}

// ipset sends no netlink notification and this kernel allows no tracing or LSM BPF program
// that could see its commands, so while rules use sets they are re-read every ipsetPollMin, or
// 20 times as long as a read took (a large set costs at most ~5% of a CPU), at most ipsetPollMax.
const (
	ipsetPollMin = 50 * time.Millisecond
	ipsetPollMax = time.Second
)

const keepChanges = 4096

// Run runs the controller until ctx is cancelled, then detaches everything.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Quiet == 0 {
		cfg.Quiet = 2 * time.Millisecond
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = 20 * time.Millisecond
	}
	log := cfg.Log
	// One controller per namespace: the status socket is the lock.
	ln, err := net.Listen("unix", status.SocketName)
	if err != nil {
		if errors.Is(err, syscallEADDRINUSE) {
			return fmt.Errorf("linuxfp is already running in this network namespace (see linuxfp status)")
		}
		return fmt.Errorf("listen on %s: %w", status.SocketName, err)
	}
	defer ln.Close()

	c := &Controller{cfg: cfg, log: log, started: time.Now(), owned: map[int][]uint32{}, refused: refusals{}}
	// Subscribe before the first read, so no change in between is missed.
	c.w, err = observe.NewWatcher(ctx, log)
	if err != nil {
		return err
	}
	defer c.w.Close()
	c.obs, err = observe.NewObserver()
	if err != nil {
		return err
	}
	defer c.obs.Close()
	c.dp, err = dataplane.New(log)
	if err != nil {
		return fmt.Errorf("create data plane: %w (is this root, with BPF available?)", err)
	}
	defer func() {
		// Detach every program: traffic goes back to Linux as it was.
		if err := c.dp.Close(); err != nil {
			log.Error("detach", "err", err)
		}
		log.Info("stopped; all programs detached")
	}()

	if err := c.dp.ReadFDBRefreshes(c.refreshFDB); err != nil {
		return err
	}
	if c.ct, err = conntrack.Dial(); err != nil {
		return err
	}
	defer c.ct.Close()
	if err := c.dp.ReadCTRequests(c.setLiberal); err != nil {
		return err
	}
	if err := c.dp.ReadTCRequests(func(ifindex int) { go c.attachCompanion(ifindex) }); err != nil {
		return err
	}

	srv := &http.Server{Handler: c.handler()}
	go srv.Serve(ln)
	defer srv.Close()

	go func() {
		t := time.NewTimer(ipsetPollMin)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				t.Reset(min(max(ipsetPollMin, 20*time.Duration(c.setsReadTime.Load())), ipsetPollMax))
				if c.pollSets.Load() {
					select {
					case c.w.C <- observe.Event{Dirty: observe.DirtyIPSet, At: time.Now()}:
					default:
					}
				}
			}
		}
	}()
	log.Info("linuxfp running", "pid", os.Getpid(), "hook", cfg.Options.Hook,
		"sysctl_watch", c.w.SysctlMethod)
	if err := c.react(observe.DirtyAll, time.Now(), time.Now(), 1); err != nil {
		return err
	}
	for {
		var ev observe.Event
		select {
		case <-ctx.Done():
			return nil
		case err := <-c.w.Failed:
			// Without events the fast path would follow a configuration nobody watches: stop, and
			// the deferred Close hands every packet back to Linux.
			return fmt.Errorf("%w; stopping so that Linux handles every packet", err)
		case ev = <-c.w.C:
		}
		first, last, n, dirty := ev.At, ev.At, 1, ev.Dirty
		deadline := time.NewTimer(cfg.MaxDelay)
	coalesce:
		for {
			quiet := time.NewTimer(cfg.Quiet)
			select {
			case <-ctx.Done():
				quiet.Stop()
				deadline.Stop()
				return nil
			case ev = <-c.w.C:
				quiet.Stop()
				dirty |= ev.Dirty
				last = ev.At
				n++
			case <-quiet.C:
				break coalesce
			case <-deadline.C:
				quiet.Stop()
				break coalesce
			}
		}
		deadline.Stop()
		if err := c.react(dirty, first, last, n); err != nil {
			return fmt.Errorf("%w (3 times in a row); stopping so that Linux handles every packet", err)
		}
	}
}

// react re-reads what changed and brings the data plane to the new plan.
// react re-reads what changed and brings the data plane to the new plan. It returns an error
// when Linux's state could not be read several times in a row: the data plane would then follow
// a configuration linuxfp no longer sees.
func (c *Controller) react(dirty observe.Dirty, first, last time.Time, n int) error {
	c.busy.Store(true)
	defer c.busy.Store(false)
	if dirty == observe.DirtyIPSet && c.lastFilter != nil {
		// A poll of the ipsets (they send no events): nothing to do unless one changed.
		snap, err := c.obs.Refresh(dirty)
		if err == nil && snap.Filter == c.lastFilter {
			c.setsReadTime.Store(int64(snap.Filter.SetsReadTime))
			return nil
		}
	}
	ch := status.Change{FirstEvent: first, LastEvent: last, Events: n, Dirty: dirty.String()}
	verified := c.dp.Verified()
	programs, err := c.apply(dirty)
	ch.Applied = time.Now()
	ch.Programs = programs
	ch.Verified = int(c.dp.Verified() - verified)
	var readErr *readError
	switch {
	case errors.As(err, &readErr):
		c.readFailures++
		if c.readFailures >= 3 {
			return err
		}
		c.log.Warn("reading Linux's state failed; retrying", "err", err)
		// Everything again, shortly: the failed read left the snapshot incomplete.
		time.AfterFunc(50*time.Millisecond, func() {
			select {
			case c.w.C <- observe.Event{Dirty: observe.DirtyAll, At: time.Now()}:
			default:
			}
		})
	case err != nil:
		c.readFailures = 0
		c.log.Error("apply", "err", err)
	default:
		c.readFailures = 0
	}
	if err != nil {
		ch.Err = err.Error()
	}
	c.mu.Lock()
	c.events += uint64(n)
	c.seq++
	ch.Seq = c.seq
	c.changes = append(c.changes, ch)
	if len(c.changes) > keepChanges {
		c.changes = slices.Clone(c.changes[len(c.changes)-keepChanges/2:])
	}
	c.mu.Unlock()
	c.log.Debug("applied", "dirty", ch.Dirty, "events", n, "programs", programs, "verified", ch.Verified,
		"latency", ch.Applied.Sub(first))
	return nil
}

// readError: Linux's state could not be read.
type readError struct{ err error }

func (e *readError) Error() string { return "read state: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

func (c *Controller) ownedProgram(ifindex int, id uint32) bool {
	return slices.Contains(c.owned[ifindex], id) || c.dp.OwnsCompanion(ifindex, id)
}

// attachCompanion attaches the tc program after an XDP program that asked for one (a packet
// only an skb can take arrived; see dataplane/companion.go).
func (c *Controller) attachCompanion(ifindex int) {
	t0 := time.Now()
	id, err := c.dp.AttachCompanion(ifindex)
	name := ""
	if in, ok := c.dp.Installed()[ifindex]; ok {
		name = in.Spec.Name
	}
	switch {
	case err != nil:
		c.log.Warn("tc program after XDP not attached: the packets it would take go to Linux", "interface", name, "err", err)
	case id != 0:
		c.log.Info("attached tc program after XDP: packets only an skb can take are fast-pathed there",
			"interface", name, "program", id, "took", time.Since(t0).Round(time.Millisecond))
	}
}

func (c *Controller) apply(dirty observe.Dirty) (int, error) {
	t0 := time.Now()
	snap, err := c.obs.Refresh(dirty)
	if err != nil {
		return 0, &readError{err}
	}
	tRead := time.Since(t0)
	defer func() {
		c.log.Debug("apply timing", "read", tRead, "total", time.Since(t0))
	}()
	for _, name := range c.refused.forgetChanged(snap.Links) {
		c.log.Info("interface changed: trying the hook the kernel refused again", "interface", name)
	}
	plan := graph.Build(snap, c.cfg.Options, c.ownedProgram, c.refused.graph())
	c.lastFilter = snap.Filter
	c.pollSets.Store(snap.Filter.UsesSets())
	if snap.Filter != nil {
		c.setsReadTime.Store(int64(snap.Filter.SetsReadTime))
	}
	if dirty&(observe.DirtyNetfilter|observe.DirtyIPSet) != 0 && snap.Filter != nil {
		c.log.Debug("netfilter ruleset compiled", "generation", snap.Filter.Generation,
			"took", snap.Filter.CompileTime, "err4", snap.Filter.Err[0], "err6", snap.Filter.Err[1])
	}
	links := map[int]observe.Link{}
	for idx, lk := range snap.Links {
		links[idx] = *lk
	}
	installed := c.dp.Installed()
	programs := 0
	var errs []error

	// 1. Remove programs the plan no longer wants, and forget those whose device is gone (the
	//    kernel detached them already). Removing first is the conservative order: a packet
	//    then goes to Linux.
	for idx, in := range installed {
		it := plan.Interfaces[idx]
		switch {
		case it == nil || it.Name != in.Spec.Name:
			c.dp.Forget(idx)
			delete(c.owned, idx)
			c.log.Info("interface gone; its program went with it", "interface", in.Spec.Name)
			programs++
		case it.Spec == nil:
			if err := c.dp.Remove(idx); err != nil {
				errs = append(errs, err)
			}
			c.log.Info("removed fast path: packets go to Linux", "interface", it.Name, "why", strings.Join(it.Notes, "; "))
			programs++
		}
	}
	// 2. Data in place.
	if err := c.dp.Sync(plan.Data); err != nil {
		errs = append(errs, fmt.Errorf("update maps: %w", err))
	}
	// 3. Install or replace programs: loaded (verified) in parallel, one per CPU, as a change to
	//    a bridge or a burst of new interfaces may need several.
	type job struct {
		idx  int
		it   *graph.Interface
		had  bool
		inst dataplane.Installed
		err  error
	}
	var jobs []*job
	for idx, it := range plan.Interfaces {
		if it.Spec == nil {
			continue
		}
		before, had := installed[idx]
		if had && before.Spec.Equal(*it.Spec) {
			continue
		}
		jobs = append(jobs, &job{idx: idx, it: it, had: had})
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			j.inst, j.err = c.dp.Install(*j.it.Spec)
		}()
	}
	wg.Wait()
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].idx < jobs[b].idx })
	var refused []int
	for _, j := range jobs {
		it := j.it
		programs++
		if j.err != nil {
			if c.refused.add(snap.Links[j.idx], j.err) {
				refused = append(refused, j.idx) // decided again below, knowing it
				continue
			}
			errs = append(errs, j.err)
			it.Notes = append(it.Notes, "install failed: "+j.err.Error())
			it.Spec = nil
			continue
		}
		if id := uint32(j.inst.ProgramID); !slices.Contains(c.owned[j.idx], id) {
			c.owned[j.idx] = append(c.owned[j.idx], id)
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
	c.logDecisions(plan)
	fdb := fdbLearning(plan)
	c.mu.Lock()
	c.plan = plan
	c.fdb = fdb
	c.links = links
	c.backend = snap.Netfilter.Backend
	c.mu.Unlock()
	return programs, errors.Join(errs...)
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
		if was == nil || was.Egress != it.Egress {
			if it.Egress {
				c.log.Info("egress ready for XDP redirect", "interface", it.Name)
			} else {
				c.log.Info("egress not a redirect target: its packets go to Linux", "interface", it.Name, "why", it.EgressNote)
			}
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
