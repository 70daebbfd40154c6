package graph

import (
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/observe"
)

func TestFibCache(t *testing.T) {
	on := Options{FibCache: true, NeighEvents: true}
	if p := Build(snapshot(), on, nil, nil); !p.Data.FibCache4 || p.Data.FibCache6 {
		t.Fatalf("plain routing, watchers attached: FibCache4=%v FibCache6=%v, want on, off (%q)", p.Data.FibCache4, p.Data.FibCache6, p.FibCacheOff)
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
}
