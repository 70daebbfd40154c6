package testbed

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// The services topology is one Kubernetes node that runs kube-proxy (iptables or nftables mode,
// ServicesOptions.ProxyMode) in front of
// its pods, a client outside the cluster that reaches the services' cluster IPs through the node
// (as where the service CIDR is routed to the nodes), and a host outside the cluster that the
// pods reach through the node (masqueraded):
//
//	client eth0 198.18.0.2/24 <-> in0 198.18.0.1/24 [node] out0 198.18.2.1/24 <-> eth0 198.18.2.2/24 outside
//	                                   cni0 198.19.1.1/24
//	                   vethXXXXXXXX --veth-- eth0 198.19.1.k  pod k (k = 2 .. Pods+1)
//
// The pods are plugged in with the commands of the CNI bridge plugin as Flannel configures it
// (Pods.AddPod: cni0, MTU 1450, hairpin, host-local addresses, routes via cni0), and the node has
// Flannel's iptables rules (FLANNEL-POSTRTG: pods' traffic leaving the cluster CIDR is
// masqueraded with --random-fully; FLANNEL-FWD) and kube-proxy's (SetServices: KubeProxy.Apply).
// Endpoints are spread over a handful of pods, told apart by their ports (see ServicesFor), so
// 1,000 services need no 3,000 namespaces.
//
// With ServicesOptions.IPv6 the node is dual-stack, as kube-proxy runs on dual-stack clusters:
// the client 2001:2::2/64 on in0's 2001:2::1/64, cni0 2001:2:0:101::1/64 and pod k 2001:2:0:101::k,
// and SetServices also loads kube-proxy's IPv6 rules (ip6tables, or in nftables mode its table
// ip6 kube-proxy) for the same services at IPv6 cluster IPs (ServiceIP6). The outside host stays
// IPv4 only.
//
// The client and the outside host stand for hosts behind physical NICs: their stacks compute
// checksums themselves (tx checksum offload off), and their eth0 has GRO on so that frames may be
// redirected into it at XDP (a veth needs NAPI to receive them, see KERNEL-NOTES). The node's in0
// and out0 have GRO on for the same reason (the benchmark's XDP generator sends into them). The
// pods' veths are left as the CNI plugin leaves them (unless ServicesOptions.PodGRO).

// Addresses of the services topology.
var (
	ServicesClientIP  = netip.MustParseAddr("198.18.0.2")
	ServicesNodeInIP  = netip.MustParseAddr("198.18.0.1")
	ServicesNodeOutIP = netip.MustParseAddr("198.18.2.1")
	ServicesOutsideIP = netip.MustParseAddr("198.18.2.2")
	// ServicesCIDR holds the services' cluster IPs (kube-apiserver's --service-cluster-ip-range).
	ServicesCIDR = netip.MustParsePrefix("198.18.128.0/17")

	// The dual-stack node's IPv6 addresses (ServicesOptions.IPv6).
	ServicesClientIP6 = netip.MustParseAddr("2001:2::2")
	ServicesNodeInIP6 = netip.MustParseAddr("2001:2::1")
	// ServicesCIDR6 holds the IPv6 cluster IPs; ServicesPodCIDR6 is the IPv6 cluster CIDR, of
	// which the node's pod subnet is ServicesPodSubnet6.
	ServicesCIDR6      = netip.MustParsePrefix("2001:2:0:80::/112")
	ServicesPodCIDR6   = netip.MustParsePrefix("2001:2:0:100::/56")
	ServicesPodSubnet6 = netip.MustParsePrefix("2001:2:0:101::/64")
)

// Ports of the services ServicesFor makes: every service has a TCP port and a UDP port (as
// kube-dns has "dns" and "dns-tcp"). The UDP port and its target are 9 (discard), where the
// benchmark's XDP generator sends and its sink counts.
const (
	ServiceTCPPort      = 80
	ServiceUDPPort      = 9
	EndpointPortBase    = 10000 // service i's TCP endpoints listen on EndpointPortBase + i
	EndpointsPerService = 3
	// MaxServices bounds ServicesFor: the cluster IPs and endpoint ports must not run out.
	MaxServices = 10000
)

// ServicesOptions shape the services topology.
type ServicesOptions struct {
	// Pods holding the services' endpoints (default 6; at least EndpointsPerService).
	Pods int
	// PodGRO turns GRO on in the pods' eth0, which the CNI plugin leaves off: with NAPI there,
	// XDP programs in the node may redirect frames into the pods' veths (see KERNEL-NOTES).
	PodGRO bool
	// ProxyMode: kube-proxy's iptables mode (the default) or its nftables mode.
	ProxyMode ProxyMode
	// IPv6: a dual-stack node (see above).
	IPv6 bool
}

// Services is the node, its pods, the client and the outside host.
type Services struct {
	Client, Node, Outside *nsutil.NS
	// Pods are the pods on the node (cni0's ports), in the order they were added.
	Pods []*Pod
	// Subnet is the node's pod subnet, Gateway cni0's address in it.
	Subnet  netip.Prefix
	Gateway netip.Addr
	// Kube is the kube-proxy configuration SetServices loaded last, in ProxyMode; Kube6 its IPv6
	// one (IPv6 only).
	Kube, Kube6 KubeProxy
	ProxyMode   ProxyMode
	IPv6        bool

	// MACs and ifindexes (each in its own namespace) for the benchmark's generator and sinks.
	ClientMAC, InMAC, OutMAC, OutsideMAC, BridgeMAC net.HardwareAddr
	ClientIfindex, OutsideIfindex                   int

	pods *Pods
}

// ServiceIP is service i's cluster IP (198.18.128.1 onwards).
func ServiceIP(i int) netip.Addr {
	n := 128<<8 + i + 1
	return netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)})
}

// ServiceIP6 is service i's IPv6 cluster IP (2001:2:0:80::1 onwards).
func ServiceIP6(i int) netip.Addr {
	b := ServicesCIDR6.Addr().As16()
	n := i + 1
	b[14], b[15] = byte(n>>8), byte(n)
	return netip.AddrFrom16(b)
}

// PodIP6 is the IPv6 address of the pod whose IPv4 address is ip (the same host number in
// ServicesPodSubnet6).
func PodIP6(ip netip.Addr) netip.Addr {
	b := ServicesPodSubnet6.Addr().As16()
	b[15] = ip.As4()[3]
	return netip.AddrFrom16(b)
}

// ServicesFor6 is ServicesFor at IPv6 cluster IPs (ServiceIP6) and the pods' IPv6 addresses
// (PodIP6): the same services, endpoints and ports.
func ServicesFor6(n int, podIPs []netip.Addr) ([]KubeService, error) {
	svcs, err := ServicesFor(n, podIPs)
	if err != nil {
		return nil, err
	}
	for i := range svcs {
		svcs[i].ClusterIP = ServiceIP6(i / 2) // a TCP and a UDP port per service
		eps := make([]netip.AddrPort, len(svcs[i].Endpoints))
		for j, ep := range svcs[i].Endpoints {
			eps[j] = netip.AddrPortFrom(PodIP6(ep.Addr()), ep.Port())
		}
		svcs[i].Endpoints = eps
	}
	return svcs, nil
}

// ServicesFor makes n services with EndpointsPerService endpoints each, spread over the pods at
// podIPs: service i is default/svc-i with cluster IP ServiceIP(i), port "http" (TCP 80 -> the
// endpoints' EndpointPortBase+i: every TCP endpoint is an address and port of its own) and port
// "discard" (UDP 9 -> 9). Its endpoints are the pods 3i, 3i+1, 3i+2 modulo len(podIPs), so
// consecutive services use different pods.
func ServicesFor(n int, podIPs []netip.Addr) ([]KubeService, error) {
	if n < 0 || n > MaxServices {
		return nil, fmt.Errorf("%d services: want 0 to %d", n, MaxServices)
	}
	if len(podIPs) < EndpointsPerService {
		return nil, fmt.Errorf("%d pods: want at least %d (the endpoints of a service are on different pods)", len(podIPs), EndpointsPerService)
	}
	var out []KubeService
	for i := range n {
		var tcp, udp []netip.AddrPort
		for j := range EndpointsPerService {
			ip := podIPs[(EndpointsPerService*i+j)%len(podIPs)]
			tcp = append(tcp, netip.AddrPortFrom(ip, uint16(EndpointPortBase+i)))
			udp = append(udp, netip.AddrPortFrom(ip, ServiceUDPPort))
		}
		name := fmt.Sprintf("svc-%d", i)
		out = append(out,
			KubeService{Namespace: "default", Name: name, PortName: "http", Proto: "tcp", ClusterIP: ServiceIP(i), Port: ServiceTCPPort, Endpoints: tcp},
			KubeService{Namespace: "default", Name: name, PortName: "discard", Proto: "udp", ClusterIP: ServiceIP(i), Port: ServiceUDPPort, Endpoints: udp})
	}
	return out, nil
}

// NewServices builds the topology with no services yet (see SetServices). Names start with prefix
// (use "lfp-..."); Close removes everything, and NewServices removes what it built when it fails.
func NewServices(prefix string, o ServicesOptions) (_ *Services, err error) {
	if o.Pods == 0 {
		o.Pods = 6
	}
	if o.Pods < EndpointsPerService || o.Pods > 250 {
		return nil, fmt.Errorf("%d pods: want %d to 250", o.Pods, EndpointsPerService)
	}
	mode, err := ParseProxyMode(string(o.ProxyMode))
	if err != nil {
		return nil, err
	}
	s := &Services{Subnet: PodSubnet(1), ProxyMode: mode, IPv6: o.IPv6}
	s.Gateway = s.Subnet.Addr().Next()
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.Client, err = nsutil.New(prefix + "-client"); err != nil {
		return nil, err
	}
	if s.Outside, err = nsutil.New(prefix + "-outside"); err != nil {
		return nil, err
	}
	node, err := nsutil.New(prefix + "-node")
	if err != nil {
		return nil, err
	}
	s.Node = node
	s.pods = &Pods{}
	s.pods.Nodes[0] = &PodNode{NS: node, Index: 1, IP: ServicesNodeInIP, Subnet: s.Subnet, Gateway: s.Gateway, prefix: prefix, next: 2}

	if _, err := s.Client.Run("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "in0", "netns", node.Name); err != nil {
		return nil, err
	}
	if _, err := s.Outside.Run("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "out0", "netns", node.Name); err != nil {
		return nil, err
	}
	// Kubernetes requires forwarding and bridged traffic through iptables on a node.
	err = node.BatchScript(`
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.bridge.bridge-nf-call-iptables=1
ip addr add 198.18.0.1/24 dev in0
ip addr add 198.18.2.1/24 dev out0
ip link set in0 up
ip link set out0 up
ethtool -K in0 gro on
ethtool -K out0 gro on
`)
	if err != nil {
		return nil, err
	}
	hosts := []struct {
		ns   *nsutil.NS
		addr string
		gw   string
	}{
		{s.Client, "198.18.0.2/24", "198.18.0.1"},
		// No route back to the pods: their packets reach it masqueraded to the node's out0.
		{s.Outside, "198.18.2.2/24", ""},
	}
	for i, h := range hosts {
		v6 := "sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1"
		if o.IPv6 && i == 0 { // the client
			v6 = fmt.Sprintf("ip -6 addr add %s/64 dev eth0 nodad\nsysctl -qw net.ipv6.conf.eth0.router_solicitations=0", ServicesClientIP6)
		}
		script := fmt.Sprintf(`
%s
ip addr add %s dev eth0
ip link set eth0 up
ethtool -K eth0 tx off
ethtool -K eth0 gro on
`, v6, h.addr)
		if h.gw != "" {
			script += "ip route add default via " + h.gw + "\n"
			if o.IPv6 {
				script += "ip -6 route add default via " + ServicesNodeInIP6.String() + "\n"
			}
		}
		if err := h.ns.BatchScript(script); err != nil {
			return nil, err
		}
	}
	// Flannel's chains and rules (masquerading what leaves the cluster CIDR), as in the pods
	// topology.
	if err := s.loadFlannel(); err != nil {
		return nil, err
	}
	for range o.Pods {
		pod, err := s.pods.AddPod(1)
		if err != nil {
			return nil, err
		}
		s.Pods = append(s.Pods, pod)
		if o.IPv6 {
			if err := s.addPodIP6(pod); err != nil {
				return nil, err
			}
		}
		if o.PodGRO {
			if _, err := pod.NS.Run("ethtool", "-K", "eth0", "gro", "on"); err != nil {
				return nil, err
			}
		}
	}
	for _, l := range []struct {
		ns   *nsutil.NS
		name string
		mac  *net.HardwareAddr
		idx  *int
	}{
		{s.Client, "eth0", &s.ClientMAC, &s.ClientIfindex}, {s.Outside, "eth0", &s.OutsideMAC, &s.OutsideIfindex},
		{node, "in0", &s.InMAC, nil}, {node, "out0", &s.OutMAC, nil}, {node, "cni0", &s.BridgeMAC, nil},
	} {
		mac, idx, err := LinkOf(l.ns, l.name)
		if err != nil {
			return nil, err
		}
		*l.mac = mac
		if l.idx != nil {
			*l.idx = idx
		}
	}
	return s, nil
}

// dualStack gives the node its IPv6 side: forwarding, in0's and cni0's addresses (cni0 exists
// once the first pod is plugged in: see addPodIP6).
func (s *Services) dualStack() error {
	return s.Node.Script(fmt.Sprintf(`
sysctl -qw net.ipv6.conf.all.forwarding=1
ip -6 addr add %s/64 dev in0 nodad
ip -6 addr add %s/%d dev cni0 nodad
`, ServicesNodeInIP6, ServicesPodSubnet6.Addr().Next(), ServicesPodSubnet6.Bits()))
}

// addPodIP6 gives pod its IPv6 address and default route (as a dual-stack CNI configuration's
// host-local ranges would), after the node's IPv6 side if it is the first pod.
func (s *Services) addPodIP6(pod *Pod) error {
	if len(s.Pods) == 1 {
		if err := s.dualStack(); err != nil {
			return err
		}
	}
	return pod.NS.Script(fmt.Sprintf(`
ip -6 addr add %s/%d dev eth0 nodad
ip -6 route add default via %s
`, PodIP6(pod.IP), ServicesPodSubnet6.Bits(), ServicesPodSubnet6.Addr().Next()))
}

// PodIPs6 lists the pods' IPv6 addresses, in the order of Pods (IPv6 only).
func (s *Services) PodIPs6() []netip.Addr {
	var out []netip.Addr
	for _, p := range s.Pods {
		out = append(out, PodIP6(p.IP))
	}
	return out
}

// LinkOf is the MAC address and ifindex of the device name in ns.
func LinkOf(ns *nsutil.NS, name string) (net.HardwareAddr, int, error) {
	var mac net.HardwareAddr
	var idx int
	err := ns.Do(func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", name, ns.Name, err)
		}
		mac, idx = l.Attrs().HardwareAddr, l.Attrs().Index
		return nil
	})
	return mac, idx, err
}

func (s *Services) loadFlannel() error {
	if err := s.Node.Script(flannelIptablesChains); err != nil {
		return err
	}
	for _, table := range flannelIptables(s.Subnet) {
		if err := iptablesRestore(s.Node, table); err != nil {
			return err
		}
	}
	return nil
}

// PodIPs lists the pods' addresses, in the order of Pods.
func (s *Services) PodIPs() []netip.Addr {
	var out []netip.Addr
	for _, p := range s.Pods {
		out = append(out, p.IP)
	}
	return out
}

// SetServices gives the node n services (ServicesFor over its pods) as kube-proxy would have them
// after a full sync: the node's iptables (and kube-proxy's nftables table) are emptied, then
// kube-proxy's rules in the topology's ProxyMode (KubeProxy.Apply or ApplyNFT; cluster CIDR
// 198.19.0.0/16: a client outside it is masqueraded to the node; nftables mode: NodePorts on
// in0's address, the service CIDR's unallocated addresses dropped) and Flannel's are loaded; on
// a dual-stack node kube-proxy's IPv6 rules too, in the same mode (Kube6).
// Starting from empty tables keeps the ruleset exactly kube-proxy's for n services (applying
// its iptables payload again would append the jumps from the built-in chains once more).
func (s *Services) SetServices(n int) error {
	svcs, err := ServicesFor(n, s.PodIPs())
	if err != nil {
		return err
	}
	k := KubeProxy{ClusterCIDR: PodsClusterCIDR, Services: svcs,
		ServiceCIDR: ServicesCIDR, NodePortIPs: []netip.Addr{ServicesNodeInIP}}
	restores := []string{"iptables-restore"}
	if s.IPv6 {
		restores = append(restores, "ip6tables-restore")
	}
	for _, restore := range restores {
		if err := s.Node.Do(func() error {
			cmd := exec.Command(restore, "-w")
			cmd.Stdin = strings.NewReader("*mangle\nCOMMIT\n*nat\nCOMMIT\n*filter\nCOMMIT\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("empty the node's tables (%s): %v: %s", restore, err, out)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if err := DeleteNFT(s.Node); err != nil {
		return err
	}
	apply := k.Apply
	if s.ProxyMode == ProxyNFTables {
		apply = k.ApplyNFT
	}
	if err := apply(s.Node); err != nil {
		return fmt.Errorf("load kube-proxy's rules (%s mode) for %d services: %w", s.ProxyMode, n, err)
	}
	if err := s.loadFlannel(); err != nil {
		return err
	}
	s.Kube = k
	if s.IPv6 {
		svcs6, err := ServicesFor6(n, s.PodIPs())
		if err != nil {
			return err
		}
		k6 := KubeProxy{ClusterCIDR: ServicesPodCIDR6, Services: svcs6, ServiceCIDR: ServicesCIDR6,
			NodePortIPs: []netip.Addr{ServicesNodeInIP6}}
		apply6 := k6.Apply
		if s.ProxyMode == ProxyNFTables {
			apply6 = k6.ApplyNFT
		}
		if err := apply6(s.Node); err != nil {
			return fmt.Errorf("load kube-proxy's IPv6 rules (%s mode) for %d services: %w", s.ProxyMode, n, err)
		}
		s.Kube6 = k6
	}
	return nil
}

// ResolveNeighbours makes the hosts resolve each other the ordinary way (by pinging): the node
// its client, the outside host and every pod; each of them the node (over IPv6 too on a
// dual-stack node, but for the outside host).
func (s *Services) ResolveNeighbours() error {
	type hop struct {
		from *nsutil.NS
		to   netip.Addr
	}
	hops := []hop{
		{s.Node, ServicesClientIP}, {s.Node, ServicesOutsideIP},
		{s.Client, ServicesNodeInIP}, {s.Outside, ServicesNodeOutIP},
	}
	for _, pod := range s.Pods {
		hops = append(hops, hop{s.Node, pod.IP}, hop{pod.NS, s.Gateway})
	}
	if s.IPv6 {
		hops = append(hops, hop{s.Node, ServicesClientIP6}, hop{s.Client, ServicesNodeInIP6})
		for _, pod := range s.Pods {
			hops = append(hops, hop{s.Node, PodIP6(pod.IP)}, hop{pod.NS, ServicesPodSubnet6.Addr().Next()})
		}
	}
	for _, h := range hops {
		if _, err := h.from.Run("ping", "-c", "1", "-W", "2", h.to.String()); err != nil {
			return err
		}
	}
	return nil
}

// Namespaces lists every namespace of the topology.
func (s *Services) Namespaces() []*nsutil.NS {
	var out []*nsutil.NS
	for _, ns := range []*nsutil.NS{s.Client, s.Node, s.Outside} {
		if ns != nil {
			out = append(out, ns)
		}
	}
	for _, p := range s.Pods {
		out = append(out, p.NS)
	}
	return out
}

// Close removes every namespace (and with them every device and rule).
func (s *Services) Close() error {
	var errs []error
	if s.pods != nil {
		errs = append(errs, s.pods.Close()) // the pods, then the node
	} else if s.Node != nil {
		errs = append(errs, s.Node.Close())
	}
	for _, ns := range []*nsutil.NS{s.Client, s.Outside} {
		if ns != nil {
			errs = append(errs, ns.Close())
		}
	}
	s.pods, s.Pods = nil, nil
	return errors.Join(errs...)
}
