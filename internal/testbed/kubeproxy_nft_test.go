package testbed

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// Chains are named as kube-proxy's nftables mode names them (the names of its upstream test,
// TestOverallNFTablesRules).
func TestKubeNFTName(t *testing.T) {
	s := KubeService{Namespace: "ns1", Name: "svc1", PortName: "p80", Proto: "TCP"}
	if got, want := kubeNFTName(s, netip.AddrPort{}), "ULMVA6XW-ns1/svc1/tcp/p80"; got != want {
		t.Errorf("service chain base %q, want %q", got, want)
	}
	if got, want := kubeNFTName(s, netip.MustParseAddrPort("10.180.0.1:80")), "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"; got != want {
		t.Errorf("endpoint chain base %q, want %q", got, want)
	}
}

// The generated nftables-mode rules load as kube-proxy's do (nft takes them, twice: kube-proxy
// rewrites them on every sync), and leave an established connection's packets to rules the
// filter module decides without Linux.
func TestKubeProxyNFTRules(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("nft not installed")
	}
	k := testKubeProxy()
	rules := k.NFTRules()
	for _, want := range []string{
		"add chain ip kube-proxy filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }",
		"add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips",
		"add element ip kube-proxy service-ips { 198.19.100.1 . udp . 53 : goto service-",
		"numgen random mod 3 vmap { 0 : goto endpoint-",
		"update @affinity-",
		`add element ip kube-proxy no-endpoint-services { 198.19.0.5 . tcp . 80 comment "default/gone:http" : goto reject-chain }`,
		`add element ip kube-proxy no-endpoint-nodeports { tcp . 30081 comment "default/gone:http" : goto reject-chain }`,
		"add element ip kube-proxy service-nodeports { tcp . 30080 : goto external-",
		"add rule ip kube-proxy cluster-ips-check ip daddr { 198.19.0.0/16 } drop",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q", want)
		}
	}

	ns := loadTwice(t, "lfp-nm-kpn", k.ApplyNFT, rules)
	out, err := ns.Run("nft", "list", "table", "ip", "kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "jump firewall-check"); n != 2 {
		t.Errorf("after two syncs, %d jumps to firewall-check, want 2 (one per pre-DNAT chain):\n%s", n, out)
	}
	// A backend's reply and a client's later packet: no rule acts on them.
	a := netip.MustParseAddr
	compileEstablished(t, ns,
		compile.Input{Src: a("198.18.1.7"), Dst: a("198.18.9.9"), Proto: model.ProtoTCP, SrcPort: 8080, DstPort: 40000, CtState: model.CtEstablished},
		compile.Input{Src: a("198.18.9.9"), Dst: a("198.18.1.7"), Proto: model.ProtoTCP, SrcPort: 40000, DstPort: 8080, CtState: model.CtEstablished})
	if err := DeleteNFT(ns); err != nil {
		t.Fatal(err)
	}
	if err := DeleteNFT(ns); err != nil {
		t.Fatal(err)
	}
}
