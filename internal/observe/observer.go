package observe

import (
	"fmt"
	"sync/atomic"

	"github.com/vishvananda/netlink"
)

// Observer keeps a Snapshot of the current namespace and re-reads the parts events mark dirty.
type Observer struct {
	h     *netlink.Handle
	peers peerFinder
	snap  Snapshot
	// setReads counts the reads of the ipsets (with the ruleset, or alone).
	setReads atomic.Uint64
}

// SetReads is how many times the ipsets were read.
func (o *Observer) SetReads() uint64 { return o.setReads.Load() }

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
		links, err := readLinks(o.h)
		if err != nil {
			return nil, err
		}
		s.Links = links
		o.peers.readPeers(links)
		if err := readBridgeAttrs(links); err != nil {
			return nil, err
		}
		// Per-link facts read by other calls must be re-read for the new Link values.
		d |= DirtyTC | DirtyXDP | DirtySysctl | DirtyFDB
	}
	if d&DirtyXDP != 0 {
		if err := readXDPFeatures(s.Links); err != nil {
			return nil, err
		}
	}
	if d&DirtyTC != 0 {
		if err := readTC(o.h, s.Links); err != nil {
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
		f, err := readFDB(o.h, s.Links)
		if err != nil {
			return nil, err
		}
		s.FDB = f
	}
	if d&DirtySysctl != 0 {
		s.Sysctl = readSysctls(s.Links)
	}
	if d&DirtyNetfilter != 0 {
		o.setReads.Add(1)
		f, err := readFilter()
		if err != nil {
			return nil, err
		}
		s.Filter = f
		s.Netfilter = readNetfilter(f)
	} else if d&DirtyIPSet != 0 && s.Filter != nil {
		o.setReads.Add(1)
		f, err := s.Filter.refreshSets()
		if err != nil {
			return nil, err
		}
		s.Filter = f
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
