package e2e

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// kube-proxy's nftables mode (table ip kube-proxy as kube-proxy 1.33 writes it:
// testbed.KubeProxy.NFTRules) on the kube node, with services whose endpoint is a local pod or a
// remote one, reached through their cluster IPs and NodePorts over TCP and UDP from the client
// and from a pod, a service without endpoints (rejected by reject-chain through the
// no-endpoint-services and no-endpoint-nodeports verdict maps), another port of a cluster IP
// (rejected by cluster-ips-check), an unallocated cluster IP (dropped) and a one-way UDP flow
// (its packets stay NEW, so every one of them meets the no-endpoint-services map in
// filter-forward). The same connections run with Linux alone and with linuxfp (XDP on in0 and
// out0), and end the same way: the same backend seeing the same client address, the same
// refusals and silences, every one-way datagram delivered. With linuxfp, every established
// packet of both directions (and the one-way flow's, after its first) is fast-pathed.
func TestKubeProxyNFTablesMode(t *testing.T) {
	requireTool(t, "nft")
	k := newKubeNodeNamed(t, "lfp-nm-kp-", "xdp", 2, 1)
	kubeNFTablesMode(t, k, false)
}

// The same on a dual-stack node over IPv6: kube-proxy's two proxiers' tables (ip and ip6
// kube-proxy) loaded, the IPv6 services at IPv6 cluster IPs DNAT'd to the pods' and node2's
// IPv6 addresses, the same connections, refusals, silences and one-way flow over IPv6, ending
// the same way with Linux alone and with linuxfp. With linuxfp the IPv6 flows' established
// packets are counted fast-pathed where they enter: translated by the conntrack module at the
// router, or, for a pod reaching another pod through its service (br_netfilter bridges the
// packets after the DNAT), translated at the bridge as br_netfilter translates them.
func TestKubeProxyNFTablesModeIPv6(t *testing.T) {
	requireTool(t, "nft")
	k := newKubeNodeDualStack(t, "lfp-nm-kp6-", "xdp", 2, 1)
	kubeNFTablesMode(t, k, true)
}

// kubeNFTablesMode runs the nftables-mode scenario on k over IPv4, or over IPv6 (v6; k
// dual-stack, with the IPv4 table loaded too as on such a node).
func kubeNFTablesMode(t *testing.T, k *kubeNode, v6 bool) {
	pod1, pod2 := k.Pods[0], k.Pods[1]
	ap := netip.AddrPortFrom
	serviceIP, pod1IP, remote, nodeIn := kubeServiceIP, pod1.IP, k.Remotes[0], kubeNodeInIP
	kp := testbed.KubeProxy{ClusterCIDR: kubeClusterNet, ServiceCIDR: netip.MustParsePrefix("198.18.128.0/17")}
	route := "ip route add 198.18.128.0/17 via 198.18.1.2"
	unallocated, nodeOut := netip.MustParseAddr("198.18.200.9"), kubeNodeOutIP
	if v6 {
		serviceIP, pod1IP, remote, nodeIn = kubeServiceIP6, pod1.IP6, k.Remotes6[0], kubeNodeInIP6
		kp = testbed.KubeProxy{ClusterCIDR: kubeClusterNet6, ServiceCIDR: kubeServiceNet6}
		route = "ip -6 route add " + kubeServiceNet6.String() + " via " + kubeNode2IP6.String()
		unallocated, nodeOut = kubeServiceIP6(200), kubeNodeOutIP6
	}
	localIP, remoteIP, goneIP, discardIP := serviceIP(1), serviceIP(2), serviceIP(3), serviceIP(4)
	kp.NodePortIPs = []netip.Addr{nodeIn}
	kp.Services = []testbed.KubeService{
		kubeSvc("local", "tcp", localIP, 80, 30001, ap(pod1IP, kubeTCPPort)),
		kubeSvc("local", "udp", localIP, 53, 30002, ap(pod1IP, kubeUDPPort)),
		kubeSvc("remote", "tcp", remoteIP, 80, 0, ap(remote, kubeTCPPort)),
		kubeSvc("remote", "udp", remoteIP, 53, 0, ap(remote, kubeUDPPort)),
		kubeSvc("gone", "tcp", goneIP, 80, 30009),
		kubeSvc("gone", "udp", goneIP, 53, 0),
		{Namespace: "default", Name: "discard", PortName: "discard", Proto: "udp", ClusterIP: discardIP, Port: 9,
			Endpoints: []netip.AddrPort{ap(pod1IP, 9)}},
	}
	// The service CIDR is routed through the node (as a default route would), so that packets
	// to cluster IPs without a DNAT reach the forward hook, where kube-proxy rejects or drops them.
	sh(t, k.Node, route)
	if v6 {
		// The IPv4 proxier's table beside the IPv6 one's, as kube-proxy keeps them.
		kp4 := testbed.KubeProxy{ClusterCIDR: kubeClusterNet, ServiceCIDR: netip.MustParsePrefix("198.18.128.0/17"),
			NodePortIPs: []netip.Addr{kubeNodeInIP}, Services: []testbed.KubeService{
				kubeSvc("local", "tcp", kubeServiceIP(1), 80, 30001, ap(pod1.IP, kubeTCPPort)),
				kubeSvc("local", "udp", kubeServiceIP(1), 53, 30002, ap(pod1.IP, kubeUDPPort))}}
		if err := kp4.ApplyNFT(k.Node); err != nil {
			t.Fatal(err)
		}
	}
	if err := kp.ApplyNFT(k.Node); err != nil {
		t.Fatal(err)
	}
	var sunk atomic.Uint64
	discardServer(t, pod1.NS, pod1IP, &sunk)

	run := func(l *testbed.Linuxfp) map[string]string {
		out := map[string]string{}
		type flow struct {
			c                  *svcConn
			in, back           string
			inLinux, backLinux string // as kubeFlow's
		}
		var flows []flow
		id := 0
		dial := func(ns *nsutil.NS, name, proto string, dst netip.AddrPort) (*svcConn, error) {
			id++
			return dialService(ns, name, proto, dst, 200+id)
		}
		for _, proto := range []string{"tcp", "udp"} {
			port, np := uint16(80), uint16(30001)
			if proto == "udp" {
				port, np = 53, 30002
			}
			for _, f := range []struct {
				ns                 *nsutil.NS
				name               string
				dst                netip.AddrPort
				in, back           string
				inLinux, backLinux string
			}{
				{k.Client, "client -> ClusterIP -> local pod", ap(localIP, port), "in0", pod1.HostVeth, "", ""},
				{k.Client, "client -> NodePort -> local pod", ap(nodeIn, np), "in0", pod1.HostVeth, "", ""},
				{k.Client, "client -> ClusterIP -> remote", ap(remoteIP, port), "in0", "out0", "", ""},
				{pod2.NS, "pod -> ClusterIP -> local pod", ap(localIP, port), pod2.HostVeth, pod1.HostVeth, "", ""},
			} {
				c, err := dial(f.ns, f.name, proto, f.dst)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.close)
				if _, _, err := c.roundTrip(1000, 5*time.Second); err != nil {
					t.Fatalf("%s: %v", c, err)
				}
				out[c.String()] = fmt.Sprintf("answered by %s, which saw %s", c.backend, c.peer.Addr())
				flows = append(flows, flow{c, f.in, f.back, f.inLinux, f.backLinux})
			}
		}
		// Refused and dropped, by Linux in either run (new connections are Linux's).
		for _, x := range []struct {
			proto string
			dst   netip.AddrPort
		}{
			{"tcp", ap(goneIP, 80)}, {"udp", ap(goneIP, 53)}, {"tcp", ap(nodeIn, 30009)},
			{"tcp", ap(localIP, 81)}, {"udp", ap(unallocated, 53)},
		} {
			c, err := dial(k.Client, "client -> "+x.dst.String(), x.proto, x.dst)
			key := fmt.Sprintf("client -> %s %s", x.proto, x.dst)
			if err != nil {
				out[key] = errKind(err)
				continue
			}
			_, _, err = c.roundTrip(100, time.Second)
			c.close()
			out[key] = "answered"
			if err != nil {
				out[key] = errKind(err)
			}
		}

		if l != nil {
			var conns []*svcConn
			for _, f := range flows {
				conns = append(conns, f.c)
			}
			k.waitFastPathReady(t, conns)
			// At XDP, packets for the pods' veths go to a tc program on in0 that linuxfp attaches
			// when the first of them arrives: until then they are Linux's (egress_not_ready).
			eventually(t, 5*time.Second, "in0's packets into the pods fast-pathed", func() error {
				s0 := kubeSnapshot(t, l)
				for _, f := range flows {
					if err := f.c.exchange(1, 1000); err != nil {
						t.Fatal(err)
					}
				}
				if d := kubeSnapshot(t, l).sub(s0)["in0"]; d.linux() > 0 {
					return fmt.Errorf("in0: %s", d)
				}
				return nil
			})
			kubeQuiet(t, l)
		}
		const n = 100
		for _, f := range flows {
			var s0 kubeSnap
			if l != nil {
				s0 = kubeSnapshot(t, l)
			}
			if err := f.c.exchange(n, 1000); err != nil {
				t.Fatal(err)
			}
			if l == nil {
				continue
			}
			s1 := kubeQuiet(t, l)
			if f.c.udp {
				s1 = kubeSnapshot(t, l)
			}
			d := s1.sub(s0)
			t.Logf("%s: requests at %s: %s; answers at %s: %s", f.c, f.in, d[f.in], f.back, d[f.back])
			checkEstablished(t, f.c, "requests", f.in, d[f.in], n, f.inLinux)
			checkEstablished(t, f.c, "answers", f.back, d[f.back], n, f.backLinux)
		}

		// One way: the entry stays unreplied, its packets NEW.
		const oneWay = 300
		c, err := dial(k.Client, "client -> one-way flow", "udp", ap(discardIP, 9))
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		var s0 kubeSnap
		if l != nil {
			s0 = kubeSnapshot(t, l)
		}
		before := sunk.Load()
		for i := range oneWay {
			if _, err := c.c.Write(make([]byte, 100)); err != nil {
				t.Fatal(err)
			}
			if i%20 == 0 {
				time.Sleep(time.Millisecond) // no burst beyond the socket buffers
			}
		}
		eventually(t, 3*time.Second, "one-way datagrams delivered", func() error {
			if got := sunk.Load() - before; got < oneWay {
				return fmt.Errorf("%d of %d", got, oneWay)
			}
			return nil
		})
		time.Sleep(100 * time.Millisecond)
		out["client -> one-way udp flow"] = fmt.Sprintf("%d datagrams delivered", sunk.Load()-before)
		if l != nil {
			d := kubeSnapshot(t, l).sub(s0)["in0"]
			t.Logf("one-way flow at in0: %s", d)
			// Its first datagram creates the entry (Linux's); a few more may meet it unconfirmed.
			if d.forwarded < oneWay-5 || d.linux() != d.passed["ct_new"] {
				t.Errorf("one-way flow: %d of %d datagrams forwarded by the fast path at in0, to Linux %v; want all but its first few (ct_new)",
					d.forwarded, oneWay, d.passed)
			}
		}
		for _, f := range flows {
			f.c.close()
		}
		return out
	}

	linux := run(nil)
	// The connections' FIN exchanges end before their entries go: an entry flushed mid-close
	// would have the ends retransmit into the next run's counters.
	time.Sleep(300 * time.Millisecond)
	k.flushConntrack(t)
	l := k.startLinuxfp(t)
	got := run(l)
	for _, key := range slices.Sorted(maps.Keys(linux)) {
		t.Logf("%s: %s", key, linux[key])
		if got[key] != linux[key] {
			t.Errorf("with linuxfp, %s: %s; with Linux alone: %s", key, got[key], linux[key])
		}
	}
	// What Linux does, so that the comparison compares something.
	for key, want := range map[string]string{
		fmt.Sprintf("client -> tcp %s", ap(goneIP, 80)):                         "refused",
		fmt.Sprintf("client -> udp %s", ap(goneIP, 53)):                         "refused",
		fmt.Sprintf("client -> tcp %s", ap(nodeIn, 30009)):                      "refused",
		fmt.Sprintf("client -> tcp %s", ap(localIP, 81)):                        "refused",
		fmt.Sprintf("client -> udp %s", ap(unallocated, 53)):                    "no answer",
		"client -> one-way udp flow":                                            "300 datagrams delivered",
		fmt.Sprintf("client -> ClusterIP -> remote (tcp %s)", ap(remoteIP, 80)): fmt.Sprintf("answered by %s, which saw %s", remote, nodeOut),
	} {
		if linux[key] != want {
			t.Errorf("Linux alone: %s: %s, want %s", key, linux[key], want)
		}
	}
}

// discardServer counts the datagrams ns's UDP port 9 at addr receives, until the test ends.
func discardServer(t *testing.T, ns *nsutil.NS, addr netip.Addr, n *atomic.Uint64) {
	t.Helper()
	var conn *net.UDPConn
	if err := ns.Do(func() (err error) {
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 9)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
}
