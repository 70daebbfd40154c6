package e2e

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// kubeSvc is one service port of the tests.
func kubeSvc(name, proto string, clusterIP netip.Addr, port, nodePort uint16, eps ...netip.AddrPort) testbed.KubeService {
	pn := "http"
	if proto == "udp" {
		pn = "dns"
	}
	return testbed.KubeService{Namespace: "default", Name: name, PortName: pn, Proto: proto, ClusterIP: clusterIP,
		Port: port, NodePort: nodePort, Endpoints: eps}
}

// kubeFlow is one client's connection to a service in TestKubeProxyServices and where its
// packets enter the node.
type kubeFlow struct {
	c *svcConn
	// the backend it must reach and the client address that backend must see (after NAT)
	backend netip.Addr
	peer    netip.Addr
	// in: the interface the requests enter the node by; back: the answers'.
	in, back string
	// inLinux, backLinux: "" where the fast path must forward every established packet, else
	// the one reason for which all go to Linux.
	inLinux, backLinux string
	// ttl: the TTL a datagram must reach the backend with (UDP).
	ttl byte
}

// kube-proxy's rules for services with a local pod as endpoint and with a remote one, reached
// through their cluster IPs and NodePorts, over TCP and UDP, from a client outside the cluster
// and from pods on the node. Every connection reaches the right backend, which sees the
// address kube-proxy's MASQUERADE gives it (or the pod's own, for pod-to-service traffic), and
// the answers come back un-NATed (the client's connected sockets take nothing else). Linux
// decides each connection (its first packet: DNAT, the MASQUERADE mark); once the conntrack entry
// is one the fast path takes (TCP: marked liberal; UDP: ASSURED), every packet of both
// directions is forwarded by the fast path, translated as the entry says, and none goes to Linux.
//
// The exceptions, checked as such (every established packet to Linux, for that one reason):
//   - at XDP, a packet from in0 or out0 into a pod's veth cannot be redirected (the pod's eth0
//     has neither GRO nor an XDP program, so the veth would drop the frame; see KERNEL-NOTES):
//     the client's requests to local pods and remote backends' answers to pods go to Linux as
//     egress_not_ready, while the pods' own packets, entering at their veths' tc hook, are
//     fast-pathed;
//   - a pod reaching a pod on its own bridge through a cluster IP (itself included): Linux
//     bridges these DNAT'd packets rather than routing them (see below), and the fast path
//     takes neither direction (hairpin, ct_nat).
//
// Datagrams reach the backend with the TTL Linux gives them: one less when routed, unchanged
// when br_netfilter bridges them.
func TestKubeProxyServices(t *testing.T) {
	for _, hook := range []string{"xdp", "tc"} {
		t.Run(hook, func(t *testing.T) {
			k := newKubeNode(t, hook, 2, 1)
			pod1, pod2 := k.Pods[0], k.Pods[1]
			remote := k.Remotes[0]
			localIP, remoteIP := kubeServiceIP(1), kubeServiceIP(2)
			k.sync(t, testbed.KubeProxy{ClusterCIDR: kubeClusterNet, Services: []testbed.KubeService{
				kubeSvc("local", "tcp", localIP, 80, 30001, netip.AddrPortFrom(pod1.IP, kubeTCPPort)),
				kubeSvc("local", "udp", localIP, 53, 30002, netip.AddrPortFrom(pod1.IP, kubeUDPPort)),
				kubeSvc("remote", "tcp", remoteIP, 80, 30003, netip.AddrPortFrom(remote, kubeTCPPort)),
				kubeSvc("remote", "udp", remoteIP, 53, 30004, netip.AddrPortFrom(remote, kubeUDPPort)),
			}})
			l := k.startLinuxfp(t)

			ap := netip.AddrPortFrom
			// At XDP, nothing can be redirected into a pod's veth.
			toPod := ""
			if hook == "xdp" {
				toPod = "egress_not_ready"
			}
			var flows []*kubeFlow
			add := func(ns *nsutil.NS, name, proto string, dst netip.AddrPort, f kubeFlow) {
				c, err := dialService(ns, name, proto, dst, 100+len(flows))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.close)
				f.c = c
				flows = append(flows, &f)
			}
			before := kubeSnapshot(t, l)
			for _, proto := range []string{"tcp", "udp"} {
				port, np := uint16(80), uint16(30001)
				if proto == "udp" {
					port, np = 53, 30002
				}
				// From outside the cluster: masqueraded (KUBE-SVC's `! -s <cluster CIDR>` and
				// KUBE-EXT's KUBE-MARK-MASQ), to cni0's address towards a local pod, out0's
				// towards the other node.
				add(k.Client, "client -> ClusterIP -> local pod", proto, ap(localIP, port),
					kubeFlow{backend: pod1.IP, peer: kubeGatewayIP, in: "in0", back: pod1.HostVeth, inLinux: toPod, ttl: 63})
				add(k.Client, "client -> NodePort -> local pod", proto, ap(kubeNodeInIP, np),
					kubeFlow{backend: pod1.IP, peer: kubeGatewayIP, in: "in0", back: pod1.HostVeth, inLinux: toPod, ttl: 63})
				add(k.Client, "client -> ClusterIP -> remote", proto, ap(remoteIP, port),
					kubeFlow{backend: remote, peer: kubeNodeOutIP, in: "in0", back: "out0", ttl: 63})
				add(k.Client, "client -> NodePort -> remote", proto, ap(kubeNodeInIP, np+2),
					kubeFlow{backend: remote, peer: kubeNodeOutIP, in: "in0", back: "out0", ttl: 63})
				// From a pod: not masqueraded, but for a pod reaching itself through its service
				// (KUBE-SEP's `-s <endpoint>` rule). A pod's packets to a pod on the same bridge
				// through a cluster IP are not routed by Linux: br_netfilter sees the DNAT to an
				// address behind the bridge they came from and bridges them there (TTL unchanged,
				// no IP forwarding: br_nf_pre_routing_finish_bridge); the fast path, which would
				// route them back out of cni0, hands them to Linux (hairpin). The answers go from
				// pod to pod on the bridge, and the fast path does not translate bridged packets
				// (ct_nat).
				add(pod2.NS, "pod -> ClusterIP -> local pod", proto, ap(localIP, port),
					kubeFlow{backend: pod1.IP, peer: pod2.IP, in: pod2.HostVeth, back: pod1.HostVeth, inLinux: "hairpin", backLinux: "ct_nat", ttl: 64})
				add(pod2.NS, "pod -> ClusterIP -> remote", proto, ap(remoteIP, port),
					kubeFlow{backend: remote, peer: pod2.IP, in: pod2.HostVeth, back: "out0", backLinux: toPod, ttl: 63})
				add(pod1.NS, "pod -> ClusterIP -> itself", proto, ap(localIP, port),
					kubeFlow{backend: pod1.IP, peer: kubeGatewayIP, in: pod1.HostVeth, back: pod1.HostVeth, inLinux: "hairpin", backLinux: "hairpin", ttl: 64})
			}

			// Exchange until every entry is one the fast path takes: a UDP flow is ASSURED once
			// it has answers 2 s after its first datagram.
			eventually(t, 6*time.Second, "every connection's conntrack entry ready for the fast path", func() error {
				var errs []string
				for _, f := range flows {
					if err := f.c.exchange(1, 1000); err != nil {
						t.Fatal(err)
					}
					if err := k.fastPathReady(f.c); err != nil {
						errs = append(errs, err.Error())
					}
				}
				if len(errs) > 0 {
					return fmt.Errorf("%s", strings.Join(errs, "; "))
				}
				return nil
			})
			for _, f := range flows {
				if f.c.backend != f.backend || f.c.peer.Addr() != f.peer {
					t.Errorf("%s: answered by %s, which saw the client as %s; want %s seeing %s", f.c, f.c.backend, f.c.peer, f.backend, f.peer)
				}
			}
			// Linux decided each connection: its first packet entered with no entry.
			warm := kubeSnapshot(t, l).sub(before)
			for _, in := range []string{"in0", pod2.HostVeth} {
				if warm[in].passed["ct_new"] == 0 {
					t.Errorf("%s: no packet handed to Linux as ct_new while the connections started: %s", in, warm[in])
				}
			}
			time.Sleep(250 * time.Millisecond) // the last delayed ACKs

			// Established: one flow at a time, 200 messages of up to 1000 bytes (one segment
			// each way), counted where they enter the node.
			const n = 200
			for _, f := range flows {
				s0 := kubeSnapshot(t, l)
				if err := f.c.exchange(n, 1000); err != nil {
					t.Fatal(err)
				}
				if !f.c.udp {
					// The client's delayed ACK of the last answer, counted with its flow.
					time.Sleep(250 * time.Millisecond)
				}
				d := kubeSnapshot(t, l).sub(s0)
				in, back := d[f.in], d[f.back]
				want, wantBack := uint64(n), uint64(n)
				if f.in == f.back { // a pod reaching itself: both directions enter at its veth
					want, wantBack = 2*n, 0
				}
				t.Logf("%s: requests at %s: %s; answers at %s: %s", f.c, f.in, in, f.back, back)
				if f.c.udp && f.c.ttl != f.ttl {
					t.Errorf("%s: the last datagram reached the backend with TTL %d; with Linux, %d", f.c, f.c.ttl, f.ttl)
				}
				for _, x := range []struct {
					what, iface, reason string
					c                   kubeCounters
					n                   uint64
				}{{"requests", f.in, f.inLinux, in, want}, {"answers", f.back, f.backLinux, back, wantBack}} {
					if x.reason == "" && (x.c.forwarded < x.n || x.c.linux() > 0) {
						t.Errorf("%s, established: %d %s forwarded by the fast path at %s, to Linux %v; want all %d forwarded",
							f.c, x.c.forwarded, x.what, x.iface, x.c.passed, x.n)
					}
					if x.reason != "" && (x.c.forwarded > 0 || x.c.passed[x.reason] < x.n || x.c.linux() != x.c.passed[x.reason]) {
						t.Errorf("%s, established: %d %s forwarded by the fast path at %s, to Linux %v; want all %d to Linux as %s",
							f.c, x.c.forwarded, x.what, x.iface, x.c.passed, x.n, x.reason)
					}
				}
			}
		})
	}
}

// kubeCounters is one interface's fast-path counters (routed and bridged packets together).
type kubeCounters struct {
	forwarded uint64
	passed    map[string]uint64
}

// linux is what went to Linux but ARP (not_ip).
func (c kubeCounters) linux() uint64 {
	var n uint64
	for r, v := range c.passed {
		if r != "not_ip" {
			n += v
		}
	}
	return n
}

func (c kubeCounters) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "forwarded %d, to Linux", c.forwarded)
	if len(c.passed) == 0 {
		b.WriteString(" nothing")
	}
	for _, r := range slices.Sorted(maps.Keys(c.passed)) {
		fmt.Fprintf(&b, " %s=%d", r, c.passed[r])
	}
	return b.String()
}

type kubeSnap map[string]kubeCounters

func kubeSnapshot(t *testing.T, l *testbed.Linuxfp) kubeSnap {
	t.Helper()
	st, err := l.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	s := kubeSnap{}
	for _, it := range st.Interfaces {
		c := kubeCounters{forwarded: it.Forwarded.Packets + it.Bridged.Packets, passed: map[string]uint64{}}
		for r, v := range it.Passed {
			c.passed[r] = v.Packets
		}
		s[it.Name] = c
	}
	return s
}

func (s kubeSnap) sub(o kubeSnap) kubeSnap {
	d := kubeSnap{}
	for name, c := range s {
		x := kubeCounters{forwarded: c.forwarded - o[name].forwarded, passed: map[string]uint64{}}
		for r, v := range c.passed {
			if v > o[name].passed[r] {
				x.passed[r] = v - o[name].passed[r]
			}
		}
		d[name] = x
	}
	return d
}
