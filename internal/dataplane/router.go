package dataplane

import "net/netip"

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
}

func newRouterMaps() routerMaps {
	return routerMaps{
		local4: map[uint32]uint8{},
		local6: map[linuxfpLfpIn6]uint8{},
		pfx4:   map[linuxfpLfpLpm4Key]uint8{},
		pfx6:   map[linuxfpLfpLpm6Key]uint8{},
	}
}

// Local addresses make the fast path more conservative: they go in before lfp_config.
func (r *routerMaps) sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
	l4 := map[uint32]uint8{}
	l6 := map[linuxfpLfpIn6]uint8{}
	for _, a := range data.LocalHosts {
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
	return []func() error{
		func() error { return syncMap(d.maps.LfpLocalPfx4, r.pfx4, p4) },
		func() error { return syncMap(d.maps.LfpLocalPfx6, r.pfx6, p6) },
		func() error { return syncMap(d.maps.LfpLocal4, r.local4, l4) },
		func() error { return syncMap(d.maps.LfpLocal6, r.local6, l6) },
	}, nil
}

// routerSettings: the families the router module forwards, and whether frames may be skbs
// from a local stack.
func routerSettings(k *settings, s Spec, companion bool) {
	k.Router4, k.Router6 = boolU32(s.Router4), boolU32(s.Router6)
	// After native XDP, the tc program sees skbs built from XDP frames: no offload state.
	k.SkbSender = boolU32(s.SkbSender && !(companion && s.Hook == HookXDP))
}
