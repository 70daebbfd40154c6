package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The pods topology (testbed.NewPods: two Flannel vxlan nodes, pods plugged into cni0 as the CNI
// bridge plugin does, Flannel's iptables rules) with linuxfp in both nodes, and pods coming and
// going while TCP request/response runs between others, intra-node (bridged through cni0 and
// br_netfilter's rules, conntrack) and inter-node (routed into flannel.1, encapsulated,
// decapsulated on the other node, routed into its cni0).
//
// What must hold:
//   - the long-lived connections between pods that are left alone see every message come back
//     unaltered, without an error or a stall, whatever pods are added or removed around them on
//     either node;
//   - a new pod gets a program on its host veth, and its traffic, both ways and both kinds, is
//     fast-pathed: its veth counts bridged and encapsulated packets, the underlays decapsulated
//     ones, flannel.1 what it routed into cni0 (counters read with `linuxfp status -j` in each
//     node, as a person would);
//   - a removed pod's host veth leaves linuxfp's status.
func TestPodsChurn(t *testing.T) {
	start := time.Now()
	p := newPodsTopology(t, [2]int{4, 4})
	n1, n2 := p.Nodes[0], p.Nodes[1]
	a, b, u1, x1 := n1.Pods[0], n1.Pods[1], n1.Pods[2], n1.Pods[3]
	c, d, u2, x2 := n2.Pods[0], n2.Pods[1], n2.Pods[2], n2.Pods[3]
	startLinuxfpPods(t, p)
	for _, pod := range []*testbed.Pod{a, b, c, d, u2, x1, x2} {
		servePodEcho(t, pod)
	}

	// Long-lived exchanges whose ends are left alone. UDP request/response, where a lost
	// packet is a missing answer: u1 to b (intra node1) and to u2 (inter-node).
	udpStart := time.Now()
	udps := []*podUDPFlow{
		startPodUDPFlow(t, 5, u1, b),
		startPodUDPFlow(t, 6, u1, u2),
	}
	// The pods that go away first have had connections of their own (closed before they go).
	podExchange(t, x1, a, 50)
	podExchange(t, x2, c, 50)
	// TCP, intra-node on both nodes, inter-node both ways.
	flows := []*podFlow{
		startPodFlow(t, 1, a, b), // intra node1
		startPodFlow(t, 2, a, c), // node1 -> node2
		startPodFlow(t, 3, d, b), // node2 -> node1
		startPodFlow(t, 4, c, d), // intra node2
	}
	defer func() {
		for _, f := range flows {
			f.stop()
		}
	}()
	waitFlowsProgress(t, flows)
	var long [][2]*testbed.Pod
	for _, f := range flows {
		long = append(long, [2]*testbed.Pod{f.from, f.to})
	}
	waitLiberal(t, long, flowPorts(flows), nil)
	// Conntrack calls a UDP flow a stream (ASSURED) once it has answers 2 s after its first
	// packet; until then its packets are Linux's. From here on they should be fast-pathed.
	time.Sleep(time.Until(udpStart.Add(2500 * time.Millisecond)))
	before := podsSnapshot(t, p)
	udpBefore, tcpBefore := udpCounts(udps), flowCounts(flows)

	churn := []*testbed.Pod{x1, x2}
	var churnUDP []*podUDPFlow // the churning pods' own datagrams, running until they go
	const rounds, n = 5, 200
	for round := range rounds {
		// New pods on both nodes, with the long-lived connections running.
		e, err := p.AddPod(1)
		if err != nil {
			t.Fatal(err)
		}
		f, err := p.AddPod(2)
		if err != nil {
			t.Fatal(err)
		}
		servePodEcho(t, e)
		servePodEcho(t, f)
		waitPodProgram(t, e)
		waitPodProgram(t, f)
		// The new pods send datagrams across to a long-lived pod of the other node until they
		// are removed (in the next round), answers and all.
		newUDP := []*podUDPFlow{startPodUDPFlow(t, 10+2*round, e, c), startPodUDPFlow(t, 11+2*round, f, a)}

		// Their traffic, intra- and inter-node, to them and from them. Each connection's first
		// segments are Linux's (the handshake, and those before the controller has marked the
		// connection liberal in conntrack); once marked in every node it crosses, all of them
		// should be fast-pathed.
		rc := podsConns(t, [][2]*testbed.Pod{
			{e, a}, // intra node1
			{e, c}, // node1 -> node2
			{f, e}, // node2 -> node1, to the new pod
			{f, d}, // intra node2
		})
		rc.warmUp(t)
		s0 := podsSnapshot(t, p)
		rc.exchange(t, n)
		s1 := podsSnapshot(t, p)
		rc.close()
		de, df := s1.iface(t, 1, e.HostVeth).sub(s0.iface(t, 1, e.HostVeth)), s1.iface(t, 2, f.HostVeth).sub(s0.iface(t, 2, f.HostVeth))
		// Counted where the packets enter a node: e's requests to a bridged, its requests to c
		// and answers to f encapsulated; f's requests to d bridged, to e encapsulated. Each
		// message is one segment each way; a few more (pure ACKs) may come. 95% at least.
		min := uint64(n * 95 / 100)
		for _, ck := range []struct {
			what      string
			got, want uint64
		}{
			{"new pod " + e.IP.String() + " (node1) bridged to " + a.IP.String(), de.bridged, min},
			{"new pod " + e.IP.String() + " (node1) encapsulated to " + c.IP.String() + " and " + f.IP.String(), de.encapsulated, 2 * min},
			{"new pod " + f.IP.String() + " (node2) bridged to " + d.IP.String(), df.bridged, min},
			{"new pod " + f.IP.String() + " (node2) encapsulated to " + e.IP.String(), df.encapsulated, min},
			{"node1's eth0 decapsulated (from node2 to " + e.IP.String() + ")", s1.iface(t, 1, "eth0").sub(s0.iface(t, 1, "eth0")).decapsulated, 2 * min},
			{"node2's eth0 decapsulated (from node1 to " + c.IP.String() + ", " + f.IP.String() + ")", s1.iface(t, 2, "eth0").sub(s0.iface(t, 2, "eth0")).decapsulated, 2 * min},
			{"node1's flannel.1 routed into cni0", s1.iface(t, 1, "flannel.1").sub(s0.iface(t, 1, "flannel.1")).forwarded, 2 * min},
			{"node2's flannel.1 routed into cni0", s1.iface(t, 2, "flannel.1").sub(s0.iface(t, 2, "flannel.1")).forwarded, 2 * min},
		} {
			if ck.got < ck.want {
				t.Errorf("round %d: %s: %d packets fast-pathed, want >= %d; %s: %s; %s: %s", round+1, ck.what, ck.got, ck.want,
					e.HostVeth, de, f.HostVeth, df)
			}
		}

		// Pods that are no peer of a running connection go, on both nodes.
		progress := flowCounts(flows)
		for _, gone := range churn {
			if err := p.RemovePod(gone); err != nil {
				t.Fatal(err)
			}
		}
		for _, gone := range churn {
			waitPodGone(t, gone)
		}
		for _, u := range churnUDP {
			u.abandon()
		}
		churn, churnUDP = []*testbed.Pod{e, f}, newUDP
		// The long-lived connections went on meanwhile.
		for i, fl := range flows {
			if err := fl.failed(); err != nil {
				t.Fatalf("round %d: %s: %v", round+1, fl, err)
			}
			if fl.count() <= progress[i] {
				t.Errorf("round %d: %s made no progress while pods were added and removed (%d messages)", round+1, fl, fl.count())
			}
		}
	}
	waitFlowsProgress(t, flows)
	for _, u := range churnUDP {
		u.abandon()
	}
	for _, f := range flows {
		f.stop()
	}
	for _, f := range udps {
		f.stop()
	}
	after := podsSnapshot(t, p)

	// Every message of the long-lived connections came back as it was sent; no datagram went
	// missing.
	for _, f := range flows {
		if err := f.failed(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		t.Logf("%s: %d messages, %d bytes each way, %d TCP retransmissions", f, f.count(), f.bytes.Load(), f.retrans)
	}
	for _, f := range udps {
		sent, answered, bad := f.result()
		if answered != sent || bad != 0 {
			t.Errorf("%s: %d requests, %d answered, %d answers altered", f, sent, answered, bad)
		}
		t.Logf("%s: %d requests, %d answered", f, sent, answered)
	}
	// And they were fast-pathed all along. Each message is at least one packet each way
	// (bridged, or routed into flannel.1: encapsulated, or forwarded to the driver when it is a
	// GSO train); every datagram one.
	da := after.iface(t, 1, a.HostVeth).sub(before.iface(t, 1, a.HostVeth))
	db := after.iface(t, 1, b.HostVeth).sub(before.iface(t, 1, b.HostVeth))
	dc := after.iface(t, 2, c.HostVeth).sub(before.iface(t, 2, c.HostVeth))
	dd := after.iface(t, 2, d.HostVeth).sub(before.iface(t, 2, d.HostVeth))
	du1 := after.iface(t, 1, u1.HostVeth).sub(before.iface(t, 1, u1.HostVeth))
	du2 := after.iface(t, 2, u2.HostVeth).sub(before.iface(t, 2, u2.HostVeth))
	udpAfter, tcpAfter := udpCounts(udps), flowCounts(flows)
	msgs := func(i int) uint64 { return tcpAfter[i] - tcpBefore[i] }
	dgrams := func(i int) uint64 { return udpAfter[i] - udpBefore[i] }
	for _, ck := range []struct {
		what      string
		got, want uint64
	}{
		{a.IP.String() + " -> " + b.IP.String() + ", bridged at " + a.HostVeth, da.bridged, msgs(0)},
		{a.IP.String() + " -> " + c.IP.String() + ", encapsulated at " + a.HostVeth, da.encapsulated + da.forwarded, msgs(1)},
		{c.IP.String() + " -> " + a.IP.String() + " (answers), encapsulated at " + c.HostVeth, dc.encapsulated + dc.forwarded, msgs(1)},
		{d.IP.String() + " -> " + b.IP.String() + ", encapsulated at " + d.HostVeth, dd.encapsulated + dd.forwarded, msgs(2)},
		{b.IP.String() + " -> " + d.IP.String() + " (answers), encapsulated at " + b.HostVeth, db.encapsulated + db.forwarded, msgs(2)},
		{c.IP.String() + " -> " + d.IP.String() + ", bridged at " + c.HostVeth, dc.bridged, msgs(3)},
		{u1.IP.String() + " -> " + b.IP.String() + " udp, bridged at " + u1.HostVeth, du1.bridged, dgrams(0) * 95 / 100},
		{u1.IP.String() + " -> " + u2.IP.String() + " udp, encapsulated at " + u1.HostVeth, du1.encapsulated, dgrams(1) * 95 / 100},
		{u2.IP.String() + " -> " + u1.IP.String() + " udp answers, encapsulated at " + u2.HostVeth, du2.encapsulated, dgrams(1) * 95 / 100},
	} {
		if ck.got < ck.want {
			t.Errorf("%s: %d packets fast-pathed for %d messages", ck.what, ck.got, ck.want)
		}
	}
	// b and u2 are peers of long-lived exchanges only: what their veths handed to Linux
	// meanwhile is at most their own ARP (and, at worst, a neighbour that went stale). Packets
	// that met the fence are not counted: each pod added or removed changes the node's
	// configuration, and while linuxfp applies a change its packets are Linux's by design (the
	// fast-path counts above show the fence opened again).
	for _, ck := range []struct {
		pod *testbed.Pod
		d   fpCounters
	}{{b, db}, {u2, du2}} {
		linux := uint64(0)
		for r, v := range ck.d.passed {
			if r != "not_ip" && r != "bridge_flood" && r != "fenced" {
				linux += v
			}
		}
		if fast := ck.d.bridged + ck.d.forwarded + ck.d.encapsulated; linux > fast/100 {
			t.Errorf("pod %s's %s handed %d IP packets to Linux while it fast-pathed %d: %s", ck.pod.IP, ck.pod.HostVeth, linux, fast, ck.d)
		}
	}
	for _, pod := range []*testbed.Pod{a, b, c, d, u1, u2} {
		st := after.iface(t, pod.Node.Index, pod.HostVeth).sub(before.iface(t, pod.Node.Index, pod.HostVeth))
		t.Logf("pod %s's %s during the churn: %s", pod.IP, pod.HostVeth, st)
	}
	t.Logf("%d rounds of pods added and removed on both nodes, %s in all", rounds, time.Since(start).Round(time.Millisecond))
}

// newPodsTopology builds the pods topology with pods[i] pods on node i+1 and removes it at the
// end of the test.
func newPodsTopology(t *testing.T, pods [2]int) *testbed.Pods {
	t.Helper()
	p, err := testbed.NewPods(nsPrefix, testbed.PodsOptions{Pods: pods})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// startLinuxfpPods runs linuxfp in both nodes for the rest of the test and waits until each has
// a program on its underlay, flannel.1 and every pod's host veth.
func startLinuxfpPods(t *testing.T, p *testbed.Pods) {
	t.Helper()
	for _, n := range p.Nodes {
		want := []string{"eth0", "flannel.1"}
		for _, pod := range n.Pods {
			want = append(want, pod.HostVeth)
		}
		l, err := testbed.StartLinuxfpIn(n.NS, linuxfpBin, func(st *status.Status) bool {
			got := 0
			for _, it := range st.Interfaces {
				if contains(want, it.Name) && it.Program != nil && it.Program.Hook == "tc" {
					got++
				}
			}
			return got == len(want)
		})
		if err != nil {
			t.Fatalf("node%d: %v", n.Index, err)
		}
		stopAtCleanup(t, l)
	}
}

// nodeStatus is `linuxfp status -j` run in node n.
func nodeStatus(n *testbed.PodNode) (*status.Status, error) {
	cmd := exec.Command("ip", "netns", "exec", n.NS.Name, linuxfpBin, "status", "-j")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("node%d: linuxfp status -j: %w: %s", n.Index, err, strings.TrimSpace(stderr.String()))
	}
	var st status.Status
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("node%d: linuxfp status -j: %w", n.Index, err)
	}
	return &st, nil
}

func statusInterface(st *status.Status, name string) *status.Interface {
	for i := range st.Interfaces {
		if st.Interfaces[i].Name == name {
			return &st.Interfaces[i]
		}
	}
	return nil
}

// waitPodProgram waits until linuxfp in the pod's node runs a tc program on its host veth.
func waitPodProgram(t *testing.T, pod *testbed.Pod) {
	t.Helper()
	eventually(t, 3*time.Second, "a program on new pod "+pod.IP.String()+"'s "+pod.HostVeth, func() error {
		st, err := nodeStatus(pod.Node)
		if err != nil {
			return err
		}
		it := statusInterface(st, pod.HostVeth)
		if it == nil || it.Program == nil || it.Program.Hook != "tc" || it.Master != "cni0" {
			return fmt.Errorf("status: %+v", it)
		}
		return nil
	})
}

// waitPodGone waits until a removed pod's host veth has left linuxfp's status in its node.
func waitPodGone(t *testing.T, pod *testbed.Pod) {
	t.Helper()
	eventually(t, 3*time.Second, "removed pod "+pod.IP.String()+"'s "+pod.HostVeth+" gone from linuxfp status", func() error {
		st, err := nodeStatus(pod.Node)
		if err != nil {
			return err
		}
		if it := statusInterface(st, pod.HostVeth); it != nil {
			return fmt.Errorf("still there: %+v", it)
		}
		return nil
	})
}

// fpCounters is what an interface fast-pathed, in packets.
type fpCounters struct {
	bridged, forwarded, encapsulated, decapsulated uint64
	passed                                         map[string]uint64
}

func (c fpCounters) sub(o fpCounters) fpCounters {
	d := fpCounters{bridged: c.bridged - o.bridged, forwarded: c.forwarded - o.forwarded,
		encapsulated: c.encapsulated - o.encapsulated, decapsulated: c.decapsulated - o.decapsulated, passed: map[string]uint64{}}
	for r, v := range c.passed {
		if v > o.passed[r] {
			d.passed[r] = v - o.passed[r]
		}
	}
	return d
}

func (c fpCounters) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bridged %d, forwarded %d, encapsulated %d, decapsulated %d, to Linux", c.bridged, c.forwarded, c.encapsulated, c.decapsulated)
	if len(c.passed) == 0 {
		b.WriteString(" nothing")
	}
	for _, r := range slices.Sorted(maps.Keys(c.passed)) {
		fmt.Fprintf(&b, " %s=%d", r, c.passed[r])
	}
	return b.String()
}

// podsCounters is both nodes' per-interface counters at one moment.
type podsCounters [2]map[string]fpCounters

func podsSnapshot(t *testing.T, p *testbed.Pods) podsCounters {
	t.Helper()
	var s podsCounters
	for i, n := range p.Nodes {
		st, err := nodeStatus(n)
		if err != nil {
			t.Fatal(err)
		}
		s[i] = map[string]fpCounters{}
		for _, it := range st.Interfaces {
			c := fpCounters{bridged: it.Bridged.Packets, forwarded: it.Forwarded.Packets,
				encapsulated: it.Encapsulated.Packets, decapsulated: it.Decapsulated.Packets, passed: map[string]uint64{}}
			for r, v := range it.Passed {
				c.passed[r] = v.Packets
			}
			s[i][it.Name] = c
		}
	}
	return s
}

// iface is an interface's counters in node (1 or 2); it must be in the status.
func (s podsCounters) iface(t *testing.T, node int, name string) fpCounters {
	t.Helper()
	c, ok := s[node-1][name]
	if !ok {
		t.Fatalf("no interface %s in node%d's linuxfp status", name, node)
	}
	return c
}

// podEchoPort is where every pod's echo servers listen (TCP and UDP).
const podEchoPort = 7000

// servePodEcho runs TCP and UDP echo servers on the pod's address until the end of the test.
func servePodEcho(t *testing.T, pod *testbed.Pod) {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	err := pod.NS.Do(func() (err error) {
		addr := netip.AddrPortFrom(pod.IP, podEchoPort).String()
		if ln, err = net.Listen("tcp", addr); err != nil {
			return err
		}
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			ln.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		pc.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// dialPod connects from pod from to to's echo server.
func dialPod(from, to *testbed.Pod) (*net.TCPConn, error) {
	var c net.Conn
	err := from.NS.Do(func() (err error) {
		c, err = (&net.Dialer{Timeout: 3 * time.Second}).Dial("tcp", netip.AddrPortFrom(to.IP, podEchoPort).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s -> %s: %w", from.IP, to.IP, err)
	}
	return c.(*net.TCPConn), nil
}

// podMessage is message i of connection id: its length and bytes depend on both, so a message
// delivered to the wrong connection, out of order, truncated or altered does not compare equal.
func podMessage(id, i, maxLen int) []byte {
	r := rand.New(rand.NewSource(int64(id)<<32 | int64(i)))
	m := make([]byte, 1+r.Intn(maxLen))
	r.Read(m)
	if len(m) >= 8 {
		binary.BigEndian.PutUint32(m[0:], uint32(id))
		binary.BigEndian.PutUint32(m[4:], uint32(i))
	}
	return m
}

// echoOne sends one message and reads it back, within 5 s.
func echoOne(c net.Conn, msg, buf []byte) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(buf[:len(msg)], msg) {
		return errors.New("echo altered")
	}
	return nil
}

// podExchange connects from one pod to another, exchanges n messages of up to 1000 bytes (one
// segment each way) and closes.
func podExchange(t *testing.T, from, to *testbed.Pod, n int) {
	t.Helper()
	c, err := dialPod(from, to)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id := int(from.IP.As4()[2])<<24 | int(from.IP.As4()[3])<<16 | int(to.IP.As4()[2])<<8 | int(to.IP.As4()[3])
	buf := make([]byte, 1000)
	for i := range n {
		if err := echoOne(c, podMessage(id, i, 1000), buf); err != nil {
			t.Fatalf("%s -> %s, message %d: %v", from.IP, to.IP, i, err)
		}
	}
}

// podConns are TCP connections between pairs of pods, driven in turn by the test.
type podConns struct {
	pairs [][2]*testbed.Pod
	conns []*net.TCPConn
	next  []int // the next message of each
	buf   []byte
}

func podsConns(t *testing.T, pairs [][2]*testbed.Pod) *podConns {
	t.Helper()
	r := &podConns{pairs: pairs, next: make([]int, len(pairs)), buf: make([]byte, 1000)}
	t.Cleanup(r.close)
	for _, pr := range pairs {
		c, err := dialPod(pr[0], pr[1])
		if err != nil {
			t.Fatal(err)
		}
		r.conns = append(r.conns, c)
	}
	return r
}

// one exchanges the next message (up to 1000 bytes: one segment) on connection k.
func (r *podConns) one(t *testing.T, k int) {
	t.Helper()
	from, to := r.pairs[k][0], r.pairs[k][1]
	if err := echoOne(r.conns[k], podMessage(100+k, r.next[k], 1000), r.buf); err != nil {
		t.Fatalf("%s -> %s, message %d: %v", from.IP, to.IP, r.next[k], err)
	}
	r.next[k]++
}

// warmUp exchanges messages on every connection until conntrack has marked each liberal in
// every node it crosses (see waitLiberal).
func (r *podConns) warmUp(t *testing.T) {
	t.Helper()
	var ports []uint16
	for _, c := range r.conns {
		ports = append(ports, uint16(c.LocalAddr().(*net.TCPAddr).Port))
	}
	waitLiberal(t, r.pairs, ports, func() {
		for k := range r.conns {
			r.one(t, k)
		}
		time.Sleep(time.Millisecond)
	})
}

// exchange exchanges n messages on every connection, in turn.
func (r *podConns) exchange(t *testing.T, n int) {
	t.Helper()
	for range n {
		for k := range r.conns {
			r.one(t, k)
		}
	}
}

func (r *podConns) close() {
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// waitLiberal waits until the conntrack entry of every connection (from pairs[k][0], port
// ports[k], to pairs[k][1]'s echo server) is marked liberal both ways in every node it
// crosses: from then on the fast path takes all its segments but SYN, FIN and RST. poke, if
// set, runs between looks (the marks follow the connections' own segments).
func waitLiberal(t *testing.T, pairs [][2]*testbed.Pod, ports []uint16, poke func()) {
	t.Helper()
	eventually(t, 3*time.Second, "connections marked liberal in conntrack", func() error {
		if poke != nil {
			poke()
		}
		for k, pr := range pairs {
			src, dst := netip.AddrPortFrom(pr[0].IP, ports[k]), netip.AddrPortFrom(pr[1].IP, podEchoPort)
			for _, n := range []*testbed.PodNode{pr[0].Node, pr[1].Node} {
				ok, err := ctLiberal(n, src, dst)
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("%s -> %s not liberal in node%d yet", src, dst, n.Index)
				}
			}
		}
		return nil
	})
}

// ctLiberal reports whether node n's conntrack entry for the TCP connection src -> dst has
// IP_CT_TCP_FLAG_BE_LIBERAL in both directions.
func ctLiberal(n *testbed.PodNode, src, dst netip.AddrPort) (bool, error) {
	const beLiberal = 0x08
	found, ok := false, false
	fs, err := conntrackFlows(n.NS)
	for _, f := range fs {
		o := f.TupleOrig
		if o.Proto.Protocol != unix.IPPROTO_TCP || o.IP.SourceAddress != src.Addr() || o.Proto.SourcePort != src.Port() ||
			o.IP.DestinationAddress != dst.Addr() || o.Proto.DestinationPort != dst.Port() {
			continue
		}
		found = true
		// struct nf_ct_tcp_flags {flags, mask}, big endian as a 16-bit attribute.
		if tcp := f.ProtoInfo.TCP; tcp != nil {
			ok = (tcp.OriginalFlags>>8)&beLiberal != 0 && (tcp.ReplyFlags>>8)&beLiberal != 0
		}
	}
	if err == nil && !found {
		err = fmt.Errorf("node%d: no conntrack entry for %s -> %s", n.Index, src, dst)
	}
	return ok, err
}

// podFlow is a long-lived request/response connection between two pods, running in the
// background with a short pause between messages.
type podFlow struct {
	id       int
	from, to *testbed.Pod
	conn     *net.TCPConn
	n        atomic.Uint64
	bytes    atomic.Uint64
	err      atomic.Pointer[error]
	done     chan struct{}
	finished chan struct{}
	retrans  uint32
}

func (f *podFlow) String() string {
	return fmt.Sprintf("connection %d, %s (node%d) -> %s (node%d)", f.id, f.from.IP, f.from.Node.Index, f.to.IP, f.to.Node.Index)
}

func startPodFlow(t *testing.T, id int, from, to *testbed.Pod) *podFlow {
	t.Helper()
	c, err := dialPod(from, to)
	if err != nil {
		t.Fatal(err)
	}
	f := &podFlow{id: id, from: from, to: to, conn: c, done: make(chan struct{}), finished: make(chan struct{})}
	go f.run()
	return f
}

func (f *podFlow) run() {
	defer close(f.finished)
	buf := make([]byte, 3000)
	for i := 0; ; i++ {
		select {
		case <-f.done:
			return
		default:
		}
		// Up to 3000 bytes: some messages take several segments (and GSO trains).
		msg := podMessage(f.id, i, 3000)
		if err := echoOne(f.conn, msg, buf); err != nil {
			err = fmt.Errorf("message %d (%d bytes): %w", i, len(msg), err)
			f.err.Store(&err)
			return
		}
		f.n.Add(1)
		f.bytes.Add(uint64(len(msg)))
		time.Sleep(time.Millisecond)
	}
}

func (f *podFlow) count() uint64 { return f.n.Load() }

func (f *podFlow) failed() error {
	if e := f.err.Load(); e != nil {
		return *e
	}
	return nil
}

// stop ends the flow after its current message, reads its TCP retransmission count and closes.
func (f *podFlow) stop() {
	select {
	case <-f.done:
		return
	default:
	}
	close(f.done)
	<-f.finished
	if raw, err := f.conn.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				f.retrans = info.Total_retrans
			}
		})
	}
	f.conn.Close()
}

func flowPorts(flows []*podFlow) []uint16 {
	var out []uint16
	for _, f := range flows {
		out = append(out, uint16(f.conn.LocalAddr().(*net.TCPAddr).Port))
	}
	return out
}

func flowCounts(flows []*podFlow) []uint64 {
	var out []uint64
	for _, f := range flows {
		out = append(out, f.count())
	}
	return out
}

// waitFlowsProgress waits until every flow has exchanged a few more messages.
func waitFlowsProgress(t *testing.T, flows []*podFlow) {
	t.Helper()
	base := flowCounts(flows)
	eventually(t, 5*time.Second, "the long-lived connections exchange messages", func() error {
		for i, f := range flows {
			if err := f.failed(); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if f.count() < base[i]+50 {
				return fmt.Errorf("%s: %d messages", f, f.count())
			}
		}
		return nil
	})
}

// podUDPFlow is a long-lived UDP request/response exchange between two pods: a request every
// 2 ms, each answered by the other pod's echo server. Requests are not retried, so a packet lost
// on the way is an answer missing at the end.
type podUDPFlow struct {
	id       int
	from, to *testbed.Pod
	conn     net.Conn
	mu       sync.Mutex
	answered map[uint32]bool
	bad      int
	sent     atomic.Uint64
	done     chan struct{}
	sending  chan struct{} // closed when the last request has been sent
	wg       sync.WaitGroup
	stopOnce sync.Once
}

func (f *podUDPFlow) String() string {
	return fmt.Sprintf("udp exchange %d, %s (node%d) -> %s (node%d)", f.id, f.from.IP, f.from.Node.Index, f.to.IP, f.to.Node.Index)
}

func startPodUDPFlow(t *testing.T, id int, from, to *testbed.Pod) *podUDPFlow {
	t.Helper()
	f := &podUDPFlow{id: id, from: from, to: to, answered: map[uint32]bool{}, done: make(chan struct{}), sending: make(chan struct{})}
	err := from.NS.Do(func() (err error) {
		f.conn, err = net.Dial("udp", netip.AddrPortFrom(to.IP, podEchoPort).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.abandon)
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		buf := make([]byte, 2048)
		for {
			n, err := f.conn.Read(buf)
			if err != nil {
				return
			}
			f.mu.Lock()
			if n < 8 || binary.BigEndian.Uint32(buf) != uint32(id) {
				f.bad++
			} else {
				i := binary.BigEndian.Uint32(buf[4:])
				if !bytes.Equal(buf[:n], podDatagram(id, int(i))) {
					f.bad++
				} else {
					f.answered[i] = true
				}
			}
			f.mu.Unlock()
		}
	}()
	go func() {
		defer f.wg.Done()
		defer close(f.sending)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-f.done:
				return
			case <-tick.C:
			}
			f.conn.Write(podDatagram(id, i))
			f.sent.Add(1)
		}
	}()
	return f
}

// podDatagram is request i of UDP exchange id: 8 to 1400 bytes, starting with id and i.
func podDatagram(id, i int) []byte {
	m := binary.BigEndian.AppendUint32(nil, uint32(id))
	m = binary.BigEndian.AppendUint32(m, uint32(i))
	return append(m, podMessage(id, i, 1392)...)
}

// stop ends the requests and waits a second for the last answers.
func (f *podUDPFlow) stop() {
	f.stopOnce.Do(func() {
		close(f.done)
		<-f.sending
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			if sent, answered, _ := f.result(); answered == sent {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		f.conn.Close()
		f.wg.Wait()
	})
}

// abandon ends the requests without waiting for answers (its pod is gone).
func (f *podUDPFlow) abandon() {
	f.stopOnce.Do(func() {
		close(f.done)
		f.conn.Close()
		f.wg.Wait()
	})
}

// result is how many requests were sent, answered, and answered with other bytes.
func (f *podUDPFlow) result() (sent, answered uint64, bad int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent.Load(), uint64(len(f.answered)), f.bad
}

func udpCounts(flows []*podUDPFlow) []uint64 {
	var out []uint64
	for _, f := range flows {
		out = append(out, f.sent.Load())
	}
	return out
}
