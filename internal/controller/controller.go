// Package controller is `linuxfp run`: it follows Linux's state by events, rebuilds the graph and
// brings the data plane to it, and answers status queries.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/linuxfp/linuxfp/internal/conntrack"
	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/graph"
	"github.com/linuxfp/linuxfp/internal/observe"
	"github.com/linuxfp/linuxfp/internal/status"
)

// Config configures Run.
type Config struct {
	Options   graph.Options
	Dataplane dataplane.Options
	Log       *slog.Logger
	// Quiet and MaxDelay coalesce bursts of events: the data plane is rebuilt once no event
	// arrived for Quiet, or MaxDelay after the first one, whichever is first.
	Quiet    time.Duration
	MaxDelay time.Duration
	Metrics  MetricsConfig
}

// Controller holds the running state.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	dp      *dataplane.Dataplane
	obs     *observe.Observer
	w       *observe.Watcher
	started time.Time

	// taken: the fence's counts whose events were merged into an apply (fence.go).
	taken taken

	mu      sync.Mutex
	plan    *graph.Plan
	links   map[int]observe.Link
	backend string   // netfilter backend
	refused refusals // hooks the kernel refused programs at (refused.go)
	events  uint64
	seq     uint64
	changes []status.Change

	readFailures int
	// applyErr: the last apply failed (applyErrSince: since when); what it could not do is in
	// status, logged once per failure, and retried after applyRetry (doubling).
	applyErr      string
	applyErrSince time.Time
	applyRetry    time.Duration
	retryTimer    *time.Timer

	fdb          map[fdbKey]int // learned FDB entries the data plane may refresh (see refreshFDB)
	fdbRefreshes uint64
	// ct: ctnetlink, to mark the TCP connections the fast path takes liberal (see setLiberal).
	ct              *conntrack.Client
	ctLiberal       atomic.Uint64
	ctLiberalFailed atomic.Uint64
	// pollSets: the filter's rules use ipsets and no netlink watcher sees their changes: poll.
	lastFilter   *observe.FilterState
	pollSets     atomic.Bool
	setsReadTime atomic.Int64
	// warnedNoXDP: the warning that --hook xdp accelerates nothing here was logged.
	warnedNoXDP bool
	// busy: a reaction to events is being applied (status says so: benchmarks wait for it).
	busy atomic.Bool
	// metrics: what --metrics-addr serves (metrics.go); nil without it.
	metrics *promState
}

// ipset sends no netlink notification. Its commands are seen as they are made where the netlink
// watcher attaches (observe/netlinkwatch.go); elsewhere, while rules use sets, they are re-read
// every ipsetPollMin, or 20 times as long as a read took (a large set costs at most ~5% of a
// CPU), at most ipsetPollMax.
const (
	ipsetPollMin = 50 * time.Millisecond
	ipsetPollMax = time.Second
)

const keepChanges = 4096

// fencedQuiet is Quiet while a change the fence counted waits to be applied.
const fencedQuiet = 250 * time.Microsecond

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

	c := &Controller{cfg: cfg, log: log, started: time.Now(), refused: refusals{}}
	// The maps first (nothing is attached yet): the watchers count changes in its fence.
	c.dp, err = dataplane.New(log, cfg.Dataplane)
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
	// Subscribe before the first read, so no change in between is missed.
	c.w, err = observe.NewWatcher(ctx, log, c.dp.WatcherMaps())
	if err != nil {
		return err
	}
	defer c.w.Close()
	c.w.OnFDBForgotten(c.dp.ForgetFDB)
	c.w.OnSysctlOnly(func(n uint64) {
		seq := c.dp.Done()
		seq[dataplane.FenceSysctl] = n
		c.openFence(time.Time{}, seq, false)
	})
	c.obs, err = observe.NewObserver()
	if err != nil {
		return err
	}
	defer c.obs.Close()
	c.obs.Follow(c.w)

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

	srv := newAPIServer(c.handler(), log)
	go srv.Serve(newAPIListener(ln, log))
	defer srv.Close()
	stopMetrics, err := c.serveMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()

	go func() {
		if c.w.IPSetEvents {
			return
		}
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
		"sysctl_watch", c.w.SysctlMethod, "ipset_watch", c.w.IPSetMethod)
	if err := c.react(observe.DirtyAll, time.Now(), time.Now(), 1); err != nil {
		return err
	}
	// Tell systemd (Type=notify) that the first apply is done: the data plane is installed, or
	// what it could not install is Linux's and status says why. Without NOTIFY_SOCKET this does
	// nothing.
	daemon.SdNotify(false, daemon.SdNotifyReady)
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
		c.taken.take(ev.Counted)
		first, last, n, dirty := ev.At, ev.At, 1, ev.Dirty
		// While a change the fence counted waits, its families' packets go to Linux: wait
		// for further events only briefly (the notifications that follow a command come
		// within microseconds).
		fenced := len(ev.Counted) > 0
		deadline := time.NewTimer(cfg.MaxDelay)
	coalesce:
		for {
			wait := cfg.Quiet
			if fenced {
				wait = min(wait, fencedQuiet)
			}
			quiet := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				quiet.Stop()
				deadline.Stop()
				return nil
			case ev = <-c.w.C:
				quiet.Stop()
				c.taken.take(ev.Counted)
				fenced = fenced || len(ev.Counted) > 0
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

// react re-reads what changed and brings the data plane to the new plan. It returns an error
// when Linux's state could not be read several times in a row: the data plane would then follow
// a configuration linuxfp no longer sees.
func (c *Controller) react(dirty observe.Dirty, first, last time.Time, n int) error {
	c.busy.Store(true)
	defer c.busy.Store(false)
	ch := status.Change{FirstEvent: first, LastEvent: last, Events: n, Dirty: dirty.String()}
	verified := c.dp.Verified()
	programs, err := c.apply(dirty)
	if errors.Is(err, errSetsUnchanged) {
		return nil
	}
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
		c.applyFailed(err)
	default:
		c.readFailures = 0
		c.applySucceeded()
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
	c.observeChange(ch)
	c.watchFence()
	c.log.Debug("applied", "dirty", ch.Dirty, "events", n, "programs", programs, "verified", ch.Verified,
		"latency", ch.Applied.Sub(first))
	return nil
}

// errSetsUnchanged: an apply for the ipsets found none changed (not a change to record).
var errSetsUnchanged = errors.New("ipsets unchanged")

// readError: Linux's state could not be read.
type readError struct{ err error }

func (e *readError) Error() string { return "read state: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

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
	// The changes counted before the read are the ones this apply follows (the fence).
	seq, err := c.dp.Fence()
	if err != nil {
		return 0, err
	}
	snap, err := c.obs.Refresh(dirty)
	if err != nil {
		return 0, &readError{err}
	}
	if dirty == observe.DirtyIPSet && c.lastFilter != nil && snap.Filter == c.lastFilter {
		// Only the ipsets could have changed, and none did (a poll, or a command that
		// changed nothing): the data plane follows them already.
		c.setsReadTime.Store(int64(snap.Filter.SetsReadTime))
		c.openFence(t0, seq, false)
		return 0, errSetsUnchanged
	}
	tRead := time.Since(t0)
	defer c.returnMemory(largeReplaced(c.lastFilter, snap.Filter))
	defer func() {
		c.log.Debug("apply timing", "read", tRead, "total", time.Since(t0))
	}()
	for _, name := range c.refused.forgetChanged(snap.Links) {
		c.log.Info("interface changed: trying the hook the kernel refused again", "interface", name)
	}
	plan := graph.Build(snap, c.cfg.Options, c.dp.Owns, c.refused.graph())
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
	synced := len(errs) == 0
	if err := c.dp.Sync(plan.Data); err != nil {
		errs = append(errs, fmt.Errorf("update maps: %w", err))
		synced = false
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
	// The data plane follows what was read: the changes counted before the read may be
	// fast-pathed. An interface whose program could not be installed has none (Linux's), so
	// only a failed removal or map update keeps the fence closed (and the gate, for the latter).
	if synced {
		c.openFence(t0, seq, dirty == observe.DirtyAll)
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
		if it.Name == "lo" {
			continue // Linux's own: never an egress of forwarded packets
		}
		if was == nil || was.Egress != it.Egress || was.TCEgress != it.TCEgress || was.TCPeer != it.TCPeer {
			switch {
			case it.Egress:
				c.log.Info("egress ready for XDP redirect", "interface", it.Name)
			case it.TCEgress:
				// XDP cannot send there, but tc programs (and the tc program after XDP) can.
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

// openFence lets the fast path decide again what the changes counted up to seq had fenced, for
// a data plane brought to a state read from t0 on. Sysctl writes that matter are stored just
// after they are counted: only a read started late enough has seen them (SysctlSettled).
//
// The families' units open only up to the changes whose events were taken in (taken), unless
// full: the state was read whole, which covers every change counted before seq was read.
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
			select {
			case c.w.C <- observe.Event{Dirty: observe.DirtyAll, At: time.Now()}:
			default:
			}
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
	c.retryTimer = time.AfterFunc(c.applyRetry, func() {
		select {
		case c.w.C <- observe.Event{Dirty: observe.DirtyAll, At: time.Now()}:
		default:
		}
	})
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
