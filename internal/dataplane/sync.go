package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Data is everything the programs read from maps: changing it never reloads a program. Each
// module owns its part, declared in its own file.
type Data struct {
	TxData
	NeighData
	RouterData
	BridgeData
	// Filter is the filter module's ruleset and interfaces.
	Filter FilterData
	// CT is the conntrack module's settings.
	CT CT
	VXLANData
	FibCacheData
}

// A module is one fast-path module's part of Sync. sync computes the entries its maps must
// hold for data and sets its fields of lfp_config, and returns its map writes in two groups:
// before, the entries that make the fast path more conservative (local sources, STALE
// neighbours) or that a count in lfp_config makes it look at, written before lfp_config; after,
// the ones that let it forward (egress devices), written after it.
type module interface {
	sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error)
}

// Sync brings the maps to data, touching only entries that differ.
func (d *Dataplane) Sync(data Data) error {
	d.mu.Lock()
	defer d.mu.Unlock()

	// The filter goes first, for the gate.
	fwFlags, fwBank, fwErr := d.syncFilter(data.Filter)
	var failed Families
	if fwErr != nil {
		// The families whose ruleset changed keep the one written before, which Linux has
		// replaced: the gate holds them before anything else is written.
		// A failure that changed no ruleset (the interfaces' pattern bits) may be stale for both.
		if failed = d.fw.behind(data.Filter); failed == 0 {
			failed = BothFamilies
		}
		if err := d.setGateLocked(d.failed | failed); err != nil {
			return errors.Join(fwErr, err)
		}
	}
	// In this order, the writes of each group follow the modules' order.
	modules := []module{
		&d.routerMaps, &d.neighMaps, &d.bridgeMaps, ctModule{},
		filterModule{flags: fwFlags, bank: fwBank}, &d.txMaps, &d.vxlanMaps, &d.fibCacheMaps,
	}
	var cfg linuxfpLfpConfig
	var before, after []func() error
	for _, m := range modules {
		b, a := m.sync(d, &data, &cfg)
		before, after = append(before, b...), append(after, a...)
	}
	var errs []error
	for _, w := range before {
		errs = append(errs, w())
	}
	errs = append(errs, fwErr, d.maps.LfpConfigMap.Put(uint32(0), cfg))
	for _, w := range after {
		errs = append(errs, w())
	}
	for _, err := range errs {
		// Whatever else failed may decide packets of either family.
		if err != nil && err != fwErr {
			failed = BothFamilies
		}
	}
	// Only now, with everything written, is a family the gate held let through again. Written
	// even when unchanged: it moves the FIB cache's generation on.
	errs = append(errs, d.writeGateLocked(failed, d.done))
	return errors.Join(errs...)
}

// syncMap makes m (whose contents are mirrored in cur) equal to want, and updates cur.
func syncMap[K comparable, V comparable](m *ebpf.Map, cur, want map[K]V) error {
	for k := range cur {
		if _, ok := want[k]; !ok {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("delete from %s: %w", m, err)
			}
			delete(cur, k)
		}
	}
	for k, v := range want {
		if old, ok := cur[k]; ok && old == v {
			continue
		}
		if err := m.Put(k, v); err != nil {
			return fmt.Errorf("update %s: %w", m, err)
		}
		cur[k] = v
	}
	return nil
}

// syncSplitMap is syncMap for data by ifindex split as lfp_ifs and lfp_ifs_hi are (iface.h): keys
// below lo's size in the array lo, where a key is removed by writing the zero value, the others
// in the hash hi.
func syncSplitMap[V comparable](lo, hi *ebpf.Map, cur, want map[uint32]V) error {
	m := func(k uint32) *ebpf.Map {
		if k < lo.MaxEntries() {
			return lo
		}
		return hi
	}
	var zero V
	for k := range cur {
		if _, ok := want[k]; !ok {
			var err error
			if m(k) == lo {
				err = lo.Put(k, zero)
			} else if err = hi.Delete(k); errors.Is(err, ebpf.ErrKeyNotExist) {
				err = nil
			}
			if err != nil {
				return fmt.Errorf("delete from %s: %w", m(k), err)
			}
			delete(cur, k)
		}
	}
	for k, v := range want {
		if old, ok := cur[k]; ok && old == v {
			continue
		}
		if err := m(k).Put(k, v); err != nil {
			return fmt.Errorf("update %s: %w", m(k), err)
		}
		cur[k] = v
	}
	return nil
}

// htons turns a port into network byte order as the data plane keeps it.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// addrWords is an address as the data plane keeps it: network byte order, IPv4 in word 0.
func addrWords(a netip.Addr) (w [4]uint32) {
	if a.Is4() {
		b := a.As4()
		w[0] = binary.NativeEndian.Uint32(b[:])
		return w
	}
	b := a.As16()
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return w
}

// addrFamily is a's address family as the kernel numbers it (AF_INET, AF_INET6).
func addrFamily(a netip.Addr) uint32 {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
