package testbed

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"strings"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// ProxyMode is how kube-proxy programs the services: its iptables mode (KubeProxy.Rules) or its
// nftables mode (KubeProxy.NFTRules).
type ProxyMode string

const (
	ProxyIPTables ProxyMode = "iptables"
	ProxyNFTables ProxyMode = "nftables"
)

// ParseProxyMode checks a mode's name ("" is iptables, kube-proxy's default).
func ParseProxyMode(s string) (ProxyMode, error) {
	switch ProxyMode(s) {
	case "", ProxyIPTables:
		return ProxyIPTables, nil
	case ProxyNFTables:
		return ProxyNFTables, nil
	}
	return "", fmt.Errorf("proxy mode %q: want iptables or nftables", s)
}

// kubeNFTName is kube-proxy's nftables name for a service port's chains (and, with the endpoint,
// an endpoint's chain and affinity set): "ns/name/proto/port[__ip/port]", led by the first 8
// characters of the base32 of its SHA-256, so that names alike at a glance differ at the start.
// An IPv6 endpoint's colons, which chain names may not hold, are dots. kube-proxy truncates names
// longer than 240 characters, which Kubernetes' name limits let no service port reach here.
func kubeNFTName(s KubeService, ep netip.AddrPort) string {
	name := fmt.Sprintf("%s/%s/%s/%s", s.Namespace, s.Name, strings.ToLower(s.Proto), s.PortName)
	if ep.IsValid() {
		name += fmt.Sprintf("__%s/%d", strings.ReplaceAll(ep.Addr().String(), ":", "."), ep.Port())
	}
	h := sha256.Sum256([]byte(name))
	return base32.StdEncoding.EncodeToString(h[:])[:8] + "-" + name
}

// kubeNFTTables are kube-proxy's tables, one per family: a dual-stack node's kube-proxy runs a
// proxier per family, each with its own table of the same name.
var kubeNFTTables = []string{"ip kube-proxy", "ip6 kube-proxy"}

// nftFamily is the configuration's nftables family as kube-proxy's proxier for it writes its
// rules: the table, the address match (`ip daddr`, `ip6 daddr`) and the sets' address type.
func (k KubeProxy) nftFamily() (table, ipX, addrType string) {
	if k.ipv6() {
		return kubeNFTTables[1], "ip6", "ipv6_addr"
	}
	return kubeNFTTables[0], "ip", "ipv4_addr"
}

// NFTRules renders the nft transaction kube-proxy's nftables mode (1.33) writes on a full sync
// for the services, into table `ip kube-proxy` (created if missing; chains and maps flushed and
// refilled, as its transaction does). For an IPv6 ClusterCIDR the table is `ip6 kube-proxy`, as
// the IPv6 proxier of a dual-stack node's kube-proxy writes it: the same chains, sets and maps,
// with ipv6_addr keys, `ip6 daddr`/`ip6 saddr` matches and [address]:port DNAT targets. The rules:
//   - base chains: filter-prerouting-pre-dnat and filter-output-pre-dnat (priority -110: before
//     DNAT, `ct state new jump firewall-check`), filter-forward, filter-input and filter-output
//     (priority 0: `ct state new` jumps to the no-endpoint and cluster-IP checks), nat-prerouting
//     and nat-output (dstnat: jump services), nat-postrouting (srcnat: jump masquerading);
//   - the set cluster-ips and nodeport-ips (NodePortIPs: --nodeport-addresses, by default the
//     node's primary address), and the verdict maps service-ips and no-endpoint-services
//     (`ip daddr . meta l4proto . th dport`), service-nodeports and no-endpoint-nodeports
//     (`meta l4proto . th dport`), firewall-ips (empty: no LoadBalancer source ranges here);
//   - per service port with endpoints a service-* chain (mark-for-masquerade for sources outside
//     ClusterCIDR, affinity lookups, `numgen random mod N vmap` over the endpoint chains), for a
//     NodePort an external-* chain (mark-for-masquerade, goto the service chain), per endpoint an
//     endpoint-* chain (mark-for-masquerade for the endpoint itself, the affinity set's update,
//     DNAT); a service port without endpoints is rejected through no-endpoint-services (and
//     no-endpoint-nodeports) by reject-chain;
//   - ServiceCIDR: cluster-ips-check drops what goes to an unallocated cluster IP in it (and
//     rejects other ports of allocated ones).
func (k KubeProxy) NFTRules() string {
	var b strings.Builder
	line := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	t, ipX, addrType := k.nftFamily()
	line(`add table %s { comment "rules for kube-proxy" ; }`, t)
	for _, c := range []struct{ name, spec string }{
		{"filter-prerouting-pre-dnat", "type filter hook prerouting priority -110"},
		{"filter-output-pre-dnat", "type filter hook output priority -110"},
		{"filter-forward", "type filter hook forward priority 0"},
		{"filter-input", "type filter hook input priority 0"},
		{"filter-output", "type filter hook output priority 0"},
		{"nat-prerouting", "type nat hook prerouting priority -100"},
		{"nat-output", "type nat hook output priority -100"},
		{"nat-postrouting", "type nat hook postrouting priority 100"},
	} {
		line("add chain %s %s { %s ; }", t, c.name, c.spec)
		line("flush chain %s %s", t, c.name)
	}
	for _, c := range []string{"cluster-ips-check", "firewall-check", "mark-for-masquerade", "masquerading",
		"nodeport-endpoints-check", "services", "service-endpoints-check"} {
		line("add chain %s %s", t, c)
		line("flush chain %s %s", t, c)
	}
	line(`add chain %s reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }`, t)
	line("flush chain %s reject-chain", t)

	addrKey := addrType + " . inet_proto . inet_service : verdict"
	for _, s := range []struct{ kind, name, typ, comment string }{
		{"set", "cluster-ips", addrType, "Active ClusterIPs"},
		{"set", "nodeport-ips", addrType, "IPs that accept NodePort traffic"},
		{"map", "firewall-ips", addrKey, "destinations that are subject to LoadBalancerSourceRanges"},
		{"map", "no-endpoint-nodeports", "inet_proto . inet_service : verdict", "vmap to drop or reject packets to service nodeports with no endpoints"},
		{"map", "no-endpoint-services", addrKey, "vmap to drop or reject packets to services with no endpoints"},
		{"map", "service-ips", addrKey, "ClusterIP, ExternalIP and LoadBalancer IP traffic"},
		{"map", "service-nodeports", "inet_proto . inet_service : verdict", "NodePort traffic"},
	} {
		line(`add %s %s %s { type %s ; comment "%s" ; }`, s.kind, t, s.name, s.typ, s.comment)
		line("flush %s %s %s", s.kind, t, s.name)
	}

	// The jumps from the base chains, and the fixed chains' rules.
	for _, r := range []string{
		"filter-input ct state new jump nodeport-endpoints-check",
		"filter-input ct state new jump service-endpoints-check",
		"filter-forward ct state new jump service-endpoints-check",
		"filter-output ct state new jump service-endpoints-check",
		"filter-prerouting-pre-dnat ct state new jump firewall-check",
		"filter-output-pre-dnat ct state new jump firewall-check",
		"nat-output jump services",
		"nat-prerouting jump services",
		"nat-postrouting jump masquerading",
		"filter-forward ct state new jump cluster-ips-check",
		"filter-output ct state new jump cluster-ips-check",
		"mark-for-masquerade mark set mark or 0x4000",
		"masquerading mark and 0x4000 == 0 return",
		"masquerading mark set mark xor 0x4000",
		"masquerading masquerade fully-random",
		`cluster-ips-check ` + ipX + ` daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"`,
		"reject-chain reject",
		"service-endpoints-check " + ipX + " daddr . meta l4proto . th dport vmap @no-endpoint-services",
		"nodeport-endpoints-check " + ipX + " daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports",
		"firewall-check " + ipX + " daddr . meta l4proto . th dport vmap @firewall-ips",
		"services " + ipX + " daddr . meta l4proto . th dport vmap @service-ips",
		"services " + ipX + " daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
	} {
		line("add rule %s %s", t, r)
	}
	if k.ServiceCIDR.IsValid() {
		line(`add rule %s cluster-ips-check %s daddr { %s } drop comment "Drop traffic to unallocated ClusterIPs"`, t, ipX, k.ServiceCIDR)
	}
	for _, a := range k.NodePortIPs {
		line("add element %s nodeport-ips { %s }", t, a)
	}

	clusterIPs := map[netip.Addr]bool{}
	for _, s := range k.Services {
		proto := strings.ToLower(s.Proto)
		if !clusterIPs[s.ClusterIP] {
			clusterIPs[s.ClusterIP] = true
			line("add element %s cluster-ips { %s }", t, s.ClusterIP)
		}
		if len(s.Endpoints) == 0 {
			line(`add element %s no-endpoint-services { %s . %s . %d comment "%s" : goto reject-chain }`, t, s.ClusterIP, proto, s.Port, s.id())
			if s.NodePort != 0 {
				line(`add element %s no-endpoint-nodeports { %s . %d comment "%s" : goto reject-chain }`, t, proto, s.NodePort, s.id())
			}
			continue
		}
		// The chains first (kube-proxy's ensureChain), as the rules jump between them.
		svc := "service-" + kubeNFTName(s, netip.AddrPort{})
		ext := "external-" + kubeNFTName(s, netip.AddrPort{})
		chains := []string{svc}
		if s.NodePort != 0 {
			chains = append(chains, ext)
		}
		for _, ep := range s.Endpoints {
			chains = append(chains, "endpoint-"+kubeNFTName(s, ep))
			if s.Affinity {
				// ClientIP affinity: the endpoint's set of client addresses, remembered for
				// kube-proxy's default 10800 s.
				line("add set %s affinity-%s { type %s ; flags dynamic,timeout ; timeout 10800s ; }", t, kubeNFTName(s, ep), addrType)
			}
		}
		for _, c := range chains {
			line("add chain %s %s", t, c)
			line("flush chain %s %s", t, c)
		}
		line("add rule %s %s %s daddr %s %s saddr != %s jump mark-for-masquerade", t, svc, ipX, s.ClusterIP, ipX, k.ClusterCIDR)
		var eps []string
		for i, ep := range s.Endpoints {
			name := kubeNFTName(s, ep)
			if s.Affinity {
				line("add rule %s %s %s saddr @affinity-%s goto endpoint-%s", t, svc, ipX, name, name)
			}
			eps = append(eps, fmt.Sprintf("%d : goto endpoint-%s", i, name))
		}
		line("add rule %s %s numgen random mod %d vmap { %s }", t, svc, len(s.Endpoints), strings.Join(eps, " , "))
		for _, ep := range s.Endpoints {
			name := kubeNFTName(s, ep)
			line("add rule %s endpoint-%s %s saddr %s jump mark-for-masquerade", t, name, ipX, ep.Addr())
			if s.Affinity {
				line("add rule %s endpoint-%s update @affinity-%s { %s saddr }", t, name, name, ipX)
			}
			// An IPv6 endpoint prints as [address]:port, as nft takes it.
			line("add rule %s endpoint-%s meta l4proto %s dnat to %s", t, name, proto, ep)
		}
		line("add element %s service-ips { %s . %s . %d : goto %s }", t, s.ClusterIP, proto, s.Port, svc)
		if s.NodePort != 0 {
			line("add rule %s %s jump mark-for-masquerade", t, ext)
			line("add rule %s %s goto %s", t, ext, svc)
			line("add element %s service-nodeports { %s . %d : goto %s }", t, proto, s.NodePort, ext)
		}
	}
	return b.String()
}

// ApplyNFT loads NFTRules into ns with `nft -f`, as one transaction as kube-proxy's sync is. On
// a table that exists already the chains and maps are flushed and refilled, but the chains of
// service ports gone stay (kube-proxy flushes and deletes them later): for a set of services
// different from the last, delete the table first (DeleteNFT).
func (k KubeProxy) ApplyNFT(ns *nsutil.NS) error {
	return load(ns, "nft -f", k.NFTRules(), "nft", "-f", "-")
}

// DeleteNFT removes kube-proxy's nftables tables (both families) from ns, where there are any
// (as `kube-proxy --cleanup` does).
func DeleteNFT(ns *nsutil.NS) error {
	var b strings.Builder
	for _, t := range kubeNFTTables {
		fmt.Fprintf(&b, "add table %s\ndelete table %s\n", t, t)
	}
	return load(ns, "nft delete table kube-proxy", b.String(), "nft", "-f", "-")
}
