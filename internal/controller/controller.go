// Package controller is `linuxfp run`: it follows Linux's state by events, rebuilds the graph and
// brings the data plane to it, and answers status queries.
//
// The loop is in this file: a burst of events (coalesce.go) is followed by Refresh (observe),
// Build (graph) and Apply (apply.go), and recorded. The fence and the retries of a failed apply
// are in fence.go; what the data plane asks of Linux (FDB refreshes, conntrack marks, the tc
// program after XDP) in writeback.go.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
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
	// Quiet and MaxDelay coalesce bursts of events (see coalesce).
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
	// taken: the fence's counts whose events were merged into an update (taken.go).
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
	// applyErr: the last apply failed (applyErrSince: since when); see applyFailed.
	applyErr      string
	applyErrSince time.Time
	applyRetry    time.Duration
	retryTimer    *time.Timer

	// ct: ctnetlink, to mark the TCP connections the fast path takes liberal (see setLiberal).
	ct              *conntrack.Client
	ctLiberal       atomic.Uint64
	ctLiberalFailed atomic.Uint64
	// lastRules and lastFilter: the ruleset read and compiled for the last plan.
	lastRules  *observe.Ruleset
	lastFilter *graph.Filter
	// warnedNoXDP: the warning that --hook xdp accelerates nothing here was logged.
	warnedNoXDP bool
	// busy: a reaction to events is being applied (status says so: benchmarks wait for it).
	busy atomic.Bool
	// metrics: what --metrics-addr serves (metrics.go); nil without it.
	metrics *promState
	// mon: the packet monitors connected to the status API (monitor.go).
	mon *monitorHub
}

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

	c := &Controller{cfg: cfg, log: log, started: time.Now(), refused: refusals{}}
	// The maps first (nothing is attached yet): the watchers count changes in its fence.
	c.dp, err = dataplane.New(log, cfg.Dataplane)
	if err != nil {
		return fmt.Errorf("create data plane: %w (is this root, with BPF available?)", err)
	}
	defer func() {
		// Detach every program: traffic goes back to Linux as it was. The watchers last: until
		// no program is attached, the changes they count (the fence, the FIB cache's generation,
		// the conntrack entries freed) still govern packets.
		if err := c.dp.Close(); err != nil {
			log.Error("detach", "err", err)
		}
		log.Info("stopped; all programs detached")
		if c.w != nil {
			c.w.Close()
		}
	}()
	if err := c.dp.CountLongRoutes(c.cfg.Options.FibCache); err != nil {
		return err
	}
	// Subscribe before the first read, so no change in between is missed.
	w, err := observe.NewWatcher(ctx, log, c.dp.WatcherMaps(), observe.WatchOptions{FibCache: c.cfg.Options.FibCache, CtCache: c.cfg.Options.CtCache})
	if err != nil {
		return err
	}
	c.w = w
	c.cfg.Options.NeighEvents = c.w.Fence && c.w.NeighEvents
	c.cfg.Options.CtFreeEvents = c.w.Fence && c.w.CtFreeEvents
	c.w.OnSysctlOnly(c.sysctlOnly)
	c.obs, err = observe.NewObserver()
	if err != nil {
		return err
	}
	defer c.obs.Close()
	c.obs.Follow(c.w)
	c.obs.FDBMoves = c.dp.FDBMoves
	if c.cfg.Options.NeighEvents {
		c.obs.StaleLost = c.dp.StaleLost
	}
	stopRequests, err := c.serveRequests()
	if err != nil {
		return err
	}
	defer stopRequests()

	c.mon = newMonitorHub(c.dp, log, c.ifName)
	defer c.mon.close()
	srv := newAPIServer(c.handler(), log)
	go srv.Serve(newAPIListener(ln, log))
	defer srv.Close()
	stopMetrics, err := c.serveMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()

	log.Info("linuxfp running", "pid", os.Getpid(), "hook", cfg.Options.Hook,
		"sysctl_watch", c.w.SysctlMethod, "ipset_watch", c.w.IPSetMethod)
	now := time.Now()
	if err := c.react(burst{dirty: observe.DirtyAll, first: now, last: now, n: 1}); err != nil {
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
		b, ok := coalesce(ctx, c.w.C, ev, cfg.Quiet, cfg.MaxDelay)
		if !ok {
			return nil
		}
		c.taken.take(b.counted)
		if err := c.react(b); err != nil {
			return fmt.Errorf("%w (3 times in a row); stopping so that Linux handles every packet", err)
		}
	}
}

// react follows a burst of events: Refresh -> Build -> Apply, then records the change. It
// returns an error when Linux's state could not be read several times in a row: the data plane
// would then follow a configuration linuxfp no longer sees.
func (c *Controller) react(b burst) error {
	c.busy.Store(true)
	defer c.busy.Store(false)
	verified := c.dp.Verified()
	programs, err := c.update(b.dirty)
	if errors.Is(err, errSetsUnchanged) {
		return nil
	}
	ch := status.Change{FirstEvent: b.first, LastEvent: b.last, Events: b.n, Dirty: b.dirty.String(),
		Applied: time.Now(), Programs: programs, Verified: int(c.dp.Verified() - verified)}
	var readErr *readError
	switch {
	case errors.As(err, &readErr):
		c.readFailures++
		if c.readFailures >= 3 {
			return err
		}
		c.log.Warn("reading Linux's state failed; retrying", "err", err)
		// Everything again, shortly: the failed read left the snapshot incomplete.
		c.w.WakeAfter(50*time.Millisecond, observe.DirtyAll)
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
	c.record(ch)
	c.watchFence()
	c.log.Debug("applied", "dirty", ch.Dirty, "events", b.n, "programs", programs, "verified", ch.Verified,
		"latency", ch.Applied.Sub(b.first))
	return nil
}

// update re-reads what dirty marks and brings the data plane to it. It returns how many
// programs it installed, replaced or removed.
func (c *Controller) update(dirty observe.Dirty) (int, error) {
	t0 := time.Now()
	// The fence: the changes counted before the read are the ones this update follows. It is
	// opened only once the data plane follows them (see openFence).
	seq, err := c.dp.Fence()
	if err != nil {
		return 0, err
	}
	snap, err := c.obs.Refresh(dirty)
	if err != nil {
		return 0, &readError{err}
	}
	if dirty == observe.DirtyIPSet && c.lastRules != nil && snap.Rules == c.lastRules {
		// Only the ipsets could have changed, and none did (a poll, or a command that
		// changed nothing): the data plane follows them already.
		c.w.PollSets(c.lastFilter.UsesSets(), snap.Rules.SetsReadTime)
		c.openFence(t0, seq, false)
		return 0, errSetsUnchanged
	}
	tRead := time.Since(t0)
	defer func() {
		c.log.Debug("apply timing", "read", tRead, "total", time.Since(t0))
	}()
	plan := c.build(snap, dirty)
	defer c.returnMemory(largeReplaced(c.lastFilter, plan.Filter))
	c.lastRules, c.lastFilter = snap.Rules, plan.Filter
	programs, synced, err := c.apply(snap, plan)
	// Only a failed removal or map update keeps the fence closed (see apply).
	if synced {
		c.openFence(t0, seq, dirty == observe.DirtyAll)
	}
	c.logDecisions(plan)
	links := make(map[int]observe.Link, len(snap.Links))
	for idx, lk := range snap.Links {
		links[idx] = *lk
	}
	c.mu.Lock()
	c.plan, c.links, c.backend = plan, links, snap.Netfilter.Backend
	c.mu.Unlock()
	return programs, err
}

// build decides the plan for snap, knowing which hooks the kernel refused.
func (c *Controller) build(snap *observe.Snapshot, dirty observe.Dirty) *graph.Plan {
	for _, name := range c.refused.forgetChanged(snap.Links) {
		c.log.Info("interface changed: trying the hook the kernel refused again", "interface", name)
	}
	plan := graph.Build(snap, c.cfg.Options, c.dp.Owns, c.refused.graph())
	if f := plan.Filter; f != nil {
		c.w.PollSets(f.UsesSets(), snap.Rules.SetsReadTime)
		if dirty&(observe.DirtyNetfilter|observe.DirtyIPSet) != 0 {
			c.log.Debug("netfilter ruleset compiled", "generation", f.Generation,
				"took", f.CompileTime, "err4", f.Err[0], "err6", f.Err[1])
		}
	} else {
		c.w.PollSets(false, 0)
	}
	return plan
}

// ifName is the name of the interface ifindex, as last read ("" if unknown).
func (c *Controller) ifName(ifindex int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.links[ifindex].Name
}

// record keeps ch for status and the metrics.
func (c *Controller) record(ch status.Change) {
	c.mu.Lock()
	c.events += uint64(ch.Events)
	c.seq++
	ch.Seq = c.seq
	c.changes = append(c.changes, ch)
	if len(c.changes) > keepChanges {
		c.changes = slices.Clone(c.changes[len(c.changes)-keepChanges/2:])
	}
	c.mu.Unlock()
	c.observeChange(ch)
}

// errSetsUnchanged: an apply for the ipsets found none changed (not a change to record).
var errSetsUnchanged = errors.New("ipsets unchanged")

// readError: Linux's state could not be read.
type readError struct{ err error }

func (e *readError) Error() string { return "read state: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }
