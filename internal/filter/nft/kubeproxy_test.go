package nft_test

import (
	"net/netip"
	"os"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/filtertest"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// kube-proxy's nftables mode guards every check of its filter chains with `ct state new`: the
// packets of established connections pass them, and the filter module decides them without
// Linux; new ones meet the verdict maps (decided) and the rejects (Linux's). Its tables make
// netfilter track connections.
func TestKubeProxyNFTablesMode(t *testing.T) {
	filtertest.Require(t, "nft")
	ns := filtertest.NewNS(t, "lfp-kpn")
	script, err := os.ReadFile("../eval/testdata/kube-proxy-nftables.nft")
	if err != nil {
		t.Fatal(err)
	}
	if err := filtertest.NFT(ns, string(script)); err != nil {
		t.Fatal(err)
	}
	snap, err := filtertest.Read(ns)
	if err != nil {
		t.Fatal(err)
	}
	rs := snap.IPv4
	if len(rs.Conntrack) == 0 {
		t.Fatal("kube-proxy's nftables tables: netfilter not taken as tracking connections")
	}
	prog, err := compile.Compile(rs.Established(), snap.Sets)
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	for _, c := range []struct {
		what string
		in   compile.Input
		want compile.Verdict
	}{
		{"a backend's reply", compile.Input{Src: a("198.18.1.7"), Dst: a("198.18.9.9"), Proto: model.ProtoTCP, SrcPort: 8080, DstPort: 40000, CtState: model.CtEstablished}, compile.Accept},
		{"a client's later packet to a service", compile.Input{Src: a("198.18.9.9"), Dst: a("198.18.1.7"), Proto: model.ProtoTCP, SrcPort: 40000, DstPort: 8080, CtState: model.CtEstablished}, compile.Accept},
		// An unreplied flow's packets are NEW: they meet the no-endpoint-services verdict map
		// (after DNAT, with the backend's address) and cluster-ips-check, decided here.
		{"an unreplied UDP flow's later packet", compile.Input{Src: a("198.18.9.9"), Dst: a("198.18.1.5"), Proto: model.ProtoUDP, SrcPort: 40000, DstPort: 53, CtState: model.CtNew}, compile.Accept},
		{"a new connection to a service without endpoints", compile.Input{Src: a("198.18.9.9"), Dst: a("198.19.0.5"), Proto: model.ProtoTCP, SrcPort: 40000, DstPort: 80, CtState: model.CtNew}, compile.Linux},
		{"its other port", compile.Input{Src: a("198.18.9.9"), Dst: a("198.19.0.5"), Proto: model.ProtoTCP, SrcPort: 40000, DstPort: 81, CtState: model.CtNew}, compile.Drop},
		{"a cluster IP's other port", compile.Input{Src: a("198.18.9.9"), Dst: a("198.19.0.6"), Proto: model.ProtoUDP, SrcPort: 40000, DstPort: 80, CtState: model.CtNew}, compile.Linux},
		{"state not known", compile.Input{Src: a("198.18.1.7"), Dst: a("198.18.9.9"), Proto: model.ProtoTCP, SrcPort: 8080, DstPort: 40000}, compile.Linux},
	} {
		if got := prog.Classify(c.in); got.Verdict != c.want {
			t.Errorf("%s: %v (rule %d %s), want %v\n%s", c.what, got.Verdict, got.Rule, got.Why, c.want, prog)
		}
	}
}
