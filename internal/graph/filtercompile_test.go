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

// The conntrack module translates a family's connections only where no rule of that family on
// prerouting or postrouting could act on an established packet: a mangle-priority drop on IPv6
// prerouting keeps IPv6's translated connections with Linux, not IPv4's, and the other way round.
func TestCTNATPerFamily(t *testing.T) {
	ruleset := func(fam model.Family, tf string, preDrop bool) *model.Ruleset {
		rs := &model.Ruleset{Family: fam, Chains: map[model.ChainKey]*model.Chain{}, Base: map[model.Hook][]*model.Chain{},
			Conntrack: []string{tf + " nat: nat chain"}}
		if preDrop {
			key := model.ChainKey{TableFamily: tf, Table: "mangle", Chain: "PREROUTING"}
			ch := &model.Chain{Key: key, IPTables: true,
				Base:  &model.BaseChain{Hook: model.Prerouting, Priority: -150, Type: model.ChainFilter},
				Rules: []*model.Rule{{ID: model.RuleID{Chain: key}, Verdict: model.Verdict{Kind: model.Drop}}}}
			rs.Chains[key] = ch
			rs.Base[model.Prerouting] = []*model.Chain{ch}
		}
		return rs
	}
	for _, tc := range []struct {
		name       string
		pre4, pre6 bool
		nat4, nat6 bool
	}{
		{"no prerouting rules", false, false, true, true},
		{"an ipv6 prerouting drop", false, true, true, false},
		{"an ipv4 prerouting drop", true, false, false, true},
	} {
		s := snapshot()
		s.Rules = &observe.Ruleset{Generation: 1, Rulesets: [2]*model.Ruleset{
			ruleset(model.IPv4, "ip", tc.pre4), ruleset(model.IPv6, "ip6", tc.pre6)}}
		ct := ctData(s)
		if !ct.Active4 || !ct.Active6 || ct.NAT4 != tc.nat4 || ct.NAT6 != tc.nat6 {
			t.Errorf("%s: conntrack %+v, want both families active, NAT4 %v, NAT6 %v", tc.name, ct, tc.nat4, tc.nat6)
		}
	}
}
