package compile_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/eval"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// builder makes small rulesets by hand: chains in table "ip t" unless named "table/chain".
type builder struct {
	rs   *model.Ruleset
	sets map[string]*model.IPSet
}

func newBuilder(f model.Family) *builder {
	return &builder{rs: model.NewRuleset(f), sets: map[string]*model.IPSet{}}
}

func (b *builder) key(name string) model.ChainKey {
	table := "t"
	if i := strings.IndexByte(name, '/'); i >= 0 {
		table, name = name[:i], name[i+1:]
	}
	fam := "ip"
	if b.rs.Family == model.IPv6 {
		fam = "ip6"
	}
	return model.ChainKey{TableFamily: fam, Table: table, Chain: name}
}

func (b *builder) base(name string, h model.Hook, prio int32, policy model.Policy, rules ...*model.Rule) *model.Chain {
	return b.add(name, &model.BaseChain{Hook: h, Priority: prio, Type: model.ChainFilter, Policy: policy}, rules)
}

func (b *builder) user(name string, rules ...*model.Rule) *model.Chain {
	return b.add(name, nil, rules)
}

func (b *builder) add(name string, base *model.BaseChain, rules []*model.Rule) *model.Chain {
	k := b.key(name)
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

	maybe    = model.Unknown{What: "ct state"}
	stateful = model.Unknown{What: "limit", SideEffect: true}
	tcp      = model.Proto{Proto: model.ProtoTCP}
	udp      = model.Proto{Proto: model.ProtoUDP}
)

func jump(c string) model.Verdict  { return model.Verdict{Kind: model.Jump, Chain: c} }
func gotoV(c string) model.Verdict { return model.Verdict{Kind: model.Goto, Chain: c} }

func src(p string) model.Addr  { return model.Addr{Dir: model.Src, Prefix: netip.MustParsePrefix(p)} }
func dst(p string) model.Addr  { return model.Addr{Dir: model.Dst, Prefix: netip.MustParsePrefix(p)} }
func nsrc(p string) model.Addr { a := src(p); a.Invert = true; return a }
func dports(rs ...uint16) model.Ports {
	m := model.Ports{Dir: model.Dst}
	for _, p := range rs {
		m.Ranges = append(m.Ranges, model.PortRange{From: p, To: p})
	}
	return m
}
func iface(out bool, name string) model.Iface {
	m := model.Iface{Out: out, Name: strings.TrimSuffix(name, "+"), Wildcard: strings.HasSuffix(name, "+")}
	return m
}

// pkt: "udp 198.18.0.10:1000 > 198.19.0.5:53 eth0>eth1" (icmp: "icmp A > B type/code").
func pkt(s string) eval.Packet {
	f := strings.Fields(s)
	p := eval.Packet{In: "eth0", Out: "eth1"}
	switch f[0] {
	case "tcp":
		p.Proto = model.ProtoTCP
	case "udp":
		p.Proto = model.ProtoUDP
	case "dccp":
		p.Proto = model.ProtoDCCP
	case "icmp":
		p.Proto = model.ProtoICMP
	case "icmp6":
		p.Proto = model.ProtoICMPv6
	case "gre":
		p.Proto = 47
	default:
		panic(f[0])
	}
	addr := func(s string) (netip.Addr, uint16) {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr(), ap.Port()
		}
		return netip.MustParseAddr(s), 0
	}
	p.Src, p.SrcPort = addr(f[1])
	p.Dst, p.DstPort = addr(f[3])
	p.Family = model.IPv4
	if p.Src.Is6() {
		p.Family = model.IPv6
	}
	for _, x := range f[4:] {
		switch {
		case strings.Contains(x, ">"):
			io := strings.Split(x, ">")
			p.In, p.Out = io[0], io[1]
		case strings.Contains(x, "/"):
			var t, c uint8
			fmt.Sscanf(x, "%d/%d", &t, &c)
			p.ICMPType, p.ICMPCode = t, c
		case strings.HasPrefix(x, "mark="):
			fmt.Sscanf(x, "mark=%v", &p.Mark)
		}
	}
	return p
}

type want struct {
	p    string
	eval eval.Verdict    // what the evaluator says (checks the test itself)
	got  compile.Verdict // what Classify must say
}

func mustCompile(t *testing.T, b *builder) *compile.Program {
	t.Helper()
	prog, err := compile.Compile(b.rs, b.sets)
	if err != nil {
		t.Fatal(err)
	}
	checkProgram(t, prog)
	return prog
}

// check compiles and classifies: the evaluator must say w.eval, Classify w.got.
func check(t *testing.T, b *builder, ws ...want) *compile.Program {
	t.Helper()
	prog := mustCompile(t, b)
	for _, w := range ws {
		p := pkt(w.p)
		e := eval.Evaluate(b.rs, b.sets, p)
		if e.Verdict != w.eval {
			t.Errorf("%s: the evaluator says %s (%s), the test expects %s", w.p, e.Verdict, e.Reason, w.eval)
		}
		got := prog.Classify(input(prog, p))
		if got.Verdict != w.got {
			why := got.Why
			if got.Rule >= 0 {
				why = prog.Rules[got.Rule].String() + " [" + prog.Rules[got.Rule].Origin.String() + "]"
			}
			t.Errorf("%s: Classify says %s (%s), want %s\n%s", w.p, got.Verdict, why, w.got, prog)
		}
	}
	return prog
}

const (
	A, D, L = eval.Accept, eval.Drop, eval.Linux
)

var (
	cA, cD, cL = compile.Accept, compile.Drop, compile.Linux
)

func TestChains(t *testing.T) {
	b := newBuilder(model.IPv4)
	b.base("FORWARD", model.Forward, 0, model.PolicyDrop,
		rule(jump("U1"), src("198.18.0.0/24")),
		rule(gotoV("U2"), src("198.18.1.0/24")),
		rule(accept, tcp, dports(80)),
		rule(ret, udp),
		rule(accept, dst("198.19.0.0/16")),
	)
	b.user("U1",
		rule(ret, src("198.18.0.10/32")),
		rule(drop, dst("198.19.0.5/32")),
		rule(jump("U3"), udp),
		rule(accept, tcp),
	)
	b.user("U2",
		rule(drop, tcp, dports(22)),
		rule(ret, tcp),
		rule(accept, udp, dports(53)),
	)
	b.user("U3",
		rule(drop, dports(1000)),
		rule(ret),
		rule(drop), // never reached
	)
	check(t, b,
		want{"tcp 198.18.0.10:1000 > 198.19.0.5:80", A, cA}, // U1 returns, accept :80
		want{"tcp 198.18.0.10:1000 > 198.19.0.5:81", A, cA}, // U1 returns, -d 198.19/16 accept
		want{"gre 198.18.0.10 > 198.20.0.5", D, cD},         // U1 returns, policy
		want{"tcp 198.18.0.11:1000 > 198.19.0.5:80", D, cD}, // U1 drop
		want{"tcp 198.18.0.11:1000 > 198.20.0.5:81", A, cA}, // U1 accept tcp
		want{"udp 198.18.0.11:1 > 198.20.0.5:1000", D, cD},  // U1 -> U3 drop
		want{"udp 198.18.0.11:1 > 198.20.0.5:1001", D, cD},  // U3 returns, U1 nothing; return in FORWARD: policy
		want{"tcp 198.18.1.1:1 > 198.20.0.5:22", D, cD},     // goto U2 drop
		want{"tcp 198.18.1.1:1 > 198.19.0.5:80", D, cD},     // goto U2 return: FORWARD's return: policy
		want{"udp 198.18.1.1:1 > 198.19.0.5:53", A, cA},     // goto U2 accept
		want{"udp 198.18.1.1:1 > 198.19.0.5:54", D, cD},     // end of U2: policy
		want{"gre 198.18.2.1 > 198.19.0.5", A, cA},          // -d accept
		want{"udp 198.18.2.1:1 > 198.19.0.5:1", D, cD},      // return in FORWARD: policy
	)
}

func TestBaseChainsAndHooks(t *testing.T) {
	b := newBuilder(model.IPv4)
	b.base("raw/PREROUTING", model.Prerouting, model.PriorityRaw, model.PolicyAccept,
		rule(accept, src("198.18.0.0/24")), // ends raw only
		rule(drop, src("198.18.0.0/16")),
	)
	b.base("mangle/FORWARD", model.Forward, model.PriorityMangle, model.PolicyAccept,
		rule(accept, tcp),
		rule(ret, udp), // return in a base chain: its policy (accept)
		rule(drop, dst("198.19.9.0/24")),
	)
	b.base("filter/FORWARD", model.Forward, model.PriorityFilter, model.PolicyAccept,
		rule(drop, dst("198.19.0.5/32")),
	)
	b.base("nat/POSTROUTING", model.Postrouting, model.PrioritySrcNAT, model.PolicyAccept,
		rule(model.Verdict{Kind: model.Linux, Reason: "MASQUERADE translates the packet", NAT: true}, iface(true, "eth1")),
	)
	check(t, b,
		want{"tcp 198.18.0.10:1 > 198.19.0.5:80 eth0>eth2", D, cD}, // raw accepts, mangle accepts, filter drops
		want{"tcp 198.18.1.10:1 > 198.19.0.6:80 eth0>eth2", D, cD}, // raw drops
		want{"tcp 198.17.1.10:1 > 198.19.0.6:80 eth0>eth2", A, cA},
		want{"udp 198.17.1.10:1 > 198.19.9.6:80 eth0>eth2", A, cA}, // return in mangle: accept
		want{"gre 198.17.1.10 > 198.19.9.6 eth0>eth2", D, cD},
		want{"gre 198.17.1.10 > 198.19.8.6 eth0>eth1", L, cL}, // masquerade
	)
}

func TestMaybe(t *testing.T) {
	b := newBuilder(model.IPv4)
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept,
		rule(cont, maybe, src("198.18.0.0/24")),                           // no verdict: nothing changes
		rule(jump("QUIET"), maybe),                                        // decides nothing: passed
		rule(jump("LOUD"), maybe, udp),                                    // decides for some packets
		rule(drop, src("198.18.5.0/24"), stateful),                        // side effects: Linux for every packet of 198.18.5/24
		rule(drop, src("198.18.6.0/24"), maybe),                           // may apply with a verdict: Linux
		rule(drop, nsrc("198.18.7.0/24"), stateful, src("198.18.8.0/24")), // Linux even outside 198.18.8/24
		rule(drop, dst("198.19.9.9/32")),
	)
	b.user("QUIET",
		rule(ret, tcp),
		rule(cont, udp),
	)
	b.user("LOUD",
		rule(ret, dports(53)),
		rule(drop, dports(1000)),
		rule(jump("LOUDER")),
	)
	b.user("LOUDER",
		rule(accept, dports(2000)),
	)
	check(t, b,
		want{"tcp 198.18.7.10:1 > 198.19.0.5:80", A, cA},
		want{"tcp 198.18.0.10:1 > 198.19.0.5:80", L, cL},   // ! -s 198.18.7/24, then the limit runs
		want{"udp 198.18.7.10:1 > 198.19.0.5:53", A, cA},   // LOUD returns
		want{"udp 198.18.7.10:1 > 198.19.0.5:99", A, cA},   // LOUD decides nothing
		want{"udp 198.18.7.10:1 > 198.19.0.5:1000", L, cL}, // LOUD would drop
		want{"udp 198.18.7.10:1 > 198.19.0.5:2000", L, cL}, // LOUDER would accept
		want{"tcp 198.18.5.10:1 > 198.19.0.5:80", L, cL},
		want{"tcp 198.18.6.10:1 > 198.19.0.5:80", L, cL},
		want{"tcp 198.18.9.10:1 > 198.19.0.5:80", L, cL}, // ! -s 198.18.7/24, then the limit runs
		want{"tcp 198.18.7.10:1 > 198.19.9.9:80", D, cD}, // 198.18.7/24 stops before the limit
	)
}

func TestPorts(t *testing.T) {
	b := newBuilder(model.IPv4)
	either := model.Ports{Dir: model.Either, Ranges: []model.PortRange{{From: 7000, To: 7000}, {From: 7100, To: 7200}}}
	notEither := either
	notEither.Invert = true
	nd := dports(22, 23, 24, 100)
	nd.Invert = true
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept,
		rule(drop, tcp, dports(80, 443, 8000)),
		rule(drop, udp, either, src("198.18.0.0/24")),
		rule(jump("U"), src("198.18.1.0/24"), tcp, nd), // negated list with a protocol: inverted tests
		rule(drop, src("198.18.2.0/24"), nd),           // without: ports in the gaps
		rule(drop, src("198.18.3.0/24"), udp, notEither),
	)
	b.user("U", rule(drop, dports(5000)))
	prog := check(t, b,
		want{"tcp 198.18.0.10:1 > 198.19.0.5:443", D, cD},
		want{"tcp 198.18.0.10:1 > 198.19.0.5:444", A, cA},
		want{"udp 198.18.0.10:1 > 198.19.0.5:443", A, cA},
		want{"udp 198.18.0.10:7150 > 198.19.0.5:1", D, cD},
		want{"udp 198.18.0.10:1 > 198.19.0.5:7000", D, cD},
		want{"udp 198.18.0.10:1 > 198.19.0.5:7001", A, cA},
		want{"tcp 198.18.1.10:1 > 198.19.0.5:5000", D, cD},
		want{"tcp 198.18.1.10:5000 > 198.19.0.5:23", A, cA},
		want{"udp 198.18.2.10:1 > 198.19.0.5:25", D, cD},
		want{"udp 198.18.2.10:1 > 198.19.0.5:24", A, cA},
		want{"gre 198.18.2.10 > 198.19.0.5", A, cA}, // no ports: the negated match is false
		want{"dccp 198.18.2.10:1 > 198.19.0.5:0", D, cD},
		want{"udp 198.18.3.10:1 > 198.19.0.5:7101", A, cA},
		want{"udp 198.18.3.10:7000 > 198.19.0.5:1", A, cA},
		want{"udp 198.18.3.10:1 > 198.19.0.5:7001", D, cD},
	)
	var n80, nU int
	for _, r := range prog.Rules {
		if r.Origin.Rule == b.rs.Chains[b.key("FORWARD")].Rules[0] {
			n80++
		}
		if r.Origin.Rule == b.rs.Chains[b.key("U")].Rules[0] {
			nU++
			if len(r.Tests) != 3 { // -s, -p, --dport 5000 (which implies the 4 inverted --dport)
				t.Errorf("U's rule inlined as %s", r)
			}
		}
	}
	if n80 != 3 || nU != 1 {
		t.Errorf("--dports 80,443,8000: %d rules, want 3; U's rule: %d, want 1\n%s", n80, nU, prog)
	}
}

func TestICMPAndProto(t *testing.T) {
	b := newBuilder(model.IPv4)
	icmp := model.Proto{Proto: model.ProtoICMP}
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept,
		rule(drop, icmp, model.ICMP{Type: 8, CodeMin: 0, CodeMax: 255}),
		rule(drop, icmp, model.ICMP{Type: 3, CodeMin: 1, CodeMax: 4, Invert: true}),
		rule(drop, model.Proto{Proto: 47, Invert: true}, src("198.18.9.0/24")),
	)
	check(t, b,
		want{"icmp 198.18.0.1 > 198.19.0.1 8/0", D, cD},
		want{"icmp 198.18.0.1 > 198.19.0.1 3/3", A, cA},
		want{"icmp 198.18.0.1 > 198.19.0.1 3/5", D, cD},
		want{"icmp 198.18.0.1 > 198.19.0.1 0/0", D, cD},
		want{"gre 198.18.9.1 > 198.19.0.1", A, cA},
		want{"udp 198.18.9.1:1 > 198.19.0.1:2", D, cD},
	)
}

func TestSets(t *testing.T) {
	b := newBuilder(model.IPv4)
	b.sets["m24"] = &model.IPSet{Name: "m24", Type: "hash:ip", Family: model.IPv4, Netmask: 24,
		Entries: []model.SetEntry{{Prefix: netip.MustParsePrefix("198.18.4.0/32")}, {Prefix: netip.MustParsePrefix("0.0.0.0/32")}}}
	b.sets["ipport"] = &model.IPSet{Name: "ipport", Type: "hash:ip,port", Family: model.IPv4,
		Entries: []model.SetEntry{{Prefix: netip.MustParsePrefix("198.19.0.5/32"), Proto: model.ProtoTCP, Port: 80},
			{Prefix: netip.MustParsePrefix("198.19.0.6/32"), Proto: model.ProtoDCCP, Port: 0}}}
	b.sets["net"] = &model.IPSet{Name: "net", Type: "hash:net", Family: model.IPv4,
		Entries: []model.SetEntry{{Prefix: netip.MustParsePrefix("198.21.0.0/16")}, {Prefix: netip.MustParsePrefix("198.21.7.0/24"), NoMatch: true}}}
	b.sets["v6"] = &model.IPSet{Name: "v6", Type: "hash:net", Family: model.IPv6}
	b.sets["timeout"] = &model.IPSet{Name: "timeout", Type: "hash:ip", Family: model.IPv4, Unsupported: "skbinfo"}
	set := func(name string, inv bool, dirs ...model.Dir) model.Set {
		return model.Set{Name: name, Dirs: dirs, Invert: inv}
	}
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept,
		rule(drop, set("m24", false, model.Src)),
		rule(drop, set("ipport", false, model.Dst, model.Dst)),
		rule(drop, set("ipport", true, model.Dst)),        // fewer directions than dimensions: ! false: every packet
		rule(drop, set("v6", false, model.Dst), udp),      // other family: never
		rule(drop, set("timeout", false, model.Src), udp), // not modelled
		rule(drop, set("missing", false, model.Src), tcp, dports(22)),
		rule(accept),
	)
	b.base("filter2", model.Forward, 10, model.PolicyAccept,
		rule(drop, set("net", false, model.Dst)),
	)
	prog := check(t, b,
		want{"tcp 198.18.4.77:1 > 198.20.0.5:2", D, cD},
		want{"tcp 198.18.5.77:1 > 198.19.0.5:80", D, cD},
		want{"tcp 198.18.5.77:1 > 198.19.0.5:81", D, cD}, // ! (fewer directions)
	)
	for _, r := range prog.Rules {
		if r.Origin.Rule != nil && r.Origin.Rule.ID.Position >= 2 && r.Origin.Rule.ID.Chain.Chain == "FORWARD" && r.Origin.Rule.ID.Position < 4 {
			if len(r.Tests) != 0 {
				t.Errorf("set match not folded: %s", r)
			}
		}
	}
	// The fewer-directions rule drops everything: the rest of FORWARD is never reached.
	b.rs.Chains[b.key("FORWARD")].Rules[2].Matches = nil
	b.rs.Chains[b.key("FORWARD")].Rules[2].Verdict = cont
	check(t, b,
		want{"tcp 0.0.0.1:1 > 198.20.0.5:2", A, cA},       // masks to zero: no match
		want{"dccp 198.18.5.77:1 > 198.19.0.6:80", D, cD}, // ipset: DCCP's port is 0
		want{"udp 198.18.5.77:1 > 198.19.0.6:80", L, cL},
		want{"tcp 198.18.5.77:1 > 198.19.0.6:22", L, cL},
		want{"tcp 198.18.5.77:1 > 198.19.0.6:23", A, cA},
	)
	b.rs.Chains[b.key("FORWARD")].Rules[6].Verdict = cont
	check(t, b,
		want{"tcp 198.18.5.77:1 > 198.21.0.6:23", D, cD},
		want{"tcp 198.18.5.77:1 > 198.21.7.6:23", A, cA}, // nomatch
		want{"tcp 198.18.5.77:1 > 198.20.7.6:23", A, cA},
	)
	ref := prog.Sets[0]
	if ref.Name != "m24" || !ref.HashIP || ref.Netmask != 24 || len(ref.Entries) != 2 || ref.Entries[0].Prefix != netip.MustParsePrefix("198.18.4.0/24") {
		t.Errorf("set ref %+v", ref)
	}
}

func TestInterfaces(t *testing.T) {
	b := newBuilder(model.IPv4)
	b.base("PREROUTING", model.Prerouting, 0, model.PolicyAccept,
		rule(drop, iface(true, "eth1")),                    // no output interface yet: never
		rule(drop, iface(true, "+"), dst("198.19.1.0/24")), // -o +: every name, even none
		rule(jump("U"), model.Iface{Out: true, Name: "veth", Wildcard: true, Invert: true}),
	)
	b.user("U", rule(drop, iface(false, "veth+"), iface(true, "eth1")))
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept,
		rule(jump("U")),
		rule(drop, model.Iface{Name: "eth0", Invert: true}),
	)
	b.base("POSTROUTING", model.Postrouting, 0, model.PolicyAccept,
		rule(drop, iface(false, "eth7")), // the input interface is known in postrouting
	)
	prog := check(t, b,
		want{"tcp 198.18.0.1:1 > 198.19.0.1:2 eth0>eth1", A, cA},
		want{"tcp 198.18.0.1:1 > 198.19.1.1:2 eth0>eth1", D, cD},
		want{"tcp 198.18.0.1:1 > 198.19.0.1:2 veth3>eth1", D, cD}, // U in FORWARD
		want{"tcp 198.18.0.1:1 > 198.19.0.1:2 veth3>eth2", D, cD}, // ! -i eth0
		want{"tcp 198.18.0.1:1 > 198.19.0.1:2 eth7>eth2", D, cD},
	)
	if len(prog.Patterns) != 4 { // veth+, eth1, eth0, eth7
		t.Errorf("patterns %v", prog.Patterns)
	}
}

func TestEqualPriority(t *testing.T) {
	b := newBuilder(model.IPv4)
	b.base("a/fwd", model.Forward, 0, model.PolicyDrop,
		rule(accept, tcp),
	)
	b.base("b/fwd", model.Forward, 0, model.PolicyAccept,
		rule(linux, dports(53)),
		rule(drop, dports(54)),
	)
	b.base("c/fwd", model.Forward, 0, model.PolicyAccept,
		rule(linux, src("198.18.9.0/24")),
	)
	b.base("d/fwd", model.Forward, 0, model.PolicyAccept,
		rule(drop, dports(55)),
	)
	check(t, b,
		want{"tcp 198.18.0.1:1 > 198.19.0.1:2", A, cA},
		want{"tcp 198.18.0.1:1 > 198.19.0.1:53", L, cL},
		want{"tcp 198.18.0.1:1 > 198.19.0.1:54", D, cD},
		want{"tcp 198.18.0.1:1 > 198.19.0.1:55", D, cD},
		want{"tcp 198.18.9.1:1 > 198.19.0.1:54", L, cL},
		want{"udp 198.18.0.1:1 > 198.19.0.1:2", D, cD},  // a's policy
		want{"udp 198.18.0.1:1 > 198.19.0.1:53", L, cL}, // a drops, b needs Linux
		want{"udp 198.18.9.1:1 > 198.19.0.1:2", L, cL},  // a drops, c needs Linux
	)
}

func TestMarkAndEmpty(t *testing.T) {
	b := newBuilder(model.IPv4)
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept,
		rule(cont, src("198.18.0.0/24")),
		rule(drop, model.Mark{Value: 0x4000, Mask: 0x4000}),
	)
	prog := check(t, b, want{"tcp 198.18.0.1:1 > 198.19.0.1:2", A, cA})
	if !prog.Empty || !prog.HasMark || len(prog.Rules) != 0 {
		t.Errorf("empty %v, has mark %v, %d rules", prog.Empty, prog.HasMark, len(prog.Rules))
	}
	b.rs.Chains[b.key("FORWARD")].Rules[1].Matches[0] = model.Mark{Value: 0x4000, Mask: 0x4000, Invert: true}
	prog = check(t, b, want{"tcp 198.18.0.1:1 > 198.19.0.1:2", D, cD})
	if prog.Empty || len(prog.Rules) != 1 || len(prog.Rules[0].Tests) != 0 {
		t.Errorf("%s", prog)
	}
	prog = mustCompile(t, newBuilder(model.IPv6))
	if !prog.Empty || len(prog.Prefixes) != 1 || prog.Prefixes[0].Prefix.Bits() != 0 || !prog.Prefixes[0].Prefix.Addr().Is6() {
		t.Errorf("empty IPv6 program: %s", prog)
	}
}

func TestLimits(t *testing.T) {
	b := newBuilder(model.IPv4)
	many := []model.Match{tcp, src("198.18.0.0/16"), dst("198.19.0.0/16")}
	for p := uint16(1); p <= 8; p++ {
		pm := dports(p * 10)
		pm.Invert = true
		many = append(many, pm)
	}
	wide := []model.Match{tcp}
	for range 3 {
		m := model.Ports{Dir: model.Either}
		for p := uint16(1); p <= 3; p++ {
			m.Ranges = append(m.Ranges, model.PortRange{From: p * 100, To: p * 100})
		}
		wide = append(wide, m) // 6 alternatives each: 216 copies
	}
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept,
		rule(drop, many...),
		rule(drop, wide...),
		rule(jump("NOPE"), udp),
		rule(jump("LOOP"), model.Proto{Proto: 47}),
	)
	b.user("LOOP", rule(jump("LOOP")))
	prog := check(t, b,
		want{"tcp 198.18.0.1:1 > 198.19.0.1:2", D, cL}, // more than MaxTests: Linux
		want{"tcp 198.18.0.1:1 > 198.19.0.1:10", A, cA},
		want{"tcp 198.18.0.1:1 > 198.19.0.1:80", A, cL}, // the inverted tests left out
		want{"tcp 198.20.0.1:100 > 198.19.0.1:200", D, cL},
		want{"udp 198.20.0.1:100 > 198.19.0.1:200", L, cL},
		want{"gre 198.20.0.1 > 198.19.0.1", L, cL},
	)
	for _, r := range prog.Rules {
		if len(r.Tests) > compile.MaxTests {
			t.Errorf("rule with %d tests", len(r.Tests))
		}
	}
	// More interface patterns than bits: the rules past the limit may apply.
	b = newBuilder(model.IPv4)
	var rs []*model.Rule
	for i := range compile.MaxPatterns + 6 {
		rs = append(rs, rule(drop, src(fmt.Sprintf("198.18.%d.0/24", i)), iface(false, fmt.Sprintf("if%d", i))))
	}
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept, rs...)
	prog = check(t, b,
		want{"tcp 198.18.3.1:1 > 198.19.0.1:2 if3>eth1", D, cD},
		want{"tcp 198.18.66.1:1 > 198.19.0.1:2 if66>eth1", D, cL},
		want{"tcp 198.18.66.1:1 > 198.19.0.1:2 eth0>eth1", A, cL},
		want{"tcp 198.18.63.1:1 > 198.19.0.1:2 eth0>eth1", A, cA},
	)
	if len(prog.Patterns) != compile.MaxPatterns {
		t.Errorf("%d patterns", len(prog.Patterns))
	}
	// A jump graph that doubles at each level: too large, refused quickly.
	b = newBuilder(model.IPv4)
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept, rule(jump("C0")))
	for i := range 40 {
		next := fmt.Sprintf("C%d", i+1)
		b.user(fmt.Sprintf("C%d", i), rule(jump(next), tcp), rule(jump(next), dports(2)))
	}
	b.user("C40", rule(drop, dports(1)))
	if _, err := compile.Compile(b.rs, nil); !errors.Is(err, compile.ErrTooLarge) {
		t.Errorf("exponential jumps: %v", err)
	}
}

func TestIPv6(t *testing.T) {
	b := newBuilder(model.IPv6)
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept,
		rule(drop, src("2001:2::/64"), model.Proto{Proto: model.ProtoICMPv6}, model.ICMP{Type: 128, CodeMax: 255}),
		rule(drop, src("198.18.0.0/16")), // other family: never
		rule(drop, dst("2001:2:0:f100::5/128")),
	)
	prog := check(t, b,
		want{"icmp6 2001:2::1 > 2001:2:0:f100::6 128/0", D, cD},
		want{"icmp6 2001:2::1 > 2001:2:0:f100::6 129/0", A, cA},
		want{"tcp [2001:2::1]:1 > [2001:2:0:f100::5]:2", D, cD},
	)
	if len(prog.Rules) != 2 {
		t.Errorf("%s", prog)
	}
}

func TestGotoReturnsToCallersCaller(t *testing.T) {
	b := newBuilder(model.IPv4)
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept,
		rule(jump("U1"), tcp),
		rule(drop, dports(80)),
	)
	b.user("U1",
		rule(gotoV("U2"), src("198.18.0.0/24")),
		rule(accept, dports(80)), // not for 198.18.0/24: U2's return goes back to FORWARD
	)
	b.user("U2",
		rule(ret, dports(80)),
		rule(drop, dports(81)),
	)
	check(t, b,
		want{"tcp 198.18.0.1:1 > 198.19.0.1:80", D, cD},
		want{"tcp 198.18.0.1:1 > 198.19.0.1:81", D, cD},
		want{"tcp 198.18.0.1:1 > 198.19.0.1:82", A, cA},
		want{"tcp 198.18.1.1:1 > 198.19.0.1:80", A, cA},
		want{"udp 198.18.0.1:1 > 198.19.0.1:80", D, cD},
	)
}

func TestLeaves(t *testing.T) {
	b := newBuilder(model.IPv4)
	ndst := dst("198.19.0.0/16")
	ndst.Invert = true
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept,
		rule(drop, ndst, tcp),                       // 0: outside 198.19/16
		rule(drop, dst("198.19.1.0/24"), udp),       // 1
		rule(drop, dst("198.19.1.5/32"), tcp),       // 2
		rule(drop, dst("198.19.1.5/32")),            // 3
		rule(drop, src("198.18.0.0/16"), dports(9)), // 4: everywhere
	)
	prog := check(t, b,
		want{"tcp 198.18.0.1:1 > 198.20.0.1:2", D, cD},
		want{"tcp 198.18.0.1:1 > 198.19.0.1:2", A, cA},
		want{"udp 198.18.0.1:1 > 198.19.1.1:2", D, cD},
		want{"tcp 198.18.0.1:1 > 198.19.1.5:2", D, cD},
		want{"gre 198.18.0.1 > 198.19.1.5", D, cD},
		want{"udp 198.18.0.1:1 > 198.19.0.1:9", D, cD},
	)
	if prog.Cut != compile.CutDst {
		t.Fatalf("cut %s\n%s", prog.Cut, prog)
	}
	leafOf := func(a string) []int {
		for _, lp := range prog.Prefixes {
			if lp.Prefix.String() == a {
				return prog.Leaves[lp.Leaf].Rules
			}
		}
		return nil
	}
	exp := map[string][]int{
		"0.0.0.0/0":     {0, 4},
		"198.19.0.0/16": {4},
		"198.19.1.0/24": {1, 4},
		"198.19.1.5/32": {1, 2, 3, 4},
	}
	for p, want := range exp {
		if got := leafOf(p); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("leaf of %s: %v, want %v\n%s", p, got, want, prog)
		}
	}
}

// Drops by a chain before conntrack (raw) are marked: the data plane then refreshes conntrack
// entries only for packets no such rule dropped. A conntrack state test there sees INVALID.
func TestPreConntrack(t *testing.T) {
	b := newBuilder(model.IPv4)
	b.base("RAW", model.Prerouting, model.PriorityRaw, model.PolicyAccept,
		rule(drop, src("198.18.9.0/24")),
		rule(drop, model.CtState{States: model.CtEstablished}), // never: INVALID before conntrack
	)
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept, rule(drop, dst("198.19.9.0/24")))
	prog := check(t, b,
		want{"tcp 198.18.9.1:1 > 198.19.0.1:2", D, cD},
		want{"tcp 198.18.0.1:1 > 198.19.9.1:2", D, cD},
		want{"tcp 198.18.0.1:1 > 198.19.0.1:2", A, cA},
	)
	if !prog.PreCTDrop || prog.HasCtState {
		t.Errorf("pre-conntrack drop %v, has ct state %v\n%s", prog.PreCTDrop, prog.HasCtState, prog)
	}
	for _, r := range prog.Rules {
		if r.PreCT != (r.Origin.Chain.Key.Chain == "RAW") {
			t.Errorf("rule of %s: pre-conntrack %v", r.Origin.Chain.Key, r.PreCT)
		}
	}
	b = newBuilder(model.IPv4)
	b.base("FORWARD", model.Forward, 0, model.PolicyAccept, rule(drop, dst("198.19.9.0/24")))
	if prog := mustCompile(t, b); prog.PreCTDrop {
		t.Error("a forward drop marked as before conntrack")
	}
}
