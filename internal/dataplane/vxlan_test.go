package dataplane

import (
	"bytes"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/difftest"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/packet"
)

// The VXLAN encapsulation of the tc build must put on the wire what the kernel's vxlan driver
// puts there for the same packet: each frame is routed once by Linux (injected on in0's peer,
// forwarded into flannel.1, encapsulated by the driver, captured on out0's peer) and once by the
// program (BPF_PROG_TEST_RUN as if received on in0), and the outer frames must be equal but for
// the IPv4 ID (Linux's is a hashed counter, see vxlan.h) and the header checksum that covers it.
const vxlanTopology = `
ip link add in0 address 02:00:00:00:00:01 type veth peer name in0p
ip link add out0 address 02:00:00:00:00:02 type veth peer name out0p
ip link set in0 up
ip link set in0p up
ip link set out0 up
ip link set out0p up
ip addr add 198.18.0.1/24 dev in0
ip addr add 198.18.1.1/24 dev out0
sysctl -qw net.ipv4.ip_forward=1
ip neigh replace 198.18.0.2 lladdr 02:00:00:00:00:05 dev in0 nud permanent
ip neigh replace 198.18.1.2 lladdr 02:00:00:00:00:03 dev out0 nud permanent
ip link add flannel.1 address 02:00:00:00:00:0a type vxlan id 7 local 198.18.1.1 dev out0 dstport 8472 nolearning noudpcsum
ip link set flannel.1 mtu 1450
ip addr add 198.19.1.0/32 dev flannel.1
ip link set flannel.1 up
ip route add 198.19.2.0/24 via 198.19.2.0 dev flannel.1 onlink
ip neigh add 198.19.2.0 lladdr 02:00:00:00:00:0b dev flannel.1 nud permanent
bridge fdb append 02:00:00:00:00:0b dev flannel.1 dst 198.18.1.2
`

func newVXLANEnv(t *testing.T) *testEnv {
	requireRoot(t)
	ns, err := nsutil.New("lfp-vxtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	if err := ns.Script(vxlanTopology); err != nil {
		t.Fatal(err)
	}
	env := &testEnv{ns: ns, hook: HookTC, progs: map[progKey]*ebpf.Program{}}
	var in, out, vx int
	err = ns.Do(func() error {
		dp, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
		if err != nil {
			return err
		}
		env.dp = dp
		idx := func(n string) int { l, _ := netlink.LinkByName(n); return l.Attrs().Index }
		in, out, vx = idx("in0"), idx("out0"), idx("flannel.1")
		env.in, env.out = in, out
		return dp.Sync(vxlanData(in, out, vx, false))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.dp.Close() })
	env.vx = vx
	if b, _ := ns.Run("cat", "/proc/sys/net/ipv4/ip_local_port_range"); strings.Join(strings.Fields(b), " ") != "32768 60999" {
		t.Skipf("ip_local_port_range %q: the test assumes the default", b)
	}
	return env
}

var macVX = net.HardwareAddr{2, 0, 0, 0, 0, 0x0a} // flannel.1

// vxlanData is the vxlan tests' data; inPeer: in0 as a container's veth (delivery with
// bpf_redirect_peer), where a frame decapsulated on out0 may be routed by out0's program.
func vxlanData(in, out, vx int, inPeer bool) Data {
	tx := tcTx(in, out, vx)
	tx[0].Peer, tx[0].PeerMTU = inPeer, 1500
	return Data{
		TxData: TxData{TCTx: tx},
		VXLANData: VXLANData{VXLAN: []VXLANDev{{Ifindex: vx, VNI: 7, Local: netip.MustParseAddr("198.18.1.1"), Port: 8472, PortMin: 32768, PortMax: 60999}},
			VXLANFDB: []VXLANFDBEntry{{Dev: vx, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0x0b}, Dst: netip.MustParseAddr("198.18.1.2"), VNI: 7}},
			VXLANRx:  []VXLANRx{{Dev: vx, Port: 8472, VNI: 7, Local: netip.MustParseAddr("198.18.1.1"), MAC: macVX}},
			VX:       VXHost{LocalOut4: true, LocalIn4: true, DefaultTTL: 64},
		},
	}
}

func TestVXLANEncapMatchesDriver(t *testing.T) {
	env := newVXLANEnv(t)
	ns, in := env.ns, env.in
	prog := env.prog(t, true, true)

	spec := func(f func(*packet.Spec)) []byte {
		s := packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: netip.MustParseAddr("198.18.0.2"), Dst: netip.MustParseAddr("198.19.2.7"),
			SrcPort: 1000, DstPort: 2000, Size: 100}
		f(&s)
		return s.Bytes()
	}
	cases := []struct {
		name string
		pkt  []byte
	}{
		{"udp", spec(func(*packet.Spec) {})},
		{"udp other ports (another source port hash)", spec(func(s *packet.Spec) { s.SrcPort, s.DstPort = 4242, 53 })},
		{"tcp", spec(func(s *packet.Spec) { s.Proto = layers.IPProtocolTCP })},
		{"ecn ect(0)", spec(func(s *packet.Spec) { s.TOS = 0x02 })},
		{"ecn ce: outer ect(0)", spec(func(s *packet.Spec) { s.TOS = 0x13 })},
		{"dscp not inherited", spec(func(s *packet.Spec) { s.TOS = 0xb8 })},
		{"ttl 2", spec(func(s *packet.Spec) { s.TTL = 2 })},
		{"1400 bytes", spec(func(s *packet.Spec) { s.Size = 1400 })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			capt, err := difftest.Run(difftest.Options{
				Inject:  difftest.Endpoint{Name: "in", NS: ns, Device: "in0p"},
				Capture: []difftest.Endpoint{{Name: "out", NS: ns, Device: "out0p"}},
				Settle:  200 * time.Millisecond,
			}, []difftest.Frame{{Name: c.name, Data: c.pkt}})
			if err != nil {
				t.Fatal(err)
			}
			var linux []byte
			for _, p := range capt.Packets["out"] {
				if len(p.Data) > 23 && p.Data[23] == 17 && p.Data[36] == 0x21 && p.Data[37] == 0x18 { // UDP to 8472
					linux = p.Data
				}
			}
			if linux == nil {
				t.Fatalf("the driver sent nothing: %d frames captured", len(capt.Packets["out"]))
			}
			ret, got, reason := env.runOn(t, prog, c.pkt, in)
			if reason != Encapsulated || ret != xdpRedirect {
				t.Fatalf("reason %v verdict %d, want encapsulated", reason, ret)
			}
			got = got[:len(linux)]
			mask := func(b []byte) []byte {
				b = append([]byte(nil), b...)
				b[18], b[19], b[24], b[25] = 0, 0, 0, 0 // IPv4 ID and header checksum
				return b
			}
			if !bytes.Equal(mask(got), mask(linux)) {
				t.Fatalf("outer frames differ (ID and checksum masked):\n driver %s\n linuxfp %s", hex.EncodeToString(linux), hex.EncodeToString(got))
			}
			if packet.IPv4HeaderChecksum(append(got[14:24:24], append([]byte{0, 0}, got[26:34]...)...)) != uint16(got[24])<<8|uint16(got[25]) {
				t.Fatal("outer IPv4 header checksum wrong")
			}
		})
	}
}

// Decapsulation: an outer frame from the remote VTEP through Linux alone (the driver decapsulates,
// Linux routes the inner packet to in0) and through the programs (out0's decapsulates and hands
// the inner frame to flannel.1's receive path, where flannel.1's routes it) must leave in0 with
// the same bytes; what the fast path does not do exactly goes to Linux.
func TestVXLANDecapMatchesDriver(t *testing.T) {
	env := newVXLANEnv(t)
	load := func(s Spec, slot int) *ebpf.Program {
		s.Hook, s.Router4, s.Router6, s.Conntrack4, s.Conntrack6 = HookTC, true, true, true, true
		p, err := env.dp.LoadProgram(s, slot)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	outProg := load(Spec{Ifindex: env.out, Name: "out0", MAC: MACOf(macOut)}, 0)
	vxProg := load(Spec{Ifindex: env.vx, Name: "flannel.1", MAC: MACOf(macVX)}, 1)
	// out0's program as the graph specialises it where flannel.1's program qualifies.
	inlineProg := load(Spec{Ifindex: env.out, Name: "out0", MAC: MACOf(macOut), VXLANRxRoute: true}, 0)
	remote := net.HardwareAddr{2, 0, 0, 0, 0, 0x0b}
	outer := func(inner []byte, f func(b []byte)) []byte {
		s := packet.Spec{SrcMAC: macNext, DstMAC: macOut, Src: netip.MustParseAddr("198.18.1.2"), Dst: netip.MustParseAddr("198.18.1.1"),
			SrcPort: 40000, DstPort: 8472, Payload: append([]byte{8, 0, 0, 0, 0, 0, 7, 0}, inner...)}
		s.Size = 14 + 20 + 8 + len(s.Payload)
		b := s.Bytes()
		b[40], b[41] = 0, 0 // UDP checksum 0, as Flannel's devices send
		if f != nil {
			f(b)
		}
		return b
	}
	inner := func(f func(*packet.Spec)) []byte {
		s := packet.Spec{SrcMAC: remote, DstMAC: macVX, Src: netip.MustParseAddr("198.19.2.7"), Dst: netip.MustParseAddr("198.18.0.2"),
			SrcPort: 53, DstPort: 1000, Size: 90}
		if f != nil {
			f(&s)
		}
		return s.Bytes()
	}
	cases := []struct {
		name string
		pkt  []byte
		want Reason // on out0
	}{
		{"udp", outer(inner(nil), nil), Decapsulated},
		{"tcp", outer(inner(func(s *packet.Spec) { s.Proto = layers.IPProtocolTCP; s.Size = 300 }), nil), Decapsulated},
		{"outer udp checksum", outer(inner(nil), func(b []byte) { b[40], b[41] = 0x12, 0x34 }), PassVXLAN},
		{"another flag", outer(inner(nil), func(b []byte) { b[42] |= 0x80 }), PassVXLAN},
		{"outer ecn ce", outer(inner(nil), func(b []byte) { b[15] |= 3; fixCsum(b) }), PassVXLAN},
		{"inner frame from the device itself", outer(inner(func(s *packet.Spec) { s.SrcMAC = macVX }), nil), PassVXLAN},
		{"another vni", outer(inner(nil), func(b []byte) { b[48] = 9 }), PassFIBNotForwarded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ret, got, reason := env.runOn(t, outProg, c.pkt, env.out)
			if reason != c.want {
				t.Fatalf("reason %v, want %v", reason, c.want)
			}
			if c.want != Decapsulated {
				if ret != xdpPass || !bytes.Equal(got[:len(c.pkt)], c.pkt) {
					t.Fatalf("verdict %d, not handed to Linux untouched", ret)
				}
				return
			}
			if ret != xdpRedirect {
				t.Fatalf("verdict %d, want a redirect to flannel.1's receive path", ret)
			}
			innerFrame := got[:len(c.pkt)-50]
			if !bytes.Equal(innerFrame, c.pkt[50:]) {
				t.Fatalf("decapsulated frame:\n got %s\nwant %s", hex.EncodeToString(innerFrame), hex.EncodeToString(c.pkt[50:]))
			}
			fwdBefore := env.slotCounters(t, 1)[Forwarded].Packets
			ret, fwd, _ := env.runOn(t, vxProg, innerFrame, env.vx)
			if fwdAfter := env.slotCounters(t, 1)[Forwarded].Packets; fwdAfter != fwdBefore+1 || ret != xdpRedirect {
				t.Fatalf("flannel.1's program: forwarded %d -> %d, verdict %d", fwdBefore, fwdAfter, ret)
			}
			fwd = fwd[:len(innerFrame)]
			capt, err := difftest.Run(difftest.Options{
				Inject:  difftest.Endpoint{Name: "out", NS: env.ns, Device: "out0p"},
				Capture: []difftest.Endpoint{{Name: "in", NS: env.ns, Device: "in0p"}},
				Settle:  200 * time.Millisecond,
			}, []difftest.Frame{{Name: c.name, Data: c.pkt}})
			if err != nil {
				t.Fatal(err)
			}
			var linux []byte
			for _, p := range capt.Packets["in"] {
				if len(p.Data) == len(fwd) && p.Data[12] == 8 && p.Data[13] == 0 {
					linux = p.Data
				}
			}
			if !bytes.Equal(fwd, linux) {
				t.Fatalf("leaving in0:\n Linux   %s\n linuxfp %s", hex.EncodeToString(linux), hex.EncodeToString(fwd))
			}

			// Routed in out0's program: in0 is no container's veth here, so the inner
			// frame goes to flannel.1's receive path as before, untouched.
			ret, got, _ = env.runOn(t, inlineProg, c.pkt, env.out)
			if ret != xdpRedirect || !bytes.Equal(got[:len(innerFrame)], innerFrame) {
				t.Fatalf("out0's program routing inline towards a plain veth: verdict %d, frame %s, want flannel.1's receive path",
					ret, hex.EncodeToString(got[:len(innerFrame)]))
			}
			// As a container's veth: the same frame flannel.1's program sends, counted as
			// flannel.1's, with the priority a redirect into flannel.1 leaves (zero).
			env.syncVXLAN(t, true)
			defer env.syncVXLAN(t, false)
			_, want, _ := env.runOn(t, vxProg, innerFrame, env.vx)
			want = want[:len(innerFrame)]
			before := env.slotCounters(t, 1)
			ret, got, _ = env.runSkb(t, inlineProg, c.pkt, skbMD{Ifindex: uint32(env.out), Priority: 6})
			after := env.slotCounters(t, 1)
			if ret != xdpRedirect || !bytes.Equal(got[:len(want)], want) {
				t.Fatalf("out0's program routing inline: verdict %d\n got  %s\n want %s", ret,
					hex.EncodeToString(got[:len(want)]), hex.EncodeToString(want))
			}
			if after[Forwarded].Packets != before[Forwarded].Packets+1 {
				t.Fatalf("flannel.1's forwarded counter %d -> %d, want one more", before[Forwarded].Packets, after[Forwarded].Packets)
			}
			if env.ctxOut.Priority != 0 {
				t.Fatalf("priority %d after the inline route, want 0 (____dev_forward_skb)", env.ctxOut.Priority)
			}
		})
	}
}

// The VXLAN outer route's next hop (the underlay neighbour 198.18.1.2) becoming STALE after the
// FIB cache kept the route's answer: the next packet goes the driver's way (which moves the
// neighbour on), as one does before the answer was kept; the cache's note that the next hop was
// not in the STALE set holds only under its generation.
func TestVXLANOuterNeighbourStale(t *testing.T) {
	env := newVXLANEnv(t)
	data := vxlanData(env.in, env.out, env.vx, false)
	data.FibCacheData = FibCacheData{FibCache4: true}
	data.NeighData = NeighData{StaleByEvents: true}
	if err := env.ns.Do(func() error { return env.dp.Sync(data) }); err != nil {
		t.Fatal(err)
	}
	prog := env.prog(t, true, true)
	pkt := packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: netip.MustParseAddr("198.18.0.2"), Dst: netip.MustParseAddr("198.19.2.7"),
		SrcPort: 1000, DstPort: 2000, Size: 100}.Bytes()
	encap := func(want bool) {
		t.Helper()
		if _, _, reason := env.runOn(t, prog, pkt, env.in); (reason == Encapsulated) != want {
			t.Fatalf("reason %v, want encapsulated %v", reason, want)
		}
	}
	encap(true)
	encap(true)
	env.markStale(t, env.out, netip.MustParseAddr("198.18.1.2"))
	encap(false)
	encap(true)
}

// A change of the vxlan device waiting for the controller (the link fence closed for
// flannel.1, not for out0): out0's program hands VXLAN for it to Linux untouched, whose
// vxlan_rcv() acts on the device's new configuration, and decapsulates again once the fence
// lets the change through.
func TestVXLANDecapDeviceFenced(t *testing.T) {
	env := newVXLANEnv(t)
	env.syncVXLAN(t, false)
	s := Spec{Ifindex: env.out, Name: "out0", MAC: MACOf(macOut), Hook: HookTC, Router4: true, Conntrack4: true}
	prog, err := env.dp.LoadProgram(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	in := packet.Spec{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 0x0b}, DstMAC: macVX, Src: netip.MustParseAddr("198.19.2.7"),
		Dst: netip.MustParseAddr("198.18.0.2"), SrcPort: 53, DstPort: 1000, Size: 90}.Bytes()
	o := packet.Spec{SrcMAC: macNext, DstMAC: macOut, Src: netip.MustParseAddr("198.18.1.2"), Dst: netip.MustParseAddr("198.18.1.1"),
		SrcPort: 40000, DstPort: 8472, Payload: append([]byte{8, 0, 0, 0, 0, 0, 7, 0}, in...)}
	o.Size = 14 + 20 + 8 + len(o.Payload)
	pkt := o.Bytes()
	pkt[40], pkt[41] = 0, 0
	run := func(want Reason) {
		t.Helper()
		ret, got, reason := env.runOn(t, prog, pkt, env.out)
		if reason != want {
			t.Fatalf("reason %v, want %v", reason, want)
		}
		if want != Decapsulated && (ret != xdpPass || !bytes.Equal(got[:len(pkt)], pkt)) {
			t.Fatalf("verdict %d, not handed to Linux untouched", ret)
		}
	}
	run(Decapsulated)
	env.fenceLink(t, env.vx)
	run(PassFenced)
	if err := env.dp.maps.LfpIfFence.Delete(uint32(env.vx)); err != nil {
		t.Fatal(err)
	}
	run(Decapsulated)
}

func (e *testEnv) syncVXLAN(t *testing.T, inPeer bool) {
	t.Helper()
	if err := e.ns.Do(func() error { return e.dp.Sync(vxlanData(e.in, e.out, e.vx, inPeer)) }); err != nil {
		t.Fatal(err)
	}
}

func (e *testEnv) slotCounters(t *testing.T, slot int) []Counter {
	t.Helper()
	c, err := e.dp.Counters(slot)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
