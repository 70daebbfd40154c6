package observe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/mdlayher/genetlink"
	mnl "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Dirty says which parts of the Snapshot an event may have changed.
type Dirty uint32

const (
	DirtyLinks Dirty = 1 << iota
	DirtyAddrs
	DirtyRoutes
	DirtyNeigh
	DirtySysctl
	DirtyNetfilter
	DirtyTC
	DirtyXDP
	DirtyXfrm
	DirtyFDB
	DirtyIPSet
	// DirtyTaps: the packet sockets tapping devices (Snapshot.PacketTaps), polled.
	DirtyTaps
	DirtyAll Dirty = 1<<iota - 1
)

func (d Dirty) String() string {
	names := []string{"links", "addrs", "routes", "neigh", "sysctl", "netfilter", "tc", "xdp", "xfrm", "fdb", "ipset", "taps"}
	if d == DirtyAll {
		return "all"
	}
	var s []string
	for i, n := range names {
		if d&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	return fmt.Sprint(s)
}

// Event is a notification that something changed, and when linuxfp received it.
type Event struct {
	Dirty Dirty
	At    time.Time
	// Counted: the fence counts of the changes this event is for (netlink watcher events only);
	// the controller lets a change through the fence only once it has taken in its event.
	Counted []Counted
}

// Counted is one change's count in one fence unit (dataplane.FenceSeq's index).
type Counted struct {
	Unit int
	Seq  uint64
}

// Watcher delivers Events from every source. Sources are opened by NewWatcher, before the first
// read of the state, so no change between the read and the first event is missed.
type Watcher struct {
	C chan Event
	// Failed receives an error when an event source stops for good: from then on linuxfp would
	// not see changes, so the controller must stop (and its fast path with it).
	Failed  chan error
	log     *slog.Logger
	closers []func()
	// SysctlMethod says how sysctls are watched (shown by `linuxfp status`).
	SysctlMethod string
	// LegacyPoll says that legacy iptables tables are polled (they have no events).
	LegacyPoll time.Duration
	// IPSetEvents: ipset changes arrive as events (netlinkwatch.go); otherwise the watcher
	// polls the sets while rules use them (see PollSets). IPSetMethod says which (shown by
	// `linuxfp status`).
	IPSetEvents bool
	IPSetMethod string
	sets        setPoll
	// Fence: the netlink watcher counts changes in the data plane's fence as they are made.
	Fence bool
	// nlChanges: the netlink watcher's count of changes by class (NetlinkChanges).
	nlChanges *ebpf.Map
	// fencedSets: which ipsets the netlink watcher fences (watchSets).
	fencedSets setWatch
	// NeighEvents: the neighbour table's own changes move the FIB cache's generation on as they
	// happen (netlinkwatch.go); without them the cache stays off.
	NeighEvents bool
	// routeSysctls: the FIB cache may be on (forwardingSysctl).
	routeSysctls bool
	// NeighMethod says how the neighbour table's own changes reach the data plane.
	NeighMethod string
	// CtFreeEvents: every free of a conntrack entry's object moves the conntrack cache's counts
	// as it happens (netlinkwatch.go); without it the cache stays off. CtFreeMethod says how.
	CtFreeEvents bool
	CtFreeMethod string
	ctCache      bool // WatchOptions.CtCache
	// FDBMethod says how the bridge FDB's own changes reach the data plane.
	FDBMethod string
	// sysctl: the sysctl writes seen (the fence's sysctl unit).
	sysctl sysctlWrites
	// changes: the links the events named (see changeLog), read by an Observer that follows
	// this Watcher; rt: the rtnetlink event socket (see settle).
	changes changeLog
	rt      *mnl.Conn
	// held: kinds waiting for room in C (see send).
	heldMu   sync.Mutex
	held     Event
	flushing bool
}

// eventBuffer is the receive buffer of the event sockets (SO_RCVBUFFORCE, as root): deleting
// 200 veths while the controller re-reads overflowed the default 208 KiB; an overflow costs a
// re-read of everything.
const eventBuffer = 16 << 20

const legacyPollInterval = 250 * time.Millisecond

// initCgroupNSInode is the initial cgroup namespace's inode number (PROC_CGROUP_INIT_INO).
const initCgroupNSInode = 0xEFFFFFFB

// sysctlSettle: how long after the cgroup/sysctl hook a sysctl write is surely stored (it is
// stored as soon as the hook returns: microseconds).
const sysctlSettle = 20 * time.Millisecond

// sysctlWrites counts the sysctl writes the hook reported, and when the last one that matters
// was made.
type sysctlWrites struct {
	mu       sync.Mutex
	n        uint64    // writes reported
	relevant time.Time // the last write that matters
	lastN    uint64    // its number
	settled  uint64    // the count SysctlSettled last found settled
	missing  time.Time // since when fewer were reported than counted (a full ring)
	ack      func(n uint64)
}

// seen records a write. It returns the function that opens the fence for the first n writes
// when every write that matters among them has been read since (nil otherwise).
func (s *sysctlWrites) seen(relevant bool) (n uint64, ack func(uint64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if relevant {
		s.relevant, s.lastN = time.Now(), s.n
	}
	if s.lastN > s.settled {
		return s.n, nil
	}
	return s.n, s.ack
}

// OnSysctlOnly sets the function that opens the fence's sysctl unit for the first n writes,
// called at once when the last of them does not matter to the fast path and none before it
// waits for a read.
func (w *Watcher) OnSysctlOnly(ack func(n uint64)) {
	w.sysctl.mu.Lock()
	defer w.sysctl.mu.Unlock()
	w.sysctl.ack = ack
}

// SysctlSettled: a read of Linux's state that started at t sees every one of the count sysctl
// writes (the fence's sysctl unit) that matters. Each write is reported before it is counted;
// one that matters is stored just after the hook, so a read must start sysctlSettle after it.
// Writes counted but never reported (a full ring) are taken as mattering.
func (w *Watcher) SysctlSettled(t time.Time, count uint64) bool {
	s := &w.sysctl
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n < count {
		if s.missing.IsZero() {
			s.missing = time.Now()
			time.AfterFunc(sysctlSettle, func() {
				w.changes.addAll(DirtySysctl)
				select {
				case w.C <- Event{Dirty: DirtySysctl, At: time.Now()}:
				default:
				}
			})
		}
		if t.Before(s.missing.Add(sysctlSettle)) {
			return false
		}
		// Read late enough for whatever they were: as if reported, and as if they mattered.
		s.n, s.lastN, s.missing = count, count, time.Time{}
	} else {
		s.missing = time.Time{}
	}
	if t.Before(s.relevant.Add(sysctlSettle)) {
		return false
	}
	s.settled = max(s.settled, count)
	return true
}

// WatchOptions are the user's choices a Watcher follows.
type WatchOptions struct {
	// FibCache: the sysctl writes the FIB cache depends on keep the fence closed too
	// (forwardingSysctl).
	FibCache bool
	// CtCache: watch conntrack entries' frees, so that the conntrack cache may be used
	// (netlinkwatch.go). Without it nothing runs at each slab free of the host, and each packet
	// of a tracked connection asks the kernel's conntrack lookup.
	CtCache bool
}

// NewWatcher subscribes to every event source in the current network namespace. shared are the
// data plane's maps the watchers write: the fence, in which they count changes as they are made,
// and the FDB mirror (nil: none).
func NewWatcher(ctx context.Context, log *slog.Logger, shared map[string]*ebpf.Map, o WatchOptions) (*Watcher, error) {
	w := &Watcher{C: make(chan Event, 1024), Failed: make(chan error, 8), log: log, LegacyPoll: legacyPollInterval,
		routeSysctls: o.FibCache, ctCache: o.CtCache}
	ok := false
	defer func() {
		if !ok {
			w.Close()
		}
	}()

	// rtnetlink: everything iproute2 changes.
	rt, err := mnl.Dial(unix.NETLINK_ROUTE, &mnl.Config{Groups: groupMask(
		unix.RTNLGRP_LINK, unix.RTNLGRP_NEIGH, unix.RTNLGRP_TC,
		unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV4_ROUTE,
		unix.RTNLGRP_IPV6_IFADDR, unix.RTNLGRP_IPV6_ROUTE,
		unix.RTNLGRP_IPV4_NETCONF, unix.RTNLGRP_IPV6_NETCONF)})
	if err != nil {
		return nil, fmt.Errorf("subscribe to rtnetlink: %w", err)
	}
	w.closers = append(w.closers, func() { rt.Close() })
	if err := rt.JoinGroup(unix.RTNLGRP_NEXTHOP); err != nil { // group > 31: only by setsockopt
		return nil, fmt.Errorf("subscribe to nexthop events: %w", err)
	}
	// A routing daemon loading 10,000 routes must not overflow the socket; if it still does,
	// ENOBUFS makes us re-read everything.
	_ = rt.SetReadBuffer(eventBuffer)
	w.rt = rt
	go w.receive(ctx, "rtnetlink", rt, func(m mnl.Message) Dirty {
		if m.Header.Type == mnl.Error {
			w.changes.settled(m.Header.Sequence) // the acknowledgement settle asked for
			return 0
		}
		d := rtnlDirty(m)
		if d != 0 {
			w.changes.recordRoute(m, d)
		}
		return d
	})

	// Links in every namespace that has an id here (veth peers' namespaces): a peer's checksum
	// offload changes there, with no event here. NETLINK_LISTEN_ALL_NSID holds no reference to
	// those namespaces.
	peers, err := dialPeerEvents()
	if err != nil {
		return nil, fmt.Errorf("subscribe to rtnetlink: %w", err)
	}
	w.closers = append(w.closers, func() { peers.Close() })
	go w.receivePeers(ctx, peers)

	// nf_tables: every ruleset change (iptables-nft, nft, firewalld ...).
	nf, err := mnl.Dial(unix.NETLINK_NETFILTER, &mnl.Config{Groups: groupMask(unix.NFNLGRP_NFTABLES)})
	if err != nil {
		return nil, fmt.Errorf("subscribe to nf_tables: %w", err)
	}
	w.closers = append(w.closers, func() { nf.Close() })
	// A commit notifies every rule it adds or deletes, then NFT_MSG_NEWGEN: the new generation
	// is what wakes the controller (reading the ruleset after the first rule's notification
	// would read it again for the rest). Its larger buffer holds a 50,000-rule commit.
	_ = nf.SetReadBuffer(4 * eventBuffer)
	go w.receive(ctx, "nf_tables", nf, func(m mnl.Message) Dirty {
		if m.Header.Type == mnl.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWGEN) {
			return DirtyNetfilter
		}
		return 0
	})

	// XFRM policies.
	xf, err := mnl.Dial(unix.NETLINK_XFRM, &mnl.Config{Groups: groupMask(xfrmnlgrpPolicy)})
	if err != nil {
		return nil, fmt.Errorf("subscribe to xfrm: %w", err)
	}
	w.closers = append(w.closers, func() { xf.Close() })
	_ = xf.SetReadBuffer(eventBuffer)
	go w.receive(ctx, "xfrm", xf, func(mnl.Message) Dirty { return DirtyXfrm })

	// Generic netlink "netdev": XDP feature changes (a veth peer gaining or losing NAPI).
	gc, err := genetlink.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("dial generic netlink: %w", err)
	}
	w.closers = append(w.closers, func() { gc.Close() })
	_ = gc.SetReadBuffer(eventBuffer)
	fam, err := gc.GetFamily("netdev")
	if err != nil {
		return nil, fmt.Errorf("generic netlink family netdev (kernel >= 6.3 needed): %w", err)
	}
	i := slices.IndexFunc(fam.Groups, func(g genetlink.MulticastGroup) bool { return g.Name == netdevMcgrpMgmt })
	if i < 0 {
		return nil, errors.New("netdev family has no mgmt group")
	}
	if err := gc.JoinGroup(fam.Groups[i].ID); err != nil {
		return nil, fmt.Errorf("join netdev mgmt group: %w", err)
	}
	go w.receiveGenl(ctx, gc)

	w.watchSysctls(ctx, shared)
	if err := w.watchNetlink(ctx, shared); err != nil {
		w.IPSetMethod = "poll: every 50 ms to 1 s (netlink watcher unavailable: " + err.Error() + ")"
		w.log.Warn("cannot see ipset changes as they are made; sets are polled", "err", err)
	} else {
		w.IPSetEvents, w.Fence = true, shared != nil
		w.IPSetMethod = "event: tp_btf/consume_skb sees each ipset command before it returns"
	}
	go w.pollLegacy(ctx)
	if !w.IPSetEvents {
		go w.pollSets(ctx)
	}
	ok = true
	return w, nil
}

const xfrmnlgrpPolicy = 4 // XFRMNLGRP_POLICY

func groupMask(groups ...uint32) uint32 {
	var m uint32
	for _, g := range groups {
		m |= 1 << (g - 1)
	}
	return m
}

// Close unsubscribes from everything.
func (w *Watcher) Close() {
	for _, c := range w.closers {
		c()
	}
	w.closers = nil
}

// send delivers an event without blocking its source: when the controller is busy and C is
// full, the event's kinds are held and delivered as one event once C has room, so the source
// keeps reading and its socket does not overflow (an overflow costs a re-read of everything).
func (w *Watcher) send(ctx context.Context, d Dirty) { w.sendCounted(ctx, d, nil) }

// sendCounted is send for the changes counted is the fence's counts of.
func (w *Watcher) sendCounted(ctx context.Context, d Dirty, counted []Counted) {
	ev := Event{Dirty: d, At: time.Now(), Counted: counted}
	select {
	case w.C <- ev:
		return
	default:
	}
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	if w.held.Dirty == 0 {
		w.held.At = ev.At
	}
	w.held.Dirty |= d
	w.held.Counted = append(w.held.Counted, counted...)
	if w.flushing {
		return
	}
	w.flushing = true
	go func() {
		for {
			// What arrives while this waits for room goes in the next event.
			w.heldMu.Lock()
			ev := w.held
			w.held = Event{}
			if ev.Dirty == 0 {
				w.flushing = false
				w.heldMu.Unlock()
				return
			}
			w.heldMu.Unlock()
			select {
			case w.C <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
}

// overflowed: a socket's events were lost. Everything is re-read once: no second full re-read
// is asked for while one is still pending.
func (w *Watcher) overflowed(ctx context.Context, source string) {
	w.log.Warn("event socket overflowed; re-reading all state", "source", source)
	w.changes.mu.Lock()
	pending := w.changes.all == DirtyAll
	w.changes.all = DirtyAll
	w.changes.mu.Unlock()
	if !pending {
		w.send(ctx, DirtyAll)
	}
}

// netdevIfindex is NETDEV_A_DEV_IFINDEX of a netdev family notification.
func netdevIfindex(b []byte) (int, bool) {
	ad, err := mnl.NewAttributeDecoder(b)
	if err != nil {
		return 0, false
	}
	for ad.Next() {
		if ad.Type() == netdevADevIfindex {
			return int(ad.Uint32()), true
		}
	}
	return 0, false
}

func (w *Watcher) fail(err error) {
	select {
	case w.Failed <- err:
	default:
	}
}

func rtnlDirty(m mnl.Message) Dirty {
	switch m.Header.Type {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
		// Links carry sysctl directories and qdiscs with them.
		return DirtyLinks | DirtySysctl | DirtyTC | DirtyXDP
	case unix.RTM_NEWADDR, unix.RTM_DELADDR:
		return DirtyAddrs | DirtyRoutes
	case unix.RTM_NEWROUTE, unix.RTM_DELROUTE,
		unix.RTM_NEWNEXTHOP, unix.RTM_DELNEXTHOP:
		return DirtyRoutes
	case unix.RTM_NEWNEIGH, unix.RTM_DELNEIGH:
		// struct ndmsg starts with the family: AF_BRIDGE is a bridge FDB entry.
		if len(m.Data) > 0 && m.Data[0] == unix.AF_BRIDGE {
			return DirtyFDB
		}
		return DirtyNeigh
	case unix.RTM_NEWNETCONF, unix.RTM_DELNETCONF:
		return DirtySysctl
	case unix.RTM_NEWQDISC, unix.RTM_DELQDISC, unix.RTM_NEWTFILTER, unix.RTM_DELTFILTER,
		unix.RTM_NEWCHAIN, unix.RTM_DELCHAIN:
		return DirtyTC
	}
	return 0
}

func (w *Watcher) receive(ctx context.Context, name string, c *mnl.Conn, classify func(mnl.Message) Dirty) {
	for {
		msgs, err := c.Receive()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, unix.ENOBUFS) {
				w.overflowed(ctx, name)
				continue
			}
			w.fail(fmt.Errorf("event source %s: %w", name, err))
			return
		}
		var d Dirty
		for _, m := range msgs {
			d |= classify(m)
		}
		if d != 0 {
			w.send(ctx, d)
		}
	}
}

func (w *Watcher) receiveGenl(ctx context.Context, c *genetlink.Conn) {
	for {
		msgs, _, err := c.Receive()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, unix.ENOBUFS) {
				w.overflowed(ctx, "netdev")
				continue
			}
			w.fail(fmt.Errorf("event source netdev: %w", err))
			return
		}
		// A veth's XDP features change when its peer gains or loses an XDP program (or GRO):
		// that veth re-reads its peer.
		for _, m := range msgs {
			if idx, ok := netdevIfindex(m.Data); ok {
				w.changes.addLink(idx, DirtyLinks)
			}
		}
		w.send(ctx, DirtyXDP|DirtyLinks)
	}
}

// watchSysctls wakes the controller after sysctl writes under net/, through a cgroup/sysctl
// program on the root of the cgroup v2 hierarchy (sysctls have no netlink event, except netconf
// for forwarding, rp_filter and proxy_ndp, which rtnetlink already delivers). The hook runs just
// before the value is stored, so each wake-up is followed by a second one 20ms later. Without
// cgroup v2 it polls once a second.
func (w *Watcher) watchSysctls(ctx context.Context, shared map[string]*ebpf.Map) {
	err := func() error {
		cg, done, err := cgroup2Root()
		if err != nil {
			return err
		}
		defer done()
		ino, err := netnsInode()
		if err != nil {
			return err
		}
		spec, err := loadSysctlwatch()
		if err != nil {
			return err
		}
		if err := spec.Variables["cfg_netns"].Set(ino); err != nil {
			return err
		}
		var opts *ebpf.CollectionOptions
		if fence := shared["lfp_fence_map"]; fence != nil {
			opts = &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"lfp_fence_map": fence}}
		}
		var objs sysctlwatchObjects
		if err := spec.LoadAndAssign(&objs, opts); err != nil {
			return err
		}
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: ebpf.AttachCGroupSysctl, Program: objs.LfpSysctlWrite})
		if err != nil {
			objs.Close()
			return err
		}
		rd, err := ringbuf.NewReader(objs.LfpSysctlEvents)
		if err != nil {
			l.Close()
			objs.Close()
			return err
		}
		w.closers = append(w.closers, func() { rd.Close(); l.Close(); objs.Close() })
		w.readRing(ctx, rd, "sysctl events", func(b []byte) {
			name, _, _ := strings.Cut(string(b), "\x00")
			if !forwardingSysctl(name, w.routeSysctls) {
				// Nothing the fast path follows: no read needed, the fence opens at once
				// (unless a write that matters waits for its read).
				if n, ack := w.sysctl.seen(false); ack != nil {
					ack(n)
				}
				return
			}
			// The value is stored after the hook: an apply that starts within sysctlSettle
			// of it may read the old one, and must not open the fence.
			w.sysctl.seen(true)
			w.changes.addAll(DirtySysctl)
			w.send(ctx, DirtySysctl)
			time.AfterFunc(sysctlSettle, func() {
				w.changes.addAll(DirtySysctl)
				w.send(ctx, DirtySysctl)
			})
		})
		w.SysctlMethod = "event: cgroup/sysctl BPF program on the cgroup v2 root"
		return nil
	}()
	if err == nil {
		return
	}
	w.SysctlMethod = "poll: every 1s (cgroup/sysctl hook unavailable: " + err.Error() + ")"
	w.log.Warn("cannot watch sysctl writes by event; polling", "err", err)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.changes.addAll(DirtySysctl)
				w.send(ctx, DirtySysctl)
			}
		}
	}()
}

// cgroup2Root finds where the cgroup v2 hierarchy is mounted. `ip netns exec` gives its
// command a fresh /sys without the cgroup mounts; then the hierarchy is mounted on a temporary
// directory just long enough to attach (the attachment holds the cgroup, not the mount), and
// done() removes the mount again.
func cgroup2Root() (path string, done func(), err error) {
	// In a cgroup namespace of its own (a container's), every cgroup2 mount it can see or make
	// is rooted in its own cgroup: a program attached there would miss the host's writes while
	// status said "event". Initial namespaces have fixed inode numbers.
	if fi, err := os.Stat("/proc/self/ns/cgroup"); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Ino != initCgroupNSInode {
			return "", nil, errors.New("in a cgroup namespace of its own: a cgroup/sysctl program would see only its own cgroup's writes")
		}
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		// id parent dev root mountpoint options ... - fstype source options
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) >= 5 && f[3] == "/" {
			return f[4], func() {}, nil
		}
	}
	dir, err := os.MkdirTemp("", "linuxfp-cgroup2-")
	if err != nil {
		return "", nil, err
	}
	if err := unix.Mount("none", dir, "cgroup2", 0, ""); err != nil {
		os.Remove(dir)
		return "", nil, fmt.Errorf("no cgroup2 mount, and mounting one failed: %w", err)
	}
	return dir, func() {
		unix.Unmount(dir, unix.MNT_DETACH)
		os.Remove(dir)
	}, nil
}
