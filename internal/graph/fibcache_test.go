package graph

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/observe"
)

func TestFibCache(t *testing.T) {
	on := Options{FibCache: true, NeighEvents: true}
	if p := Build(snapshot(), on, nil, nil); !p.Data.FibCache4 || !p.Data.FibCache6 {
		t.Fatalf("plain routing, watchers attached: FibCache4=%v FibCache6=%v, want on (%q)", p.Data.FibCache4, p.Data.FibCache6, p.FibCacheOff)
	}
	if p := Build(snapshot(), Options{FibCache: true}, nil, nil); p.Data.FibCache4 {
		t.Fatal("cache on without the watchers")
	}
	if p := Build(snapshot(), Options{NeighEvents: true}, nil, nil); p.Data.FibCache4 {
		t.Fatal("cache on without --fib-cache")
	}
	cases := map[string]func(*observe.Snapshot){
		"policy routing":                func(s *observe.Snapshot) { s.Routes.PolicyRules4 = true },
		"multipath":                     func(s *observe.Snapshot) { s.Routes.Multipath4 = true },
		"ip_forward_use_pmtu":           func(s *observe.Snapshot) { s.Sysctl.FwdUsePMTU4 = true },
		"locked MTU":                    func(s *observe.Snapshot) { s.Routes.MTULocked4 = true },
		"ignore_routes_with_linkdown=1": func(s *observe.Snapshot) { s.Sysctl.IgnoreLinkdown4 = map[string]bool{"out0": true} },
	}
	for want, set := range cases {
		s := snapshot()
		set(s)
		p := Build(s, on, nil, nil)
		if p.Data.FibCache4 || !strings.Contains(strings.Join(p.FibCacheOff[0], ";"), want) {
			t.Errorf("%s: FibCache4=%v, off because %q", want, p.Data.FibCache4, p.FibCacheOff[0])
		}
	}
	cases6 := map[string]func(*observe.Snapshot){
		"policy routing":                func(s *observe.Snapshot) { s.Routes.PolicyRules6 = true },
		"multipath":                     func(s *observe.Snapshot) { s.Routes.Multipath6 = true },
		"locked MTU":                    func(s *observe.Snapshot) { s.Routes.MTULocked6 = true },
		"source prefix":                 func(s *observe.Snapshot) { s.Routes.SourceRoutes6 = true },
		"expires":                       func(s *observe.Snapshot) { s.Routes.Expiring6 = true },
		"router advertisements":         func(s *observe.Snapshot) { s.Sysctl.AcceptRA6 = map[string]bool{"in0": true} },
		"ignore_routes_with_linkdown=1": func(s *observe.Snapshot) { s.Sysctl.IgnoreLinkdown6 = map[string]bool{"out0": true} },
	}
	for want, set := range cases6 {
		s := snapshot()
		set(s)
		p := Build(s, on, nil, nil)
		if p.Data.FibCache6 || !p.Data.FibCache4 || !strings.Contains(strings.Join(p.FibCacheOff[1], ";"), want) {
			t.Errorf("%s: FibCache6=%v FibCache4=%v, off because %q", want, p.Data.FibCache6, p.Data.FibCache4, p.FibCacheOff[1])
		}
	}
}

// The blocks whose destinations may meet different routes: those of longer routes, of local
// addresses and of their broadcast, network and subnet anycast addresses.
func TestFibSplit(t *testing.T) {
	s := snapshot()
	s.Addrs = []observe.Addr{
		{Index: 2, Prefix: netip.MustParsePrefix("198.18.0.1/24")},
		{Index: 2, Prefix: netip.MustParsePrefix("198.19.1.5/22")}, // broadcast 198.19.3.255
		{Index: 2, Prefix: netip.MustParsePrefix("2001:2:0:1:0:0:1:5/48")},
	}
	s.Routes.Long4 = []netip.Prefix{netip.MustParsePrefix("198.19.9.128/25"), netip.MustParsePrefix("198.19.9.7/32")}
	s.Routes.Long6 = []netip.Prefix{netip.MustParsePrefix("2001:2:0:f1::7/128")}
	p := Build(s, Options{FibCache: true, NeighEvents: true}, nil, nil)
	var got []string
	for _, b := range p.Data.FibSplit {
		got = append(got, b.String())
	}
	want := []string{"198.18.0.0/24", "198.19.0.0/24", "198.19.1.0/24", "198.19.3.0/24", "198.19.9.0/24",
		"2001:2::/64", "2001:2:0:1::/64", "2001:2:0:f1::/64"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("split blocks %v, want %v", got, want)
	}
}
