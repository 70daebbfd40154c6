// Package compiletest makes random forward-path rulesets, ipset sets and packets in the model's
// terms (no kernel involved) for differential tests of the filter compiler against the reference
// evaluator, and of the BPF classifier against the compiler.
//
// The rulesets have the shape of package eval's kernel-backed generator (iptables tables raw,
// mangle, nat, filter with user chains, jumps, gotos, returns, random policies, set matches,
// supported and unsupported matches and targets, a native nft table with base chains at random
// priorities, some equal to iptables' ones) and go further where the model allows what iptables
// refuses: -o in prerouting, -i in postrouting, port matches without a protocol, jumps to chains
// that do not exist, sets that are missing, of the other family or not modelled, marks, and
// blacklists of many prefixes.
package compiletest

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"

	"github.com/linuxfp/linuxfp/internal/filter/eval"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// Gen makes random rulesets and packets of one family.
type Gen struct {
	R      *rand.Rand
	Family model.Family
}

var (
	src4 = []string{"198.18.0.10", "198.18.0.11", "198.18.0.77", "198.18.1.20", "198.18.1.21", "198.18.9.5", "198.18.9.200", "198.18.128.3"}
	dst4 = []string{"198.19.0.5", "198.19.0.6", "198.19.1.9", "198.19.100.1", "198.19.128.5", "198.19.128.6", "198.19.200.1", "198.19.255.7"}
	src6 = []string{"2001:2::10", "2001:2::11", "2001:2::7f", "2001:2:0:1::20", "2001:2:0:1::21", "2001:2:0:9::5", "2001:2:0:9::c8", "2001:2:0:8000::3"}
	dst6 = []string{"2001:2:0:f100::5", "2001:2:0:f100::6", "2001:2:0:f100::109", "2001:2:0:f100::ff01", "2001:2:0:f200::5", "2001:2:0:f200::6", "2001:2:0:f200::1c8", "2001:2:0:f200::ff07"}

	ports = []uint16{0, 22, 53, 80, 443, 1000, 1500, 8080, 65535}

	// Interfaces are named from Ifaces; patterns mix names and prefixes of them.
	Ifaces   = []string{"eth0", "eth1", "vethin1", "vethout2", "docker0", "cni0"}
	patterns = []model.Iface{
		{Name: "eth0"}, {Name: "eth1"}, {Name: "vethin1"}, {Name: "vethout2"}, {Name: "docker0"}, {Name: "wlan0"},
		{Name: "eth", Wildcard: true}, {Name: "veth", Wildcard: true}, {Name: "vethin", Wildcard: true},
		{Name: "vethout", Wildcard: true}, {Name: "e", Wildcard: true}, {Name: "d", Wildcard: true}, {Wildcard: true},
		{Name: ""},
	}
)

// Local are the prefixes of the local, broadcast, anycast and multicast routes of the host the
// random packets pass (eval.MaybeLocal): some addresses and prefixes of the pools, so that
// `fib saddr|daddr type local` is "maybe" for some packets.
var Local = []netip.Prefix{
	netip.MustParsePrefix("198.19.255.0/24"), netip.MustParsePrefix("198.18.9.200/32"),
	netip.MustParsePrefix("2001:2:0:f200::ff00/120"), netip.MustParsePrefix("2001:2:0:9::c8/128"),
}

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func (g *Gen) v6() bool { return g.Family == model.IPv6 }

func (g *Gen) srcs() []string {
	if g.v6() {
		return src6
	}
	return src4
}

func (g *Gen) dsts() []string {
	if g.v6() {
		return dst6
	}
	return dst4
}

func (g *Gen) icmp() uint8 {
	if g.v6() {
		return model.ProtoICMPv6
	}
	return model.ProtoICMP
}

// addr is an address of the pools, or one near them.
func (g *Gen) addr(pool []string) netip.Addr {
	r := g.R
	a := netip.MustParseAddr(pick(r, pool))
	if r.IntN(5) == 0 {
		b := a.AsSlice()
		b[len(b)-1] = byte(r.IntN(256))
		if r.IntN(2) == 0 {
			b[len(b)-2] = byte(r.IntN(256))
		}
		a, _ = netip.AddrFromSlice(b)
	}
	return a
}

// prefix is a random prefix around an address of the pool.
func (g *Gen) prefix(pool []string) netip.Prefix {
	r := g.R
	a := g.addr(pool)
	if r.IntN(40) == 0 { // the other family: never matches
		if a.Is4() {
			a = netip.MustParseAddr("2001:2::10")
		} else {
			a = netip.MustParseAddr("198.18.0.10")
		}
	}
	var bits int
	if a.Is4() {
		bits = pick(r, []int{32, 32, 31, 30, 24, 24, 23, 17, 16, 15, 8, 0})
	} else {
		bits = pick(r, []int{128, 128, 127, 126, 120, 64, 64, 63, 48, 47, 16, 0})
	}
	p, _ := a.Prefix(bits)
	if r.IntN(10) == 0 {
		p = netip.PrefixFrom(a, bits) // not masked: the model may hold such
	}
	return p
}

func (g *Gen) portRange() model.PortRange {
	r := g.R
	a, b := pick(r, ports), pick(r, ports)
	if r.IntN(4) == 0 {
		a = b
	}
	if a > b {
		a, b = b, a
	}
	if r.IntN(30) == 0 {
		a = b + 1 // empty (From > To): no port; or all ports when b is 65535
	}
	return model.PortRange{From: a, To: b}
}

// matches returns random matches for a rule (of any chain: -o may land in prerouting).
func (g *Gen) matches() []model.Match {
	r := g.R
	var m []model.Match
	inv := func() bool { return r.IntN(4) == 0 }
	add := func(x model.Match) { m = append(m, x) }
	if r.IntN(3) == 0 {
		add(model.Addr{Dir: model.Src, Prefix: g.prefix(g.srcs()), Invert: inv()})
	}
	if r.IntN(3) == 0 {
		add(model.Addr{Dir: model.Dst, Prefix: g.prefix(g.dsts()), Invert: inv()})
	}
	if r.IntN(5) == 0 {
		p := pick(r, patterns)
		p.Invert = inv()
		add(p)
	}
	if r.IntN(5) == 0 {
		p := pick(r, patterns)
		p.Out, p.Invert = true, inv()
		add(p)
	}
	switch r.IntN(9) {
	case 0, 1, 2:
		p := pick(r, []uint8{model.ProtoTCP, model.ProtoUDP, model.ProtoTCP, model.ProtoUDP, model.ProtoSCTP, model.ProtoDCCP})
		if r.IntN(15) != 0 { // the translator always puts one: the model does not promise it
			add(model.Proto{Proto: p})
		}
		for range r.IntN(3) {
			pm := model.Ports{Dir: pick(r, []model.Dir{model.Src, model.Dst, model.Dst, model.Either}), Invert: inv()}
			for range 1 + r.IntN(3) {
				pm.Ranges = append(pm.Ranges, g.portRange())
			}
			if r.IntN(40) == 0 {
				pm.Ranges = nil
			}
			add(pm)
		}
	case 3:
		add(model.Proto{Proto: g.icmp()})
		if r.IntN(3) != 0 {
			im := model.ICMP{Invert: inv()}
			switch r.IntN(6) {
			case 0:
				im.AnyType = true
			case 1:
				im.Type, im.CodeMin, im.CodeMax = 3, 1, 4
			case 2:
				im.Type, im.CodeMin, im.CodeMax = 3, 5, 2 // no code
			default:
				tc := g.icmpTypes()[r.IntN(len(g.icmpTypes()))]
				im.Type, im.CodeMin, im.CodeMax = tc[0], tc[1], tc[1]
				if r.IntN(2) == 0 {
					im.CodeMin, im.CodeMax = 0, 0xff
				}
			}
			add(im)
		}
	case 4:
		add(model.Proto{Proto: pick(r, []uint8{model.ProtoTCP, model.ProtoUDP, g.icmp(), 47, 0}), Invert: inv()})
	case 5:
		// An nf_tables protocol set (`meta l4proto { tcp, udp } th dport 53`).
		ps := model.Protos{Protos: pick(r, [][]uint8{{model.ProtoTCP, model.ProtoUDP}, {model.ProtoUDP, model.ProtoSCTP, model.ProtoDCCP},
			{model.ProtoTCP, g.icmp()}, {47}, {}}), Invert: inv()}
		add(ps)
		if !ps.Invert && len(ps.Protos) > 0 && model.HasPorts(ps.Protos[len(ps.Protos)-1]) && r.IntN(2) == 0 {
			add(model.Ports{Dir: pick(r, []model.Dir{model.Src, model.Dst}), Ranges: []model.PortRange{g.portRange()}, Invert: inv()})
		}
	}
	switch r.IntN(20) {
	case 0, 1, 2, 3:
		s := model.Set{Name: pick(r, []string{"ip", "ipm", "net", "ipport", "netport", "ip", "net", "ipport", "netport", "unsup", "other", "bitmap", "missing"}), Invert: inv()}
		for range 1 + r.IntN(2) {
			s.Dirs = append(s.Dirs, pick(r, []model.Dir{model.Src, model.Dst}))
		}
		add(s)
	case 4:
		add(model.Unknown{What: "conntrack --ctstatus ASSURED"})
	case 11, 12:
		// An nf_tables address set lookup (`ip daddr @s`, `ip saddr != @s`).
		add(model.Set{Name: NFTSet, Dirs: []model.Dir{pick(r, []model.Dir{model.Src, model.Dst})}, Invert: inv(), Nft: true})
	case 8, 9, 10:
		add(model.CtState{States: pick(r, []uint8{model.CtEstablished | model.CtRelated, model.CtNew, model.CtInvalid,
			model.CtEstablished, model.CtUntracked | model.CtNew, model.CtStates, 0}), Invert: inv()})
	case 5:
		add(model.Unknown{What: "limit", SideEffect: true})
	case 6:
		add(model.Mark{Value: pick(r, []uint32{0, 1, 0x4000}), Mask: pick(r, []uint32{0xffffffff, 0x4000, 0xffff}), Invert: inv()})
	case 7:
		add(model.Unknown{What: "length 0:1000"})
	case 13:
		// Rare: a ruleset with one hands Linux every packet whose address may be local.
		if r.IntN(4) != 0 {
			break
		}
		add(model.FibLocal{Dir: pick(r, []model.Dir{model.Src, model.Dst}), Invert: inv()})
	}
	r.Shuffle(len(m), func(i, j int) {
		// Keep protocols before what needs them (as the translator does) most of the time.
		if r.IntN(8) == 0 {
			m[i], m[j] = m[j], m[i]
		}
	})
	return m
}

func (g *Gen) icmpTypes() [][2]uint8 {
	if g.v6() {
		return [][2]uint8{{128, 0}, {129, 0}, {1, 3}, {1, 4}, {3, 0}}
	}
	return [][2]uint8{{8, 0}, {0, 0}, {3, 4}, {3, 1}, {11, 0}}
}

type chainSpec struct {
	key  model.ChainKey
	base *model.BaseChain
}

// Ruleset returns a random ruleset and the sets its matches may name.
func (g *Gen) Ruleset() (*model.Ruleset, map[string]*model.IPSet) {
	r := g.R
	rs := model.NewRuleset(g.Family)
	famName := "ip"
	if g.v6() {
		famName = "ip6"
	}
	type tbl struct {
		family, name string
		bases        []*model.BaseChain
		names        []string
		verdicts     []model.VerdictKind
	}
	vk := func(ks ...model.VerdictKind) []model.VerdictKind { return ks }
	C, A, D, R, J, G, L := model.Continue, model.Accept, model.Drop, model.Return, model.Jump, model.Goto, model.Linux
	bc := func(h model.Hook, prio int32, typ model.ChainType) *model.BaseChain {
		return &model.BaseChain{Hook: h, Priority: prio, Type: typ}
	}
	tables := []tbl{
		{famName, "raw", []*model.BaseChain{bc(model.Prerouting, model.PriorityRaw, model.ChainFilter)}, []string{"PREROUTING"}, vk(C, A, A, D, R, J, G, L)},
		{famName, "mangle", []*model.BaseChain{bc(model.Prerouting, model.PriorityMangle, model.ChainFilter), bc(model.Forward, model.PriorityMangle, model.ChainFilter), bc(model.Postrouting, model.PriorityMangle, model.ChainFilter)},
			[]string{"PREROUTING", "FORWARD", "POSTROUTING"}, vk(C, A, A, D, R, J, G, L)},
		{famName, "nat", []*model.BaseChain{bc(model.Prerouting, model.PriorityDstNAT, model.ChainNAT), bc(model.Postrouting, model.PrioritySrcNAT, model.ChainNAT)},
			[]string{"PREROUTING", "POSTROUTING"}, vk(C, A, A, R, J, G, L, L)},
		{famName, "filter", []*model.BaseChain{bc(model.Forward, model.PriorityFilter, model.ChainFilter)}, []string{"FORWARD"}, vk(C, A, A, A, D, D, D, R, J, J, G, L)},
	}
	if r.IntN(6) == 0 {
		tables = append(tables, tbl{famName, "security", []*model.BaseChain{bc(model.Forward, model.PrioritySecurity, model.ChainFilter)}, []string{"FORWARD"}, vk(C, A, D, R, J, L)})
	}
	if r.IntN(2) == 0 {
		n := 1 + r.IntN(2)
		t := tbl{family: "inet", name: "lfp", verdicts: vk(C, A, D, D, R, J, G, L)}
		for i := range n {
			h := pick(r, []model.Hook{model.Prerouting, model.Forward, model.Forward, model.Postrouting})
			prio := pick(r, []int32{-350, -300, -200, -150, -120, 0, 0, 10, 50, 100, 150})
			t.bases = append(t.bases, bc(h, prio, model.ChainFilter))
			t.names = append(t.names, fmt.Sprintf("base%d", i))
		}
		tables = append(tables, t)
	}
	for _, t := range tables {
		if r.IntN(3) == 0 {
			continue // the table is absent
		}
		nuser := r.IntN(4)
		var chains []*model.Chain
		for i, b := range t.bases {
			if b.Type == model.ChainFilter && r.IntN(6) == 0 {
				b.Policy = model.PolicyDrop
			}
			chains = append(chains, &model.Chain{Key: model.ChainKey{TableFamily: t.family, Table: t.name, Chain: t.names[i]}, Base: b, IPTables: t.family != "inet"})
		}
		nbase := len(chains)
		for u := 1; u <= nuser; u++ {
			chains = append(chains, &model.Chain{Key: model.ChainKey{TableFamily: t.family, Table: t.name, Chain: fmt.Sprintf("U%d", u)}, IPTables: t.family != "inet"})
		}
		for ci, c := range chains {
			n := r.IntN(6)
			if c.Base != nil && c.Base.Hook == model.Forward && r.IntN(8) == 0 {
				g.blacklist(c)
			}
			// Each rule's position in the chain as read (the rules a lookup of a
			// concatenation becomes share one).
			ids := make([]int, len(c.Rules))
			for i := range ids {
				ids[i] = i
			}
			for range n {
				v := model.Verdict{Kind: pick(r, t.verdicts)}
				switch v.Kind {
				case J, G:
					// Only to user chains after this one: no loops (nf_tables refuses them).
					first := 1
					if ci >= nbase {
						first = ci - nbase + 2
					}
					switch {
					case r.IntN(30) == 0:
						v.Chain = "NOPE"
					case first > nuser:
						v.Kind = R
					default:
						v.Chain = fmt.Sprintf("U%d", first+r.IntN(nuser-first+1))
					}
				case L:
					v.Reason = pick(r, []string{"target REJECT", "target LOG", "DNAT translates the packet", "target MARK"})
					v.NAT = v.Reason == "DNAT translates the packet"
				}
				pos := len(ids)
				if pos > 0 {
					pos = ids[pos-1] + 1
				}
				rules := []*model.Rule{{Matches: g.matches(), Verdict: v}}
				if r.IntN(8) == 0 {
					rules = g.concat(rs, c, pos, v)
				}
				for range rules {
					ids = append(ids, pos)
				}
				c.Rules = append(c.Rules, rules...)
			}
			for i, rule := range c.Rules {
				rule.ID = model.RuleID{Chain: c.Key, Handle: uint64(ids[i] + 2), Position: ids[i]}
			}
			rs.AddChain(c)
		}
	}
	rs.Sort()
	return rs, g.sets()
}

// concat returns the rules the translator makes of a rule with a lookup of a concatenation of
// exact keys (package nft's expandConcat), at position pos of chain c with verdict v: one rule
// per element (the matches before the lookup, the element's key, the matches after it, v), or,
// negated, a jump to a chain made for the rule (added to rs), whose elements return before a
// last rule of the matches after the lookup with v.
func (g *Gen) concat(rs *model.Ruleset, c *model.Chain, pos int, v model.Verdict) []*model.Rule {
	r := g.R
	before, after := g.matches(), g.matches()
	if r.IntN(2) == 0 {
		before = nil
	}
	if r.IntN(2) == 0 {
		after = nil
	}
	exact := func(pool []string) netip.Prefix {
		a := netip.MustParseAddr(pick(r, pool))
		return netip.PrefixFrom(a, a.BitLen())
	}
	kind := r.IntN(2)
	seen := map[string]bool{}
	var keys [][]model.Match
	for range r.IntN(5) {
		var k []model.Match
		switch kind {
		case 0: // daddr . l4proto . dport
			p := pick(r, ports)
			k = []model.Match{model.Addr{Dir: model.Dst, Prefix: exact(g.dsts())}, model.Proto{Proto: pick(r, []uint8{model.ProtoTCP, model.ProtoUDP})},
				model.Ports{Dir: model.Dst, Ranges: []model.PortRange{{From: p, To: p}}}}
		case 1: // saddr . daddr
			k = []model.Match{model.Addr{Dir: model.Src, Prefix: exact(g.srcs())}, model.Addr{Dir: model.Dst, Prefix: exact(g.dsts())}}
		}
		if s := fmt.Sprint(k); !seen[s] {
			seen[s] = true
			keys = append(keys, k)
		}
	}
	negated := r.IntN(2) == 0 && v.Kind != model.Return && v.Kind != model.Goto
	if !negated {
		var out []*model.Rule
		for _, k := range keys {
			out = append(out, &model.Rule{Matches: slices.Concat(before, k, after), Verdict: v})
		}
		return out
	}
	id := model.RuleID{Chain: c.Key, Handle: uint64(pos + 2), Position: pos}
	sub := &model.Chain{Key: c.Key}
	sub.Key.Chain = fmt.Sprintf("%s handle %d not in @s", c.Key.Chain, pos+2)
	for _, k := range keys {
		sub.Rules = append(sub.Rules, &model.Rule{ID: id, Matches: k, Verdict: model.Verdict{Kind: model.Return}})
	}
	sub.Rules = append(sub.Rules, &model.Rule{ID: id, Matches: after, Verdict: v})
	rs.AddChain(sub)
	return []*model.Rule{{Matches: before, Verdict: model.Verdict{Kind: model.Jump, Chain: sub.Key.Chain}}}
}

// blacklist adds many address rules to c (the leaves' shapes).
func (g *Gen) blacklist(c *model.Chain) {
	r := g.R
	dir := pick(r, []model.Dir{model.Src, model.Dst})
	pool := g.dsts()
	if dir == model.Src {
		pool = g.srcs()
	}
	for range 10 + r.IntN(60) {
		a := g.addr(pool)
		bits := pick(r, []int{32, 32, 24})
		if g.v6() {
			bits = pick(r, []int{128, 128, 64})
		}
		p, _ := a.Prefix(bits)
		c.Rules = append(c.Rules, &model.Rule{Matches: []model.Match{model.Addr{Dir: dir, Prefix: p}}, Verdict: model.Verdict{Kind: pick(r, []model.VerdictKind{model.Drop, model.Drop, model.Accept})}})
	}
}

// sets returns the sets rules may name: modelled ones of each type, one of the other family, one
// not modelled, one of a type not modelled ("missing" is not there).
func (g *Gen) sets() map[string]*model.IPSet {
	r := g.R
	other := model.IPv6
	if g.v6() {
		other = model.IPv4
	}
	all := append(append([]string(nil), g.srcs()...), g.dsts()...)
	nm := 24
	if g.v6() {
		nm = 64
	}
	icmpPort := uint16(8 << 8)
	if g.v6() {
		icmpPort = 128 << 8
	}
	portKeys := [][2]uint16{{model.ProtoTCP, 80}, {model.ProtoUDP, 53}, {model.ProtoTCP, 22}, {uint16(g.icmp()), icmpPort}, {model.ProtoUDP, 1000}, {model.ProtoDCCP, 0}, {47, 0}}
	sets := map[string]*model.IPSet{
		"ip":      {Name: "ip", Type: "hash:ip", Family: g.Family},
		"ipm":     {Name: "ipm", Type: "hash:ip", Family: g.Family, Netmask: nm},
		"net":     {Name: "net", Type: "hash:net", Family: g.Family},
		"ipport":  {Name: "ipport", Type: "hash:ip,port", Family: g.Family},
		"netport": {Name: "netport", Type: "hash:net,port", Family: g.Family},
		"unsup":   {Name: "unsup", Type: "hash:ip", Family: g.Family, Unsupported: "option skbinfo"},
		"other":   {Name: "other", Type: "hash:ip", Family: other},
		"bitmap":  {Name: "bitmap", Type: "bitmap:port", Family: g.Family},
		NFTSet:    {Name: NFTSet, Type: "hash:net", Family: g.Family, Nft: true},
	}
	for _, name := range []string{"ip", "ipm", "net", "ipport", "netport", "unsup", "other", "bitmap"} { // not map order: reproducible
		s := sets[name]
		for range r.IntN(6) {
			a := netip.MustParseAddr(pick(r, all))
			var e model.SetEntry
			switch s.Type {
			case "hash:ip":
				e.Prefix = netip.PrefixFrom(a, a.BitLen())
				if s.Netmask > 0 {
					p, _ := a.Prefix(s.Netmask)
					e.Prefix = netip.PrefixFrom(p.Addr(), a.BitLen())
				}
			case "hash:net", "hash:net,port":
				e.Prefix = g.prefix(all)
				if !e.Prefix.IsValid() || e.Prefix.Bits() == 0 || e.Prefix.Addr().Is4() != a.Is4() {
					e.Prefix = netip.PrefixFrom(a, a.BitLen())
				}
				e.Prefix = e.Prefix.Masked()
				e.NoMatch = r.IntN(4) == 0
			case "hash:ip,port":
				e.Prefix = netip.PrefixFrom(a, a.BitLen())
			}
			if model.Dimensions(s.Type) == 2 {
				k := pick(r, portKeys)
				e.Proto, e.Port = uint8(k[0]), k[1]
			}
			s.Entries = append(s.Entries, e)
		}
	}
	// The nf_tables set: the prefixes covering its intervals (package nft), no nomatch, and
	// sometimes every address (an interval from the lowest to the highest).
	nset := sets[NFTSet]
	for range r.IntN(6) {
		pf := g.prefix(all)
		if !pf.IsValid() || pf.Addr().Is4() != !g.v6() {
			continue
		}
		nset.Entries = append(nset.Entries, model.SetEntry{Prefix: pf.Masked()})
	}
	if r.IntN(15) == 0 {
		a := netip.IPv4Unspecified()
		if g.v6() {
			a = netip.IPv6Unspecified()
		}
		nset.Entries = append(nset.Entries, model.SetEntry{Prefix: netip.PrefixFrom(a, 0)})
	}
	return sets
}

// NFTSet is the name of the generated nf_tables address set.
const NFTSet = "nftables set inet t s"

// Packet returns a random forwarded packet: addresses from the pools or near them, a protocol
// with or without ports, interfaces named from Ifaces, mark 0 (one in ten: another mark).
func (g *Gen) Packet() eval.Packet {
	r := g.R
	p := eval.Packet{Family: g.Family}
	pool := func(first []string) []string {
		if r.IntN(6) == 0 {
			if g.v6() {
				return pick(r, [][]string{src6, dst6})
			}
			return pick(r, [][]string{src4, dst4})
		}
		return first
	}
	p.Src, p.Dst = g.addr(pool(g.srcs())), g.addr(pool(g.dsts()))
	if r.IntN(100) == 0 {
		p.Src = netip.IPv4Unspecified()
		if g.v6() {
			p.Src = netip.IPv6Unspecified()
		}
	}
	p.SrcMaybeLocal, p.DstMaybeLocal = eval.MaybeLocal(p.Src, Local), eval.MaybeLocal(p.Dst, Local)
	p.In, p.Out = pick(r, Ifaces), pick(r, Ifaces)
	p.Proto = pick(r, []uint8{model.ProtoTCP, model.ProtoTCP, model.ProtoUDP, model.ProtoUDP, g.icmp(), g.icmp(), 47, model.ProtoDCCP, model.ProtoSCTP, model.ProtoUDPLite, 0})
	switch {
	case model.HasPorts(p.Proto):
		p.SrcPort, p.DstPort = pick(r, ports), pick(r, ports)
		if r.IntN(3) == 0 {
			p.SrcPort = uint16(1024 + r.IntN(60000))
		}
	case p.Proto == g.icmp():
		tc := pick(r, g.icmpTypes())
		p.ICMPType, p.ICMPCode = tc[0], tc[1]
	}
	if r.IntN(10) == 0 {
		p.Mark = pick(r, []uint32{1, 0x4000, 0x2})
	}
	// Mostly what the fast path sees (established, new). Never 0 (not known): the evaluator's
	// "maybe" for it would be compared with a data plane that leaves such packets to Linux.
	p.CtState = pick(r, []uint8{model.CtEstablished, model.CtEstablished, model.CtEstablished, model.CtNew, model.CtNew,
		model.CtRelated, model.CtInvalid, model.CtUntracked})
	return p
}
