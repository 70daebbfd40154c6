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
	// With StaleByEvents: covered is the controller's part of lfp_stale_count as last written,
	// the tracepoints' count of losses that writing covered (staleNotCovered: none). buckets:
	// the controller's part of lfp_stale_filter as last written, by bucket. seeded: the first
	// Sync wrote the entries STALE before the tracepoints.
	covered uint64
	buckets map[uint32]int64
	seeded  bool
}

// staleBuckets is LFP_STALE_BUCKETS (include/neigh_map.h): lfp_stale_filter holds the
// tracepoints' part of each bucket's count, then the controller's.
const staleBuckets = 4096

// neighBucket is neigh_bucket() (include/neigh_map.h): the bucket of a STALE-set key.
func neighBucket(k linuxfpLfpNeighKey) uint32 {
	h := k.Ifindex * 0x9e3779b1
	h = (h ^ k.Addr[0]) * 0x85ebca6b
	h = (h ^ k.Addr[1]) * 0xc2b2ae35
	h = (h ^ k.Addr[2]) * 0x9e3779b1
	h = (h ^ k.Addr[3]) * 0x85ebca6b
	return h >> 20
}

// staleNotCovered (LFP_STALE_NOT_COVERED, include/neigh_map.h) in the controller's lost field
// hands every packet to a neighbour to Linux until a writing of the set succeeds: the
// tracepoints' count never reaches it, and they wake the controller on every neighbour change
// meanwhile.
const staleNotCovered = ^uint64(0)

func newNeighMaps() neighMaps {
	return neighMaps{stale: map[linuxfpLfpNeighKey]linuxfpLfpStaleVal{}, buckets: map[uint32]int64{}}
}

// The STALE set goes in before the count in lfp_config that makes the data plane look at it.
func (n *neighMaps) sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
	// Written unmarked; the data plane marks an entry once it has handed Linux a packet for it.
	// An entry that stays STALE is not rewritten, so the mark stays until Linux reports a new
	// state (PROBE, REACHABLE ...) and the entry leaves the set.
	stale := map[linuxfpLfpNeighKey]linuxfpLfpStaleVal{}
	for _, k := range data.StaleNeighbours {
		stale[linuxfpLfpNeighKey{Ifindex: uint32(k.Ifindex), Family: addrFamily(k.Addr), Addr: addrWords(k.Addr)}] = linuxfpLfpStaleVal{}
	}
	if data.StaleByEvents {
		cfg.StaleNeighs = 0
		if n.seeded && n.covered == data.StaleLost {
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
// before the neighbours, moved on). Each entry is counted in the controller's part of its
// bucket of lfp_stale_filter first, so that the data plane never skips a lookup the set needs.
// An entry whose neighbour left STALE after the controller read it stays until the neighbour's
// next change: one packet more to Linux, no more. Only once every entry is in is lost recorded as
// covered; if the set is still full, the data plane keeps handing packets to neighbours to
// Linux.
func (n *neighMaps) seed(d *Dataplane, stale map[linuxfpLfpNeighKey]linuxfpLfpStaleVal, lost uint64) error {
	add := map[uint32]int64{}
	for k := range stale {
		add[neighBucket(k)]++
	}
	if err := n.count(d, add); err != nil {
		return err
	}
	full := false
	unused := map[uint32]int64{}
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
		unused[neighBucket(k)]--
	}
	if err := n.count(d, unused); err != nil {
		return err
	}
	covered := lost
	if full {
		covered = staleNotCovered
	}
	if full && n.covered != staleNotCovered {
		d.log.Warn("the STALE neighbour mirror is full: packets to neighbours go to Linux (neighbour_mirror_lost)",
			"stale", len(stale), "max_entries", d.maps.LfpStale.MaxEntries())
	} else if !full && n.covered == staleNotCovered {
		d.log.Info("the STALE neighbour mirror has room again", "stale", len(stale))
	}
	if err := d.maps.LfpStaleCount.Put(uint32(1), linuxfpLfpStaleCount{Lost: covered}); err != nil {
		return fmt.Errorf("seed STALE neighbours: %w", err)
	}
	n.covered = covered
	n.seeded = true
	return nil
}

// count adds delta to the controller's part of the buckets' counts.
func (n *neighMaps) count(d *Dataplane, delta map[uint32]int64) error {
	for b, v := range delta {
		if v == 0 {
			continue
		}
		c := n.buckets[b] + v
		if err := d.maps.LfpStaleFilter.Put(staleBuckets+b, c); err != nil {
			return fmt.Errorf("seed STALE neighbours: count: %w", err)
		}
		n.buckets[b] = c
	}
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
