package graph

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// forwardDrop is a ruleset read whose IPv4 forward chain drops everything; conntrack lists what
// makes netfilter track IPv4 connections (none: untracked).
func forwardDrop(conntrack ...string) *observe.Ruleset {
	key := model.ChainKey{TableFamily: "ip", Table: "filter", Chain: "FORWARD"}
	ch := &model.Chain{Key: key, IPTables: true,
		Base:  &model.BaseChain{Hook: model.Forward, Priority: model.PriorityFilter, Type: model.ChainFilter},
		Rules: []*model.Rule{{ID: model.RuleID{Chain: key}, Verdict: model.Verdict{Kind: model.Drop}}}}
	rs := &model.Ruleset{Family: model.IPv4, Chains: map[model.ChainKey]*model.Chain{key: ch},
		Base: map[model.Hook][]*model.Chain{model.Forward: {ch}}, Conntrack: conntrack}
	return &observe.Ruleset{Generation: 1, Rulesets: [2]*model.Ruleset{rs, nil}}
}

// A ruleset read is compiled once, however many plans are built from it (every change the
// controller follows builds one); a new read is compiled again.
func TestFilterCompiledOncePerRead(t *testing.T) {
	s := snapshot()
	s.Rules = forwardDrop()
	c0 := compiles.Load()
	p1 := Build(s, Options{Hook: HookAuto}, notOwned, nil)
	if p1.Filter == nil || p1.Filter.Prog[0] == nil || p1.Filter.Rules[0] != 1 || p1.Filter.Err[1] == "" {
		t.Fatalf("filter %+v: want the IPv4 rule compiled and IPv6 not read", p1.Filter)
	}
	for range 3 {
		if p := Build(s, Options{Hook: HookAuto}, notOwned, nil); p.Filter != p1.Filter {
			t.Fatal("an unchanged ruleset read was compiled again")
		}
	}
	if n := compiles.Load() - c0; n != 1 {
		t.Fatalf("compiled %d times, want once", n)
	}
	s.Rules = forwardDrop("nat chain")
	p2 := Build(s, Options{Hook: HookAuto}, notOwned, nil)
	if p2.Filter == p1.Filter || !p2.Filter.Tracked[0] || compiles.Load()-c0 != 2 {
		t.Fatalf("a new read: filter %+v, %d compilations, want a new tracked one", p2.Filter, compiles.Load()-c0)
	}
	s.Rules = nil
	if p := Build(s, Options{Hook: HookAuto}, notOwned, nil); p.Filter != nil || p.Filter.UsesSets() {
		t.Fatal("no ruleset read: want no filter")
	}
}
