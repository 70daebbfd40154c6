package eval

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// builder makes small rulesets by hand: chains in table "ip t" (or another table with tbl).
type builder struct{ rs *model.Ruleset }

func newBuilder() *builder { return &builder{rs: model.NewRuleset(model.IPv4)} }

func (b *builder) base(name string, h model.Hook, prio int32, policy model.Policy, rules ...*model.Rule) *model.Chain {
	return b.add("t", name, &model.BaseChain{Hook: h, Priority: prio, Type: model.ChainFilter, Policy: policy}, rules)
}

func (b *builder) user(name string, rules ...*model.Rule) *model.Chain {
	return b.add("t", name, nil, rules)
}

func (b *builder) add(table, name string, base *model.BaseChain, rules []*model.Rule) *model.Chain {
	k := model.ChainKey{TableFamily: "ip", Table: table, Chain: name}
	c := &model.Chain{Key: k, Base: base}
	for i, r := range rules {
		r.ID = model.RuleID{Chain: k, Handle: uint64(i + 100), Position: i}
		c.Rules = append(c.Rules, r)
	}
	b.rs.AddChain(c)
	b.rs.Sort()
	return c
}

func rule(v model.Verdict, ms ...model.Match) *model.Rule {
	return &model.Rule{Matches: ms, Verdict: v}
}

var (
	accept = model.Verdict{Kind: model.Accept}
	drop   = model.Verdict{Kind: model.Drop}
	ret    = model.Verdict{Kind: model.Return}
	cont   = model.Verdict{Kind: model.Continue}
	linux  = model.Verdict{Kind: model.Linux, Reason: "target LOG"}
)

func jump(c string) model.Verdict  { return model.Verdict{Kind: model.Jump, Chain: c} }
func gotoV(c string) model.Verdict { return model.Verdict{Kind: model.Goto, Chain: c} }

func src(p string) model.Addr { return model.Addr{Dir: model.Src, Prefix: netip.MustParsePrefix(p)} }
func dst(p string) model.Addr { return model.Addr{Dir: model.Dst, Prefix: netip.MustParsePrefix(p)} }

var maybe1 = model.Unknown{What: "ct state"}
var stateful = model.Unknown{What: "limit", SideEffect: true}

func pkt() Packet {
	return Packet{
		Family: model.IPv4, Src: netip.MustParseAddr("198.18.0.10"), Dst: netip.MustParseAddr("198.19.0.5"),
		Proto: model.ProtoUDP, SrcPort: 1000, DstPort: 53, In: "eth0", Out: "eth1",
	}
}

// check evaluates and compares the verdict and the deciding rule ("chain#position"; "" for none:
// a policy, or Accept, which every base chain on the path contributes to).
func check(t *testing.T, name string, rs *model.Ruleset, sets map[string]*model.IPSet, p Packet, want Verdict, wantRule string) {
	t.Helper()
	r := Evaluate(rs, sets, p)
	got := ""
	if r.Rule != nil {
		got = r.Rule.ID.Chain.Chain + "#" + string(rune('0'+r.Rule.ID.Position))
	}
	if r.Verdict != want || got != wantRule {
		t.Errorf("%s: got %s by %q (%s), want %s by %q", name, r.Verdict, got, r.Reason, want, wantRule)
	}
}

func TestChainTraversal(t *testing.T) {
	b := newBuilder()
	b.base("FORWARD", model.Forward, 0, model.PolicyDrop,
		rule(jump("A")),                        // 0
		rule(accept, src("198.18.0.0/24")),     // 1
		rule(gotoV("C"), src("198.18.1.0/24")), // 2
		rule(ret, src("198.18.2.0/24")),        // 3: return from a base chain: policy
		rule(jump("D"), src("198.18.3.0/24")),  // 4
	)
	b.user("A",
		rule(drop, src("198.18.0.66/32")),     // dropped in A
		rule(jump("B"), src("198.18.0.0/16")), // B returns
		rule(ret, src("198.18.0.10/32")),      // back to FORWARD#1
		rule(accept, src("198.18.0.11/32")),
	)
	b.user("B", rule(ret), rule(drop))
	// C is reached by goto: its end returns to FORWARD's caller (none): the policy.
	b.user("C", rule(accept, src("198.18.1.1/32")))
	// D: the end of a user chain returns to the rule after the jump.
	b.user("D", rule(cont, src("198.18.3.0/24")))
	p := pkt()
	check(t, "jump, return, accept in base", b.rs, nil, p, Accept, "")
	p.Src = netip.MustParseAddr("198.18.0.66")
	check(t, "drop in a user chain", b.rs, nil, p, Drop, "A#0")
	p.Src = netip.MustParseAddr("198.18.0.11")
	check(t, "accept in a user chain", b.rs, nil, p, Accept, "")
	p.Src = netip.MustParseAddr("198.18.1.1")
	check(t, "goto then accept", b.rs, nil, p, Accept, "")
	p.Src = netip.MustParseAddr("198.18.1.2")
	check(t, "goto, end of chain: policy of the base chain", b.rs, nil, p, Drop, "")
	p.Src = netip.MustParseAddr("198.18.2.2")
	check(t, "return in a base chain: policy", b.rs, nil, p, Drop, "")
	p.Src = netip.MustParseAddr("198.18.3.3")
	check(t, "end of user chain returns; then policy", b.rs, nil, p, Drop, "")
}

func TestMaybe(t *testing.T) {
	cases := []struct {
		name  string
		rules []*model.Rule
		want  Verdict
		rule  string
	}{
		{"maybe without verdict is passed", []*model.Rule{rule(cont, maybe1), rule(drop)}, Drop, "F#1"},
		{"maybe with verdict goes to Linux", []*model.Rule{rule(accept, maybe1), rule(drop)}, Linux, "F#0"},
		{"false before maybe: rule skipped", []*model.Rule{rule(accept, src("198.18.5.0/24"), maybe1), rule(drop)}, Drop, "F#1"},
		{"maybe before false: rule skipped", []*model.Rule{rule(accept, maybe1, src("198.18.5.0/24")), rule(drop)}, Drop, "F#1"},
		{"stateful match runs: Linux even without verdict", []*model.Rule{rule(cont, stateful), rule(drop)}, Linux, "F#0"},
		{"stateful after a false match never runs", []*model.Rule{rule(cont, src("198.18.5.0/24"), stateful), rule(drop)}, Drop, "F#1"},
		{"stateful before a false match runs", []*model.Rule{rule(cont, stateful, src("198.18.5.0/24")), rule(drop)}, Linux, "F#0"},
		{"stateful after a maybe may run", []*model.Rule{rule(cont, maybe1, stateful, src("198.18.5.0/24")), rule(drop)}, Linux, "F#0"},
		{"Linux verdict of a matching rule", []*model.Rule{rule(linux, src("198.18.0.0/24")), rule(accept)}, Linux, "F#0"},
		{"Linux verdict of a rule that does not match", []*model.Rule{rule(linux, src("198.18.5.0/24")), rule(accept)}, Accept, ""},
		{"maybe jump to a chain that decides nothing is passed", []*model.Rule{rule(jump("U"), maybe1), rule(drop)}, Drop, "F#1"},
		{"maybe jump to a chain that may decide goes to Linux", []*model.Rule{rule(jump("V"), maybe1), rule(drop)}, Linux, "F#0"},
		{"maybe goto goes to Linux", []*model.Rule{rule(gotoV("U"), maybe1), rule(drop)}, Linux, "F#0"},
		{"maybe return goes to Linux", []*model.Rule{rule(ret, maybe1), rule(drop)}, Linux, "F#0"},
	}
	for _, c := range cases {
		b := newBuilder()
		b.base("F", model.Forward, 0, model.PolicyAccept, c.rules...)
		b.user("U", rule(drop, src("198.18.5.0/24")), rule(cont))
		b.user("V", rule(drop, src("198.18.0.0/24")))
		check(t, c.name, b.rs, nil, pkt(), c.want, c.rule)
	}
}

func TestHooksAndPriorities(t *testing.T) {
	// Accept ends a base chain only; the next priority runs; a drop anywhere ends it all.
	b := newBuilder()
	b.base("raw", model.Prerouting, model.PriorityRaw, model.PolicyAccept, rule(accept))
	b.base("pre", model.Prerouting, model.PriorityMangle, model.PolicyAccept, rule(drop, dst("198.19.0.0/24")))
	b.base("fwd", model.Forward, 0, model.PolicyAccept, rule(linux))
	check(t, "drop in prerouting before forward", b.rs, nil, pkt(), Drop, "pre#0")
	p := pkt()
	p.Dst = netip.MustParseAddr("198.19.1.1")
	check(t, "on to forward", b.rs, nil, p, Linux, "fwd#0")

	// Equal priorities: the kernel's order is not known.
	for _, c := range []struct {
		name string
		a, b []*model.Rule
		want Verdict
	}{
		{"drop and accept", []*model.Rule{rule(drop)}, []*model.Rule{rule(accept)}, Drop},
		{"accept and drop", []*model.Rule{rule(accept)}, []*model.Rule{rule(drop)}, Drop},
		{"drop and linux", []*model.Rule{rule(drop)}, []*model.Rule{rule(linux)}, Linux},
		{"accept and accept", []*model.Rule{rule(accept)}, []*model.Rule{}, Accept},
	} {
		b := newBuilder()
		b.base("x", model.Forward, 0, model.PolicyAccept, c.a...)
		b.base("y", model.Forward, 0, model.PolicyAccept, c.b...)
		if got := Evaluate(b.rs, nil, pkt()).Verdict; got != c.want {
			t.Errorf("equal priority, %s: got %s, want %s", c.name, got, c.want)
		}
	}
}

func TestMatches(t *testing.T) {
	in := func(name string, wild, inv bool) model.Iface {
		return model.Iface{Name: name, Wildcard: wild, Invert: inv}
	}
	out := func(name string, wild, inv bool) model.Iface {
		return model.Iface{Out: true, Name: name, Wildcard: wild, Invert: inv}
	}
	ports := func(d model.Dir, inv bool, rs ...model.PortRange) model.Ports {
		return model.Ports{Dir: d, Ranges: rs, Invert: inv}
	}
	udp := model.Proto{Proto: model.ProtoUDP}
	with := func(f func(*Packet)) Packet { q := pkt(); f(&q); return q }
	icmpP := pkt()
	icmpP.Proto, icmpP.ICMPType, icmpP.ICMPCode = model.ProtoICMP, 3, 4
	cases := []struct {
		name string
		hook model.Hook
		p    Packet
		m    []model.Match
		want bool
	}{
		{"src prefix", model.Forward, pkt(), []model.Match{src("198.18.0.0/24")}, true},
		{"! src prefix", model.Forward, pkt(), []model.Match{model.Addr{Dir: model.Src, Prefix: netip.MustParsePrefix("198.18.0.0/24"), Invert: true}}, false},
		{"dst /32", model.Forward, pkt(), []model.Match{dst("198.19.0.5/32")}, true},
		{"dst /0", model.Forward, pkt(), []model.Match{dst("0.0.0.0/0")}, true},
		{"-p udp", model.Forward, pkt(), []model.Match{udp}, true},
		{"! -p udp", model.Forward, pkt(), []model.Match{model.Proto{Proto: model.ProtoUDP, Invert: true}}, false},
		{"--dport 53", model.Forward, pkt(), []model.Match{udp, ports(model.Dst, false, model.PortRange{From: 53, To: 53})}, true},
		{"! --dport 50:60", model.Forward, pkt(), []model.Match{udp, ports(model.Dst, true, model.PortRange{From: 50, To: 60})}, false},
		{"--sport 1000:1000 edges", model.Forward, pkt(), []model.Match{udp, ports(model.Src, false, model.PortRange{From: 999, To: 1000})}, true},
		{"multiport --ports either", model.Forward, pkt(), []model.Match{udp, ports(model.Either, false, model.PortRange{From: 80, To: 80}, model.PortRange{From: 1000, To: 1000})}, true},
		{"no range: never", model.Forward, pkt(), []model.Match{udp, ports(model.Dst, false)}, false},
		{"ports on icmp: false even inverted", model.Forward, icmpP, []model.Match{ports(model.Dst, true, model.PortRange{From: 1, To: 2})}, false},
		{"-i eth0", model.Forward, pkt(), []model.Match{in("eth0", false, false)}, true},
		{"-i eth (exact)", model.Forward, pkt(), []model.Match{in("eth", false, false)}, false},
		{"-i eth+", model.Forward, pkt(), []model.Match{in("eth", true, false)}, true},
		{"-i +", model.Forward, pkt(), []model.Match{in("", true, false)}, true},
		{"! -o eth+", model.Forward, pkt(), []model.Match{out("eth", true, true)}, false},
		{"oifname in prerouting is empty", model.Prerouting, pkt(), []model.Match{out("", false, false)}, true},
		{"oifname eth1 in prerouting", model.Prerouting, pkt(), []model.Match{out("eth1", false, false)}, false},
		{"iifname in postrouting is the input device", model.Postrouting, pkt(), []model.Match{in("eth0", false, false)}, true},
		{"icmp type 3 code 4", model.Forward, icmpP, []model.Match{model.ICMP{Type: 3, CodeMin: 4, CodeMax: 4}}, true},
		{"icmp type 3 codes 0-3", model.Forward, icmpP, []model.Match{model.ICMP{Type: 3, CodeMin: 0, CodeMax: 3}}, false},
		{"icmp any", model.Forward, icmpP, []model.Match{model.ICMP{Type: 255, CodeMax: 255, AnyType: true}}, true},
		{"! icmp any", model.Forward, icmpP, []model.Match{model.ICMP{Type: 255, CodeMax: 255, AnyType: true, Invert: true}}, false},
		{"mark 0 with mask", model.Forward, pkt(), []model.Match{model.Mark{Value: 0, Mask: 0x4000}}, true},
		{"! mark 0x4000/0x4000", model.Forward, with(func(q *Packet) { q.Mark = 0x4001 }), []model.Match{model.Mark{Value: 0x4000, Mask: 0x4000, Invert: true}}, false},
		{"icmp match on udp: false", model.Forward, pkt(), []model.Match{model.ICMP{Type: 3, CodeMax: 255, Invert: true}}, false},
	}
	for _, c := range cases {
		b := newBuilder()
		b.base("c", c.hook, 0, model.PolicyAccept, rule(drop, c.m...))
		r := Evaluate(b.rs, nil, c.p)
		if got := r.Verdict == Drop; got != c.want {
			t.Errorf("%s: matched %v, want %v (%s)", c.name, got, c.want, r.Reason)
		}
	}
}

func TestSets(t *testing.T) {
	e := func(p string, proto uint8, port uint16, nomatch bool) model.SetEntry {
		return model.SetEntry{Prefix: netip.MustParsePrefix(p), Proto: proto, Port: port, NoMatch: nomatch}
	}
	sets := map[string]*model.IPSet{
		"ip":      {Name: "ip", Type: "hash:ip", Family: model.IPv4, Entries: []model.SetEntry{e("198.18.0.10/32", 0, 0, false)}},
		"ipm":     {Name: "ipm", Type: "hash:ip", Family: model.IPv4, Netmask: 24, Entries: []model.SetEntry{e("198.18.0.0/32", 0, 0, false)}},
		"zero":    {Name: "zero", Type: "hash:ip", Family: model.IPv4, Netmask: 1, Entries: []model.SetEntry{e("0.0.0.0/32", 0, 0, false)}},
		"net":     {Name: "net", Type: "hash:net", Family: model.IPv4, Entries: []model.SetEntry{e("198.18.0.0/16", 0, 0, false), e("198.18.0.0/24", 0, 0, true), e("198.18.0.10/32", 0, 0, false)}},
		"ipport":  {Name: "ipport", Type: "hash:ip,port", Family: model.IPv4, Entries: []model.SetEntry{e("198.19.0.5/32", model.ProtoUDP, 53, false), e("198.19.0.5/32", model.ProtoICMP, 3<<8|4, false), e("198.19.0.5/32", 47, 0, false)}},
		"netport": {Name: "netport", Type: "hash:net,port", Family: model.IPv4, Entries: []model.SetEntry{e("198.19.0.0/16", model.ProtoUDP, 1000, false), e("198.19.0.0/24", model.ProtoUDP, 1000, true), e("198.19.0.0/24", model.ProtoUDP, 53, false)}},
		"v6":      {Name: "v6", Type: "hash:net", Family: model.IPv6, Entries: []model.SetEntry{e("::/1", 0, 0, false)}},
		"odd":     {Name: "odd", Type: "hash:net,iface", Family: model.IPv4, Unsupported: "type hash:net,iface is not modelled"},
	}
	S, D := model.Src, model.Dst
	p := pkt() // 198.18.0.10:1000 -> 198.19.0.5:53 udp
	with := func(f func(*Packet)) Packet { q := pkt(); f(&q); return q }
	cases := []struct {
		name      string
		set       string
		dirs      []model.Dir
		p         Packet
		in, known bool
	}{
		{"hash:ip src", "ip", []model.Dir{S}, p, true, true},
		{"hash:ip dst", "ip", []model.Dir{D}, p, false, true},
		{"hash:ip extra dims ignored", "ip", []model.Dir{S, D}, p, true, true},
		{"hash:ip netmask", "ipm", []model.Dir{S}, with(func(q *Packet) { q.Src = netip.MustParseAddr("198.18.0.200") }), true, true},
		{"hash:ip masked to zero never matches", "zero", []model.Dir{S}, with(func(q *Packet) { q.Src = netip.MustParseAddr("1.2.3.4") }), false, true},
		{"hash:net most specific wins (/32 match)", "net", []model.Dir{S}, p, true, true},
		{"hash:net most specific is nomatch", "net", []model.Dir{S}, with(func(q *Packet) { q.Src = netip.MustParseAddr("198.18.0.11") }), false, true},
		{"hash:net wider entry", "net", []model.Dir{S}, with(func(q *Packet) { q.Src = netip.MustParseAddr("198.18.9.9") }), true, true},
		{"hash:ip,port dst,dst udp", "ipport", []model.Dir{D, D}, p, true, true},
		{"hash:ip,port dst,src udp", "ipport", []model.Dir{D, S}, p, false, true},
		{"hash:ip,port with one dimension never matches", "ipport", []model.Dir{D}, p, false, true},
		{"hash:ip,port icmp type/code", "ipport", []model.Dir{D, D}, with(func(q *Packet) { q.Proto, q.ICMPType, q.ICMPCode = model.ProtoICMP, 3, 4 }), true, true},
		{"hash:ip,port other protocol: port 0", "ipport", []model.Dir{D, S}, with(func(q *Packet) { q.Proto = 47 }), true, true},
		{"hash:net,port nomatch more specific", "netport", []model.Dir{D, S}, p, false, true},
		{"hash:net,port other port, other entry", "netport", []model.Dir{D, D}, p, true, true},
		{"hash:net,port wider entry", "netport", []model.Dir{D, S}, with(func(q *Packet) { q.Dst = netip.MustParseAddr("198.19.5.5") }), true, true},
		{"family mismatch", "v6", []model.Dir{S}, p, false, true},
		{"unsupported type", "odd", []model.Dir{S}, p, false, false},
		{"missing set", "nope", []model.Dir{S}, p, false, false},
	}
	for _, c := range cases {
		in, known := SetTest(sets[c.set], c.dirs, c.p)
		if in != c.in || known != c.known {
			t.Errorf("%s: got in=%v known=%v, want in=%v known=%v", c.name, in, known, c.in, c.known)
		}
	}
	// Through a rule: an unknown set is a maybe.
	b := newBuilder()
	b.base("F", model.Forward, 0, model.PolicyAccept, rule(drop, model.Set{Name: "odd", Dirs: []model.Dir{S}}))
	r := Evaluate(b.rs, sets, p)
	if r.Verdict != Linux || !strings.Contains(r.Reason, "hash:net,iface") {
		t.Errorf("unsupported set: got %s (%s), want linux naming the set type", r.Verdict, r.Reason)
	}
}
