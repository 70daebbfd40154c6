package harness

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"

	"github.com/linuxfp/linuxfp/internal/bench/harness/benchtest"
	"github.com/linuxfp/linuxfp/internal/packet"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xa}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xb}
	macC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xc}
)

// The generator must produce a correct frame from whatever the page holds (live-frame pages are
// recycled, and the DUT rewrites MACs, TTL and checksum in place), cycling through the prefixes.
func TestGeneratorFrames(t *testing.T) {
	benchtest.NeedRoot(t)
	benchtest.PinThread(t)
	const prefixes, ifindex = 50, 7
	g, err := newGeneratorProgram(Flow{Src: macA, Dst: macB, SrcIP: testbed.GenAddr, DstIP: testbed.Prefix4(0, 0),
		Prefixes: prefixes, Ifindex: ifindex})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetSize(128); err != nil {
		t.Fatal(err)
	}
	for i := range 2*prefixes + 3 {
		out := runGen(t, g, i)
		if want := genWant(testbed.Prefix4(i%prefixes, 1+i/prefixes), 124); !bytes.Equal(out, want) {
			t.Fatalf("frame %d:\n got %x\nwant %x", i, out, want)
		}
		if c := packet.IPv4HeaderChecksum(out[14:34]); c != binary.BigEndian.Uint16(out[24:26]) {
			t.Fatalf("frame %d: IPv4 checksum %04x, want %04x", i, binary.BigEndian.Uint16(out[24:26]), c)
		}
	}
	if n, err := g.Sent(); err != nil || n != 2*prefixes+3 {
		t.Fatalf("sent %d (%v), want %d", n, err, 2*prefixes+3)
	}
}

// runGen runs the generator once for frame i, on the template or, every other frame, on what a
// forwarded frame leaves in a recycled page (other MACs, TTL 63), and checks that it redirects.
func runGen(t *testing.T, g *Generator, i int) []byte {
	t.Helper()
	in := g.frame
	if i%2 == 1 {
		in = packet.Forwarded(g.frame, macC, macC)
	}
	out := make([]byte, len(in))
	ret, err := g.objs.BenchGen.Run(&ebpf.RunOptions{Data: in, DataOut: out})
	if err != nil {
		t.Fatal(err)
	}
	if ret != 4 { // XDP_REDIRECT
		t.Fatalf("frame %d: verdict %d, want XDP_REDIRECT", i, ret)
	}
	return out
}

// genWant is the frame of size bytes (without FCS) the generator should send to dst.
func genWant(dst netip.Addr, size int) []byte {
	want := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr, Dst: dst, SrcPort: 1024, DstPort: 9, Size: size}.Bytes()
	want[40], want[41] = 0, 0 // no UDP checksum
	return want
}

// With no routed prefixes (the bridge benchmark) every frame goes to the one destination, with
// its checksum intact, whatever the page held.
func TestGeneratorFixedDestination(t *testing.T) {
	benchtest.NeedRoot(t)
	benchtest.PinThread(t)
	g, err := newGeneratorProgram(Flow{Src: macA, Dst: macB, SrcIP: testbed.GenAddr, DstIP: testbed.BridgeSinkAddr, Ifindex: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetSize(64); err != nil {
		t.Fatal(err)
	}
	want := genWant(testbed.BridgeSinkAddr, 60)
	garbage := bytes.Repeat([]byte{0xa5}, len(want))
	for i, in := range [][]byte{g.frame, garbage, g.frame} {
		out := make([]byte, len(in))
		ret, err := g.objs.BenchGen.Run(&ebpf.RunOptions{Data: in, DataOut: out})
		if err != nil {
			t.Fatal(err)
		}
		// The padding after the headers is not rewritten (the DUT does not touch it either).
		if ret != 4 || !bytes.Equal(out[:42], want[:42]) {
			t.Fatalf("frame %d: verdict %d\n got %x\nwant %x", i, ret, out[:42], want[:42])
		}
	}
}

// In list mode the destinations follow the list in order, then from its start again, each
// frame with its checksum right; a shorter list given later takes effect at once.
func TestGeneratorList(t *testing.T) {
	benchtest.NeedRoot(t)
	benchtest.PinThread(t)
	g, err := newGeneratorProgram(Flow{Src: macA, Dst: macB, SrcIP: testbed.GenAddr, DstIP: netip.IPv4Unspecified(),
		List: true, Ifindex: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetSize(64); err != nil {
		t.Fatal(err)
	}
	long := []netip.Addr{testbed.Prefix4(0, 201), testbed.Prefix4(3, 1), netip.MustParseAddr("198.18.255.254"),
		netip.MustParseAddr("255.255.255.255"), testbed.Prefix4(49, 200)}
	short := long[1:3]
	var want []netip.Addr // every frame's destination so far
	done := 0             // frames generated and checked
	check := func() {
		t.Helper()
		for ; done < len(want); done++ {
			// The padding after the headers is not rewritten.
			if out, exp := runGen(t, g, done), genWant(want[done], 60); !bytes.Equal(out[:42], exp[:42]) {
				t.Fatalf("frame %d (to %s):\n got %x\nwant %x", done, want[done], out[:42], exp[:42])
			}
		}
	}
	if err := g.SetDsts(long); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		want = append(want, long...)
	}
	want = append(want, long[:3]...) // stops at the 4th entry
	check()
	if err := g.SetDsts(short); err != nil {
		t.Fatal(err)
	}
	// The next position (3) is past the new list's end: it starts again from its first entry.
	want = append(want, short[0], short[1], short[0])
	check()
	if err := g.SetDsts(nil); err == nil {
		t.Error("an empty list was accepted")
	}
}

func TestSinkVerdicts(t *testing.T) {
	benchtest.NeedRoot(t)
	var objs sinkObjects
	if err := loadSinkObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	src, dst := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.19.3.1")
	udp9 := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: src, Dst: dst, DstPort: 9, Size: 60}.Bytes()
	for _, tc := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"udp to port 9", udp9, 1},
		{"udp to port 10", packet.Spec{SrcMAC: macA, DstMAC: macB, Src: src, Dst: dst, DstPort: 10, Size: 60}.Bytes(), 2},
		{"tcp to port 9", packet.Spec{SrcMAC: macA, DstMAC: macB, Src: src, Dst: dst, Proto: layers.IPProtocolTCP, DstPort: 9, Size: 60}.Bytes(), 2},
		{"ipv6 udp to port 9", packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr6, Dst: testbed.Prefix6(3, 1), DstPort: 9, Size: 80}.Bytes(), 2},
		{"ip options", packet.Spec{SrcMAC: macA, DstMAC: macB, Src: src, Dst: dst, DstPort: 9, Options: []byte{1, 0, 0, 0}, Size: 64}.Bytes(), 2},
		{"arp", arpFrame(), 2},
		{"truncated", udp9[:40], 2},
	} {
		ret, err := objs.BenchSink.Run(&ebpf.RunOptions{Data: tc.frame})
		if err != nil {
			t.Fatal(err)
		}
		if ret != tc.want {
			t.Errorf("%s: verdict %d, want %d", tc.name, ret, tc.want)
		}
	}
	var per []sinkSinkCounter
	if err := objs.SinkCount.Lookup(uint32(0), &per); err != nil {
		t.Fatal(err)
	}
	var c sinkSinkCounter
	for _, p := range per {
		c.Packets += p.Packets
		c.Bytes += p.Bytes
	}
	if c.Packets != 1 || c.Bytes != uint64(len(udp9)) {
		t.Errorf("counted %d packets, %d bytes; want 1, %d", c.Packets, c.Bytes, len(udp9))
	}
}

func TestCeilingVerdicts(t *testing.T) {
	benchtest.NeedRoot(t)
	var eth [12]byte
	copy(eth[:6], macC)
	copy(eth[6:], macB)
	objs := loadTestCeiling(t, map[string]any{ceilingVarCfgEth: eth})
	in := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr, Dst: testbed.Prefix4(1, 1), DstPort: 9, Size: 60}.Bytes()
	out := make([]byte, len(in))
	ret, err := objs.BenchCeiling.Run(&ebpf.RunOptions{Data: in, DataOut: out})
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte(nil), macC...), macB...), in[12:]...)
	if ret != 4 || !bytes.Equal(out, want) {
		t.Errorf("ipv4: verdict %d, frame %x; want 4, %x", ret, out, want)
	}
	if ret, err := objs.BenchCeiling.Run(&ebpf.RunOptions{Data: arpFrame()}); err != nil || ret != 2 {
		t.Errorf("arp: verdict %d (%v), want XDP_PASS", ret, err)
	}
}

// The bridge benchmark's ceiling redirects IPv4 frames as they are and passes the rest.
func TestCeilingL2Verdicts(t *testing.T) {
	benchtest.NeedRoot(t)
	objs := loadTestCeiling(t, map[string]any{ceilingVarCfgL2: uint32(1)})
	for _, tc := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"ipv4", packet.Spec{SrcMAC: macA, DstMAC: macC, Src: testbed.GenAddr, Dst: testbed.BridgeSinkAddr, DstPort: 9, Size: 60}.Bytes(), 4},
		{"ipv6", packet.Spec{SrcMAC: macA, DstMAC: macC, Src: testbed.GenAddr6, Dst: testbed.BridgeSinkAddr6, DstPort: 9, Size: 80}.Bytes(), 2},
		{"arp", arpFrame(), 2},
		{"bridge learning frame", etherFrame(macA, macC, 0x88b5), 2},
	} {
		out := make([]byte, len(tc.frame))
		ret, err := objs.BenchCeiling.Run(&ebpf.RunOptions{Data: tc.frame, DataOut: out})
		if err != nil {
			t.Fatal(err)
		}
		if ret != tc.want || !bytes.Equal(out, tc.frame) {
			t.Errorf("%s: verdict %d, frame %x; want %d, unmodified", tc.name, ret, out, tc.want)
		}
	}
}

// etherFrame is a minimal Ethernet frame of ethertype typ (the bridge benchmark's learning frames
// are such, of a local experimental ethertype).
func etherFrame(src, dst net.HardwareAddr, typ uint16) []byte {
	f := make([]byte, 60)
	copy(f, dst)
	copy(f[6:], src)
	binary.BigEndian.PutUint16(f[12:], typ)
	return f
}

// loadTestCeiling loads the ceiling with vars set, lo standing in for out0 (a test run only
// records the redirect).
func loadTestCeiling(t *testing.T, vars map[string]any) *ceilingObjects {
	t.Helper()
	spec, err := loadCeiling()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			t.Fatal(err)
		}
	}
	var objs ceilingObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	if err := objs.CeilingTx.Put(uint32(0), ceilingBpfDevmapVal{Ifindex: 1}); err != nil {
		t.Fatal(err)
	}
	return &objs
}

// arpFrame is an ARP frame from macA to macB (only the ethertype matters here).
func arpFrame() []byte {
	arp := append(append(append([]byte(nil), macB...), macA...), 0x08, 0x06)
	return append(arp, make([]byte, 46)...)
}

// The tc ceiling redirects IPv4 frames to its ifindex, with the MACs rewritten unless l2, and
// hands everything else on to Linux.
func TestTCCeilingVerdicts(t *testing.T) {
	benchtest.NeedRoot(t)
	var eth [12]byte
	copy(eth[:6], macC)
	copy(eth[6:], macB)
	ipv4 := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr, Dst: testbed.Prefix4(1, 1), DstPort: 9, Size: 60}.Bytes()
	ipv6 := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr6, Dst: testbed.Prefix6(1, 1), DstPort: 9, Size: 80}.Bytes()
	rewritten := append(append(append([]byte(nil), macC...), macB...), ipv4[12:]...)
	const redirect, next = 7, tcxNext // TC_ACT_REDIRECT, TCX_NEXT
	for _, l2 := range []bool{false, true} {
		p, err := loadTCCeiling(l2, eth, 1) // lo: a test run only records the redirect
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		wantIPv4 := rewritten
		if l2 {
			wantIPv4 = ipv4
		}
		for _, tc := range []struct {
			name       string
			frame, out []byte
			verdict    int32
		}{
			{"ipv4", ipv4, wantIPv4, redirect},
			{"ipv6", ipv6, ipv6, next},
			{"arp", arpFrame(), arpFrame(), next},
			{"bridge learning frame", etherFrame(macA, macC, 0x88b5), etherFrame(macA, macC, 0x88b5), next},
		} {
			out := make([]byte, len(tc.frame))
			ret, err := p.Run(&ebpf.RunOptions{Data: tc.frame, DataOut: out})
			if err != nil {
				t.Fatal(err)
			}
			if int32(ret) != tc.verdict || !bytes.Equal(out, tc.out) {
				t.Errorf("l2 %v, %s: verdict %d, frame %x; want %d, %x", l2, tc.name, int32(ret), out, tc.verdict, tc.out)
			}
		}
	}
}
