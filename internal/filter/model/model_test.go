package model

import (
	"net/netip"
	"testing"
)

func TestRulesetSortAndLookup(t *testing.T) {
	rs := NewRuleset(IPv4)
	add := func(table, chain string, base *BaseChain, rules ...*Rule) *Chain {
		c := &Chain{Key: ChainKey{TableFamily: "ip", Table: table, Chain: chain}, Base: base, Rules: rules}
		rs.AddChain(c)
		return c
	}
	nat := add("nat", "POSTROUTING", &BaseChain{Hook: Postrouting, Priority: PrioritySrcNAT, Type: ChainNAT})
	mangle := add("mangle", "POSTROUTING", &BaseChain{Hook: Postrouting, Priority: PriorityMangle})
	native := add("a", "post", &BaseChain{Hook: Postrouting, Priority: PriorityMangle})
	user := add("nat", "USER", nil, &Rule{Verdict: Verdict{Kind: Linux, Reason: "target MARK"}}, &Rule{Matches: []Match{Unknown{What: "x"}}})
	rs.Sort()
	got := rs.Base[Postrouting]
	if len(got) != 3 || got[0] != native || got[1] != mangle || got[2] != nat {
		t.Errorf("postrouting order: %v %v %v, want ip a post, ip mangle POSTROUTING, ip nat POSTROUTING", got[0].Key, got[1].Key, got[2].Key)
	}
	if c := rs.Lookup(nat.Key, "USER"); c != user {
		t.Errorf("lookup USER from the nat table: %v", c)
	}
	if c := rs.Lookup(mangle.Key, "USER"); c != nil {
		t.Errorf("lookup USER from the mangle table found %v: chains are per table", c.Key)
	}
	if s := rs.Stats(); s != (Stats{Chains: 4, BaseChains: 3, Rules: 2, UnknownRules: 2}) {
		t.Errorf("stats: %+v", s)
	}
}

func TestString(t *testing.T) {
	r := &Rule{
		Matches: []Match{
			Addr{Dir: Src, Prefix: netip.MustParsePrefix("198.18.0.0/24"), Invert: true},
			Proto{Proto: ProtoTCP},
			Ports{Dir: Dst, Ranges: []PortRange{{80, 80}, {8000, 8080}}},
			Iface{Out: true, Name: "veth", Wildcard: true},
			Set{Name: "s", Dirs: []Dir{Src, Dst}},
			Mark{Value: 0x4000, Mask: 0x4000},
		},
		Verdict: Verdict{Kind: Jump, Chain: "X"},
	}
	want := "! -s 198.18.0.0/24 -p tcp -m multiport --dports 80,8000:8080 -o veth+ -m set --match-set s src,dst -m mark --mark 0x4000/0x4000 => jump X"
	if got := r.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestActsOnEstablished(t *testing.T) {
	ctNew := CtState{States: CtNew}
	dst := Addr{Dir: Dst, Prefix: netip.MustParsePrefix("198.19.0.99/32")}
	src := Addr{Dir: Src, Prefix: netip.MustParsePrefix("198.18.0.0/15")}
	rule := func(v Verdict, ms ...Match) *Rule { return &Rule{Matches: ms, Verdict: v} }
	jump := func(chain string) Verdict { return Verdict{Kind: Jump, Chain: chain} }
	drop, accept := Verdict{Kind: Drop}, Verdict{Kind: Accept}
	for _, tc := range []struct {
		name   string
		prio   int32
		policy Policy
		rules  []*Rule
		others map[string][]*Rule // regular chains of the same table
		acts   bool
	}{
		{name: "empty chain"},
		{name: "ct state new jump to an empty chain", rules: []*Rule{rule(jump("firewall-check"), ctNew)},
			others: map[string][]*Rule{"firewall-check": nil}},
		{name: "ct state new jump to a chain that drops", rules: []*Rule{rule(jump("firewall-check"), ctNew)},
			others: map[string][]*Rule{"firewall-check": {rule(drop, dst)}}},
		{name: "ct state new drop", rules: []*Rule{rule(drop, ctNew)}},
		{name: "ct state new,established drop", rules: []*Rule{rule(drop, CtState{States: CtNew | CtEstablished})}, acts: true},
		{name: "ct state new,established jump to a chain that drops", rules: []*Rule{rule(jump("X"), CtState{States: CtNew | CtEstablished})},
			others: map[string][]*Rule{"X": {rule(Verdict{Kind: Return}, src), rule(drop, dst)}}, acts: true},
		{name: "ct state related drop", rules: []*Rule{rule(drop, CtState{States: CtRelated})}, acts: true},
		{name: "not established,related drop", rules: []*Rule{rule(drop, CtState{States: CtEstablished | CtRelated, Invert: true})}},
		{name: "not new drop", rules: []*Rule{rule(drop, CtState{States: CtNew, Invert: true})}, acts: true},
		{name: "ip daddr drop", rules: []*Rule{rule(drop, dst)}, acts: true},
		{name: "accept, counter and return only", rules: []*Rule{rule(accept, src), rule(Verdict{}), rule(Verdict{Kind: Return}, dst)}},
		{name: "accept before a drop", rules: []*Rule{rule(accept, src), rule(drop)}, acts: true},
		{name: "unknown match then accept", rules: []*Rule{rule(accept, Unknown{What: "meta cpu 1"})}},
		{name: "side effect", rules: []*Rule{rule(Verdict{}, Unknown{What: "limit", SideEffect: true})}, acts: true},
		{name: "side effect after ct state new", rules: []*Rule{rule(Verdict{}, ctNew, Unknown{What: "limit", SideEffect: true})}},
		{name: "linux verdict", rules: []*Rule{rule(Verdict{Kind: Linux, Reason: "meta mark set"}, src)}, acts: true},
		{name: "jump to a missing chain", rules: []*Rule{rule(jump("nowhere"))}, acts: true},
		{name: "goto a chain that accepts", rules: []*Rule{rule(Verdict{Kind: Goto, Chain: "X"})},
			others: map[string][]*Rule{"X": {rule(accept, dst)}}},
		{name: "policy drop", policy: PolicyDrop, acts: true},
		{name: "raw: ct state established drop", prio: PriorityRaw, rules: []*Rule{rule(drop, CtState{States: CtEstablished})}},
		{name: "raw: ct state invalid drop", prio: PriorityRaw, rules: []*Rule{rule(drop, CtState{States: CtInvalid})}, acts: true},
		{name: "at conntrack's priority: ct state invalid drop", prio: PriorityConntrack, rules: []*Rule{rule(drop, CtState{States: CtInvalid})}, acts: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, h := range []Hook{Prerouting, Postrouting} {
				rs := NewRuleset(IPv4)
				prio := tc.prio
				if h == Postrouting && prio != 0 && prio <= PriorityConntrack {
					continue // conntrack's priority is a prerouting notion
				}
				if prio == 0 {
					prio = -110
				}
				key := ChainKey{TableFamily: "ip", Table: "kp", Chain: "filter-pre"}
				for i, r := range tc.rules {
					r.ID = RuleID{Chain: key, Position: i}
				}
				rs.AddChain(&Chain{Key: key, Base: &BaseChain{Hook: h, Priority: prio, Type: ChainFilter, Policy: tc.policy}, Rules: tc.rules})
				for name, rules := range tc.others {
					rs.AddChain(&Chain{Key: ChainKey{TableFamily: "ip", Table: "kp", Chain: name}, Rules: rules})
				}
				// A nat chain that drops is not in the Established view.
				rs.AddChain(&Chain{Key: ChainKey{TableFamily: "ip", Table: "nat", Chain: "PRE"},
					Base: &BaseChain{Hook: h, Priority: PriorityDstNAT, Type: ChainNAT}, Rules: []*Rule{rule(drop)}})
				rs.Sort()
				why := rs.Established().ActsOnEstablished(h)
				if (why != "") != tc.acts {
					t.Errorf("%s: acts on established packets: %q, want %v", h, why, tc.acts)
				}
			}
		})
	}
}
