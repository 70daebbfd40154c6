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
	ep := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	k := KubeProxy{
		ClusterCIDR: netip.MustParsePrefix("198.18.0.0/16"),
		Services: []KubeService{
			{Namespace: "kube-system", Name: "kube-dns", PortName: "dns", Proto: "udp", ClusterIP: netip.MustParseAddr("198.19.100.1"), Port: 53,
				Endpoints: []netip.AddrPort{ep("198.18.1.5:53"), ep("198.18.1.6:53")}},
			{Namespace: "default", Name: "web", PortName: "http", Proto: "tcp", ClusterIP: netip.MustParseAddr("198.19.0.6"), Port: 80, NodePort: 30080,
				Endpoints: []netip.AddrPort{ep("198.18.1.7:8080"), ep("198.18.2.7:8080"), ep("198.18.3.7:8080")}, Affinity: true},
			{Namespace: "default", Name: "gone", PortName: "http", Proto: "tcp", ClusterIP: netip.MustParseAddr("198.19.0.5"), Port: 80, NodePort: 30081},
		},
	}
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

	ns, err := nsutil.New("lfp-test-kp")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	for range 2 {
		if err := k.Apply(ns); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := nft.Read(nft.Options{NetNS: int(ns.Handle())})
	if err != nil {
		t.Fatal(err)
	}
	rs := snap.IPv4
	if len(rs.Conntrack) == 0 {
		t.Fatal("kube-proxy's rules: netfilter not taken as tracking connections")
	}
	prog, err := compile.Compile(rs.Established(), snap.Sets)
	if err != nil {
		t.Fatal(err)
	}
	// A reply from a backend and a later packet of a client's connection: accepted by
	// KUBE-FORWARD's conntrack rule, without Linux.
	for _, st := range []uint8{model.CtEstablished} {
		in := compile.Input{Src: netip.MustParseAddr("198.18.1.7"), Dst: netip.MustParseAddr("198.18.9.9"), Proto: model.ProtoTCP,
			SrcPort: 8080, DstPort: 40000, CtState: st}
		if out := prog.Classify(in); out.Verdict != compile.Accept {
			t.Errorf("established packet: %v (rule %d %s)\n%s", out.Verdict, out.Rule, out.Why, prog)
		}
	}
	// NEW: Linux's anyway (no entry); the rules would send it on to the filter KUBE-SERVICES.
	in := compile.Input{Src: netip.MustParseAddr("198.18.9.9"), Dst: netip.MustParseAddr("198.19.0.5"), Proto: model.ProtoTCP,
		SrcPort: 40000, DstPort: 80, CtState: model.CtNew}
	if out := prog.Classify(in); out.Verdict != compile.Linux {
		t.Errorf("NEW packet to a service without endpoints: %v, want Linux (REJECT)", out.Verdict)
	}
}
