package e2e

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/linuxfp/linuxfp/internal/difftest"
	"github.com/linuxfp/linuxfp/internal/packet"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// A dual-stack node (testbed.NewServices with IPv6: kube-proxy's ip6tables rules, the pods on
// cni0 with bridge-nf-call-ip6tables on, as by default) and a pod reaching a pod on the same
// bridge through an IPv6 cluster IP, over TCP and UDP. Linux does not route those packets:
//   - the client pod's packets go to cni0's MAC (its gateway); br_netfilter's IPv6 prerouting
//     hook DNATs them to the backend pod, and since the new destination is routed out of cni0
//     itself, br_nf_pre_routing_finish_ipv6() bridges them there
//     (br_nf_pre_routing_finish_bridge(): the backend's MAC as destination, the source MAC and
//     the hop limit kept);
//   - the backend's answers go straight to the client pod's MAC, bridged, their source
//     translated back to the cluster IP at br_netfilter's IPv6 postrouting hook (the
//     destination stays: no routing).
//
// Frames are injected at the pods' eth0, as their stacks send them (checksums complete, or left
// to offload), in three phases: each flow's first packet both ways (Linux creates and completes
// the conntrack entry; TCP segments are picked up mid-stream, liberal), after 2 s one more
// datagram of each UDP flow (which makes it ASSURED), then the flows' established packets both
// ways. What the two pods receive must be the same bytes with Linux alone (twice: the control)
// and with linuxfp, which must bridge the established packets of both directions (none handed
// to Linux as ct_nat or hairpin), translated as br_netfilter translates them.
func TestKubeProxyBridgedNAT6(t *testing.T) {
	requireTool(t, "ip6tables")
	s := newServices(t, "lfp-e2e-brnat6", testbed.ServicesOptions{Pods: 3, IPv6: true})
	backend, client := s.Pods[0], s.Pods[1]
	bIP, cIP := testbed.PodIP6(backend.IP), testbed.PodIP6(client.IP)
	svc := testbed.ServiceIP6(0)
	const tcpPort, udpPort = 8080, 5353 // the backend's
	k6 := testbed.KubeProxy{ClusterCIDR: testbed.ServicesPodCIDR6, ServiceCIDR: testbed.ServicesCIDR6, Services: []testbed.KubeService{
		kubeSvc("bridged", "tcp", svc, 80, 0, netip.AddrPortFrom(bIP, tcpPort)),
		kubeSvc("bridged", "udp", svc, 53, 0, netip.AddrPortFrom(bIP, udpPort)),
	}}
	if err := k6.Apply(s.Node); err != nil {
		t.Fatal(err)
	}
	// Linux's answers (an ICMPv6 error about an INVALID frame) must not depend on timing.
	sh(t, s.Node, diffNoRateLimits)
	// The pods are end hosts, not under test: they drop what they receive of the flows, so that
	// no reset or port unreachable of theirs moves the conntrack entries.
	sh(t, backend.NS, fmt.Sprintf("ip6tables -A INPUT -p tcp --dport %d -j DROP\nip6tables -A INPUT -p udp --dport %d -j DROP", tcpPort, udpPort))
	sh(t, client.NS, "ip6tables -A INPUT -p tcp --dport 40000:40999 -j DROP\nip6tables -A INPUT -p udp --dport 40000:40999 -j DROP")
	bMAC, cMAC := nsMAC(t, backend.NS, "eth0"), nsMAC(t, client.NS, "eth0")

	type flow struct {
		tcp   bool
		sport uint16
	}
	var flows []flow
	for i := range 8 {
		flows = append(flows, flow{tcp: i%2 == 0, sport: uint16(40000 + i)})
	}
	r := rand.New(rand.NewSource(6))
	// orig is a packet of f from the client pod to the cluster IP, through its gateway; reply one
	// from the backend pod to the client pod.
	orig := func(f flow) packet.Spec {
		sp := packet.Spec{SrcMAC: cMAC, DstMAC: s.BridgeMAC, Src: cIP, Dst: svc, Proto: layers.IPProtocolUDP, SrcPort: f.sport, DstPort: 53}
		if f.tcp {
			sp.Proto, sp.DstPort = layers.IPProtocolTCP, 80
		}
		return sp
	}
	reply := func(f flow) packet.Spec {
		sp := packet.Spec{SrcMAC: bMAC, DstMAC: cMAC, Src: bIP, Dst: cIP, Proto: layers.IPProtocolUDP, SrcPort: udpPort, DstPort: f.sport}
		if f.tcp {
			sp.Proto, sp.SrcPort = layers.IPProtocolTCP, tcpPort
		}
		return sp
	}
	const fromBackend = "backend pod"
	type corpus struct {
		frames []difftest.Frame
		fast   map[string]int // frames the fast path should take, by the veth they enter the node by
	}
	newCorpus := func() *corpus { return &corpus{fast: map[string]int{}} }
	// add appends a frame (the reply direction's sent from the backend pod); fast: one the fast
	// path should take once the flow is established; partial: its checksum left to offload.
	add := func(c *corpus, name string, sp packet.Spec, isReply, partial, fast bool, post ...func([]byte)) {
		sp.Payload = difftest.Marker(len(c.frames))
		if sp.Size == 0 {
			sp.Size = 100
		}
		sp.TOS, sp.FlowLabel = uint8(r.Intn(64))<<2, uint32(r.Intn(1<<20))
		f := difftest.Frame{Name: name, Data: sp.Bytes()}
		for _, p := range post {
			p(f.Data)
		}
		if partial {
			f.CsumStart, f.CsumOffset = leaveToOffload(f.Data)
		}
		in := client.HostVeth
		if isReply {
			f.Via, in = fromBackend, backend.HostVeth
		}
		if fast {
			c.fast[in]++
		}
		c.frames = append(c.frames, f)
	}
	protoName := func(f flow) string {
		if f.tcp {
			return "tcp"
		}
		return "udp"
	}

	first, assure, established := newCorpus(), newCorpus(), newCorpus()
	for _, f := range flows {
		add(first, "first original, "+protoName(f), orig(f), false, false, false)
		add(first, "first reply, "+protoName(f), reply(f), true, false, false)
		if !f.tcp {
			add(assure, "udp original after 2 s", orig(f), false, false, false)
		}
	}
	sizes := []int{66, 80, 200, 600, 1000, 1280, 14 + testbed.PodsMTU}
	for _, f := range flows {
		for k := range 6 {
			sp, isReply, what := orig(f), k%2 == 1, "original"
			if isReply {
				sp, what = reply(f), "reply"
			}
			sp.Size = sizes[r.Intn(len(sizes))]
			partial := k < 4
			name := fmt.Sprintf("%s, %s, checksum complete", what, protoName(f))
			if partial {
				name = fmt.Sprintf("%s, %s, checksum left to offload", what, protoName(f))
			}
			add(established, name, sp, isReply, partial, true)
		}
	}
	udp, tcp := flows[1], flows[0]
	zeroUDPCsum := func(b []byte) { b[14+40+6], b[14+40+7] = 0, 0 }
	add(established, "original, udp checksum 0", orig(udp), false, false, true, zeroUDPCsum)
	add(established, "reply, udp checksum 0", reply(udp), true, false, true, zeroUDPCsum)
	// Bridging does not look at the hop limit; the fast path's router checks it before it
	// knows the packet is bridged (Linux's then, bridged all the same).
	hl1 := func(sp packet.Spec) packet.Spec { sp.TTL = 1; return sp }
	add(established, "original, hop limit 1", hl1(orig(tcp)), false, false, false)
	add(established, "reply, hop limit 1", hl1(reply(tcp)), true, false, true)
	// INVALID for conntrack (it verifies checksums): not translated, Linux's either way.
	add(established, "original, bad tcp checksum", orig(tcp), false, false, false, func(b []byte) { b[14+40+16] ^= 0x5a })
	add(established, "reply, bad udp checksum", reply(udp), true, false, false, func(b []byte) { b[14+40+7] ^= 0x5a })
	r.Shuffle(len(established.frames), func(i, j int) {
		established.frames[i], established.frames[j] = established.frames[j], established.frames[i]
	})

	// reset: no connection tracked, the pods' MACs learned on their ports and their neighbour
	// entries in the node REACHABLE, as right after resolving them.
	reset := func() {
		sh(t, s.Node, fmt.Sprintf(`bridge fdb replace %[1]s dev %[2]s master dynamic
bridge fdb replace %[3]s dev %[4]s master dynamic
ip -6 neigh replace %[5]s lladdr %[1]s dev cni0 nud reachable
ip -6 neigh replace %[6]s lladdr %[3]s dev cni0 nud reachable
`, bMAC, backend.HostVeth, cMAC, client.HostVeth, bIP, cIP))
		flushConntrack(t, s.Node)
	}
	inject := func(c *corpus) *difftest.Capture {
		capt, err := difftest.Run(difftest.Options{
			Inject:  difftest.Endpoint{Name: "client pod", NS: client.NS, Device: "eth0"},
			Via:     []difftest.Endpoint{{Name: fromBackend, NS: backend.NS, Device: "eth0"}},
			Capture: []difftest.Endpoint{{Name: "backend pod", NS: backend.NS, Device: "eth0"}, {Name: "client pod", NS: client.NS, Device: "eth0"}},
			Gap:     time.Millisecond, Settle: 300 * time.Millisecond,
		}, c.frames)
		if err != nil {
			t.Fatal(err)
		}
		return capt
	}
	type result struct {
		capts      [3]*difftest.Capture
		all, estab kubeSnap // linuxfp's counters over the run, and over its established phase
	}
	run := func(withLinuxfp bool) result {
		var res result
		reset()
		res.capts[0] = inject(first)
		assureAt := time.Now().Add(2200 * time.Millisecond) // udp_packet(): a stream after 2 s
		var l *testbed.Linuxfp
		var s0 kubeSnap
		if withLinuxfp {
			l = startLinuxfp6(t, s, backend.HostVeth, client.HostVeth)
			s0 = kubeSnapshot(t, l)
		}
		time.Sleep(time.Until(assureAt))
		res.capts[1] = inject(assure)
		if l != nil {
			s1 := kubeSnapshot(t, l)
			res.capts[2] = inject(established)
			s2 := kubeSnapshot(t, l)
			res.all, res.estab = s2.sub(s0), s2.sub(s1)
			if err := l.Stop(); err != nil {
				t.Errorf("stop linuxfp: %v", err)
			}
		} else {
			res.capts[2] = inject(established)
		}
		return res
	}

	classify := func(_ string, f []byte) (difftest.Verdict, []byte) {
		if _, marked := difftest.FindMarker(f); !marked || len(f) < 14+40 || binary.BigEndian.Uint16(f[12:]) != 0x86dd {
			return difftest.Ignore, nil
		}
		return difftest.Exact, f
	}
	linux, control, fp := run(false), run(false), run(true)

	phases := []*corpus{first, assure, established}
	names := []string{"first packets", "udp after 2 s", "established"}
	for i, c := range phases {
		// Everything reaches a pod with Linux alone but the two frames conntrack finds INVALID
		// (not translated: KUBE-FORWARD drops the reply, the original has no route).
		want := len(c.frames)
		if c == established {
			want -= 2
		}
		if n := difftest.Count(linux.capts[i], "backend pod", classify) + difftest.Count(linux.capts[i], "client pod", classify); n < want {
			t.Fatalf("%s: Linux alone delivered %d of the %d frames: the setup is not what the test assumes", names[i], n, len(c.frames))
		}
		if ms := difftest.Compare(linux.capts[i], control.capts[i], classify); len(ms) > 0 {
			t.Errorf("%s: control: two runs of Linux alone differ:\n%s", names[i], difftest.Report(ms, c.frames, "Linux", "Linux again"))
		}
		if ms := difftest.Compare(linux.capts[i], fp.capts[i], classify); len(ms) > 0 {
			t.Errorf("%s: the pods received different frames:\n%s", names[i], difftest.Report(ms, c.frames, "Linux", "linuxfp"))
		}
	}
	for _, in := range []string{client.HostVeth, backend.HostVeth} {
		all, d := fp.all[in], fp.estab[in]
		for _, reason := range []string{"ct_nat", "hairpin"} {
			if n := all.passed[reason]; n > 0 {
				t.Errorf("%s handed %d packets to Linux as %s (%s)", in, n, reason, all)
			}
		}
		// Less the frame per source and second Linux's bridge refreshes its FDB entry from
		// (bridge_refresh, bpf/lib/fdb.h).
		if want := uint64(established.fast[in]) - d.passed["bridge_refresh"]; d.forwarded < want {
			t.Errorf("%s: the fast path took %d of the established frames entering there, want at least %d (%s)", in, d.forwarded, want, d)
		}
		t.Logf("%s, established phase: %s; whole run: %s", in, d, all)
	}
}

// startLinuxfp6 runs linuxfp in the services topology's node and waits until both pods' veths
// have programs for IPv6 with the conntrack module.
func startLinuxfp6(t *testing.T, s *testbed.Services, veths ...string) *testbed.Linuxfp {
	t.Helper()
	l, err := testbed.StartLinuxfpIn(s.Node, linuxfpBin, func(st *status.Status) bool {
		got := 0
		for _, it := range st.Interfaces {
			if contains(veths, it.Name) && it.Program != nil && contains(it.Program.Families, "ipv6") {
				got++
			}
		}
		return got == len(veths) && contains(st.Conntrack, "ipv6")
	})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, l)
	return l
}
