package e2e

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
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
	// the one reason for which it may hand them to Linux instead.
	inLinux, backLinux string
	// ttl, backTTL: the TTL a datagram must reach the backend with, and its answer the client
	// (UDP), as with Linux alone: one less when routed, the same when bridged.
	ttl, backTTL byte
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
// The exceptions, checked as such (an established packet the fast path does not forward goes
// to Linux for that one reason, and no other):
//   - (none at XDP: a packet from in0 or out0 into a pod's veth cannot be redirected as an XDP
//     frame, the pod's eth0 having neither GRO nor an XDP program, so XDP hands it, marked, to
//     the tc program after it, which forwards it as skb: checked as forwarded too;)
//   - a pod reaching itself through a cluster IP: back out of its own port, where the port's
//     hairpin mode decides: requests and answers are Linux's (hairpin). (A pod reaching another
//     pod on its bridge that way is bridged by Linux after the DNAT, not routed, and so by the
//     fast path: see below, and TestKubeProxyBridgedDNATBytes for the bytes.)
//
// Datagrams reach the backend, and their answers the client, with the TTL Linux gives them:
// one less when routed, unchanged when br_netfilter bridges them.
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
			// At XDP, packets into a pod's veth go through the tc program after XDP: forwarded.
			toPod := ""
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
					kubeFlow{backend: pod1.IP, peer: kubeGatewayIP, in: "in0", back: pod1.HostVeth, inLinux: toPod, ttl: 63, backTTL: 63})
				add(k.Client, "client -> NodePort -> local pod", proto, ap(kubeNodeInIP, np),
					kubeFlow{backend: pod1.IP, peer: kubeGatewayIP, in: "in0", back: pod1.HostVeth, inLinux: toPod, ttl: 63, backTTL: 63})
				add(k.Client, "client -> ClusterIP -> remote", proto, ap(remoteIP, port),
					kubeFlow{backend: remote, peer: kubeNodeOutIP, in: "in0", back: "out0", ttl: 63, backTTL: 63})
				add(k.Client, "client -> NodePort -> remote", proto, ap(kubeNodeInIP, np+2),
					kubeFlow{backend: remote, peer: kubeNodeOutIP, in: "in0", back: "out0", ttl: 63, backTTL: 63})
				// From a pod: not masqueraded, but for a pod reaching itself through its service
				// (KUBE-SEP's `-s <endpoint>` rule). A pod's packets to a pod on the same bridge
				// through a cluster IP are not routed by Linux: br_netfilter sees the DNAT to an
				// address behind the bridge they came from and bridges them there (TTL unchanged,
				// no IP forwarding: br_nf_pre_routing_finish_bridge), and so does the fast path.
				// The answers go from pod to pod on the bridge, their source translated back to
				// the cluster IP at br_netfilter's postrouting: the fast path bridges and
				// translates them. A pod reaching itself goes back out of its own port: Linux's.
				add(pod2.NS, "pod -> ClusterIP -> local pod", proto, ap(localIP, port),
					kubeFlow{backend: pod1.IP, peer: pod2.IP, in: pod2.HostVeth, back: pod1.HostVeth, ttl: 64, backTTL: 64})
				add(pod2.NS, "pod -> ClusterIP -> remote", proto, ap(remoteIP, port),
					kubeFlow{backend: remote, peer: pod2.IP, in: pod2.HostVeth, back: "out0", backLinux: toPod, ttl: 63, backTTL: 63})
				add(pod1.NS, "pod -> ClusterIP -> itself", proto, ap(localIP, port),
					kubeFlow{backend: pod1.IP, peer: kubeGatewayIP, in: pod1.HostVeth, back: pod1.HostVeth, inLinux: "hairpin", backLinux: "hairpin", ttl: 64, backTTL: 64})
			}

			var conns []*svcConn
			for _, f := range flows {
				conns = append(conns, f.c)
			}
			k.waitFastPathReady(t, conns)
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
			kubeQuiet(t, l) // the last delayed ACKs

			// Established: one flow at a time, 200 messages of up to 1000 bytes (one segment
			// each way), counted where they enter the node.
			const n = 200
			for _, f := range flows {
				s0 := kubeSnapshot(t, l)
				if err := f.c.exchange(n, 1000); err != nil {
					t.Fatal(err)
				}
				// TCP: the client's delayed ACK of the last answer, counted with its flow.
				s1 := kubeQuiet(t, l)
				if f.c.udp {
					s1 = kubeSnapshot(t, l)
				}
				d := s1.sub(s0)
				in, back := d[f.in], d[f.back]
				want, wantBack := uint64(n), uint64(n)
				if f.in == f.back { // a pod reaching itself: both directions enter at its veth
					want, wantBack = 2*n, 0
				}
				t.Logf("%s: requests at %s: %s; answers at %s: %s", f.c, f.in, in, f.back, back)
				if f.c.udp && (f.c.ttl != f.ttl || f.c.backTTL != f.backTTL) {
					t.Errorf("%s: the last datagram reached the backend with TTL %d, its answer the client with %d; with Linux, %d and %d",
						f.c, f.c.ttl, f.c.backTTL, f.ttl, f.backTTL)
				}
				checkEstablished(t, f.c, "requests", f.in, in, want, f.inLinux)
				checkEstablished(t, f.c, "answers", f.back, back, wantBack, f.backLinux)
			}
		})
	}
}

// kubeQuiet waits until the counters have stopped moving (at least 250 ms, more than the
// longest delayed ACK, and two looks 100 ms apart alike) and returns them.
func kubeQuiet(t *testing.T, l *testbed.Linuxfp) kubeSnap {
	t.Helper()
	time.Sleep(150 * time.Millisecond)
	last := kubeSnapshot(t, l)
	for range 30 {
		time.Sleep(100 * time.Millisecond)
		s := kubeSnapshot(t, l)
		if maps.EqualFunc(s, last, func(a, b kubeCounters) bool { return a.forwarded == b.forwarded && maps.Equal(a.passed, b.passed) }) {
			return s
		}
		last = s
	}
	t.Fatal("the fast path's counters kept moving with no traffic")
	return nil
}

// kubeCounters is one interface's fast-path counters (routed and bridged packets together).
type kubeCounters struct {
	forwarded uint64
	passed    map[string]uint64
}

// linux is what went to Linux but ARP (not_ip), ICMP and ICMPv6 (ct_protocol: IPv6's neighbour
// discovery, whose probes a host sends 5 s after it answered a solicitation, whenever two hosts
// first met), and the frame per address and second Linux's bridge refreshes its FDB entry from
// (bridge_refresh, bpf/lib/fdb.h). The tests' flows are TCP and UDP: none of their packets is
// among these.
func (c kubeCounters) linux() uint64 {
	var n uint64
	for r, v := range c.passed {
		if r != "not_ip" && r != "ct_protocol" && r != "bridge_refresh" {
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

// Endpoint removal as kube-proxy does it (its rules re-synced without the endpoint, and for UDP
// the endpoint's conntrack entries deleted), then the removed pods gone, with established TCP
// connections and UDP flows to every endpoint through the cluster IP and the NodePort. The same
// scenario runs with Linux alone and with linuxfp (at each hook), and must end the same way:
//   - established TCP connections keep their backend, removed or not (conntrack still DNATs
//     them), until the backend is gone: then they get no answer;
//   - UDP flows to a removed endpoint move to a remaining one with their next datagram (their
//     entry was deleted), the others keep theirs;
//   - new connections and flows reach only the remaining endpoints.
func TestKubeProxyEndpointRemoval(t *testing.T) {
	linux := kubeRemoval(t, "tc", false)
	for _, hook := range []string{"xdp", "tc"} {
		t.Run(hook, func(t *testing.T) {
			got := kubeRemoval(t, hook, true)
			for _, key := range slices.Sorted(maps.Keys(linux)) {
				if got[key] != linux[key] {
					t.Errorf("%s: %s; with Linux alone: %s", key, got[key], linux[key])
				}
			}
		})
	}
	// What Linux does, so that the comparison compares something.
	for _, key := range slices.Sorted(maps.Keys(linux)) {
		want := "answered by the same backend"
		switch {
		case strings.Contains(key, "udp") && strings.Contains(key, "established to a removed") && strings.HasSuffix(key, "endpoint removed"):
			want = "moved to a remaining endpoint"
		case strings.Contains(key, "tcp") && strings.Contains(key, "established to a removed") && strings.HasSuffix(key, "pod gone"):
			want = "no answer"
		case strings.Contains(key, "new"):
			want = "all to remaining endpoints"
		}
		if linux[key] != want {
			t.Errorf("Linux alone: %s: %s, want %s", key, linux[key], want)
		}
		t.Logf("%s: %s", key, linux[key])
	}
}

// kubeRemoval builds a node for hook, runs the removal scenario, with linuxfp or not, and
// returns what happened to each class of connection.
func kubeRemoval(t *testing.T, hook string, withLinuxfp bool) map[string]string {
	t.Helper()
	k := newKubeNode(t, hook, 2, 2)
	pod1, pod2 := k.Pods[0], k.Pods[1]
	remote1, remote2 := k.Remotes[0], k.Remotes[1]
	role := map[netip.Addr]string{pod1.IP: "removed local pod", remote1: "removed remote", pod2.IP: "remaining local pod", remote2: "remaining remote"}
	svcIP := kubeServiceIP(3)
	services := func(eps ...netip.Addr) []testbed.KubeService {
		var tcp, udp []netip.AddrPort
		for _, a := range eps {
			tcp = append(tcp, netip.AddrPortFrom(a, kubeTCPPort))
			udp = append(udp, netip.AddrPortFrom(a, kubeUDPPort))
		}
		return []testbed.KubeService{kubeSvc("web", "tcp", svcIP, 80, 30005, tcp...), kubeSvc("web", "udp", svcIP, 53, 30006, udp...)}
	}
	k.sync(t, testbed.KubeProxy{ClusterCIDR: kubeClusterNet, Services: services(pod1.IP, pod2.IP, remote1, remote2)})
	var l *testbed.Linuxfp
	if withLinuxfp {
		l = k.startLinuxfp(t)
	}

	type class struct {
		path, proto string
		dst         netip.AddrPort
	}
	var classes []class
	for _, proto := range []string{"tcp", "udp"} {
		port, np := uint16(80), uint16(30005)
		if proto == "udp" {
			port, np = 53, 30006
		}
		classes = append(classes, class{"ClusterIP", proto, netip.AddrPortFrom(svcIP, port)}, class{"NodePort", proto, netip.AddrPortFrom(kubeNodeInIP, np)})
	}
	id := 1000
	dial := func(c class) *svcConn {
		id++
		sc, err := dialService(k.Client, c.path, c.proto, c.dst, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sc.close)
		if _, _, err := sc.roundTrip(1000, 5*time.Second); err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		return sc
	}
	// Connections until each class has one to every endpoint (kube-proxy picks at random).
	conns := map[class]map[string]*svcConn{}
	for _, c := range classes {
		conns[c] = map[string]*svcConn{}
		for try := 0; len(conns[c]) < len(role); try++ {
			if try == 300 {
				t.Fatalf("%s %s: 300 connections reached only %v", c.path, c.proto, slices.Collect(maps.Keys(conns[c])))
			}
			sc := dial(c)
			if r := role[sc.backend]; conns[c][r] == nil {
				conns[c][r] = sc
			} else {
				sc.close()
			}
		}
	}
	var all []*svcConn
	for _, c := range classes {
		for _, sc := range conns[c] {
			all = append(all, sc)
		}
	}
	// Established: UDP entries ASSURED, and with linuxfp TCP ones marked liberal, so that the
	// fast path has them when the endpoints go.
	eventually(t, 6*time.Second, "established connections ready for the fast path", func() error {
		var errs []string
		for _, sc := range all {
			if err := sc.exchange(1, 1000); err != nil {
				t.Fatal(err)
			}
			if err := k.fastPathReady(sc); err != nil && (sc.udp || withLinuxfp) {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	})

	out := map[string]string{}
	// established runs n round trips on every established connection (all at once) and
	// records, per class, what happened.
	established := func(stage string, n int, timeout time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range classes {
			for r, sc := range conns[c] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					first := sc.backend
					res := "answered by the same backend"
					moved := netip.Addr{}
					for range n {
						b, _, err := sc.roundTrip(1000, timeout)
						if err != nil {
							res = errKind(err)
							break
						}
						switch {
						case b == first && !moved.IsValid():
						case !moved.IsValid() && strings.HasPrefix(role[b], "remaining"):
							moved, res = b, "moved to a remaining endpoint"
						case b != moved:
							res = fmt.Sprintf("answered by %s, then by %s (%s)", first, b, role[b])
						}
					}
					if moved.IsValid() {
						sc.backend = moved
					}
					mu.Lock()
					out[fmt.Sprintf("%s %s, established to a %s, %s", c.path, c.proto, r, stage)] = res
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
	}
	newConns := func(stage string, n int) {
		for _, c := range classes {
			got := map[string]int{}
			for range n {
				sc := dial(c)
				got[role[sc.backend]]++
				sc.close()
			}
			res := "all to remaining endpoints"
			if got["removed local pod"]+got["removed remote"] > 0 {
				res = fmt.Sprintf("reached %v", got)
			}
			out[fmt.Sprintf("%s %s, new, %s", c.path, c.proto, stage)] = res
		}
	}

	// The endpoints of pod1 and remote1 go (the pods terminating: still there, no longer
	// endpoints).
	var s0 kubeSnap
	if l != nil {
		s0 = kubeSnapshot(t, l)
	}
	k.sync(t, testbed.KubeProxy{ClusterCIDR: kubeClusterNet, Services: services(pod2.IP, remote2)})
	established("endpoint removed", 20, 5*time.Second)
	if l != nil {
		d := kubeSnapshot(t, l).sub(s0)
		t.Logf("established connections after the endpoint removal: in0 %s; out0 %s", d["in0"], d["out0"])
		// Their requests were the fast path's, but for the UDP flows that moved (new entries,
		// not ASSURED yet) and, at XDP, those to local pods: 20 messages on each of 4 TCP
		// connections and 2 UDP flows to remote backends, and at tc as many to local pods.
		want := uint64(6 * 20)
		if hook == "tc" {
			want *= 2
		}
		if d["in0"].forwarded < want {
			t.Errorf("in0 forwarded %d requests of established connections, want at least %d", d["in0"].forwarded, want)
		}
	}
	newConns("endpoint removed", 10)

	// The removed pods go: pod1's veth is deleted, node2 drops remote1's address.
	k.removePod(t, pod1)
	sh(t, k.Node2, "ip addr del "+remote1.String()+"/32 dev lo")
	established("pod gone", 5, time.Second)
	newConns("pod gone", 5)
	return out
}
