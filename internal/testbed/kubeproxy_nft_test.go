package testbed

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// Chains are named as kube-proxy's nftables mode names them (the names of its upstream test,
// TestOverallNFTablesRules).
func TestKubeNFTName(t *testing.T) {
	s := KubeService{Namespace: "ns1", Name: "svc1", PortName: "p80", Proto: "TCP"}
	if got, want := kubeNFTName(s, netip.AddrPort{}), "ULMVA6XW-ns1/svc1/tcp/p80"; got != want {
		t.Errorf("service chain base %q, want %q", got, want)
	}
	for ep, want := range map[string]string{
		"10.180.0.1:80": "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80",
		// IPv6 endpoints (its upstream IPv6 test's): colons as dots.
		"[fd00:10:180::1]:80":   "ZVRFLKHO-ns1/svc1/tcp/p80__fd00.10.180..1/80",
		"[fd00:10:180::2:1]:80": "2CRNCTTE-ns1/svc1/tcp/p80__fd00.10.180..2.1/80",
	} {
		if got := kubeNFTName(s, netip.MustParseAddrPort(ep)); got != want {
			t.Errorf("endpoint %s: chain base %q, want %q", ep, got, want)
		}
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

// The IPv6 proxier's nftables-mode table (a dual-stack node: `ip6 kube-proxy` beside `ip
// kube-proxy`) loads as kube-proxy's does, twice, with ipv6_addr keys, `ip6` matches and
// bracketed DNAT targets and nothing of IPv4's; it leaves an established connection's packets
// to rules the filter module decides without Linux, and DeleteNFT removes both tables.
func TestKubeProxyNFTRulesIPv6(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("nft not installed")
	}
	k := testKubeProxy6()
	rules := k.NFTRules()
	for _, want := range []string{
		`add table ip6 kube-proxy { comment "rules for kube-proxy" ; }`,
		"add chain ip6 kube-proxy filter-forward { type filter hook forward priority 0 ; }",
		`add set ip6 kube-proxy cluster-ips { type ipv6_addr ; comment "Active ClusterIPs" ; }`,
		"add map ip6 kube-proxy service-ips { type ipv6_addr . inet_proto . inet_service : verdict ;",
		"add rule ip6 kube-proxy services ip6 daddr . meta l4proto . th dport vmap @service-ips",
		"add rule ip6 kube-proxy services ip6 daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
		"add rule ip6 kube-proxy nodeport-endpoints-check ip6 daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports",
		"add element ip6 kube-proxy nodeport-ips { 2001:2::1 }",
		"add element ip6 kube-proxy service-ips { 2001:2:0:80::a . udp . 53 : goto service-",
		"ip6 daddr 2001:2:0:80::a ip6 saddr != 2001:2:0:100::/56 jump mark-for-masquerade",
		"/udp/dns__2001.2.0.101..5/53 ip6 saddr 2001:2:0:101::5 jump mark-for-masquerade",
		"/udp/dns__2001.2.0.101..5/53 meta l4proto udp dnat to [2001:2:0:101::5]:53",
		"type ipv6_addr ; flags dynamic,timeout ; timeout 10800s ;",
		"update @affinity-",
		"{ ip6 saddr }",
		`add element ip6 kube-proxy no-endpoint-services { 2001:2:0:80::5 . tcp . 80 comment "default/gone:http" : goto reject-chain }`,
		"add rule ip6 kube-proxy cluster-ips-check ip6 daddr { 2001:2:0:80::/112 } drop",
		"add rule ip6 kube-proxy masquerading masquerade fully-random",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q", want)
		}
	}
	for _, unwanted := range []string{"ip kube-proxy", "ipv4_addr", " ip daddr", " ip saddr"} {
		if strings.Contains(rules, unwanted) {
			t.Errorf("IPv6 rules hold %q", unwanted)
		}
	}

	// Both proxiers' tables, as on a dual-stack node.
	ns := loadTwice(t, "lfp-nm-kpn6", func(ns *nsutil.NS) error {
		if err := testKubeProxy().ApplyNFT(ns); err != nil {
			return err
		}
		return k.ApplyNFT(ns)
	}, rules)
	out, err := ns.Run("nft", "list", "table", "ip6", "kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "jump firewall-check"); n != 2 {
		t.Errorf("after two syncs, %d jumps to firewall-check in the IPv6 table, want 2:\n%s", n, out)
	}
	a := netip.MustParseAddr
	compileEstablished(t, ns,
		compile.Input{Src: a("2001:2:0:101::7"), Dst: a("2001:2::2"), Proto: model.ProtoTCP, SrcPort: 8080, DstPort: 40000, CtState: model.CtEstablished},
		compile.Input{Src: a("2001:2::2"), Dst: a("2001:2:0:101::7"), Proto: model.ProtoTCP, SrcPort: 40000, DstPort: 8080, CtState: model.CtEstablished},
		compile.Input{Src: a("2001:2:0:101::5"), Dst: a("2001:2::2"), Proto: model.ProtoUDP, SrcPort: 53, DstPort: 40000, CtState: model.CtEstablished})
	for range 2 {
		if err := DeleteNFT(ns); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := ns.Run("nft", "list", "tables"); err != nil || strings.Contains(out, "kube-proxy") {
		t.Errorf("after DeleteNFT: %q (%v)", out, err)
	}
}
