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
	// controller only writes the entries that were STALE before they were attached, once.
	StaleByEvents bool
}

// NeighKey identifies a neighbour entry: device and address.
type NeighKey struct {
	Ifindex int
	Addr    netip.Addr
}

// neighMaps mirror what the neighbour module's map holds (while the controller keeps it).
type neighMaps struct {
	stale map[linuxfpLfpNeighKey]linuxfpLfpStaleVal
	// seeded: with StaleByEvents, the first Sync wrote the entries STALE before the tracepoints.
	seeded bool
}

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
		if n.seeded {
			return nil, nil
		}
		return []func() error{func() error { return n.seed(d, stale) }}, nil
	}
	cfg.StaleNeighs = uint32(len(stale))
	return []func() error{func() error { return syncMap(d.maps.LfpStale, n.stale, stale) }}, nil
}

// seed writes, once, the entries that were STALE before the tracepoints kept the set: each
// one the tracepoints did not add meanwhile (they keep theirs), counted in lfp_stale_count's
// controller part first, so that the data plane never skips a lookup the set needs. An entry
// whose neighbour left STALE after the controller read it stays until the neighbour's next
// change: one packet more to Linux, no more.
func (n *neighMaps) seed(d *Dataplane, stale map[linuxfpLfpNeighKey]linuxfpLfpStaleVal) error {
	count := int64(len(stale))
	if err := d.maps.LfpStaleCount.Put(uint32(1), count); err != nil {
		return fmt.Errorf("seed STALE neighbours: %w", err)
	}
	for k, v := range stale {
		if err := d.maps.LfpStale.Update(k, v, ebpf.UpdateNoExist); err != nil {
			if !errors.Is(err, ebpf.ErrKeyExist) {
				return fmt.Errorf("seed STALE neighbours: %w", err)
			}
			count--
		}
	}
	if err := d.maps.LfpStaleCount.Put(uint32(1), count); err != nil {
		return fmt.Errorf("seed STALE neighbours: %w", err)
	}
	n.seeded = true
	return nil
}
