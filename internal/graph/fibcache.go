package graph

import (
	"encoding/binary"
	"maps"
	"net/netip"
	"slices"

	"github.com/linuxfp/linuxfp/internal/observe"
)

// fibCache decides, per family, whether the FIB cache may answer for the router's lookups
// (bpf/lib/fibcache.h explains what keeps its answers the kernel's), and says why not. It may
// where the answer depends only on what its key holds (the input device, the destination, the
// TOS or flow information) and every change that can alter the answer is seen before the
// command that made it returns.
func fibCache(s *observe.Snapshot, o Options) (why [2][]string) {
	var both []string
	if !o.FibCache {
		both = append(both, "not asked for (linuxfp run --fib-cache)")
	} else if !o.NeighEvents {
		both = append(both, "the netlink and neighbour watchers are not attached (changes are not seen as they happen)")
	}
	r := s.Routes
	// Per family (IPv4, IPv6): each condition that turns the cache off, and why.
	fams := [2]struct {
		name                                            string
		policy, multipath, pmtu, locked, source, expire bool
		linkdown, ra                                    map[string]bool
	}{
		{"ipv4", r.PolicyRules4, r.Multipath4, s.Sysctl.FwdUsePMTU4, r.MTULocked4, false, false, s.Sysctl.IgnoreLinkdown4, nil},
		{"ipv6", r.PolicyRules6, r.Multipath6, false, r.MTULocked6, r.SourceRoutes6, r.Expiring6, s.Sysctl.IgnoreLinkdown6, s.Sysctl.AcceptRA6},
	}
	for i, f := range fams {
		why[i] = append(why[i], both...)
		for _, c := range []struct {
			on  bool
			why string
		}{
			{f.policy, "policy routing rules exist (a lookup may depend on the source, marks, ports)"},
			{f.multipath, "multipath routes or nexthop groups exist (the path depends on the flow's hash)"},
			{f.pmtu, "net.ipv4.ip_forward_use_pmtu=1 (forwarding honours path MTUs learnt without an event)"},
			{f.locked, "a route has a locked MTU (forwarding honours path MTUs learnt without an event)"},
			{f.source, "a route has a source prefix (the answer depends on the source)"},
			{f.expire, "a route expires (it leaves the FIB without a request)"},
		} {
			if c.on {
				why[i] = append(why[i], c.why)
			}
		}
		if name := firstSet(f.linkdown); name != "" {
			why[i] = append(why[i], "net."+f.name+".conf."+name+".ignore_routes_with_linkdown=1 (routes follow the carrier, which changes without an event)")
		}
		if name := firstSet(f.ra); name != "" {
			why[i] = append(why[i], "net.ipv6.conf."+name+".accept_ra takes routes from router advertisements (they change without a request)")
		}
	}
	return why
}

// firstSet is the first name (in order) set in m, or "".
func firstSet(m map[string]bool) string {
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if m[name] {
			return name
		}
	}
	return ""
}

// fibSplitMax is LFP_FIB_SPLIT_MAX (bpf/include/fibcache_map.h).
const fibSplitMax = 65536

// fibSplit gives the FIB cache's blocks (observe.FibBlock4, FibBlock6) whose destinations may
// meet different routes: those holding a route longer than the block, and those holding a
// local address, its IPv4 broadcast or network address or its IPv6 subnet anycast address,
// whose local routes come back without a request when the device goes up again (bpf/lib/
// fibcache.h says why each block's answer holds for all its destinations otherwise).
func fibSplit(s *observe.Snapshot) []netip.Prefix {
	set := map[netip.Prefix]bool{}
	block := func(a netip.Addr) {
		bits := observe.FibBlock6
		if a.Is4() {
			bits = observe.FibBlock4
		}
		p, _ := a.Prefix(bits)
		set[p] = true
	}
	for _, p := range append(slices.Clip(s.Routes.Long4), s.Routes.Long6...) {
		block(p.Addr())
	}
	for _, a := range s.Addrs {
		network := a.Prefix.Masked().Addr()
		block(a.Prefix.Addr())
		block(network)
		if network.Is4() {
			b := network.As4()
			binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])|^uint32(0)>>a.Prefix.Bits())
			block(netip.AddrFrom4(b))
		}
	}
	return slices.SortedFunc(maps.Keys(set), func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
}
