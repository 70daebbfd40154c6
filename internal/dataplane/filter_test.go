package dataplane

import (
	"encoding/binary"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/packet"
)

// The filter module in BPF must classify exactly as compile.Program.Classify (its Go mirror,
// tested against the reference evaluator): each packet goes through the router program on in0
// (routed to out0) and through Classify, and the verdicts must agree.

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func filterProgram() *compile.Program {
	rules := []compile.Rule{
		// 0: udp to 198.19.0.0/24 port 53: drop
		{Tests: []compile.Test{{Kind: compile.TestDst, Prefix: pfx("198.19.0.0/25")}, {Kind: compile.TestProto, A: 17},
			{Kind: compile.TestDport, A: 53, B: 53}}, Action: compile.ActDrop},
		// 1: not from 198.18.0.0/24 to 198.19.1.0/24: Linux
		{Tests: []compile.Test{{Kind: compile.TestSrc, Prefix: pfx("198.18.0.0/24"), Invert: true},
			{Kind: compile.TestDst, Prefix: pfx("198.19.1.0/24")}}, Action: compile.ActLinux},
		// 2: tcp sport 1000-2000 from in0 (bit 0): skip to 4 (accept of the base chain)
		{Tests: []compile.Test{{Kind: compile.TestProto, A: 6}, {Kind: compile.TestSport, A: 1000, B: 2000},
			{Kind: compile.TestIif, A: 0}}, Action: compile.ActSkip, SkipTo: 4},
		// 3: tcp: drop
		{Tests: []compile.Test{{Kind: compile.TestProto, A: 6}}, Action: compile.ActDrop},
		// 4: icmp echo to an address in set 0: drop
		{Tests: []compile.Test{{Kind: compile.TestICMP, A: 8, B: 0x00ff}, {Kind: compile.TestSet, A: 0, B: 0}}, Action: compile.ActDrop},
		// 5: out of anything but out0 (bit 1): Linux
		{Tests: []compile.Test{{Kind: compile.TestOif, A: 1, Invert: true}}, Action: compile.ActLinux},
		// 6: udp dport in set 1 (hash:ip,port) from the source: drop
		{Tests: []compile.Test{{Kind: compile.TestProto, A: 17}, {Kind: compile.TestSet, A: 1, B: compile.SetAddrSrc | compile.SetPortSrc}}, Action: compile.ActDrop},
	}
	idx := make([]int, len(rules))
	for i := range idx {
		idx[i] = i
	}
	return &compile.Program{
		Family:   model.IPv4,
		Rules:    rules,
		Cut:      compile.CutDst,
		Leaves:   []compile.Leaf{{Rules: idx}, {Rules: []int{5}}, {Overflow: true}},
		Prefixes: []compile.LeafPrefix{{Prefix: pfx("0.0.0.0/0"), Leaf: 0}, {Prefix: pfx("198.19.0.192/26"), Leaf: 1}, {Prefix: pfx("198.19.0.160/27"), Leaf: 2}},
		Sets: []compile.SetRef{
			{Name: "blk", HashIP: true, Entries: []model.SetEntry{{Prefix: pfx("198.19.0.5/32")}}},
			{Name: "svc", HashIP: true, HasPort: true, Entries: []model.SetEntry{{Prefix: pfx("198.18.0.2/32"), Proto: 17, Port: 7777}}},
		},
	}
}

func TestFilterMatchesClassify(t *testing.T) {
	env := newTestEnv(t)
	prog := filterProgram()
	data := Data{
		TxData: txTo(env.out, env.in),
		Filter: FilterData{Prog4: prog, Ifaces: []FilterIface{{Ifindex: env.in, Bits: [2]uint64{1, 1}}, {Ifindex: env.out, Bits: [2]uint64{2, 2}}}},
	}
	if err := env.ns.Do(func() error { return env.dp.Sync(data) }); err != nil {
		t.Fatal(err)
	}
	type pk struct {
		name string
		spec packet.Spec
	}
	udp := func(src, dst string, sport, dport uint16) packet.Spec {
		s := v4(src, dst)
		s.SrcPort, s.DstPort = sport, dport
		return s
	}
	tcp := func(src, dst string, sport, dport uint16) packet.Spec {
		s := udp(src, dst, sport, dport)
		s.Proto = layers.IPProtocolTCP
		return s
	}
	icmp := func(dst string, typ uint8) packet.Spec {
		s := v4("198.18.0.2", dst)
		s.Proto, s.ICMPType = layers.IPProtocolICMPv4, typ
		return s
	}
	cases := []pk{
		{"udp 53 dropped", udp("198.18.0.2", "198.19.0.9", 1000, 53)},
		{"udp 54 accepted", udp("198.18.0.2", "198.19.0.9", 1000, 54)},
		{"udp 53 elsewhere accepted", udp("198.18.0.2", "198.19.0.200", 1000, 53)},
		{"tcp from in0 in range: skip", tcp("198.18.0.2", "198.19.0.9", 1500, 80)},
		{"tcp out of range: dropped", tcp("198.18.0.2", "198.19.0.9", 999, 80)},
		{"icmp echo to a set member: dropped", icmp("198.19.0.5", 8)},
		{"icmp echo to a non-member: accepted", icmp("198.19.0.6", 8)},
		{"icmp reply to a set member: accepted", icmp("198.19.0.5", 0)},
		{"udp from the set's ip,port: dropped", udp("198.18.0.2", "198.19.0.33", 7777, 9)},
		{"udp from another port: accepted", udp("198.18.0.2", "198.19.0.33", 7778, 9)},
		{"leaf 1: Linux (oif is out0, so rule 5 does not match): accepted", udp("198.18.0.2", "198.19.0.193", 1, 53)},
		{"overflow leaf: Linux", udp("198.18.0.2", "198.19.0.161", 1, 2)},
	}
	for _, hook := range hooks {
		env.hook = hook
		bpfProg := env.prog(t, true, true)
		for _, c := range cases {
			t.Run(string(hook)+"/"+c.name, func(t *testing.T) {
				in := compile.Input{Src: c.spec.Src, Dst: c.spec.Dst, Proto: uint8(c.spec.Proto), IifBits: 1, OifBits: 2}
				if in.Proto == 0 {
					in.Proto = 17
				}
				switch in.Proto {
				case 6, 17:
					in.SrcPort, in.DstPort = c.spec.SrcPort, c.spec.DstPort
				case 1:
					in.ICMPType, in.ICMPCode = c.spec.ICMPType, c.spec.ICMPCode
				}
				want := prog.Classify(in)
				ret, _, reason := env.run(t, bpfProg, c.spec.Bytes())
				var got compile.Verdict
				switch {
				case ret == xdpDrop && reason == FilterDropped:
					got = compile.Drop
				case ret == xdpRedirect && reason == Forwarded:
					got = compile.Accept
				case ret == xdpPass && reason == PassFilter:
					got = compile.Linux
				default:
					t.Fatalf("verdict %d reason %v", ret, reason)
				}
				if got != want.Verdict {
					t.Fatalf("BPF %v, Classify %v (rule %d %s)", got, want.Verdict, want.Rule, want.Why)
				}
				t.Logf("%v (rule %d)", got, want.Rule)
			})
		}
	}
}

// A set's entries are updated in place when only its contents change (an ipset add on a large
// set writes one entry, not the whole set again into another bank), and removed once no
// ruleset uses the set.
func TestFilterSetsInPlace(t *testing.T) {
	env := newTestEnv(t)
	ifs := []FilterIface{{Ifindex: env.in, Bits: [2]uint64{1, 1}}, {Ifindex: env.out, Bits: [2]uint64{2, 2}}}
	sync := func(p *compile.Program) {
		t.Helper()
		err := env.ns.Do(func() error {
			return env.dp.Sync(Data{TxData: txTo(env.out, env.in),
				Filter: FilterData{Prog4: p, Ifaces: ifs}})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	entries := func() (n int, ids map[uint32]bool) {
		ids = map[uint32]bool{}
		var k linuxfpLfpFwSetKey
		var v uint8
		it := env.dp.maps.LfpFwSets.Iterate()
		for it.Next(&k, &v) {
			n++
			ids[k.Set] = true
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return n, ids
	}
	sync(filterProgram())
	n0, ids0 := entries()
	if n0 != 2 || len(ids0) != 2 {
		t.Fatalf("%d entries in %d sets, want 2 in 2", n0, len(ids0))
	}
	// The same rules, "blk" one entry larger: one entry more, the same ids.
	p := filterProgram()
	p.Sets[0].Entries = append(p.Sets[0].Entries, model.SetEntry{Prefix: pfx("198.19.0.6/32")})
	sync(p)
	n1, ids1 := entries()
	if n1 != 3 || len(ids1) != 2 {
		t.Fatalf("after an add: %d entries in %d sets, want 3 in 2", n1, len(ids1))
	}
	for id := range ids1 {
		if !ids0[id] {
			t.Fatalf("set ids %v became %v: the sets were written again", ids0, ids1)
		}
	}
	bpfProg := env.prog(t, true, true)
	icmp := v4("198.18.0.2", "198.19.0.6")
	icmp.Proto, icmp.ICMPType = layers.IPProtocolICMPv4, 8
	if ret, _, reason := env.run(t, bpfProg, icmp.Bytes()); ret != xdpDrop || reason != FilterDropped {
		t.Fatalf("echo to the added member: verdict %d reason %v, want dropped", ret, reason)
	}
	// One member removed, one added, one turned nomatch: only those are written, and the map
	// holds exactly the new members.
	p = filterProgram()
	p.Sets[0].Entries = []model.SetEntry{{Prefix: pfx("198.19.0.4/32")}, {Prefix: pfx("198.19.0.6/32"), NoMatch: true}}
	sync(p)
	want := map[netip.Addr]uint8{netip.MustParseAddr("198.19.0.4"): 1, netip.MustParseAddr("198.19.0.6"): 0,
		netip.MustParseAddr("198.18.0.2"): 1}
	got := map[netip.Addr]uint8{}
	var k linuxfpLfpFwSetKey
	var v uint8
	for it := env.dp.maps.LfpFwSets.Iterate(); it.Next(&k, &v); {
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], k.Addr[0])
		got[netip.AddrFrom4(b)] = v
	}
	if !maps.Equal(got, want) {
		t.Fatalf("set members after a remove, an add and a nomatch: %v, want %v", got, want)
	}
	// No ruleset uses the sets any more: their entries go.
	sync(nil)
	if n, _ := entries(); n != 0 {
		t.Fatalf("%d set entries left without rules", n)
	}
}

// The bit arrays in front of the host and set lookups (lfp_fw_host_filter, lfp_fw_set_filter)
// and the /0 leaf's guard must never hide a match: blacklists of hosts in both families, as
// DROP rules and through a hash:ip set in several shapes of rules (the guard taken or not), each
// replaced by an overlapping one (a new bank, set members added and removed); every address must
// have its verdict exactly while it is listed. The controller computes the bits' buckets and the
// guard; where its buckets differed from the data plane's, listed addresses would be forwarded.
// The addresses differ in each of their last 24 bits somewhere (not only in the last byte), so
// that a bucket computed from part of an address would be found out.
func TestFilterBitFilters(t *testing.T) {
	env := newTestEnv(t)
	if err := env.ns.Script("ip route add 198.19.128.0/17 via 198.18.1.2\n"); err != nil {
		t.Fatal(err)
	}
	v4addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, byte(128 | i*7), byte(i*53 + 1)}) }
	v6addr := func(i int) netip.Addr {
		return netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 0, 0xf1, 0, 13: byte(i * 3), 14: byte(i * 7), 15: byte(i*53 + 1)})
	}
	drop := model.Verdict{Kind: model.Drop}
	inSet := model.Set{Name: "blk", Dirs: []model.Dir{model.Dst}}
	notInSet := model.Set{Name: "blk", Dirs: []model.Dir{model.Dst}, Invert: true}
	proto := func(p uint8) model.Proto { return model.Proto{Proto: p} }
	shapes := []struct {
		name string
		// rules for the listed addresses; nil: a DROP rule for each
		rules   []*model.Rule
		guarded bool // the /0 leaf has a guard
		listed  Reason
		other   Reason
	}{
		{"host rules", nil, false, FilterDropped, Forwarded},
		{"set", []*model.Rule{{Matches: []model.Match{inSet}, Verdict: drop}}, true, FilterDropped, Forwarded},
		{"set in two rules", []*model.Rule{{Matches: []model.Match{proto(6), inSet}, Verdict: drop},
			{Matches: []model.Match{inSet, proto(17)}, Verdict: drop}}, true, FilterDropped, Forwarded},
		{"inverted set", []*model.Rule{{Matches: []model.Match{notInSet}, Verdict: drop}}, false, Forwarded, FilterDropped},
		{"set and a rule without", []*model.Rule{{Matches: []model.Match{inSet}, Verdict: drop},
			{Matches: []model.Match{proto(17)}, Verdict: drop}}, false, FilterDropped, FilterDropped},
	}
	lists := [][2]int{{1, 40}, {20, 70}, {60, 61}}
	for _, sh := range shapes {
		for _, l := range lists {
			var progs [2]*compile.Program
			for fam, f := range []model.Family{model.IPv4, model.IPv6} {
				var addrs []netip.Addr
				for i := l[0]; i < l[1]; i++ {
					addrs = append(addrs, []netip.Addr{v4addr(i), v6addr(i)}[fam])
				}
				if sh.rules == nil {
					progs[fam] = blacklistProgram(t, f, addrs, false)
				} else {
					progs[fam] = forwardProgram(t, f, addrs, sh.rules...)
				}
				p := progs[fam]
				hostSets := make([]bool, len(p.Sets))
				for i := range hostSets {
					hostSets[i] = true // hash:ip: full-length entries
				}
				for _, lp := range p.Prefixes {
					if lp.Prefix.Bits() == 0 {
						if g := leafGuard(p, p.Leaves[lp.Leaf], hostSets) != 0; g != sh.guarded {
							t.Fatalf("%s: /0 leaf guarded %v, want %v\n%s", sh.name, g, sh.guarded, p)
						}
					}
				}
			}
			env.syncFilter(t, progs)
			for _, hook := range hooks {
				env.hook = hook
				prog := env.prog(t, true, true)
				for i := 0; i < 80; i += 3 {
					want := sh.other
					if l[0] <= i && i < l[1] {
						want = sh.listed
					}
					for _, spec := range []packet.Spec{v4("198.18.0.2", v4addr(i).String()), v6("2001:2::2", v6addr(i).String())} {
						if _, _, reason := env.run(t, prog, spec.Bytes()); reason != want {
							t.Fatalf("%s, list %v, %s: udp %s to %v: %v, want %v", sh.name, l, hook, spec.Src, spec.Dst, reason, want)
						}
					}
				}
			}
		}
	}
}

// syncFilter writes the IPv4 and IPv6 programs progs as the filter's, routing from in0 to out0.
func (e *testEnv) syncFilter(t testing.TB, progs [2]*compile.Program) {
	t.Helper()
	err := e.ns.Do(func() error {
		return e.dp.Sync(Data{TxData: txTo(e.out, e.in), Filter: FilterData{Prog4: progs[0], Prog6: progs[1]}})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// forwardProgram compiles a FORWARD chain (policy accept) of rules, with a hash:ip set "blk" of
// addrs.
func forwardProgram(t testing.TB, fam model.Family, addrs []netip.Addr, rules ...*model.Rule) *compile.Program {
	t.Helper()
	tf := "ip"
	if fam == model.IPv6 {
		tf = "ip6"
	}
	key := model.ChainKey{TableFamily: tf, Table: "filter", Chain: "FORWARD"}
	c := &model.Chain{Key: key, Base: &model.BaseChain{Hook: model.Forward, Type: model.ChainFilter, Policy: model.PolicyAccept}}
	ipset := &model.IPSet{Name: "blk", Type: "hash:ip", Family: fam}
	for _, a := range addrs {
		ipset.Entries = append(ipset.Entries, model.SetEntry{Prefix: netip.PrefixFrom(a, a.BitLen())})
	}
	for i, r := range rules {
		r := *r
		r.ID = model.RuleID{Chain: key, Handle: uint64(i + 1), Position: i}
		c.Rules = append(c.Rules, &r)
	}
	rs := model.NewRuleset(fam)
	rs.AddChain(c)
	rs.Sort()
	p, err := compile.Compile(rs, map[string]*model.IPSet{ipset.Name: ipset})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// blacklistProgram compiles a FORWARD chain (policy accept) that drops packets to addrs: a DROP
// rule for each (`-d addr -j DROP`), or one DROP rule matching a hash:ip set of them.
func blacklistProgram(t testing.TB, fam model.Family, addrs []netip.Addr, set bool) *compile.Program {
	t.Helper()
	if set {
		return forwardProgram(t, fam, addrs, &model.Rule{Matches: []model.Match{model.Set{Name: "blk", Dirs: []model.Dir{model.Dst}}},
			Verdict: model.Verdict{Kind: model.Drop}})
	}
	var rules []*model.Rule
	for _, a := range addrs {
		rules = append(rules, &model.Rule{Matches: []model.Match{model.Addr{Dir: model.Dst, Prefix: netip.PrefixFrom(a, a.BitLen())}},
			Verdict: model.Verdict{Kind: model.Drop}})
	}
	return forwardProgram(t, fam, nil, rules...)
}

// The bit array in front of the LPM trie (lfp_fw_short_filter) must never hide a prefix: DROP
// rules for prefixes shorter and longer than its blocks (IPv4's 16 bits, IPv6's /64s), in both
// families, IPv6 ones too short for the array among them, each set replaced by an overlapping
// one (a new bank); every address must be dropped exactly while a listed prefix holds it, and
// forwarded through /0's leaf otherwise. Where the controller's blocks differed from the data
// plane's, listed addresses would take /0's leaf and be forwarded.
func TestFilterShortPrefixes(t *testing.T) {
	env := newTestEnv(t)
	// The routed destinations (198.19.0.0/24, 2001:2:0:f100::/64) lie in one block each; the
	// lists put that block's bit clear, set by a longer or a shorter prefix that holds them or
	// not, and set by another prefix of the block.
	lists := [][]string{
		{"198.19.0.128/25", "198.18.0.0/16", "fd00::/8"},
		{"198.18.0.0/16", "2001:2:0:f100::8000/113"},
		{"198.16.0.0/14", "2000::/12"},
		{"198.20.0.0/14", "198.18.0.0/17", "fd00::/8"},
		{"198.19.0.0/16", "2001:2:0:f100::/64"},
		{"198.19.0.0/24", "2001::/16"},
		{"198.18.0.0/15"},
		// (A bank's bits stay set until the bank after next is written: the /54, and the /48
		// too long for the array, come after lists that leave the destinations' /64 clear.)
		{"2001:2:0:f000::/54", "198.19.0.0/25"},
		{"2001:2:0:f200::/56", "2001:2:0:f110::/60"},
		{"2001:2::/48"},
		{"2001:2:0:f100::/56"},
		{"2001:2:0:f100::/60", "fd00::/8"},
		{"2001:2:0:f1ff::/64", "2001:2:0:f100::/63"},
		{"2001:2:0:f101::/64"},
	}
	dsts := []string{"198.19.0.1", "198.19.0.130", "2001:2:0:f100::1", "2001:2:0:f100::8001"}
	for _, l := range lists {
		var pfs []netip.Prefix
		var progs [2]*compile.Program
		for fam, f := range []model.Family{model.IPv4, model.IPv6} {
			var rules []*model.Rule
			for _, s := range l {
				pf := netip.MustParsePrefix(s)
				if pf.Addr().Is4() == (fam == 0) {
					pfs = append(pfs, pf)
					rules = append(rules, &model.Rule{Matches: []model.Match{model.Addr{Dir: model.Dst, Prefix: pf}},
						Verdict: model.Verdict{Kind: model.Drop}})
				}
			}
			// A rule for an address outside every list: the family's ruleset is never empty.
			other := []string{"203.0.113.9/32", "3fff::9/128"}[fam]
			rules = append(rules, &model.Rule{Matches: []model.Match{model.Addr{Dir: model.Dst, Prefix: netip.MustParsePrefix(other)}},
				Verdict: model.Verdict{Kind: model.Drop}})
			progs[fam] = forwardProgram(t, f, nil, rules...)
		}
		env.syncFilter(t, progs)
		for _, hook := range hooks {
			env.hook = hook
			prog := env.prog(t, true, true)
			for _, d := range dsts {
				a := netip.MustParseAddr(d)
				want := Forwarded
				if slices.ContainsFunc(pfs, func(pf netip.Prefix) bool { return pf.Contains(a) }) {
					want = FilterDropped
				}
				spec := v4("198.18.0.2", d)
				if a.Is6() {
					spec = v6("2001:2::2", d)
				}
				if _, _, reason := env.run(t, prog, spec.Bytes()); reason != want {
					t.Fatalf("list %v, %s: udp to %s: %v, want %v", l, hook, d, reason, want)
				}
			}
		}
	}
}
