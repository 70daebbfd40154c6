package graph

import (
	"maps"
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
	why[0] = append(why[0], both...)
	why[1] = append(why[1], both...)
	if s.Routes.PolicyRules4 {
		why[0] = append(why[0], "policy routing rules exist (a lookup may depend on the source, marks, ports)")
	}
	if s.Routes.Multipath4 {
		why[0] = append(why[0], "multipath routes or nexthop groups exist (the path depends on the flow's hash)")
	}
	if s.Sysctl.FwdUsePMTU4 {
		why[0] = append(why[0], "net.ipv4.ip_forward_use_pmtu=1 (forwarding honours path MTUs learnt without an event)")
	}
	if s.Routes.MTULocked4 {
		why[0] = append(why[0], "a route has a locked MTU (forwarding honours path MTUs learnt without an event)")
	}
	for _, name := range slices.Sorted(maps.Keys(s.Sysctl.IgnoreLinkdown4)) {
		if s.Sysctl.IgnoreLinkdown4[name] {
			why[0] = append(why[0], "net.ipv4.conf."+name+".ignore_routes_with_linkdown=1 (routes follow the carrier, which changes without an event)")
			break
		}
	}
	// IPv6 routes change without a request in ways the watchers do not see yet: routes and
	// default routers learnt from router advertisements (accept_ra), and route expiry.
	why[1] = append(why[1], "IPv6 routes learnt from router advertisements and route expiry are not seen as they happen")
	return why
}
