package compile_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/eval"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// blacklist is `-A FORWARD -d 198.18.x.y/32 -j DROP` n times (/24s when wide), after a few rules
// without a destination (a conntrack rule, an interface rule, a source rule), like a firewall
// in front of the blacklist (in the shape of Docker's).
func blacklist(n int, wide bool) *builder {
	b := newBuilder(model.IPv4)
	rules := []*model.Rule{
		rule(accept, iface(true, "docker0"), model.Unknown{What: "conntrack --ctstate RELATED,ESTABLISHED"}),
		rule(drop, iface(false, "wlan+")),
		rule(accept, src("198.18.255.0/24"), tcp, dports(22)),
	}
	for i := range n {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18 + byte(i>>16&1), byte(i >> 8), byte(i)}), 32)
		if wide {
			p = netip.PrefixFrom(netip.AddrFrom4([4]byte{198 + byte(i>>16), byte(i >> 8), byte(i), 0}), 24)
		}
		rules = append(rules, rule(drop, model.Addr{Dir: model.Dst, Prefix: p}))
	}
	b.base("filter/FORWARD", model.Forward, 0, model.PolicyAccept, rules...)
	return b
}

// services is the nft package's scale shape: 1,000 chains jumped to by destination, 9 rules each.
func services(chains int) *builder {
	b := newBuilder(model.IPv4)
	var fwd []*model.Rule
	for c := range chains {
		name := fmt.Sprintf("C%d", c)
		fwd = append(fwd, rule(jump(name), dst(fmt.Sprintf("198.19.%d.%d/32", c/250, c%250))))
		name = "filter/" + name
		var rs []*model.Rule
		for r := range 9 {
			rs = append(rs, rule(accept, src(fmt.Sprintf("198.18.%d.%d/32", r, c%250)), tcp, dports(uint16(1000+c))))
		}
		b.user(name, rs...)
	}
	b.base("filter/FORWARD", model.Forward, 0, model.PolicyDrop, fwd...)
	return b
}

// kubeProxy is kube-proxy's nat shape for n services with two endpoints each (KUBE-SERVICES ->
// KUBE-SVC -> KUBE-SEP, NAT and MARK targets Linux's), behind a filter FORWARD that accepts the
// cluster's addresses.
func kubeProxy(n int) *builder {
	b := newBuilder(model.IPv4)
	nat := func(c string) string { return "nat/" + c }
	linuxT := func(r string) model.Verdict { return model.Verdict{Kind: model.Linux, Reason: r} }
	b.base(nat("PREROUTING"), model.Prerouting, model.PriorityDstNAT, model.PolicyAccept, rule(jump("KUBE-SERVICES")))
	b.user(nat("KUBE-MARK-MASQ"), rule(linuxT("target MARK")))
	var svcs []*model.Rule
	for i := range n {
		svcIP := fmt.Sprintf("198.19.%d.%d/32", 100+i/250, i%250)
		svc, sepA, sepB := fmt.Sprintf("KUBE-SVC-%d", i), fmt.Sprintf("KUBE-SEP-%da", i), fmt.Sprintf("KUBE-SEP-%db", i)
		svcs = append(svcs, rule(jump(svc), dst(svcIP), tcp, dports(80)))
		b.user(nat(svc),
			rule(jump("KUBE-MARK-MASQ"), nsrc("198.18.0.0/15"), dst(svcIP), tcp, dports(80)),
			rule(jump(sepA), model.Unknown{What: "statistic --mode random"}),
			rule(jump(sepB)),
		)
		for j, sep := range []string{sepA, sepB} {
			b.user(nat(sep),
				rule(jump("KUBE-MARK-MASQ"), src(fmt.Sprintf("198.18.%d.%d/32", 10+j, i%250))),
				rule(model.Verdict{Kind: model.Linux, Reason: "DNAT translates the packet", NAT: true}, tcp),
			)
		}
	}
	svcs = append(svcs, rule(jump("KUBE-NODEPORTS"), model.FibLocal{Dir: model.Dst, XT: "-m addrtype --dst-type LOCAL"}))
	b.user(nat("KUBE-SERVICES"), svcs...)
	b.user(nat("KUBE-NODEPORTS"), rule(jump("KUBE-MARK-MASQ"), tcp, dports(30080)))
	b.base("filter/FORWARD", model.Forward, model.PriorityFilter, model.PolicyDrop,
		rule(accept, src("198.18.0.0/15")),
		rule(accept, dst("198.18.0.0/15")),
	)
	return b
}

type leafStats struct{ max, sum, n int }

func leaves(p *compile.Program) (s leafStats) {
	for _, lp := range p.Prefixes {
		l := p.Leaves[lp.Leaf]
		if l.Overflow {
			s.max = compile.MaxLeaf + 1
			continue
		}
		s.max = max(s.max, len(l.Rules))
		s.sum += len(l.Rules)
		s.n++
	}
	return s
}

func TestScale(t *testing.T) {
	type shape struct {
		name    string
		b       *builder
		maxLeaf int
	}
	var shapes []shape
	for _, n := range []int{1, 10, 100, 1000, 10000} {
		shapes = append(shapes, shape{fmt.Sprintf("%d /32 blacklist", n), blacklist(n, false), 4})
	}
	shapes = append(shapes, shape{"10000 /24 blacklist", blacklist(10000, true), 4})
	shapes = append(shapes, shape{"1000 service chains x 9", services(1000), 10})
	shapes = append(shapes, shape{"kube-proxy 2000 services", kubeProxy(2000), 5})
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range shapes {
		start := time.Now()
		prog, err := compile.Compile(sh.b.rs, nil)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v", sh.name, err)
		}
		checkProgram(t, prog)
		ls := leaves(prog)
		t.Logf("%-26s compile %8v: %5d flat rules, cut %s, %5d prefixes, %5d leaves, longest leaf %d, average %.2f",
			sh.name, took.Round(10*time.Microsecond), len(prog.Rules), prog.Cut, len(prog.Prefixes), len(prog.Leaves), ls.max, float64(ls.sum)/float64(ls.n))
		if took > 500*time.Millisecond {
			t.Errorf("%s: compile took %v", sh.name, took)
		}
		if ls.max > sh.maxLeaf {
			t.Errorf("%s: longest leaf %d, want at most %d", sh.name, ls.max, sh.maxLeaf)
		}
		// And it agrees with the evaluator, on packets to the listed addresses and others.
		st := newStats()
		var pkts []eval.Packet
		for range 400 {
			p := pkt("tcp 198.18.0.1:1000 > 198.18.0.1:22")
			b := p.Dst.As4()
			b[1], b[2], b[3] = 18+byte(r.IntN(2)), byte(r.IntN(40)), byte(r.IntN(256))
			if r.IntN(2) == 0 { // the services' addresses
				b[1], b[2], b[3] = 19, byte(r.IntN(5)), byte(r.IntN(250))
			}
			p.Dst = netip.AddrFrom4(b)
			b = p.Src.As4()
			b[2], b[3] = byte(r.IntN(10)), byte(r.IntN(250))
			p.Src = netip.AddrFrom4(b)
			p.DstPort = uint16(1000 + r.IntN(1000))
			if r.IntN(4) == 0 {
				p.Src = netip.MustParseAddr("198.18.255.3")
				p.DstPort = 22
			}
			if r.IntN(10) == 0 {
				p.In = "wlan0"
			}
			if r.IntN(4) == 0 { // a kube-proxy service's client (pods in 198.18/15 too)
				p.Dst = netip.AddrFrom4([4]byte{198, 19, byte(100 + r.IntN(8)), byte(r.IntN(250))})
				p.DstPort = 80
			}
			if r.IntN(3) == 0 { // a service's client
				c := r.IntN(1000)
				p.Src = netip.AddrFrom4([4]byte{198, 18, byte(r.IntN(10)), byte(c % 250)})
				p.Dst = netip.AddrFrom4([4]byte{198, 19, byte(c / 250), byte(c % 250)})
				p.DstPort = uint16(1000 + c)
			}
			pkts = append(pkts, p)
		}
		compare(t, st, sh.b.rs, sh.b.sets, prog, pkts, func() string { return sh.name })
		if st.gap > 0 || (st.eval[eval.Linux] > 0) != strings.HasPrefix(sh.name, "kube-proxy") {
			t.Errorf("%s: %d packets go to Linux (%d by the evaluator)", sh.name, st.gap+st.eval[eval.Linux], st.eval[eval.Linux])
		}
		t.Logf("%-26s %d packets: accept %d, drop %d, linux %d", "", st.packets, st.eval[eval.Accept], st.eval[eval.Drop], st.eval[eval.Linux])
	}
}

func BenchmarkCompileBlacklist10k(b *testing.B) {
	bl := blacklist(10000, false)
	for b.Loop() {
		if _, err := compile.Compile(bl.rs, nil); err != nil {
			b.Fatal(err)
		}
	}
}
