package testbed

import (
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

func TestServicesFor(t *testing.T) {
	pods := []netip.Addr{netip.MustParseAddr("198.19.1.2"), netip.MustParseAddr("198.19.1.3"),
		netip.MustParseAddr("198.19.1.4"), netip.MustParseAddr("198.19.1.5")}
	svcs, err := ServicesFor(1000, pods)
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2000 {
		t.Fatalf("%d service ports, want 2000", len(svcs))
	}
	ips := map[netip.Addr]bool{}
	eps := map[netip.AddrPort]bool{}
	for i, s := range svcs {
		if !ServicesCIDR.Contains(s.ClusterIP) || len(s.Endpoints) != EndpointsPerService {
			t.Fatalf("%+v", s)
		}
		ips[s.ClusterIP] = true
		podsOf := map[netip.Addr]bool{}
		for _, ep := range s.Endpoints {
			podsOf[ep.Addr()] = true
			if s.Proto == "tcp" {
				eps[ep] = true
				if ep.Port() != uint16(EndpointPortBase+i/2) {
					t.Errorf("%s: endpoint %s", s.id(), ep)
				}
			} else if ep.Port() != ServiceUDPPort {
				t.Errorf("%s: endpoint %s", s.id(), ep)
			}
		}
		if len(podsOf) != EndpointsPerService {
			t.Errorf("%s: endpoints %v not on different pods", s.id(), s.Endpoints)
		}
	}
	if len(ips) != 1000 || len(eps) != 3000 {
		t.Errorf("%d cluster IPs, %d TCP endpoints: want 1000 and 3000", len(ips), len(eps))
	}
	if svcs[0].Endpoints[0].Addr() == svcs[2].Endpoints[0].Addr() {
		t.Error("consecutive services start on the same pod")
	}
	if _, err := ServicesFor(1, pods[:2]); err == nil {
		t.Error("2 pods for 3 endpoints accepted")
	}
}

// The topology carries what the services benchmark sends: the client reaches a service's
// endpoints through its cluster IP (DNAT'd and masqueraded by kube-proxy's rules), a pod
// reaches the outside host masqueraded to the node; reloading the services leaves one set of
// kube-proxy's rules; Close leaves no namespace behind.
func TestServicesTopology(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("iptables-restore not installed")
	}
	s, err := NewServices("lfp-test-svc", ServicesOptions{Pods: 3})
	if err != nil {
		t.Fatal(err)
	}
	names := s.Namespaces()
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		out, _ := exec.Command("ip", "netns", "list").Output()
		for _, ns := range names {
			if strings.Contains(string(out), ns.Name) {
				t.Errorf("namespace %s left behind", ns.Name)
			}
		}
	}()
	if len(names) != 6 {
		t.Errorf("%d namespaces, want client, node, outside and 3 pods", len(names))
	}
	for _, n := range []int{1, 4} {
		if err := s.SetServices(n); err != nil {
			t.Fatal(err)
		}
	}
	save, err := s.Node.Run("iptables-save")
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(save, "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"); c != 1 {
		t.Errorf("%d jumps from PREROUTING to KUBE-SERVICES after two syncs, want 1", c)
	}
	if c := strings.Count(save, "-j DNAT"); c != 4*2*EndpointsPerService {
		t.Errorf("%d DNAT rules, want %d", c, 4*2*EndpointsPerService)
	}
	if !strings.Contains(save, "FLANNEL-POSTRTG") {
		t.Error("Flannel's rules are missing")
	}
	if err := s.ResolveNeighbours(); err != nil {
		t.Fatal(err)
	}

	// Service 3's TCP endpoints: each accepts and reports the peer address.
	seen := make(chan string, 16)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, ks := range s.Kube.Services {
		if ks.Name != "svc-3" || ks.Proto != "tcp" {
			continue
		}
		for _, ep := range ks.Endpoints {
			pod := s.podAt(ep.Addr())
			if pod == nil {
				t.Fatalf("no pod has endpoint %s", ep)
			}
			ln := listenIn(t, pod.NS, ep)
			lns = append(lns, ln)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
					c.Close()
				}
			}()
		}
	}
	for range 3 {
		dial(t, s.Client, netip.AddrPortFrom(ServiceIP(3), ServiceTCPPort))
		select {
		case from := <-seen:
			if from != s.Gateway.String() {
				t.Errorf("an endpoint saw the client as %s, want it masqueraded to cni0's %s", from, s.Gateway)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no endpoint saw the connection")
		}
	}

	// A pod reaches the outside host as the node.
	out := netip.AddrPortFrom(ServicesOutsideIP, 8080)
	ln := listenIn(t, s.Outside, out)
	lns = append(lns, ln)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		c.Close()
	}()
	dial(t, s.Pods[0].NS, out)
	select {
	case from := <-seen:
		if from != ServicesNodeOutIP.String() {
			t.Errorf("the outside host saw the pod as %s, want it masqueraded to %s", from, ServicesNodeOutIP)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the outside host saw no connection")
	}
}

// A dual-stack node carries the same services over IPv6, in either of kube-proxy's modes: its
// IPv6 rules (one set after two syncs: ip6tables, or the table ip6 kube-proxy), the client
// reaching an endpoint's IPv6 address through the IPv6 cluster IP, masqueraded to cni0's IPv6
// address.
func TestServicesTopologyIPv6(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, mode := range []ProxyMode{ProxyIPTables, ProxyNFTables} {
		t.Run(string(mode), func(t *testing.T) { servicesTopologyIPv6(t, mode) })
	}
}

func servicesTopologyIPv6(t *testing.T, mode ProxyMode) {
	tool := map[ProxyMode]string{ProxyIPTables: "ip6tables-restore", ProxyNFTables: "nft"}[mode]
	if _, err := exec.LookPath(tool); err != nil {
		t.Skip(tool + " not installed")
	}
	s, err := NewServices("lfp-test-svc6", ServicesOptions{Pods: 3, IPv6: true, ProxyMode: mode})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	for _, n := range []int{1, 2} {
		if err := s.SetServices(n); err != nil {
			t.Fatal(err)
		}
	}
	list, dnat, jump := []string{"ip6tables-save"}, "-j DNAT", "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
	if mode == ProxyNFTables {
		list, dnat, jump = []string{"nft", "list", "table", "ip6", "kube-proxy"}, "dnat to [2001:2:0:101::", "jump services"
	}
	save, err := s.Node.Run(list...)
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(save, dnat); c != 2*2*EndpointsPerService {
		t.Errorf("%d IPv6 DNAT rules, want %d:\n%s", c, 2*2*EndpointsPerService, save)
	}
	// nftables: nat-prerouting's and nat-output's.
	if c, want := strings.Count(save, jump), map[ProxyMode]int{ProxyIPTables: 1, ProxyNFTables: 2}[mode]; c != want {
		t.Errorf("%d jumps to kube-proxy's services chain after two syncs, want %d", c, want)
	}
	if err := s.ResolveNeighbours(); err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 4)
	for _, ks := range s.Kube6.Services {
		if ks.Name != "svc-1" || ks.Proto != "tcp" {
			continue
		}
		if ks.ClusterIP != ServiceIP6(1) {
			t.Errorf("svc-1's IPv6 cluster IP %s, want %s", ks.ClusterIP, ServiceIP6(1))
		}
		for _, ep := range ks.Endpoints {
			var pod *Pod
			for _, p := range s.Pods {
				if PodIP6(p.IP) == ep.Addr() {
					pod = p
				}
			}
			if pod == nil {
				t.Fatalf("no pod has endpoint %s", ep)
			}
			ln := listenIn(t, pod.NS, ep)
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
					c.Close()
				}
			}()
		}
	}
	dial(t, s.Client, netip.AddrPortFrom(ServiceIP6(1), ServiceTCPPort))
	select {
	case from := <-seen:
		if gw := ServicesPodSubnet6.Addr().Next(); from != gw.String() {
			t.Errorf("an endpoint saw the client as %s, want it masqueraded to cni0's %s", from, gw)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no endpoint saw the connection")
	}
}

func (s *Services) podAt(ip netip.Addr) *Pod {
	for _, p := range s.Pods {
		if p.IP == ip {
			return p
		}
	}
	return nil
}

func listenIn(t *testing.T, ns *nsutil.NS, a netip.AddrPort) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", a.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ln
}

func dial(t *testing.T, ns *nsutil.NS, a netip.AddrPort) {
	t.Helper()
	if err := ns.Do(func() error {
		c, err := net.DialTimeout("tcp", a.String(), 5*time.Second)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, c) // until the endpoint closes
		return c.Close()
	}); err != nil {
		t.Fatalf("connect to %s from %s: %v", a, ns.Name, err)
	}
}

// PodGRO gives the pods' eth0 GRO (NAPI), which the CNI plugin leaves off.
func TestServicesPodGRO(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, on := range []bool{false, true} {
		s, err := NewServices("lfp-test-svc", ServicesOptions{Pods: 3, PodGRO: on})
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.Pods[2].NS.Run("ethtool", "-k", "eth0")
		if cerr := s.Close(); cerr != nil {
			t.Error(cerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := "generic-receive-offload: off"
		if on {
			want = "generic-receive-offload: on"
		}
		if !strings.Contains(out, want) {
			t.Errorf("PodGRO %v: the pod's eth0 lacks %q:\n%s", on, want, out)
		}
	}
}
