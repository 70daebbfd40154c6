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
