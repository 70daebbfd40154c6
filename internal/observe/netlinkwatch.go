package observe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
)

// Changes made over netlink are seen as the kernel applies them (bpf/netlink_watch.c): before
// the command that made them returns. Most of them also have a notification; ipset's do not,
// so this is how ipset changes are followed (without it, sets are polled).

// ipsetQuiet: how long ipset commands must pause before the sets are read.
const ipsetQuiet = 20 * time.Millisecond

// netnsInode is the inode number of the calling thread's network namespace.
func netnsInode() (uint32, error) {
	fi, err := os.Stat("/proc/thread-self/ns/net")
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("no inode number for the network namespace")
	}
	return uint32(st.Ino), nil
}

// watchNetlink attaches the netlink request watcher for this namespace: it counts each change
// in the data plane's fence as it is made, and wakes the controller (for ipset, the only way it
// learns of one). With it, the bridge FDB watcher (br_fdb_update, fdb_delete), which counts in
// the data plane's map of moves each change of the bridge's FDB the moment it is made. shared are the
// data plane's maps they use (nil: their own, for nobody).
func (w *Watcher) watchNetlink(ctx context.Context, shared map[string]*ebpf.Map) error {
	ino, err := netnsInode()
	if err != nil {
		return err
	}
	spec, err := loadNetlinkwatch()
	if err != nil {
		return err
	}
	if err := spec.Variables["cfg_netns"].Set(ino); err != nil {
		return err
	}
	if err := spec.Variables["cfg_self"].Set(uint32(os.Getpid())); err != nil {
		return err
	}
	var opts *ebpf.CollectionOptions
	if shared != nil {
		opts = &ebpf.CollectionOptions{MapReplacements: shared}
	}
	var objs netlinkwatchObjects
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("load netlink watcher: %w (%+v)", err, ve)
		}
		return fmt.Errorf("load netlink watcher: %w", err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: objs.LfpNlConsumed})
	if err != nil {
		objs.Close()
		return fmt.Errorf("attach tp_btf/consume_skb: %w", err)
	}
	rd, err := ringbuf.NewReader(objs.LfpNlEvents)
	if err != nil {
		l.Close()
		objs.Close()
		return err
	}
	w.closers = append(w.closers, func() { rd.Close(); l.Close(); objs.Close() })
	w.nlChanges = objs.LfpNlChanges
	// Every ipset command is fenced until the controller has said which sets its rules test.
	if err := objs.LfpNlSets.Put(netlinkwatchLfpSetName{}, uint8(1)); err != nil {
		rd.Close()
		l.Close()
		objs.Close()
		return fmt.Errorf("netlink watcher: fence every ipset: %w", err)
	}
	w.fencedSets = setWatch{m: objs.LfpNlSets, all: true, names: map[string]bool{}}
	if err := w.watchNeighbours(&objs); err != nil {
		w.log.Warn("cannot see the neighbour table's own changes as they happen; STALE neighbours are followed by notification and the FIB cache stays off", "err", err)
		w.NeighMethod = "notification (" + err.Error() + ")"
	} else {
		w.NeighEvents = true
		w.NeighMethod = "event: tp_btf/neigh_update_done, neigh_timer_handler, neigh_event_send_done and neigh_cleanup_and_release keep the STALE mirror at once"
	}
	if !w.ctCache {
		w.CtFreeMethod = "off (--ct-cache=false): the conntrack cache stays off"
	} else if ls, err := attachCtFrees(&objs); err != nil {
		w.CtFreeMethod = "off (" + err.Error() + ")"
		w.log.Warn("cannot see conntrack entries freed as it happens; the conntrack cache stays off", "err", err)
	} else {
		w.closers = append(w.closers, func() { closeLinks(ls) })
		w.CtFreeEvents = true
		w.CtFreeMethod = "event: tp_btf/kmem_cache_free (two programs) moves the conntrack cache's counts before an entry's memory is reused"
	}
	if err := w.watchFDB(ctx, &objs); err != nil {
		w.FDBMethod = "notification (" + err.Error() + ")"
		w.log.Warn("cannot see bridge FDB changes as they happen; followed by notification", "err", err)
	} else {
		w.FDBMethod = "event: tp_btf/br_fdb_update and fdb_delete make a moved or deleted entry Linux's at once"
	}
	// Sets are read once ipset commands pause for ipsetQuiet: a dump holds each set it reads
	// (ref_netlink) for as long as it takes, and a user's `ipset swap` or `destroy` meeting it
	// fails with EBUSY, so linuxfp does not read in the middle of a script's commands. The
	// commands' counts wait with them.
	var ipsetMu sync.Mutex
	var ipsetCounted []Counted
	ipsetRead := time.AfterFunc(time.Hour, func() {
		ipsetMu.Lock()
		counted := ipsetCounted
		ipsetCounted = nil
		ipsetMu.Unlock()
		w.sendCounted(ctx, DirtyIPSet, counted)
	})
	ipsetRead.Stop()
	w.closers = append(w.closers, func() { ipsetRead.Stop() })
	w.readRing(ctx, rd, "netlink watcher", func(b []byte) {
		var ev netlinkwatchLfpNlEvent
		if len(b) < 8+8*len(ev.Seq) {
			return
		}
		ev.Classes = binary.NativeEndian.Uint32(b)
		for u := range ev.Seq {
			ev.Seq[u] = binary.NativeEndian.Uint64(b[8+8*u:])
		}
		var counted []Counted
		for u, seq := range ev.Seq {
			if seq != 0 {
				counted = append(counted, Counted{Unit: u, Seq: seq})
			}
		}
		if ev.Classes&(1<<netlinkwatchLfpNlClassLFP_NL_IPSET) != 0 {
			ipsetMu.Lock()
			ipsetCounted = append(ipsetCounted, counted...)
			ipsetMu.Unlock()
			ipsetRead.Reset(ipsetQuiet)
			return
		}
		var d Dirty
		for class, dirty := range nlClassDirty {
			if ev.Classes&(1<<class) != 0 {
				d |= dirty
			}
		}
		if d == 0 {
			d = DirtyAll
		}
		w.sendCounted(ctx, d, counted)
	})
	return nil
}

// setWatch is the watcher's view of lfp_nl_sets: the ipsets whose commands are fenced.
type setWatch struct {
	mu    sync.Mutex
	m     *ebpf.Map // nil: no netlink watcher (sets are polled)
	all   bool      // the all-zero name is in the map: every command is fenced
	names map[string]bool
}

// watchSets makes the ipset commands fenced those that name one of names (the sets the data
// plane's rules test, and those the rules it still runs test), and no others. Commands on other
// sets change nothing the data plane holds: they are counted and wake nobody. newly reports a
// name that was not fenced before: a command on it between the sets' last read and this call
// was not fenced, so the caller reads the sets again. When the map cannot take a name, every
// ipset command is fenced (and newly is true).
func (w *Watcher) watchSets(names map[string]bool) (newly bool, err error) {
	sw := &w.fencedSets
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.m == nil {
		return false, nil
	}
	for n := range names {
		if sw.names[n] {
			continue
		}
		if err := sw.m.Put(setName(n), uint8(1)); err != nil {
			// Full (or refused): fence every command again, and say so.
			if perr := sw.m.Put(netlinkwatchLfpSetName{}, uint8(1)); perr != nil {
				return true, fmt.Errorf("fence ipset %s: %w; fence every ipset: %w", n, err, perr)
			}
			if !sw.all {
				w.log.Warn("cannot fence ipset commands set by set; every ipset command is fenced", "set", n, "err", err)
			}
			sw.all = true
			return true, nil
		}
		sw.names[n] = true
		newly = newly || !sw.all
	}
	if sw.all {
		if err := sw.m.Delete(netlinkwatchLfpSetName{}); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return newly, fmt.Errorf("stop fencing every ipset: %w", err)
		}
		sw.all = false
	}
	for n := range sw.names {
		if names[n] {
			continue
		}
		if err := sw.m.Delete(setName(n)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return newly, fmt.Errorf("stop fencing ipset %s: %w", n, err)
		}
		delete(sw.names, n)
	}
	return newly, nil
}

// setName is an ipset name as lfp_nl_sets holds it (NUL-padded; ipset names are shorter).
func setName(n string) netlinkwatchLfpSetName {
	var k netlinkwatchLfpSetName
	for i := 0; i < len(n) && i < len(k.Name)-1; i++ {
		k.Name[i] = int8(n[i])
	}
	return k
}

// watchNeighbours attaches the neighbour table's tracepoints, which keep the data plane's
// STALE-neighbour mirror (bpf/lib/neigh.h) and move the FIB cache's generation on
// (bpf/lib/fibcache.h).
func (w *Watcher) watchNeighbours(objs *netlinkwatchObjects) error {
	links, err := attachTracing(objs.LfpNeighUpdated, objs.LfpNeighTimer, objs.LfpNeighSent, objs.LfpNeighReleased)
	if err != nil {
		return err
	}
	w.closers = append(w.closers, func() { closeLinks(links) })
	return nil
}

// watchFDB attaches the bridge FDB watcher (its programs and ring are in objs).
func (w *Watcher) watchFDB(ctx context.Context, objs *netlinkwatchObjects) error {
	links, err := attachTracing(objs.LfpFdbMoved, objs.LfpFdbDeleted)
	if err != nil {
		return err
	}
	rd, err := ringbuf.NewReader(objs.LfpFdbChanges)
	if err != nil {
		closeLinks(links)
		return err
	}
	w.closers = append(w.closers, func() {
		rd.Close()
		closeLinks(links)
	})
	// Each record (struct lfp_fdb_key) is one change counted: the FDB is read again.
	w.readRing(ctx, rd, "bridge FDB watcher", func([]byte) { w.send(ctx, DirtyFDB) })
	return nil
}

// readRing hands each record of rd to fn, on a goroutine of its own, until rd is closed; a
// failure of the ring stops linuxfp (w.fail): without its events the data plane would follow
// a configuration nobody watches.
func (w *Watcher) readRing(ctx context.Context, rd *ringbuf.Reader, what string, fn func([]byte)) {
	go func() {
		for {
			rec, err := rd.Read()
			if err != nil {
				if !errors.Is(err, os.ErrClosed) && ctx.Err() == nil {
					w.fail(fmt.Errorf("%s: %w", what, err))
				}
				return
			}
			fn(rec.RawSample)
		}
	}()
}

// nlClassDirty is what each class of change makes the controller read.
var nlClassDirty = map[netlinkwatchLfpNlClass]Dirty{
	netlinkwatchLfpNlClassLFP_NL_LINK:     DirtyLinks,
	netlinkwatchLfpNlClassLFP_NL_ADDR:     DirtyAddrs,
	netlinkwatchLfpNlClassLFP_NL_ROUTE:    DirtyRoutes,
	netlinkwatchLfpNlClassLFP_NL_NEIGH:    DirtyNeigh | DirtyFDB,
	netlinkwatchLfpNlClassLFP_NL_TC:       DirtyTC,
	netlinkwatchLfpNlClassLFP_NL_OTHER:    DirtyAll,
	netlinkwatchLfpNlClassLFP_NL_NFTABLES: DirtyNetfilter,
}

// nlClassNames are the names status gives the netlink watcher's classes (enum lfp_nl_class).
var nlClassNames = map[netlinkwatchLfpNlClass]string{
	netlinkwatchLfpNlClassLFP_NL_LINK:     "link",
	netlinkwatchLfpNlClassLFP_NL_ADDR:     "address",
	netlinkwatchLfpNlClassLFP_NL_ROUTE:    "route",
	netlinkwatchLfpNlClassLFP_NL_NEIGH:    "neighbour",
	netlinkwatchLfpNlClassLFP_NL_TC:       "tc",
	netlinkwatchLfpNlClassLFP_NL_OTHER:    "other",
	netlinkwatchLfpNlClassLFP_NL_NFTABLES: "nftables",
	netlinkwatchLfpNlClassLFP_NL_IPSET:    "ipset",
}

// NetlinkChanges is how many changes the netlink watcher has seen as they were made, by class
// (nil without the watcher): what the fence saw, for status.
func (w *Watcher) NetlinkChanges() map[string]uint64 {
	if w.nlChanges == nil {
		return nil
	}
	out := map[string]uint64{}
	for class, name := range nlClassNames {
		var n uint64
		if err := w.nlChanges.Lookup(class, &n); err == nil && n > 0 {
			out[name] = n
		}
	}
	return out
}

// attachCtFrees attaches the two programs that count conntrack entries' frees (netlink_watch.c
// says why two: two programs, not one program twice, which shares one count of runs): both, or
// neither. The data plane's checks of a kept entry read its fields in program order after its
// count and rely on loads not being reordered with loads, as on x86; elsewhere the cache stays
// off.
func attachCtFrees(objs *netlinkwatchObjects) ([]link.Link, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("the conntrack cache's checks rely on x86's load ordering, this is %s", runtime.GOARCH)
	}
	return attachTracing(objs.LfpCtFreed, objs.LfpCtFreedTwin)
}

// attachTracing attaches every one of the tracing programs ps, or none: an error closes the
// links made before it.
func attachTracing(ps ...*ebpf.Program) ([]link.Link, error) {
	var ls []link.Link
	for _, p := range ps {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			closeLinks(ls)
			return nil, fmt.Errorf("attach %s: %w", p, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

func closeLinks(ls []link.Link) {
	for _, l := range ls {
		l.Close()
	}
}
