package e2e

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/linuxfp/linuxfp/internal/difftest"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/packet"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The differential test through the pods topology (testbed.NewPods: two Flannel vxlan nodes,
// pods plugged into cni0 by the CNI bridge plugin's commands, Flannel's iptables rules):
//
//	pod A 198.19.1.2 --+                                          +-- pod C 198.19.2.2
//	pod B 198.19.1.3 --+ cni0  node1  flannel.1 == eth0 <-> eth0 == flannel.1  node2  cni0
//
// Frames are injected at A's eth0, as if A's stack sent them: towards B (bridged through cni0
// and br_netfilter's rules, with conntrack since Flannel's nat chains make netfilter track every
// connection), towards C (routed into flannel.1, encapsulated, sent over the underlay,
// decapsulated, routed into node2's cni0, delivered), towards the nodes themselves, and
// everything around that Linux handles itself. What B and C receive, what crosses the underlay
// both ways (the VXLAN packets) and what comes back to A (ICMP errors, answers, hairpinned
// frames) must be the same bytes with Linux alone (twice: the control) and with linuxfp in both
// nodes.
//
// Conntrack decides a flow's first packet in Linux, so the corpus is made of flows of several
// frames; the fast path should then take at least 90% of the later frames of the flows it can
// take. Most frames are sent as A's stack sends them, with their TCP/UDP checksum left to offload
// (CHECKSUM_PARTIAL, what a container's packets are); others with complete checksums.

// Addresses A owns besides its own, each the source of one frame that Linux answers from
// ip_error() or with a redirect: both rate-limited per source by a token bucket no namespace
// sysctl turns off (see genSources).
const podSources = 16

func podSource(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, 1, byte(200 + i)}) }

// podsDiffMTU is A's MTU (and its host veth's): the underlay's, above the pods' 1450, so that
// frames too big for cni0's other ports and for flannel.1 can be sent.
const podsDiffMTU = 1500

// podDropPorts are the TCP ports B and C drop in their own INPUT chain: a TCP segment of no
// connection they know would otherwise be answered with a reset, which conntrack in the nodes
// sees and which closes the flow's entry, so that its later segments would all be Linux's. (The
// pods are end hosts, not what is under test; the corpus has TCP to other ports too.)
const podDropPorts = "20000:29999"

type podsDiff struct {
	p       *testbed.Pods
	a, b, c *testbed.Pod
	// MACs: the pods' eth0, the nodes' cni0 and eth0.
	aMAC, bMAC, cMAC net.HardwareAddr
	cni1MAC, cni2MAC net.HardwareAddr
	n1MAC, n2MAC     net.HardwareAddr
	aLL, bLL         netip.Addr // A's and B's IPv6 link-local addresses
	linuxfp          [2]*testbed.Linuxfp
}

func TestDifferentialPods(t *testing.T) {
	d := newPodsDiff(t)
	// As containers are: every stack leaves checksums to offload.
	t.Run("offload", func(t *testing.T) {
		d.differential(t, d.corpus(31), true)
	})
	// The underlay without transmit checksum offload (as a NIC without it): the VXLAN packets'
	// checksums are completed in software on the way out, so their receiver has to verify them
	// (node2 hands them to Linux: vxlan_rx), and GSO trains are cut into segments before they
	// cross. linuxfp keeps tc on the underlay (the VXLAN module decapsulates at tc only), and
	// redirects into it through its transmit path, not straight into its peer (bpf_redirect_peer
	// would skip the software checksum: the inner checksums would cross unfilled).
	//
	// GRO is off on flannel.1 here: its gro_cells would merge the segments of a train again after
	// decapsulation, but only those no one else holds a reference to (skb_cloned()), and the
	// capture on the underlay holds one until it has read the frame: whether Linux alone merges
	// a train then depends on the capture's timing (seen: never with the capture, always without
	// it), not on what is tested.
	t.Run("underlay-no-offload", func(t *testing.T) {
		for _, n := range d.p.Nodes {
			sh(t, n.NS, "ethtool -K eth0 tx off\nethtool -K flannel.1 gro off")
		}
		d.differential(t, d.corpus(32), false)
	})
}

func newPodsDiff(t *testing.T) *podsDiff {
	t.Helper()
	requireTool(t, "ethtool")
	requireTool(t, "iptables")
	p := newPodsTopology(t, [2]int{2, 1})
	d := &podsDiff{p: p, a: p.Nodes[0].Pods[0], b: p.Nodes[0].Pods[1], c: p.Nodes[1].Pods[0]}
	n1, n2 := p.Nodes[0], p.Nodes[1]
	var srcs strings.Builder
	for i := range podSources {
		fmt.Fprintf(&srcs, "ip addr add %s/24 dev eth0\n", podSource(i))
	}
	sh(t, d.a.NS, fmt.Sprintf("ip link set eth0 mtu %d\n", podsDiffMTU)+srcs.String())
	sh(t, n1.NS, fmt.Sprintf("ip link set %s mtu %d", d.a.HostVeth, podsDiffMTU))
	// Linux's answers must not depend on timing: no ICMP rate limits (see diffNoRateLimits);
	// fragments that never complete are given up after 1 s (ipfrag_time), not 30, so that none
	// is still queued when the next run sends the same ones.
	for _, ns := range []*nsutil.NS{n1.NS, n2.NS, d.b.NS, d.c.NS} {
		sh(t, ns, diffNoRateLimits+"sysctl -qw net.ipv4.ipfrag_time=1\n")
	}
	for _, pod := range []*testbed.Pod{d.b, d.c} {
		sh(t, pod.NS, "iptables -A INPUT -p tcp --dport "+podDropPorts+" -j DROP")
	}
	d.aMAC, d.bMAC, d.cMAC = nsMAC(t, d.a.NS, "eth0"), nsMAC(t, d.b.NS, "eth0"), nsMAC(t, d.c.NS, "eth0")
	d.cni1MAC, d.cni2MAC = nsMAC(t, n1.NS, "cni0"), nsMAC(t, n2.NS, "cni0")
	d.n1MAC, d.n2MAC = nsMAC(t, n1.NS, "eth0"), nsMAC(t, n2.NS, "eth0")
	d.aLL, d.bLL = linkLocal(t, d.a.NS), linkLocal(t, d.b.NS)
	return d
}

// nsMAC is the MAC of dev in ns.
func nsMAC(t *testing.T, ns *nsutil.NS, dev string) net.HardwareAddr {
	t.Helper()
	out, err := ns.Run("cat", "/sys/class/net/"+dev+"/address")
	if err != nil {
		t.Fatal(err)
	}
	mac, err := net.ParseMAC(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// linkLocal is eth0's IPv6 link-local address in ns (the pods have DAD off: it is usable).
func linkLocal(t *testing.T, ns *nsutil.NS) netip.Addr {
	t.Helper()
	out, err := ns.Run("ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(out) {
		if pfx, err := netip.ParsePrefix(f); err == nil && pfx.Addr().IsLinkLocalUnicast() {
			return pfx.Addr()
		}
	}
	t.Fatalf("no link-local address on eth0 in %s: %s", ns.Name, out)
	return netip.Addr{}
}

// reset puts both nodes and the pods in the same state before every run: no connection tracked;
// every bridge port's pod known in its FDB, as just learned, nothing else; the neighbours the
// runs need REACHABLE, as right after resolving them, nothing else (a first run would otherwise
// resolve what the next finds cached or FAILED, and a neighbour gone STALE would send frames to
// Linux in the linuxfp run).
func (d *podsDiff) reset(t *testing.T) {
	t.Helper()
	n1, n2 := d.p.Nodes[0], d.p.Nodes[1]
	var own strings.Builder
	for i := range podSources {
		fmt.Fprintf(&own, "ip neigh replace %s lladdr %s dev %%s nud reachable\n", podSource(i), d.aMAC)
	}
	ownOn := func(dev string) string { return strings.ReplaceAll(own.String(), "%s", dev) }
	sh(t, n1.NS, fmt.Sprintf(`ip link set cni0 type bridge fdb_flush
bridge fdb replace %[1]s dev %[2]s master dynamic
bridge fdb replace %[3]s dev %[4]s master dynamic
ip -4 neigh flush dev cni0
ip -4 neigh flush dev eth0
ip neigh replace %[5]s lladdr %[1]s dev cni0 nud reachable
ip neigh replace %[6]s lladdr %[3]s dev cni0 nud reachable
ip neigh replace %[7]s lladdr %[8]s dev eth0 nud reachable
`, d.aMAC, d.a.HostVeth, d.bMAC, d.b.HostVeth, d.a.IP, d.b.IP, n2.IP, d.n2MAC)+ownOn("cni0"))
	sh(t, n2.NS, fmt.Sprintf(`ip link set cni0 type bridge fdb_flush
bridge fdb replace %[1]s dev %[2]s master dynamic
ip -4 neigh flush dev cni0
ip -4 neigh flush dev eth0
ip neigh replace %[3]s lladdr %[1]s dev cni0 nud reachable
ip neigh replace %[4]s lladdr %[5]s dev eth0 nud reachable
`, d.cMAC, d.c.HostVeth, d.c.IP, n1.IP, d.n1MAC))
	// B answers A (and A's other addresses) directly, C through its gateway; A only listens.
	sh(t, d.b.NS, fmt.Sprintf(`ip -4 neigh flush dev eth0
ip -6 neigh flush dev eth0
ip neigh replace %[1]s lladdr %[2]s dev eth0 nud reachable
ip neigh replace %[3]s lladdr %[4]s dev eth0 nud reachable
ip -6 neigh replace %[5]s lladdr %[2]s dev eth0 nud reachable
`, d.a.IP, d.aMAC, n1.Gateway, d.cni1MAC, d.aLL)+ownOn("eth0"))
	sh(t, d.c.NS, fmt.Sprintf(`ip -4 neigh flush dev eth0
ip neigh replace %s lladdr %s dev eth0 nud reachable`, n2.Gateway, d.cni2MAC))
	sh(t, d.a.NS, fmt.Sprintf(`ip -4 neigh flush dev eth0
ip neigh replace %s lladdr %s dev eth0 nud reachable
ip neigh replace %s lladdr %s dev eth0 nud reachable`, n1.Gateway, d.cni1MAC, d.b.IP, d.bMAC))
	for _, n := range d.p.Nodes {
		flushConntrack(t, n.NS)
	}
}

// The capture points: the destination pods, the sender, and the underlay of each node (the
// VXLAN packets it receives from the other).
var podsPoints = []string{"A", "B", "C", "node1 eth0", "node2 eth0"}

func (d *podsDiff) run(t *testing.T, c *podsCorpus) *difftest.Capture {
	t.Helper()
	capt, err := difftest.Run(difftest.Options{
		Inject: difftest.Endpoint{Name: "A", NS: d.a.NS, Device: "eth0"},
		Capture: []difftest.Endpoint{
			{Name: "A", NS: d.a.NS, Device: "eth0"},
			{Name: "B", NS: d.b.NS, Device: "eth0"},
			{Name: "C", NS: d.c.NS, Device: "eth0"},
			{Name: "node1 eth0", NS: d.p.Nodes[0].NS, Device: "eth0"},
			{Name: "node2 eth0", NS: d.p.Nodes[1].NS, Device: "eth0"},
		},
		Gap: 500 * time.Microsecond,
		// Long enough for Linux to give up on an unresolved neighbour (3 probes a second
		// apart) and send host unreachable for what it queued.
		Settle: 4 * time.Second,
	}, c.frames)
	if err != nil {
		t.Fatal(err)
	}
	return capt
}

// podsOriginated: the sources of what the testbed's stacks generate themselves (the pods B and
// C answering, the nodes answering or sending VXLAN packets), whose IPv4 IDs differ from run to
// run (see difftest.Policy).
func (d *podsDiff) originated(a netip.Addr) bool {
	n1, n2 := d.p.Nodes[0], d.p.Nodes[1]
	return a == d.b.IP || a == d.c.IP || a == n1.IP || a == n2.IP || a == n1.Gateway || a == n2.Gateway ||
		a == n1.Subnet.Addr() || a == n2.Subnet.Addr()
}

// differential runs the corpus with Linux alone twice, then with linuxfp in both nodes, and
// compares. decap: node2 should decapsulate in the fast path (its underlay receives VXLAN
// packets whose checksum state it can vouch for).
func (d *podsDiff) differential(t *testing.T, c *podsCorpus, decap bool) {
	// The outer IPv4 ID of a VXLAN packet is the node's own (ip_select_ident(): a hashed
	// per-destination counter advanced by a random amount with time); the outer source is a
	// node's address, so the Policy clears it like any ID a stack generates. Everything else
	// in the outer headers is compared (the UDP source port is a hash of the inner flow with a
	// per-boot secret: the same in every run).
	classify := podsClassify(difftest.Policy{Originated: d.originated, VXLANPort: testbed.FlannelPort}.Classify)
	start := time.Now()
	d.reset(t)
	linux := d.run(t, c)
	d.reset(t)
	ctl := d.run(t, c)
	d.reset(t)
	d.startLinuxfp(t)
	before := d.fastCounters(t)
	fp := d.run(t, c)
	after := d.fastCounters(t)
	d.stopLinuxfp(t)
	t.Logf("%d frames (%d cases, %d the fast path should take, %d of them to node2), 3 runs in %s",
		len(c.frames), len(c.cases), c.fast, c.fastInter, time.Since(start).Round(time.Millisecond))
	if *diffCases {
		var b strings.Builder
		outcomes := difftest.Outcomes(linux, c.frames)
		slices.SortFunc(outcomes, func(a, b difftest.CaseOutcome) int { return strings.Compare(a.Name, b.Name) })
		for _, o := range outcomes {
			fmt.Fprintf(&b, "%4d sent:", o.Sent)
			for _, p := range podsPoints {
				fmt.Fprintf(&b, " %4d at %s", o.At[p], p)
			}
			fmt.Fprintf(&b, ": %s\n", o.Name)
		}
		t.Logf("what Linux alone did with each case (frames carrying the case's marker):\n%s", b.String())
	}
	for _, p := range podsPoints {
		t.Logf("at %s: Linux %d frames (%d compared), linuxfp %d frames (%d compared)", p,
			len(linux.Packets[p]), difftest.Count(linux, p, classify), len(fp.Packets[p]), difftest.Count(fp, p, classify))
	}

	// A capture that saw nothing would compare equal to another one that saw nothing.
	for _, p := range []string{"B", "C", "node2 eth0", "A"} {
		if n := difftest.Count(linux, p, classify); n < c.minAt[p] {
			t.Fatalf("%s received %d frames with Linux alone, fewer than the %d sent its way that Linux delivers: the capture is broken", p, n, c.minAt[p])
		}
	}
	if ms := difftest.Compare(linux, ctl, classify); len(ms) > 0 {
		t.Errorf("control: two runs of Linux alone differ in %d ways; the harness is not deterministic "+
			"and a difference with linuxfp would prove nothing:\n%s", len(ms), difftest.Report(ms, c.frames, "linux", "linux again"))
	}
	if ms := difftest.Compare(linux, fp, classify); len(ms) > 0 {
		t.Errorf("linuxfp is not transparent: %d differences with Linux alone:\n%s", len(ms), difftest.Report(ms, c.frames, "linux", "linuxfp"))
	}

	// Without packets on the fast path the comparison would only show that handing everything
	// to Linux is harmless. Where A's frames enter node1 (its host veth), everything fast-pathed
	// counts: bridged to B, encapsulated towards C, or routed into flannel.1 for its driver.
	aVeth := after[0][d.a.HostVeth].sub(before[0][d.a.HostVeth])
	fast := aVeth.bridged + aVeth.encapsulated + aVeth.forwarded
	t.Logf("node1 %s (A): %s", d.a.HostVeth, aVeth)
	for _, name := range []string{"eth0", "flannel.1", d.c.HostVeth} {
		t.Logf("node2 %s: %s", name, after[1][name].sub(before[1][name]))
	}
	if want := uint64(c.fast) * 9 / 10; fast < want {
		t.Errorf("node1 fast-pathed %d of A's frames, want at least %d of the %d it should take", fast, want, c.fast)
	}
	if decap {
		dec := after[1]["eth0"].sub(before[1]["eth0"]).decapsulated
		if want := uint64(c.fastInter) * 9 / 10; dec < want {
			t.Errorf("node2 decapsulated %d VXLAN packets in the fast path, want at least %d of the %d it should take", dec, want, c.fastInter)
		}
	}

	// The comparison must be able to fail on these very captures: without one answer A got
	// back and with the TTL of one frame C received changed, a run differs in exactly three
	// ways (one frame missing at A, one missing and one extra at C).
	mutated := mutatePods(fp)
	if mutated == nil {
		t.Fatal("no answer at A or marked frame at C to mutate: the corpus does not exercise what it should")
	}
	if ms := difftest.Compare(fp, mutated, classify); len(ms) != 3 {
		t.Errorf("harness check: a run with one answer missing and one delivered frame changed differs in %d ways, want 3:\n%s",
			len(ms), difftest.Report(ms, c.frames, "linuxfp", "mutated"))
	}
}

// podsClassify is policy, but for the later fragments of a packet inside a VXLAN packet at an
// underlay, which are not compared there (they are where they are delivered). The receiving node
// reassembles them (conntrack) and fragments the packet again to forward it; ip_do_fragment()
// then reuses the fragments' own buffers, writing the new IP and Ethernet headers in place
// (its fast path checks the head for clones, the other fragments only for sharing), into the
// very buffer the capture's packet socket holds a clone of. What the capture reads depends on
// whether it copied the frame out before that: seen differing between two runs of Linux alone.
func podsClassify(policy difftest.Classifier) difftest.Classifier {
	return func(point string, f []byte) (difftest.Verdict, []byte) {
		if strings.HasSuffix(point, " eth0") && len(f) >= 50+14+20 && f[12] == 8 && f[13] == 0 && f[14+9] == 17 &&
			binary.BigEndian.Uint16(f[14+20+2:]) == testbed.FlannelPort && f[50+12] == 8 && f[50+13] == 0 &&
			binary.BigEndian.Uint16(f[50+14+6:])&0x1fff != 0 {
			return difftest.Ignore, nil
		}
		return policy(point, f)
	}
}

// mutatePods copies c without its first marked frame at A and with the TTL of its first marked
// IPv4 frame at C decremented.
func mutatePods(c *difftest.Capture) *difftest.Capture {
	out := &difftest.Capture{Packets: map[string][]difftest.Packet{}}
	dropped, changed := false, false
	for p, pkts := range c.Packets {
		for _, pk := range pkts {
			_, marked := difftest.FindMarker(pk.Data)
			switch {
			case p == "A" && marked && !dropped:
				dropped = true
				continue
			case p == "C" && marked && !changed && binary.BigEndian.Uint16(pk.Data[12:]) == 0x0800:
				pk.Data = slices.Clone(pk.Data)
				pk.Data[22]--
				changed = true
			}
			out.Packets[p] = append(out.Packets[p], pk)
		}
	}
	if !dropped || !changed {
		return nil
	}
	return out
}

// startLinuxfp runs linuxfp in both nodes and waits until it has programs on every port and
// device the corpus crosses (at the hook it picks: tc on the pods' veths, and on the underlay
// while its peer leaves checksums to offload; native XDP there when it does not).
func (d *podsDiff) startLinuxfp(t *testing.T) {
	t.Helper()
	for i, n := range d.p.Nodes {
		want := []string{"eth0", "flannel.1"}
		for _, pod := range n.Pods {
			want = append(want, pod.HostVeth)
		}
		var hooks []string
		l, err := testbed.StartLinuxfpIn(n.NS, linuxfpBin, func(st *status.Status) bool {
			hooks = hooks[:0]
			for _, it := range st.Interfaces {
				if contains(want, it.Name) && it.Program != nil {
					hooks = append(hooks, it.Name+": "+it.Program.Hook)
				}
			}
			return len(hooks) == len(want)
		})
		if err != nil {
			t.Fatalf("node%d: %v", n.Index, err)
		}
		stopAtCleanup(t, l)
		t.Logf("linuxfp in node%d: %s", n.Index, strings.Join(hooks, ", "))
		d.linuxfp[i] = l
	}
}

func (d *podsDiff) stopLinuxfp(t *testing.T) {
	t.Helper()
	for i, l := range d.linuxfp {
		if err := l.Stop(); err != nil {
			t.Errorf("stop linuxfp in node%d: %v", i+1, err)
		}
		d.linuxfp[i] = nil
	}
}

// fastCounters reads both nodes' counters with `linuxfp status -j`.
func (d *podsDiff) fastCounters(t *testing.T) podsCounters {
	t.Helper()
	return podsSnapshot(t, d.p)
}

// podsCorpus is a deterministic corpus for the pods topology (cases shuffled with a fixed seed,
// every frame carrying the marker of its place in the corpus).
type podsCorpus struct {
	frames []difftest.Frame
	cases  map[string]bool
	// fast: frames node1 should fast-path (every frame of a flow it can take, but the first,
	// which conntrack gives Linux); fastInter: those of them that node2 decapsulates.
	fast, fastInter int
	// minAt: per capture point, frames Linux alone certainly delivers there (a floor that
	// shows the capture works).
	minAt map[string]int
}

type podsItem struct {
	name    string
	partial bool
	gso     uint16 // a TCP GSO train with this segment size
	build   func(mark []byte) []byte
}

type podsBuilder struct {
	d       *podsDiff
	r       *rand.Rand
	items   []podsItem
	pairs   [][2]podsItem // fragments of one packet: the first built first
	c       *podsCorpus
	sources int
}

func (d *podsDiff) newPodsBuilder(seed int64) *podsBuilder {
	return &podsBuilder{d: d, r: rand.New(rand.NewSource(seed)),
		c: &podsCorpus{cases: map[string]bool{}, minAt: map[string]int{}}}
}

// ownSource is an address of A's that no other frame uses (see podSources).
func (b *podsBuilder) ownSource() netip.Addr {
	if b.sources == podSources {
		panic("the corpus uses more than podSources own sources")
	}
	b.sources++
	return podSource(b.sources - 1)
}

func (b *podsBuilder) port() uint16 { return uint16(1024 + b.r.Intn(64000)) }

// to is UDP from A to dst through the node's cni0 (routed: dst MAC cni0's) or, for B, straight to
// B's MAC (bridged), with random ports, ID and DSCP (no ECN codepoint: see the ECN cases), and a
// small size.
func (b *podsBuilder) to(dst netip.Addr) packet.Spec {
	d := b.d
	mac := d.cni1MAC
	if d.p.Nodes[0].Subnet.Contains(dst) && dst != d.p.Nodes[0].Gateway && dst != d.p.Nodes[0].Subnet.Addr() {
		mac = d.bMAC // on A's subnet: A's stack sends it to the host itself
	}
	return packet.Spec{SrcMAC: d.aMAC, DstMAC: mac, Src: d.a.IP, Dst: dst, Proto: layers.IPProtocolUDP,
		SrcPort: b.port(), DstPort: b.port(), ID: uint16(b.r.Intn(1 << 16)), TOS: uint8(b.r.Intn(256)) &^ 3,
		Size: 64 + b.r.Intn(200)}
}

// add appends n frames of case name: spec gives frame i (drawing from b.r now, in order), the
// marker goes after its payload, post edits the serialised bytes; partial frames are sent with
// their TCP/UDP checksum left to offload.
func (b *podsBuilder) add(name string, n int, partial bool, spec func(i int) packet.Spec, post ...func([]byte) []byte) {
	for i := range n {
		s := spec(i)
		b.items = append(b.items, podsItem{name: name, partial: partial, build: func(mark []byte) []byte {
			s.Payload = append(slices.Clone(s.Payload), mark...)
			f := s.Bytes()
			for _, p := range post {
				f = p(f)
			}
			return f
		}})
	}
}

// flow adds n frames of one flow (same addresses, protocol and ports); when fast, all but its
// first count as frames the fast path should take (inter: also through node2's decapsulation).
func (b *podsBuilder) flow(name string, n int, fast, inter, partial bool, spec packet.Spec, vary func(i int, s *packet.Spec), post ...func([]byte) []byte) {
	b.add(name, n, partial, func(i int) packet.Spec {
		s := spec
		s.ID = uint16(b.r.Intn(1 << 16))
		if vary != nil {
			vary(i, &s)
		}
		return s
	}, post...)
	if fast {
		b.c.fast += n - 1
		if inter {
			b.c.fastInter += n - 1
		}
	}
}

// fragmented adds the two fragments of the packet spec gives, split at byte at of its IPv4
// payload (a multiple of 8, beyond the marker), so that they reassemble.
func (b *podsBuilder) fragmented(name string, spec packet.Spec, at int) {
	var second []byte
	b.pairs = append(b.pairs, [2]podsItem{
		{name: name, build: func(mark []byte) []byte {
			s := spec
			s.Payload = append(slices.Clone(s.Payload), mark...)
			first, rest := fragments(s.Bytes(), at)
			second = rest
			return first
		}},
		{name: name, build: func([]byte) []byte { return second }},
	})
}

func (b *podsBuilder) done() *podsCorpus {
	b.r.Shuffle(len(b.items), func(i, j int) { b.items[i], b.items[j] = b.items[j], b.items[i] })
	// Each pair of fragments somewhere, the first before the second (and built first).
	for _, pr := range b.pairs {
		i := b.r.Intn(len(b.items) + 1)
		j := i + 1 + b.r.Intn(len(b.items)-i+1)
		b.items = slices.Insert(b.items, i, pr[0])
		b.items = slices.Insert(b.items, j, pr[1])
	}
	c := b.c
	for i, it := range b.items {
		f := difftest.Frame{Name: it.name, Data: it.build(difftest.Marker(i))}
		if it.partial {
			f.CsumStart, f.CsumOffset = leaveToOffload(f.Data)
			f.GSOSize = it.gso
		}
		c.frames = append(c.frames, f)
		c.cases[it.name] = true
	}
	return c
}

// leaveToOffload turns an IPv4 or IPv6 TCP or UDP frame (no IPv6 extension headers) into what
// a stack with transmit checksum offload hands its device: the checksum field holds the
// pseudo-header sum (not complemented; what tcp_v4_send_check(), udp4_hwcsum() and their IPv6
// counterparts leave), to be completed from the L4 header on. It returns where that header and
// the field are.
func leaveToOffload(f []byte) (start, offset uint16) {
	var l4, l4len int
	var proto byte
	var addrs []byte
	switch {
	case len(f) >= 14+20 && binary.BigEndian.Uint16(f[12:]) == 0x0800:
		ihl := int(f[14]&0x0f) * 4
		l4, l4len, proto, addrs = 14+ihl, int(binary.BigEndian.Uint16(f[16:]))-ihl, f[14+9], f[26:34]
	case len(f) >= 14+40 && binary.BigEndian.Uint16(f[12:]) == 0x86dd:
		l4, l4len, proto, addrs = 14+40, int(binary.BigEndian.Uint16(f[18:])), f[14+6], f[22:54]
	default:
		panic("leaveToOffload: not IPv4 or IPv6")
	}
	switch proto {
	case 6:
		offset = 16
	case 17:
		offset = 6
	default:
		panic("leaveToOffload: not TCP or UDP")
	}
	// The same one's complement sum for both families: the addresses, the protocol and the L4
	// length (IPv6 puts the last two in 32-bit fields, whose upper halves are zero here).
	sum := uint32(proto) + uint32(l4len)
	for i := 0; i < len(addrs); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(addrs[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(f[l4+int(offset):], uint16(sum))
	return uint16(l4), offset
}

// fragments splits a frame's IPv4 payload at byte at (a multiple of 8): the first fragment
// with MF, the second with the rest; both keep the header (and its ID).
func fragments(f []byte, at int) ([]byte, []byte) {
	ihl := int(f[14]&0x0f) * 4
	hdr, payload := f[:14+ihl], f[14+ihl:]
	mk := func(part []byte, off int, mf bool) []byte {
		out := append(slices.Clone(hdr), part...)
		binary.BigEndian.PutUint16(out[16:], uint16(ihl+len(part)))
		fo := uint16(off / 8)
		if mf {
			fo |= 0x2000
		}
		binary.BigEndian.PutUint16(out[20:], fo)
		return fixCsum4(out)
	}
	return mk(payload[:at], 0, true), mk(payload[at:], at, false)
}

// corpus builds the corpus.
func (d *podsDiff) corpus(seed int64) *podsCorpus {
	b := d.newPodsBuilder(seed)
	r := b.r
	n1, n2 := d.p.Nodes[0], d.p.Nodes[1]
	B, C := d.b.IP, d.c.IP
	sizes := []int{60, 64, 65, 100, 128, 256, 512, 576, 1000, 1280, 1400, 1413, 14 + testbed.PodsMTU}
	size := func() int {
		if r.Intn(3) == 0 {
			return 64 + r.Intn(14+testbed.PodsMTU-64+1)
		}
		return sizes[r.Intn(len(sizes))]
	}
	ttl := func() uint8 { return uint8(3 + r.Intn(253)) }
	tcp := func(s *packet.Spec) { s.Proto = layers.IPProtocolTCP }
	dropped := func() uint16 { return uint16(20000 + r.Intn(10000)) } // see podDropPorts
	vary := func(anyTTL bool) func(int, *packet.Spec) {
		return func(_ int, s *packet.Spec) {
			s.Size, s.TTL, s.DF = size(), ttl(), r.Intn(2) == 0
			if anyTTL && r.Intn(4) == 0 {
				s.TTL = uint8(1 + r.Intn(2)) // bridged: the TTL is no bridge's business
			}
		}
	}

	// Flows the fast path takes once conntrack has an entry: UDP and TCP (ACK|PSH segments,
	// which conntrack picks up mid-stream as an ESTABLISHED connection, liberal), to B
	// (bridged) and to C (encapsulated), sent as a container sends them.
	const per = 4
	for i := range 24 {
		s := b.to(B)
		s.DstPort = dropped()
		if i%2 == 1 {
			tcp(&s)
		}
		b.flow(fmt.Sprintf("to B, %s, offloaded checksum", s.Proto), per, true, false, true, s, vary(true))
		s = b.to(C)
		s.DstPort = dropped()
		if i%2 == 1 {
			tcp(&s)
		}
		b.flow(fmt.Sprintf("to C, %s, offloaded checksum", s.Proto), per, true, true, true, s, vary(false))
	}
	// GSO trains, as a TCP stack sends a large write (A's MTU is 1500: segments the size of
	// the pods' MSS): bridged whole, or routed into flannel.1, whose driver encapsulates them
	// (and the underlay passes them on whole, or segments them when it has no offload).
	const mss = testbed.PodsMTU - 40
	for i := range 8 {
		dst, to := B, "to B"
		if i%2 == 1 {
			dst, to = C, "to C"
		}
		s := b.to(dst)
		tcp(&s)
		s.DstPort, s.TTL = dropped(), ttl()
		first := len(b.items)
		b.flow(to+", tcp gso train", 3, true, false, true, s, func(_ int, s *packet.Spec) {
			s.Size = 14 + 40 + mss + 1 + r.Intn(3*mss)
		})
		// (node2 leaves GSO trains to Linux, vxlan_rx: not counted as its to decapsulate)
		for k := first; k < len(b.items); k++ {
			b.items[k].gso = mss
		}
	}
	// UDP without a checksum: nothing to offload, nothing to verify.
	zeroUDPCsum := func(f []byte) []byte { f[14+20+6], f[14+20+7] = 0, 0; return f }
	for range 6 {
		b.flow("to B, udp, no checksum", per, true, false, false, b.to(B), vary(true), zeroUDPCsum)
		b.flow("to C, udp, no checksum", per, true, true, false, b.to(C), vary(false), zeroUDPCsum)
	}
	// Ethernet padding beyond the IP packet: br_netfilter trims it when bridging, the router
	// when forwarding.
	for i := range 4 {
		s := b.to(B)
		s.DstPort = dropped()
		b.flow("to B, padded", 3, true, false, true, s, func(int, *packet.Spec) {}, pad(1+i*13))
		s = b.to(C)
		s.DstPort = dropped()
		b.flow("to C, padded", 3, true, true, true, s, func(int, *packet.Spec) {}, pad(1+i*13))
	}
	// ECN codepoints: the vxlan driver copies them into the outer header, where
	// vxlan_ecn_decapsulate() may act on them: node2 leaves those to Linux.
	for ecn := range 4 {
		s := b.to(C)
		s.DstPort, s.TOS = dropped(), s.TOS|uint8(ecn)
		b.flow(fmt.Sprintf("to C, ecn %d", ecn), 3, true, ecn == 0, true, s, vary(false))
		s = b.to(B)
		s.DstPort, s.TOS = dropped(), s.TOS|uint8(ecn)
		b.flow(fmt.Sprintf("to B, ecn %d", ecn), 3, true, false, true, s, vary(true))
	}
	// TTL 2 to C: node1 forwards it with TTL 1, node2 answers time exceeded.
	for range 3 {
		s := b.to(C)
		s.TTL = 2
		b.flow("to C, ttl 2", 3, true, true, true, s, nil)
	}
	// Complete checksums (a stack without offload): conntrack verifies them
	// (nf_conntrack_checksum), so does the fast path or Linux.
	for i := range 4 {
		s := b.to(B)
		s.DstPort = dropped()
		if i%2 == 1 {
			tcp(&s)
		}
		b.flow("to B, complete checksum", 3, false, false, false, s, vary(true))
		s = b.to(C)
		s.DstPort = dropped()
		if i%2 == 1 {
			tcp(&s)
		}
		b.flow("to C, complete checksum", 3, false, true, false, s, vary(false))
	}
	// IPv6 between A and B's link-local addresses: bridged; no nat chain, no conntrack.
	for range 4 {
		s := b.to(B)
		s.Src, s.Dst, s.FlowLabel = d.aLL, d.bLL, uint32(r.Intn(1<<20))
		b.add("to B, ipv6 udp", 3, false, func(int) packet.Spec { t := s; t.Size = size(); return t })
		b.c.fast += 3
	}

	// A source MAC cni0 has not learned yet: Linux learns it from the first frame.
	newMAC := net.HardwareAddr{0x02, 0x42, 0xc6, 0x13, 0x01, 0x63}
	b.add("to B, from a MAC not learned yet", 3, true, func(int) packet.Spec { s := b.to(B); s.SrcMAC = newMAC; return s })
	b.add("to C, from a MAC not learned yet", 2, true, func(int) packet.Spec { s := b.to(C); s.SrcMAC = newMAC; return s })
	// Other sources: another pod's address on this node (C answers B), martians (node1 drops
	// them when routing; the bridge does not look). (Not a pod address of another node: Flannel
	// masquerades that, with a random port.)
	b.add("to C, from B's address", 3, true, func(int) packet.Spec { s := b.to(C); s.Src = B; return s })
	for _, src := range []string{"127.0.0.1", "0.0.0.0", "224.0.0.5", "198.19.1.255"} {
		b.add("to C, from "+src, 1, true, func(int) packet.Spec { s := b.to(C); s.Src = addr(src); return s })
	}
	for _, src := range []string{"127.0.0.1", "0.0.0.0"} {
		b.add("to B, from "+src, 1, true, func(int) packet.Spec { s := b.to(B); s.Src = addr(src); s.DstPort = dropped(); return s })
	}

	// Answered by B and C: UDP to a closed port, TCP to a port without a socket, echo.
	b.add("to B, udp to a closed port", 3, true, func(int) packet.Spec { return b.to(B) })
	b.add("to C, udp to a closed port", 3, true, func(int) packet.Spec { return b.to(C) })
	b.add("to B, tcp, reset", 2, true, func(int) packet.Spec { s := b.to(B); tcp(&s); s.DstPort = 80; return s })
	b.add("to C, tcp, reset", 2, true, func(int) packet.Spec { s := b.to(C); tcp(&s); s.DstPort = 80; return s })
	b.add("echo to B", 3, false, func(int) packet.Spec { s := b.to(B); echo4(&s); return s })
	b.add("echo to C", 3, false, func(int) packet.Spec { s := b.to(C); echo4(&s); return s })

	// TTL expiring in node1; TTL 0.
	b.add("to C, ttl 1", 4, true, func(i int) packet.Spec { s := b.to(C); s.TTL = 1; return s })
	b.add("to C, ttl 1, complete checksum", 2, false, func(i int) packet.Spec { s := b.to(C); s.TTL = 1; return s })
	b.add("to C, ttl 0", 2, false, func(int) packet.Spec { return b.to(C) }, setByte(14+8, 0), fixCsum4)

	// IPv4 options: br_netfilter parses them (and may drop), the router processes them.
	opts := []struct {
		name string
		o    []byte
	}{
		{"nop", []byte{1, 1, 1, 1}}, {"record route", []byte{7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0}},
		// (A timestamp option with room would get the time of day: a full one, which only
		// counts its overflow.)
		{"router alert", []byte{148, 4, 0, 0}}, {"timestamp full", []byte{68, 12, 13, 0x10, 0, 0, 0, 1, 0, 0, 0, 2}},
		{"length beyond the header", []byte{7, 40, 4, 0, 0, 0, 0, 0, 0, 0, 0}},
	}
	for _, o := range opts {
		b.add("to B, ip option "+o.name, 2, false, func(int) packet.Spec { s := b.to(B); s.Options = o.o; return s })
		b.add("to C, ip option "+o.name, 2, false, func(int) packet.Spec { s := b.to(C); s.Options = o.o; return s })
	}

	// Fragments: conntrack reassembles them (and the bridge or the router fragments the
	// packet again as it came); alone, a fragment waits in vain for its companions.
	for _, dst := range []netip.Addr{B, C} {
		to := "to B"
		if dst == C {
			to = "to C"
		}
		for k := range 3 {
			s := b.to(dst)
			s.Size = 300 + r.Intn(1000)
			if k == 2 {
				tcp(&s)
			}
			b.fragmented(to+", fragmented", s, 8*(10+r.Intn(20)))
		}
		b.add(to+", lone first fragment", 2, false, func(int) packet.Spec { s := b.to(dst); s.MF = true; return s })
		b.add(to+", lone later fragment", 2, false, func(int) packet.Spec { s := b.to(dst); s.FragOffset = 100; return s })
	}

	// Bad checksums: the IPv4 header's (Linux drops the packet), the UDP/TCP one (conntrack
	// calls it invalid; it is forwarded all the same, to be dropped by the receiver).
	b.add("to B, bad ip header checksum", 3, false, func(int) packet.Spec { return b.to(B) }, badCsum4)
	b.add("to C, bad ip header checksum", 3, false, func(int) packet.Spec { return b.to(C) }, badCsum4)
	badL4 := func(f []byte) []byte { f[14+20+6] ^= 0x33; return f }
	b.add("to B, bad udp checksum", 3, false, func(int) packet.Spec { s := b.to(B); s.DstPort = dropped(); return s }, badL4)
	b.add("to C, bad udp checksum", 3, false, func(int) packet.Spec { s := b.to(C); s.DstPort = dropped(); return s }, badL4)
	badTCP := func(f []byte) []byte { f[14+20+16] ^= 0x33; return f }
	b.add("to C, bad tcp checksum", 3, false, func(int) packet.Spec { s := b.to(C); tcp(&s); s.DstPort = dropped(); return s }, badTCP)
	b.add("to C, total length beyond the frame", 2, false, func(int) packet.Spec { return b.to(C) }, totLen4(+20))
	b.add("to B, total length beyond the frame", 2, false, func(int) packet.Spec { return b.to(B) }, totLen4(+20))

	// Destination MACs cni0 floods or delivers to the node.
	for _, m := range []struct {
		name string
		mac  net.HardwareAddr
	}{{"broadcast", bcastMAC}, {"unknown unicast", otherMAC}, {"multicast", mcast4MAC2}} {
		b.add("to B, "+m.name+" destination MAC", 2, true, func(int) packet.Spec { s := b.to(B); s.DstMAC = m.mac; return s })
		b.add("to C, "+m.name+" destination MAC", 2, true, func(int) packet.Spec { s := b.to(C); s.DstMAC = m.mac; return s })
	}
	b.add("to A's own MAC (hairpin)", 2, true, func(int) packet.Spec { s := b.to(B); s.DstMAC = d.aMAC; return s })
	b.add("to 239.1.2.3", 2, false, func(int) packet.Spec { s := b.to(addr("239.1.2.3")); s.DstMAC = mcast4MAC2; return s })
	b.add("arp request for B", 2, false, func(int) packet.Spec { s := b.to(B); s.DstMAC = bcastMAC; return s }, arpRequest(d.aMAC, d.a.IP, B))
	b.add("arp request for node1's gateway", 1, false, func(int) packet.Spec { s := b.to(B); s.DstMAC = bcastMAC; return s }, arpRequest(d.aMAC, d.a.IP, n1.Gateway))

	// The nodes' own addresses: answered (echo, port unreachable, reset) by node1, or by node2
	// over the tunnel. (Not node2's underlay address: a pod's packets to an address outside the
	// cluster network are masqueraded by Flannel's rule with --random-fully, a random port per
	// connection, which two runs of Linux do not share; NAT is TestDifferentialNAT's.)
	for _, a := range []netip.Addr{n1.Gateway, n1.Subnet.Addr(), n1.IP, n2.Gateway, n2.Subnet.Addr()} {
		b.add("echo to node address "+a.String(), 2, false, func(int) packet.Spec { s := b.to(a); echo4(&s); return s })
		b.add("udp to node address "+a.String(), 1, true, func(int) packet.Spec { return b.to(a) })
		b.add("tcp to node address "+a.String(), 1, true, func(int) packet.Spec { s := b.to(a); tcp(&s); return s })
	}
	b.add("echo to node1's gateway, ttl 1", 1, false, func(int) packet.Spec { s := b.to(n1.Gateway); echo4(&s); s.TTL = 1; return s })
	b.add("to the subnet broadcast of node1", 2, false, func(int) packet.Spec { s := b.to(addr("198.19.1.255")); s.DstMAC = d.cni1MAC; return s })
	b.add("to the subnet broadcast of node2", 2, false, func(int) packet.Spec { return b.to(addr("198.19.2.255")) })

	// Addresses no pod has: node1 or node2 asks for them in vain and answers host
	// unreachable; no route at all (ip_error: net unreachable, from own sources).
	// (On node1's subnet, through the gateway: routed back out of cni0, so a redirect each as
	// well: own sources.)
	b.add("to node1's subnet through the gateway, no pod", 3, true, func(int) packet.Spec {
		s := b.to(addr("198.19.1.77"))
		s.DstMAC, s.Src = d.cni1MAC, b.ownSource()
		return s
	})
	b.add("to node2's subnet, no pod", 3, true, func(int) packet.Spec { return b.to(addr("198.19.2.77")) })
	for _, a := range []string{"198.19.3.5", "198.18.7.7"} {
		b.add("to "+a+", no route", 2, true, func(int) packet.Spec { s := b.to(addr(a)); s.Src = b.ownSource(); return s })
	}

	// Routed back out of cni0 (to B through the gateway): Linux forwards it and sends A a
	// redirect.
	b.add("to B through the gateway (redirect)", 3, true, func(int) packet.Spec {
		s := b.to(B)
		s.DstMAC, s.Src, s.DstPort = d.cni1MAC, b.ownSource(), dropped()
		return s
	})

	// Too big for cni0's other ports and for flannel.1 (A's MTU is 1500): the bridge drops
	// them, the router fragments them or answers frag needed.
	for _, df := range []bool{true, false} {
		for _, partial := range []bool{true, false} {
			name := fmt.Sprintf("too big, DF %v, offloaded checksum %v", df, partial)
			b.add("to B, "+name, 2, partial, func(int) packet.Spec {
				s := b.to(B)
				s.Size, s.DF = 14+testbed.PodsMTU+1+r.Intn(podsDiffMTU-testbed.PodsMTU), df
				return s
			})
			b.add("to C, "+name, 2, partial, func(int) packet.Spec {
				s := b.to(C)
				s.Size, s.DF = 14+testbed.PodsMTU+1+r.Intn(podsDiffMTU-testbed.PodsMTU), df
				return s
			})
		}
	}
	c := b.done()
	// What certainly arrives: the fast flows' frames (bridged to B, delivered to C, crossing
	// the underlay), and the answers to the echo requests.
	c.minAt["B"], c.minAt["C"], c.minAt["node2 eth0"], c.minAt["A"] = (c.fast-c.fastInter)/2, c.fastInter/2, c.fastInter/2, 6
	return c
}

// arpRequest replaces a frame by a broadcast ARP request from mac/ip asking for target (the
// frame's marker goes after it, as Ethernet padding).
func arpRequest(mac net.HardwareAddr, ip, target netip.Addr) func([]byte) []byte {
	return func(f []byte) []byte {
		mark, _ := difftest.FindMarker(f)
		out := append(slices.Clone(bcastMAC), mac...)
		out = append(out, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1)
		out = append(out, mac...)
		out = append(out, ip.AsSlice()...)
		out = append(out, 0, 0, 0, 0, 0, 0)
		out = append(out, target.AsSlice()...)
		return append(out, difftest.Marker(mark)...)
	}
}
