package observe

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
)

// Observer keeps a Snapshot of the current namespace and re-reads the parts events mark dirty.
type Observer struct {
	h     *netlink.Handle
	peers peerFinder
	snap  Snapshot
	// setReads counts the reads of the ipsets (with the ruleset, or alone).
	setReads atomic.Uint64
	// w: the followed Watcher, whose events name the links that changed (nil: every link
	// re-reads its facts whenever links are read).
	w *Watcher
	// FDBMoves, if set, reads the bridge FDB watcher's counts of moves; Refresh calls it just
	// before each read of the FDB (Snapshot.FDBMoves).
	FDBMoves func() ([]uint64, error)
	// StaleLost, if set, reads how many STALE neighbours the neighbour tracepoints could not
	// mirror; Refresh calls it just before each read of the neighbours (Snapshot.StaleLost).
	StaleLost func() (uint64, error)
}

// SetReads is how many times the ipsets were read.
func (o *Observer) SetReads() uint64 { return o.setReads.Load() }

// perLink are the kinds whose facts are read per link; settleTimeout bounds the wait for the
// events naming the links (see Watcher.settle).
const (
	perLink       = DirtyLinks | DirtyTC | DirtySysctl
	settleTimeout = time.Second
)

// Follow makes Refresh re-read per-link facts (veth peers, tc, per-device sysctls) only for the
// links w's events named, and for new ones; the other links keep what the last read saw.
func (o *Observer) Follow(w *Watcher) { o.w = w }

// NewObserver opens a netlink handle in the current namespace.
func NewObserver() (*Observer, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	return &Observer{h: h}, nil
}

// Close releases the netlink handle.
func (o *Observer) Close() { o.h.Close() }

// Refresh re-reads what d marks dirty and returns the snapshot (owned by the Observer: read it
// before the next Refresh).
func (o *Observer) Refresh(d Dirty) (*Snapshot, error) {
	s := &o.snap
	if s.Links == nil {
		d = DirtyAll
	}
	if d&DirtyLinks != 0 {
		// Links carry facts that other calls read: sysctl directories, qdiscs, XDP features,
		// bridge ports.
		d |= DirtyTC | DirtyXDP | DirtySysctl | DirtyFDB
	}
	// The nf_conntrack sysctls appear when netfilter first tracks connections (with a
	// conntrack module loaded for a new ruleset), with no sysctl event. Once they are there,
	// only a write changes them, which the watcher sees: a netfilter change alone then reads no
	// sysctl and waits for no link event.
	ctAppear := d&DirtyNetfilter != 0 && !s.Sysctl.conntrackRead
	if ctAppear {
		d |= DirtySysctl
	}
	cs := changeSet{all: DirtyAll}
	if o.w != nil {
		settled := d&perLink == 0 || o.w.settle(settleTimeout)
		cs = o.w.changes.take(d)
		if !settled {
			cs.all = DirtyAll
		}
	}
	if d == DirtyAll {
		cs.all = DirtyAll
	}
	old := s.Links
	needs := func(k Dirty) func(*Link) bool {
		return func(lk *Link) bool { return cs.needs(k, lk, old[lk.Index]) }
	}
	if d&DirtyLinks != 0 {
		var links map[int]*Link
		var err error
		if named, ok := cs.namedLinks(); ok && old != nil && len(named) <= max(8, len(old)/4) {
			links, err = readChangedLinks(old, named)
		} else {
			links, err = readLinks()
		}
		if err != nil {
			return nil, err
		}
		for idx, lk := range links {
			if was := old[idx]; was != nil && was != lk {
				lk.keepFacts(was)
			}
		}
		o.peers.readPeers(links, needs(DirtyLinks))
		s.Links = links
		// A tap names a link by index: new links are read with the taps.
		d |= DirtyTaps
	}
	if d&DirtyTaps != 0 {
		s.PacketTaps = readPacketTaps()
	}
	if d&DirtyXDP != 0 {
		// One dump: a veth's features change with its peer's XDP program, announced only by
		// the netdev family, whose events settle does not wait for.
		if err := readXDPFeatures(s.Links); err != nil {
			return nil, err
		}
	}
	if d&DirtyTC != 0 {
		if err := readTC(o.h, s.Links, needs(DirtyTC)); err != nil {
			return nil, err
		}
	}
	if d&DirtyAddrs != 0 {
		addrs, err := readAddrs(o.h)
		if err != nil {
			return nil, err
		}
		s.Addrs = addrs
	}
	if d&DirtyRoutes != 0 {
		r, err := readRoutes(o.h)
		if err != nil {
			return nil, err
		}
		s.Routes = r
	}
	if d&DirtyNeigh != 0 {
		if o.StaleLost != nil {
			var err error
			if s.StaleLost, err = o.StaleLost(); err != nil {
				return nil, err
			}
		}
		n, err := readNeighbours(o.h)
		if err != nil {
			return nil, err
		}
		s.Neighbours = n
	}
	if d&DirtyFDB != 0 {
		vf, err := readVXLANFDB(s.Links)
		if err != nil {
			return nil, err
		}
		s.VXLANFDB = vf
		if o.FDBMoves != nil {
			if s.FDBMoves, err = o.FDBMoves(); err != nil {
				return nil, err
			}
		}
		f, err := readFDB(o.h, s.Links)
		if err != nil {
			return nil, err
		}
		s.FDB = f
	}
	if d&DirtySysctl != 0 {
		s.Sysctl = readSysctls(s.Links, s.Sysctl, cs.all&DirtySysctl != 0 || ctAppear, needs(DirtySysctl))
	}
	if d&DirtyNetfilter != 0 {
		// With no ipset command since the last read (the watcher sees each one), the sets
		// need not be read again, for the same ruleset nor for a new one (readRuleset).
		r, setsRead, err := readRuleset(s.Rules, o.w != nil && o.w.IPSetEvents && d&DirtyIPSet == 0)
		if setsRead {
			o.setReads.Add(1)
		}
		if err != nil {
			return nil, err
		}
		if r, err = o.watchSets(s.Rules, r); err != nil {
			return nil, err
		}
		s.Rules = r
		s.Netfilter = readNetfilter(r)
	} else if d&DirtyIPSet != 0 && s.Rules != nil {
		o.setReads.Add(1)
		r, err := s.Rules.refreshSets()
		if err != nil {
			return nil, err
		}
		s.Rules = r
	}
	if d&DirtyXfrm != 0 {
		x, err := readXfrm(o.h)
		if err != nil {
			return nil, err
		}
		s.XfrmPolicies = x
	}
	return s, nil
}

// watchSets tells the netlink watcher which ipsets to fence: those r's rules test, and those
// of prev, which the data plane runs until r is applied. A set fenced only now may have been
// changed after r read it, unfenced: then the sets are read again.
func (o *Observer) watchSets(prev, r *Ruleset) (*Ruleset, error) {
	if o.w == nil {
		return r, nil
	}
	names := map[string]bool{}
	prev.addSetNames(names)
	r.addSetNames(names)
	newly, err := o.w.watchSets(names)
	if err != nil {
		return nil, err
	}
	if !newly {
		return r, nil
	}
	o.setReads.Add(1)
	return r.refreshSets()
}

// keepFacts copies what other reads than the link dump found for the same link last time; the
// reads that follow replace what changed.
func (lk *Link) keepFacts(was *Link) {
	lk.PeerOffload, lk.PeerOffloadErr, lk.TxOffload = was.PeerOffload, was.PeerOffloadErr, was.TxOffload
	lk.PeerMTU, lk.PeerXDP, lk.XDPFeatures = was.PeerMTU, was.PeerXDP, was.XDPFeatures
	lk.Qdiscs, lk.TCIngress, lk.TCXIngress, lk.TCEgress = was.Qdiscs, was.TCIngress, was.TCXIngress, was.TCEgress
}
