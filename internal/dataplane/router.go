package dataplane

import (
	"fmt"
	"maps"
	"net/netip"

	"github.com/cilium/ebpf"
)

// The router module (bpf/lib/router.h): routes IPv4 and IPv6 with bpf_fib_lookup(), and hands
// Linux what Linux would treat specially (local sources, route MTUs, ...).

// RouterData is what the router module reads besides the FIB.
type RouterData struct {
	// LocalHosts are addresses whose packets Linux rejects as local (martian) sources.
	LocalHosts []netip.Addr
	// LocalPrefixes are non-host prefixes routed as local, broadcast, anycast or multicast.
	LocalPrefixes []netip.Prefix
	// RouteMTU4 / RouteMTU6 are the smallest MTU metric of any IPv4 / IPv6 route (0: none).
	RouteMTU4, RouteMTU6 uint32
	// FwdUpdatePriority4: net.ipv4.ip_forward_update_priority (forwarded IPv4 gets the skb
	// priority of its TOS at tc).
	FwdUpdatePriority4 bool
}

// routerMaps mirror what the router module's maps hold.
type routerMaps struct {
	local4 map[uint32]uint8
	local6 map[linuxfpLfpIn6]uint8
	pfx4   map[linuxfpLfpLpm4Key]uint8
	pfx6   map[linuxfpLfpLpm6Key]uint8
	filter map[uint32]uint64 // lfp_local_filter's words that have a bit set
}

func newRouterMaps() routerMaps {
	return routerMaps{
		local4: map[uint32]uint8{},
		local6: map[linuxfpLfpIn6]uint8{},
		pfx4:   map[linuxfpLfpLpm4Key]uint8{},
		pfx6:   map[linuxfpLfpLpm6Key]uint8{},
		filter: map[uint32]uint64{},
	}
}

// localFilterWords is LFP_LOCAL_FILTER_WORDS (bpf/lib/local.h): 64 buckets a word.
const localFilterWords = 1024

// localBucket is local_bucket() (bpf/lib/local.h): the filter bit of an address.
func localBucket(a netip.Addr) uint32 {
	w := addrWords(a)
	h := w[0] * 0x9e3779b1
	if a.Is6() {
		h = (h ^ w[1]) * 0x85ebca6b
		h = (h ^ w[2]) * 0xc2b2ae35
		h = (h ^ w[3]) * 0x9e3779b1
	}
	return h >> 16
}

// Local addresses make the fast path more conservative: they go in before lfp_config.
func (r *routerMaps) sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
	l4 := map[uint32]uint8{}
	l6 := map[linuxfpLfpIn6]uint8{}
	filter := map[uint32]uint64{}
	for _, a := range data.LocalHosts {
		b := localBucket(a)
		filter[b/64] |= 1 << (b % 64)
		if a.Is4() {
			l4[addrWords(a)[0]] = 1
		} else {
			l6[linuxfpLfpIn6{A: addrWords(a)}] = 1
		}
	}
	p4 := map[linuxfpLfpLpm4Key]uint8{}
	p6 := map[linuxfpLfpLpm6Key]uint8{}
	for _, p := range data.LocalPrefixes {
		p = p.Masked()
		if p.Addr().Is4() {
			p4[linuxfpLfpLpm4Key{Prefixlen: uint32(p.Bits()), Addr: addrWords(p.Addr())[0]}] = 1
		} else {
			p6[linuxfpLfpLpm6Key{Prefixlen: uint32(p.Bits()), Addr: linuxfpLfpIn6{A: addrWords(p.Addr())}}] = 1
		}
	}
	cfg.RouteMtu4, cfg.RouteMtu6 = data.RouteMTU4, data.RouteMTU6
	cfg.LocalPrefixes4, cfg.LocalPrefixes6 = boolU32(len(p4) > 0), boolU32(len(p6) > 0)
	cfg.FwdUpdatePrio4 = boolU32(data.FwdUpdatePriority4)
	// The filter's bits: those of the new addresses before the addresses go in, those of the
	// addresses gone only after they are out (a local source never finds its bit clear).
	both := maps.Clone(filter)
	for w, bits := range r.filter {
		both[w] |= bits
	}
	return []func() error{
		func() error { return syncMap(d.maps.LfpLocalPfx4, r.pfx4, p4) },
		func() error { return syncMap(d.maps.LfpLocalPfx6, r.pfx6, p6) },
		func() error { return syncFilter(d.maps.LfpLocalFilter, r.filter, both) },
		func() error { return syncMap(d.maps.LfpLocal4, r.local4, l4) },
		func() error { return syncMap(d.maps.LfpLocal6, r.local6, l6) },
		func() error { return syncFilter(d.maps.LfpLocalFilter, r.filter, filter) },
	}, nil
}

// syncFilter brings a bit array's words (lfp_local_filter, lfp_fw_host_filter) from cur to want
// (an array map: a word no longer wanted is written as 0).
func syncFilter(m *ebpf.Map, cur, want map[uint32]uint64) error {
	for w := range cur {
		if _, ok := want[w]; !ok {
			if err := m.Put(w, uint64(0)); err != nil {
				return fmt.Errorf("update %s: %w", m, err)
			}
			delete(cur, w)
		}
	}
	for w, bits := range want {
		if old, ok := cur[w]; ok && old == bits {
			continue
		}
		if err := m.Put(w, bits); err != nil {
			return fmt.Errorf("update %s: %w", m, err)
		}
		cur[w] = bits
	}
	return nil
}

// routerSettings: the families the router module forwards, and whether frames may be skbs
// from a local stack.
func routerSettings(k *settings, s Spec, companion bool) {
	k.Router4, k.Router6 = boolU32(s.Router4), boolU32(s.Router6)
	// After native XDP, the tc program sees skbs built from XDP frames: no offload state.
	k.SkbSender = boolU32(s.SkbSender && !(companion && s.Hook == HookXDP))
}
