package dataplane

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The neighbour module (bpf/lib/neigh.h): a nexthop Linux holds STALE goes to Linux, which must
// see a packet to probe it again.

// NeighData is what the neighbour module reads.
type NeighData struct {
	// StaleNeighbours are the neighbour entries Linux reports STALE.
	StaleNeighbours []NeighKey
	// StaleByEvents: the neighbour tracepoints keep the STALE mirror (bpf/netlink_watch.c); the
	// controller only writes the entries that were STALE before they were attached, and again
	// after the tracepoints lost one.
	StaleByEvents bool
	// StaleLost: how many STALE neighbours the tracepoints could not add to the mirror (it was
	// full), read before StaleNeighbours was (Dataplane.StaleLost).
	StaleLost uint64
}

// NeighKey identifies a neighbour entry: device and address.
type NeighKey struct {
	Ifindex int
	Addr    netip.Addr
}

// neighMaps mirror what the neighbour module's map holds (while the controller keeps it).
type neighMaps struct {
	stale map[linuxfpLfpNeighKey]linuxfpLfpStaleVal
	// With StaleByEvents: the controller's part of lfp_stale_count as last written. Its lost
	// field is the tracepoints' count of losses that writing covered (staleNotCovered: none).
	// seeded: the first Sync wrote the entries STALE before the tracepoints.
	part   linuxfpLfpStaleCount
	seeded bool
}

// staleNotCovered in the controller's lost field hands every packet to a neighbour to Linux
// until a writing of the set succeeds: the tracepoints' count never reaches it.
const staleNotCovered = ^uint64(0)

func newNeighMaps() neighMaps {
	return neighMaps{stale: map[linuxfpLfpNeighKey]linuxfpLfpStaleVal{}}
}

// The STALE set goes in before the count in lfp_config that makes the data plane look at it.
func (n *neighMaps) sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
	// Written unmarked; the data plane marks an entry once it has handed Linux a packet for it.
	// An entry that stays STALE is not rewritten, so the mark stays until Linux reports a new
	// state (PROBE, REACHABLE ...) and the entry leaves the set.
	stale := map[linuxfpLfpNeighKey]linuxfpLfpStaleVal{}
	for _, k := range data.StaleNeighbours {
		fam := uint32(unix.AF_INET6)
		if k.Addr.Is4() {
			fam = unix.AF_INET
		}
		stale[linuxfpLfpNeighKey{Ifindex: uint32(k.Ifindex), Family: fam, Addr: addrWords(k.Addr)}] = linuxfpLfpStaleVal{}
	}
	if data.StaleByEvents {
		cfg.StaleNeighs = 0
		if n.seeded && n.part.Lost == data.StaleLost {
			return nil, nil
		}
		return []func() error{func() error { return n.seed(d, stale, data.StaleLost) }}, nil
	}
	cfg.StaleNeighs = uint32(len(stale))
	return []func() error{func() error { return syncMap(d.maps.LfpStale, n.stale, stale) }}, nil
}

// seed writes the entries Linux held STALE when the neighbours were last read, each one the
// tracepoints did not add meanwhile (they keep theirs): once, for the entries that were STALE
// before the tracepoints were attached, and again whenever the tracepoints lost one (lost, read
// before the neighbours, moved on). Each entry is counted in the controller's part of
// lfp_stale_count first, so that the data plane never skips a lookup the set needs. An entry
// whose neighbour left STALE after the controller read it stays until the neighbour's next
// change: one packet more to Linux, no more. Only once every entry is in is lost recorded as
// covered; if the set is still full, the data plane keeps handing packets to neighbours to
// Linux.
func (n *neighMaps) seed(d *Dataplane, stale map[linuxfpLfpNeighKey]linuxfpLfpStaleVal, lost uint64) error {
	part := n.part
	part.Entries += int64(len(stale))
	if err := d.maps.LfpStaleCount.Put(uint32(1), part); err != nil {
		return fmt.Errorf("seed STALE neighbours: %w", err)
	}
	n.part = part
	full := false
	for k, v := range stale {
		err := d.maps.LfpStale.Update(k, v, ebpf.UpdateNoExist)
		switch {
		case err == nil:
			continue
		case errors.Is(err, ebpf.ErrKeyExist):
		case errors.Is(err, unix.E2BIG):
			full = true
		default:
			return fmt.Errorf("seed STALE neighbours: %w", err)
		}
		part.Entries--
	}
	part.Lost = lost
	if full {
		part.Lost = staleNotCovered
	}
	if full && n.part.Lost != staleNotCovered {
		d.log.Warn("the STALE neighbour mirror is full: packets to neighbours go to Linux (neighbour_mirror_lost)",
			"stale", len(stale), "max_entries", d.maps.LfpStale.MaxEntries())
	} else if !full && n.part.Lost == staleNotCovered {
		d.log.Info("the STALE neighbour mirror has room again", "stale", len(stale))
	}
	if err := d.maps.LfpStaleCount.Put(uint32(1), part); err != nil {
		return fmt.Errorf("seed STALE neighbours: %w", err)
	}
	n.part = part
	n.seeded = true
	return nil
}

// StaleLost reads how many STALE neighbours the neighbour tracepoints could not add to their
// mirror because it was full (see neigh_stale in bpf/lib/neigh.h).
func (d *Dataplane) StaleLost() (uint64, error) {
	var c linuxfpLfpStaleCount
	if err := d.maps.LfpStaleCount.Lookup(uint32(0), &c); err != nil {
		return 0, fmt.Errorf("read the STALE neighbour count: %w", err)
	}
	return c.Lost, nil
}
