package dataplane

import (
	"net/netip"

	"golang.org/x/sys/unix"
)

// The neighbour module (bpf/lib/neigh.h): a nexthop Linux holds STALE goes to Linux, which must
// see a packet to probe it again.

// NeighData is what the neighbour module reads.
type NeighData struct {
	// StaleNeighbours are the neighbour entries Linux reports STALE.
	StaleNeighbours []NeighKey
}

// NeighKey identifies a neighbour entry: device and address.
type NeighKey struct {
	Ifindex int
	Addr    netip.Addr
}

// neighMaps mirror what the neighbour module's map holds.
type neighMaps struct {
	stale map[linuxfpLfpNeighKey]linuxfpLfpStaleVal
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
	cfg.StaleNeighs = uint32(len(stale))
	return []func() error{func() error { return syncMap(d.maps.LfpStale, n.stale, stale) }}, nil
}
