package dataplane

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// The FIB cache module (bpf/lib/fibcache.h explains why its answers are the kernel's): the
// router's bpf_fib_lookup() answer per block of destinations, kept while its generation holds.

// FibCacheData is what the FIB cache module reads.
type FibCacheData struct {
	// FibCache4, FibCache6: the cache may answer for the family (graph/fibcache.go decides).
	FibCache4, FibCache6 bool
	// FibSplit: the blocks whose destinations may meet different routes (graph's fibSplit).
	FibSplit []netip.Prefix
}

// fibCacheMaps mirror lfp_fib_split.
type fibCacheMaps struct {
	split map[linuxfpLfpFibKey]uint8
}

// Turning the cache on needs no care: the gate is written after lfp_config at the end of every
// Sync, and each gate write moves the cache's generation on (writeGateLocked), so no entry
// filled before this Sync answers after it, and none filled under the split blocks this Sync
// replaces.
func (f *fibCacheMaps) sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
	var flags linuxfpLfpFibFlags
	if data.FibCache4 {
		flags |= linuxfpLfpFibFlagsLFP_FIB_CACHE4
	}
	if data.FibCache6 {
		flags |= linuxfpLfpFibFlagsLFP_FIB_CACHE6
	}
	cfg.FibFlags = flags
	want := make(map[linuxfpLfpFibKey]uint8, len(data.FibSplit))
	for _, p := range data.FibSplit {
		k := linuxfpLfpFibKey{Dst: addrWords(p.Addr()), Family: uint8(addrFamily(p.Addr()))}
		want[k] = 1
	}
	return []func() error{func() error { return syncMap(d.maps.LfpFibSplit, f.split, want) }}, nil
}

// CountLongRoutes asks the netlink watcher to count every new route longer than a FIB cache
// block (include/fibcache_map.h), so that a family waits behind the fence until the split blocks
// are written. Called before the watchers are attached: they add to the generations in the same
// value, and a write now loses none of their adds.
func (d *Dataplane) CountLongRoutes(on bool) error {
	var g linuxfpLfpFibGen
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.maps.LfpFibGen.Lookup(uint32(0), &g); err != nil {
		return fmt.Errorf("read lfp_fib_gen: %w", err)
	}
	g.CountLong = boolU32(on)
	if err := d.maps.LfpFibGen.Update(uint32(0), g, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("update lfp_fib_gen: %w", err)
	}
	return nil
}
