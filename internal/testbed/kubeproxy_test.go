package testbed

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/filter/nft"
	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// The generated rules load as kube-proxy's do (iptables-restore accepts them, twice: kube-proxy
// rewrites them on every sync), name chains as kube-proxy does, and leave an established
// connection's packets to rules the filter module decides without Linux.
func TestKubeProxyRules(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("iptables-restore not installed")
	}
	k := testKubeProxy()
	rules := k.Rules()
	for _, want := range []string{
		"-A KUBE-SERVICES -d 198.19.100.1/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU",
		"-m statistic --mode random --probability 0.33333333333 -j KUBE-SEP-",
		"-m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-",
		"-m recent --set --name KUBE-SEP-",
		"-A KUBE-SERVICES -d 198.19.0.5/32 -p tcp -m comment --comment \"default/gone:http has no endpoints\" -m tcp --dport 80 -j REJECT",
		"-A KUBE-NODEPORTS -p tcp -m comment --comment \"default/web:http\" -m tcp --dport 30080 -j KUBE-EXT-",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q", want)
		}
	}

	ns := loadTwice(t, "lfp-test-kp", k.Apply, rules)
	// A reply from a backend: accepted by KUBE-FORWARD's conntrack rule, without Linux.
	prog := compileEstablished(t, ns, compile.Input{Src: netip.MustParseAddr("198.18.1.7"), Dst: netip.MustParseAddr("198.18.9.9"),
		Proto: model.ProtoTCP, SrcPort: 8080, DstPort: 40000, CtState: model.CtEstablished})
	// NEW: Linux's anyway (no entry); the rules would send it on to the filter KUBE-SERVICES.
	in := compile.Input{Src: netip.MustParseAddr("198.18.9.9"), Dst: netip.MustParseAddr("198.19.0.5"), Proto: model.ProtoTCP,
		SrcPort: 40000, DstPort: 80, CtState: model.CtNew}
	if out := prog.Classify(in); out.Verdict != compile.Linux {
		t.Errorf("NEW packet to a service without endpoints: %v, want Linux (REJECT)", out.Verdict)
	}
}

// The IPv6 proxier's rules load with ip6tables-restore (twice), with IPv6 host prefixes, icmp6
// rejects and an IPv6 mask, without the IPv4-only localnet rule, and leave an established
// connection's packets to rules the filter module decides without Linux.
func TestKubeProxyRulesIPv6(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip6tables-restore"); err != nil {
		t.Skip("ip6tables-restore not installed")
	}
	k := testKubeProxy6()
	rules := k.Rules()
	for _, want := range []string{
		"-A KUBE-SERVICES -d 2001:2:0:80::a/128 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU",
		"! -s 2001:2:0:100::/56 -d 2001:2:0:80::a/128 -p udp",
		"-s 2001:2:0:101::5/128 -m comment --comment \"kube-system/kube-dns:dns\" -j KUBE-MARK-MASQ",
		"-j DNAT --to-destination [2001:2:0:101::5]:53",
		"--mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource",
		"-j REJECT --reject-with icmp6-port-unreachable",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q:\n%s", want, rules)
		}
	}
	for _, unwanted := range []string{"127.0.0.0/8", "/32 ", "icmp-port-unreachable", "255.255.255.255"} {
		if strings.Contains(rules, unwanted) {
			t.Errorf("IPv6 rules hold %q", unwanted)
		}
	}
	ns := loadTwice(t, "lfp-test-kp6", k.Apply, rules)
	snap, err := nft.Read(nft.Options{NetNS: int(ns.Handle())})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.IPv4.Conntrack); n != 0 {
		t.Errorf("IPv6 rules left %d IPv4 conntrack users", n)
	}
	rs := snap.IPv6
	if len(rs.Conntrack) == 0 {
		t.Fatal("kube-proxy's IPv6 rules: netfilter not taken as tracking connections")
	}
	prog, err := compile.Compile(rs.Established(), snap.Sets)
	if err != nil {
		t.Fatal(err)
	}
	in := compile.Input{Src: netip.MustParseAddr("2001:2:0:101::5"), Dst: netip.MustParseAddr("2001:2::2"), Proto: model.ProtoUDP,
		SrcPort: 53, DstPort: 40000, CtState: model.CtEstablished}
	if out := prog.Classify(in); out.Verdict != compile.Accept {
		t.Errorf("established packet %v: %v (rule %d %s)\n%s", in, out.Verdict, out.Rule, out.Why, prog)
	}
}

// testKubeProxy6 is testKubeProxy's services in an IPv6 cluster (addresses in 2001:2::/48).
func testKubeProxy6() KubeProxy {
	ep := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	return KubeProxy{
		ClusterCIDR: netip.MustParsePrefix("2001:2:0:100::/56"),
		ServiceCIDR: netip.MustParsePrefix("2001:2:0:80::/112"),
		NodePortIPs: []netip.Addr{netip.MustParseAddr("2001:2::1")},
		Services: []KubeService{
			{Namespace: "kube-system", Name: "kube-dns", PortName: "dns", Proto: "udp", ClusterIP: netip.MustParseAddr("2001:2:0:80::a"), Port: 53,
				Endpoints: []netip.AddrPort{ep("[2001:2:0:101::5]:53"), ep("[2001:2:0:101::6]:53")}},
			{Namespace: "default", Name: "web", PortName: "http", Proto: "tcp", ClusterIP: netip.MustParseAddr("2001:2:0:80::6"), Port: 80, NodePort: 30080,
				Endpoints: []netip.AddrPort{ep("[2001:2:0:101::7]:8080"), ep("[2001:2:0:102::7]:8080")}, Affinity: true},
			{Namespace: "default", Name: "gone", PortName: "http", Proto: "tcp", ClusterIP: netip.MustParseAddr("2001:2:0:80::5"), Port: 80, NodePort: 30081},
		},
	}
}

// testKubeProxy is the configuration the kube-proxy tests load in either mode: a UDP service with
// two endpoints, a TCP one with three, session affinity and a NodePort, and one without
// endpoints.
func testKubeProxy() KubeProxy {
	ep := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	return KubeProxy{
		ClusterCIDR: netip.MustParsePrefix("198.18.0.0/16"),
		ServiceCIDR: netip.MustParsePrefix("198.19.0.0/16"),
		NodePortIPs: []netip.Addr{netip.MustParseAddr("198.18.0.1")},
		Services: []KubeService{
			{Namespace: "kube-system", Name: "kube-dns", PortName: "dns", Proto: "udp", ClusterIP: netip.MustParseAddr("198.19.100.1"), Port: 53,
				Endpoints: []netip.AddrPort{ep("198.18.1.5:53"), ep("198.18.1.6:53")}},
			{Namespace: "default", Name: "web", PortName: "http", Proto: "tcp", ClusterIP: netip.MustParseAddr("198.19.0.6"), Port: 80, NodePort: 30080,
				Endpoints: []netip.AddrPort{ep("198.18.1.7:8080"), ep("198.18.2.7:8080"), ep("198.18.3.7:8080")}, Affinity: true},
			{Namespace: "default", Name: "gone", PortName: "http", Proto: "tcp", ClusterIP: netip.MustParseAddr("198.19.0.5"), Port: 80, NodePort: 30081},
		},
	}
}

// loadTwice loads rules with apply into a new namespace (named from name), twice, as kube-proxy
// rewrites them on every sync.
func loadTwice(t *testing.T, name string, apply func(*nsutil.NS) error, rules string) *nsutil.NS {
	t.Helper()
	ns, err := nsutil.New(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	for range 2 {
		if err := apply(ns); err != nil {
			t.Fatalf("%v\n%s", err, rules)
		}
	}
	return ns
}

// compileEstablished reads the rules loaded in ns of established's family (IPv4, or IPv6 for
// IPv6 packets), which must make netfilter track connections, and compiles what an established
// connection's packets traverse: each of established must be accepted there without Linux.
func compileEstablished(t *testing.T, ns *nsutil.NS, established ...compile.Input) *compile.Program {
	t.Helper()
	snap, err := nft.Read(nft.Options{NetNS: int(ns.Handle())})
	if err != nil {
		t.Fatal(err)
	}
	rs := snap.IPv4
	if len(established) > 0 && established[0].Src.Is6() {
		rs = snap.IPv6
	}
	if len(rs.Conntrack) == 0 {
		t.Fatal("kube-proxy's rules: netfilter not taken as tracking connections")
	}
	prog, err := compile.Compile(rs.Established(), snap.Sets)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range established {
		if out := prog.Classify(in); out.Verdict != compile.Accept {
			t.Errorf("established packet %v: %v (rule %d %s)\n%s", in, out.Verdict, out.Rule, out.Why, prog)
		}
	}
	return prog
}
