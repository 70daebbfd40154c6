package testbed

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// KubeService is one Kubernetes service port as kube-proxy programs it.
type KubeService struct {
	// Namespace/Name:PortName, as kube-proxy names it in comments and chain hashes.
	Namespace, Name, PortName string
	Proto                     string // "tcp" or "udp"
	ClusterIP                 netip.Addr
	Port                      uint16
	// NodePort: 0 for none (a ClusterIP service).
	NodePort uint16
	// Endpoints: the backends (pod address and target port); none: the service REJECTs.
	Endpoints []netip.AddrPort
	// Affinity: sessionAffinity ClientIP (the `recent` match, 10800 s).
	Affinity bool
}

func (s KubeService) id() string { return s.Namespace + "/" + s.Name + ":" + s.PortName }

// KubeProxy is a node's kube-proxy configuration.
type KubeProxy struct {
	// ClusterCIDR: traffic from outside it to a cluster IP is masqueraded (--cluster-cidr).
	ClusterCIDR netip.Prefix
	Services    []KubeService
	// nftables mode only (NFTRules): ServiceCIDR, where cluster-ips-check drops what goes to an
	// unallocated cluster IP (--service-cluster-ip-range); NodePortIPs, the addresses that
	// accept NodePorts (--nodeport-addresses; its nftables-mode default is the node's primary
	// address, where the iptables mode takes every local address).
	ServiceCIDR netip.Prefix
	NodePortIPs []netip.Addr
}

// kubeChain is kube-proxy's chain name: a prefix and the first 16 characters of the base32 of
// a SHA-256 over the service port (and, for endpoints, the endpoint) and protocol.
func kubeChain(prefix string, parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "")))
	return prefix + base32.StdEncoding.EncodeToString(h[:])[:16]
}

// ipv6: the configuration is of an IPv6 cluster (its ClusterCIDR is IPv6): kube-proxy's IPv6
// proxier, whose rules ip6tables-restore loads.
func (k KubeProxy) ipv6() bool { return k.ClusterCIDR.Addr().Is6() }

// hostLen is a's host prefix length as kube-proxy writes it (/32, /128).
func hostLen(a netip.Addr) int { return a.BitLen() }

// Rules renders the iptables-restore input kube-proxy 1.30 (iptables mode) writes for the
// services (for an IPv6 ClusterCIDR, the ip6tables-restore input of its IPv6 proxier: /128
// hosts, icmp6 rejects, an IPv6 mask for `recent`, and no localnet rule, which kube-proxy writes
// for IPv4 only): the nat table (KUBE-SERVICES, KUBE-SVC-*, KUBE-SEP-*, KUBE-EXT-*, KUBE-NODEPORTS,
// KUBE-MARK-MASQ, KUBE-POSTROUTING, statistic-mode-random endpoint choice, `recent` for session
// affinity) and the filter table (KUBE-FORWARD with its nfacct-counted INVALID drop, the
// KUBE-SERVICES REJECTs of services without endpoints, KUBE-FIREWALL). The nfacct object must
// exist first (see AddNFAcct).
func (k KubeProxy) Rules() string {
	var b strings.Builder
	line := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	reject, mask := "icmp-port-unreachable", "255.255.255.255"
	if k.ipv6() {
		reject, mask = "icmp6-port-unreachable", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	}

	line("*mangle")
	for _, c := range []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"} {
		line(":%s ACCEPT [0:0]", c)
	}
	line(":KUBE-IPTABLES-HINT - [0:0]")
	line(":KUBE-KUBELET-CANARY - [0:0]")
	line(":KUBE-PROXY-CANARY - [0:0]")
	line("COMMIT")

	line("*filter")
	line(":INPUT ACCEPT [0:0]")
	line(":FORWARD ACCEPT [0:0]")
	line(":OUTPUT ACCEPT [0:0]")
	for _, c := range []string{"KUBE-EXTERNAL-SERVICES", "KUBE-FIREWALL", "KUBE-FORWARD", "KUBE-KUBELET-CANARY",
		"KUBE-NODEPORTS", "KUBE-PROXY-CANARY", "KUBE-PROXY-FIREWALL", "KUBE-SERVICES"} {
		line(":%s - [0:0]", c)
	}
	line(`-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`)
	line(`-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS`)
	line(`-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES`)
	line(`-A INPUT -j KUBE-FIREWALL`)
	line(`-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`)
	line(`-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD`)
	line(`-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`)
	line(`-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES`)
	line(`-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`)
	line(`-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`)
	line(`-A OUTPUT -j KUBE-FIREWALL`)
	if !k.ipv6() {
		line(`-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`)
	}
	line(`-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP`)
	line(`-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT`)
	line(`-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`)
	for _, s := range k.Services {
		if len(s.Endpoints) > 0 {
			continue
		}
		line(`-A KUBE-SERVICES -d %s/%d -p %s -m comment --comment "%s has no endpoints" -m %s --dport %d -j REJECT --reject-with %s`,
			s.ClusterIP, hostLen(s.ClusterIP), s.Proto, s.id(), s.Proto, s.Port, reject)
		if s.NodePort != 0 {
			line(`-A KUBE-EXTERNAL-SERVICES -p %s -m comment --comment "%s has no endpoints" -m addrtype --dst-type LOCAL -m %s --dport %d -j REJECT --reject-with %s`,
				s.Proto, s.id(), s.Proto, s.NodePort, reject)
		}
	}
	line("COMMIT")

	line("*nat")
	for _, c := range []string{"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"} {
		line(":%s ACCEPT [0:0]", c)
	}
	var chains, rules []string
	chain := func(c string) { chains = append(chains, fmt.Sprintf(":%s - [0:0]", c)) }
	rule := func(f string, a ...any) { rules = append(rules, fmt.Sprintf(f, a...)) }
	for _, c := range []string{"KUBE-KUBELET-CANARY", "KUBE-MARK-MASQ", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-PROXY-CANARY", "KUBE-SERVICES"} {
		chain(c)
	}
	rule(`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`)
	rule(`-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`)
	rule(`-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING`)
	rule(`-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000`)
	rule(`-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN`)
	rule(`-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000`)
	rule(`-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`)
	var nodePorts []string
	for _, s := range k.Services {
		if len(s.Endpoints) == 0 {
			continue
		}
		proto := strings.ToLower(s.Proto)
		svc := kubeChain("KUBE-SVC-", s.id(), proto)
		chain(svc)
		rule(`-A KUBE-SERVICES -d %s/%d -p %s -m comment --comment "%s cluster IP" -m %s --dport %d -j %s`,
			s.ClusterIP, hostLen(s.ClusterIP), proto, s.id(), proto, s.Port, svc)
		rule(`-A %s ! -s %s -d %s/%d -p %s -m comment --comment "%s cluster IP" -m %s --dport %d -j KUBE-MARK-MASQ`,
			svc, k.ClusterCIDR, s.ClusterIP, hostLen(s.ClusterIP), proto, s.id(), proto, s.Port)
		if s.NodePort != 0 {
			ext := kubeChain("KUBE-EXT-", s.id(), proto)
			chain(ext)
			nodePorts = append(nodePorts, fmt.Sprintf(`-A KUBE-NODEPORTS -p %s -m comment --comment "%s" -m %s --dport %d -j %s`,
				proto, s.id(), proto, s.NodePort, ext))
			rule(`-A %s -m comment --comment "masquerade traffic for %s external destinations" -j KUBE-MARK-MASQ`, ext, s.id())
			rule(`-A %s -j %s`, ext, svc)
		}
		n := len(s.Endpoints)
		for i, ep := range s.Endpoints {
			sep := kubeChain("KUBE-SEP-", s.id(), proto, ep.String())
			chain(sep)
			stat := ""
			if i < n-1 {
				stat = fmt.Sprintf(" -m statistic --mode random --probability %.11f", 1/float64(n-i))
			}
			if s.Affinity {
				rule(`-A %s -m comment --comment "%s -> %s" -m recent --rcheck --seconds 10800 --reap --name %s --mask %s --rsource -j %s`,
					svc, s.id(), ep, sep, mask, sep)
			}
			rule(`-A %s -m comment --comment "%s -> %s"%s -j %s`, svc, s.id(), ep, stat, sep)
			rule(`-A %s -s %s/%d -m comment --comment "%s" -j KUBE-MARK-MASQ`, sep, ep.Addr(), hostLen(ep.Addr()), s.id())
			if s.Affinity {
				rule(`-A %s -p %s -m comment --comment "%s" -m recent --set --name %s --mask %s --rsource -m %s -j DNAT --to-destination %s`,
					sep, proto, s.id(), sep, mask, proto, ep)
			} else {
				rule(`-A %s -p %s -m comment --comment "%s" -m %s -j DNAT --to-destination %s`, sep, proto, s.id(), proto, ep)
			}
		}
	}
	rule(`-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`)
	rules = append(rules, nodePorts...)
	for _, l := range append(chains, rules...) {
		line("%s", l)
	}
	line("COMMIT")
	return b.String()
}

// Apply loads the rules into ns (creating the nfacct object they count with first), as
// kube-proxy's first sync does with iptables-restore --noflush. It is for a first load: the
// rules include the jumps from the built-in chains, which kube-proxy ensures separately (once),
// so applying again would append them again, and chains of services gone are not deleted (see
// e2e's kubeNode.sync for a re-sync as kube-proxy makes it).
//
// An IPv6 configuration (ClusterCIDR IPv6) goes to ip6tables-restore, as kube-proxy's IPv6
// proxier writes it on a dual-stack node.
func (k KubeProxy) Apply(ns *nsutil.NS) error {
	if err := AddNFAcct(ns, "ct_state_invalid_dropped_pkts"); err != nil {
		return err
	}
	restore := "iptables-restore"
	if k.ipv6() {
		restore = "ip6tables-restore"
	}
	return load(ns, restore, k.Rules(), restore, "-w", "--noflush")
}

// load runs a ruleset loader (argv: iptables-restore, nft -f -) in ns with rules as its input;
// what names it in the error.
func load(ns *nsutil.NS, what, rules string, argv ...string) error {
	return ns.Do(func() error {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", what, err, out)
		}
		return nil
	})
}

// AddNFAcct creates nfacct (extended accounting) objects in ns, which rules with `-m nfacct` need
// before they load. nfnetlink_acct is spoken here directly: the nfacct tool is not packaged
// everywhere, and the message is a name attribute.
func AddNFAcct(ns *nsutil.NS, names ...string) error {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(ns.Handle())})
	if err != nil {
		return fmt.Errorf("dial netfilter netlink: %w", err)
	}
	defer c.Close()
	const (
		nfnlSubsysAcct = 7
		msgAcctNew     = 0
		attrName       = 1
	)
	for _, name := range names {
		ae := netlink.NewAttributeEncoder()
		ae.String(attrName, name)
		attrs, err := ae.Encode()
		if err != nil {
			return err
		}
		_, err = c.Execute(netlink.Message{
			Header: netlink.Header{
				Type:  netlink.HeaderType(nfnlSubsysAcct<<8 | msgAcctNew),
				Flags: netlink.Request | netlink.Acknowledge | netlink.Create,
			},
			Data: append([]byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0}, attrs...),
		})
		if err != nil && !errors.Is(err, unix.EBUSY) { // EBUSY: it exists (nfnl_acct_new)
			return fmt.Errorf("nfacct add %s: %w", name, err)
		}
	}
	return nil
}
