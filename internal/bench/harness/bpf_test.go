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

// The IPv6 generator cycles through the routed IPv6 prefixes as the IPv4 one does, each frame
// with its UDP checksum right (IPv6 has no "no checksum"), at the smallest IPv6 frame too.
func TestGeneratorFramesIPv6(t *testing.T) {
	benchtest.NeedRoot(t)
	benchtest.PinThread(t)
	const prefixes = 50
	g, err := newGeneratorProgram(Flow{Src: macA, Dst: macB, SrcIP: testbed.GenAddr6, DstIP: testbed.Prefix6(0, 0),
		Prefixes: prefixes, Ifindex: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetSize(64); err == nil {
		t.Error("a 64-byte IPv6 frame was accepted (its headers alone are 62 bytes, with the FCS 66)")
	}
	i := 0 // frames so far: the destinations go on from one size to the next
	for _, size := range []int{MinFrame(true), 128} {
		if err := g.SetSize(size); err != nil {
			t.Fatal(err)
		}
		// 254 hosts of each prefix and a few more: every checksum, and the host wrapping to 1.
		n := 254*prefixes + 3
		if size != MinFrame(true) {
			n = 2*prefixes + 3
		}
		for end := i + n; i < end; i++ {
			out := runGen(t, g, i)
			dst := testbed.Prefix6(i%prefixes, 1+i/prefixes%254)
			want := genWant6(dst, size-FCSLen)
			if !bytes.Equal(out, want) {
				t.Fatalf("%d bytes, frame %d:\n got %x\nwant %x", size, i, out, want)
			}
			if !udp6ChecksumOK(out) {
				t.Fatalf("%d bytes, frame %d: bad UDP checksum %x", size, i, out)
			}
		}
	}
}

// In list mode the IPv6 generator follows the list as the IPv4 one does, whatever the words
// of the addresses (their checksum update adds all eight).
func TestGeneratorListIPv6(t *testing.T) {
	benchtest.NeedRoot(t)
	benchtest.PinThread(t)
	g, err := newGeneratorProgram(Flow{Src: macA, Dst: macB, SrcIP: testbed.GenAddr6, DstIP: netip.IPv6Unspecified(),
		List: true, Ifindex: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetSize(MinFrame(true)); err != nil {
		t.Fatal(err)
	}
	list := []netip.Addr{netip.MustParseAddr("2001:2:0:80::1"), netip.MustParseAddr("2001:2:ffff:ffff:ffff:ffff:ffff:ffff"),
		testbed.Prefix6(3, 1), netip.MustParseAddr("2001:2:1234:5678:9abc:def0:1357:2468")}
	if err := g.SetDsts(list); err != nil {
		t.Fatal(err)
	}
	for i := range 2*len(list) + 1 {
		out := runGen(t, g, i)
		want := genWant6(list[i%len(list)], MinFrame(true)-FCSLen)
		if !bytes.Equal(out, want) || !udp6ChecksumOK(out) {
			t.Fatalf("frame %d (to %s):\n got %x\nwant %x", i, list[i%len(list)], out, want)
		}
	}
	if err := g.SetDsts([]netip.Addr{testbed.Prefix4(0, 1)}); err == nil {
		t.Error("an IPv4 destination was accepted by an IPv6 generator")
	}
}

// A flow whose template cannot serve its mode is refused before anything is loaded.
func TestGeneratorFlowChecks(t *testing.T) {
	for _, f := range []Flow{
		{SrcIP: testbed.GenAddr, DstIP: testbed.Prefix6(0, 0), Prefixes: 50},
		{SrcIP: testbed.GenAddr6, DstIP: testbed.Prefix6(0, 1), Prefixes: 50},
		{SrcIP: testbed.GenAddr6, DstIP: testbed.Prefix4(0, 0), Prefixes: 50},
		{SrcIP: testbed.GenAddr6, DstIP: netip.IPv4Unspecified(), List: true},
		{SrcIP: testbed.GenAddr, DstIP: testbed.Prefix4(0, 0), Prefixes: 300},
	} {
		if err := f.check(); err == nil {
			t.Errorf("flow %+v accepted", f)
		}
	}
	for _, f := range []Flow{
		{SrcIP: testbed.GenAddr6, DstIP: testbed.Prefix6(0, 0), Prefixes: 50},
		{SrcIP: testbed.GenAddr6, DstIP: netip.IPv6Unspecified(), List: true},
		{SrcIP: testbed.GenAddr6, DstIP: testbed.SinkAddr6},
		{SrcIP: testbed.GenAddr, DstIP: testbed.Prefix4(0, 0), Prefixes: 50},
	} {
		if err := f.check(); err != nil {
			t.Errorf("flow %+v: %v", f, err)
		}
	}
}

// genWant6 is the IPv6 frame of size bytes (without FCS) the generator should send to dst.
func genWant6(dst netip.Addr, size int) []byte {
	return packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr6, Dst: dst, SrcPort: 1024, DstPort: 9, Size: size}.Bytes()
}

// udp6ChecksumOK checks an Ethernet + IPv6 + UDP frame's UDP checksum the way a receiver does:
// the one's-complement sum over the pseudo-header and the datagram is 0xffff, and the
// checksum is not 0.
func udp6ChecksumOK(f []byte) bool {
	udp := f[54:]
	ulen := int(binary.BigEndian.Uint16(udp[4:6]))
	if ulen > len(udp) || binary.BigEndian.Uint16(udp[6:8]) == 0 {
		return false
	}
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(f[22:54]) // source and destination addresses
	sum += uint32(ulen) + 17
	add(udp[:ulen])
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
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
	udp69 := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr6, Dst: testbed.Prefix6(3, 1), DstPort: 9, Size: 62}.Bytes()
	for _, tc := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"udp to port 9", udp9, 1},
		{"udp to port 10", packet.Spec{SrcMAC: macA, DstMAC: macB, Src: src, Dst: dst, DstPort: 10, Size: 60}.Bytes(), 2},
		{"tcp to port 9", packet.Spec{SrcMAC: macA, DstMAC: macB, Src: src, Dst: dst, Proto: layers.IPProtocolTCP, DstPort: 9, Size: 60}.Bytes(), 2},
		{"ipv6 udp to port 9", udp69, 1},
		{"ipv6 udp to port 10", packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr6, Dst: testbed.Prefix6(3, 1), DstPort: 10, Size: 80}.Bytes(), 2},
		{"ipv6 hop-by-hop udp to port 9", packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr6, Dst: testbed.Prefix6(3, 1), DstPort: 9, HopByHop: true, Size: 80}.Bytes(), 2},
		{"icmpv6", packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr6, Dst: testbed.Prefix6(3, 1), Proto: layers.IPProtocolICMPv6, ICMPType: 135, Size: 80}.Bytes(), 2},
		{"ipv6 truncated", udp69[:60], 2},
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
	if c.Packets != 2 || c.Bytes != uint64(len(udp9)+len(udp69)) {
		t.Errorf("counted %d packets, %d bytes; want 2, %d", c.Packets, c.Bytes, len(udp9)+len(udp69))
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
	in6 := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr6, Dst: testbed.Prefix6(1, 1), DstPort: 9, Size: 62}.Bytes()
	out6 := make([]byte, len(in6))
	ret, err = objs.BenchCeiling.Run(&ebpf.RunOptions{Data: in6, DataOut: out6})
	if err != nil {
		t.Fatal(err)
	}
	want6 := append(append(append([]byte(nil), macC...), macB...), in6[12:]...)
	if ret != 4 || !bytes.Equal(out6, want6) {
		t.Errorf("ipv6 udp: verdict %d, frame %x; want 4, %x", ret, out6, want6)
	}
	for name, f := range map[string][]byte{"arp": arpFrame(), "neighbour solicitation": nsFrame(), "ipv6 truncated": in6[:50]} {
		if ret, err := objs.BenchCeiling.Run(&ebpf.RunOptions{Data: f}); err != nil || ret != 2 {
			t.Errorf("%s: verdict %d (%v), want XDP_PASS", name, ret, err)
		}
	}
}

// nsFrame is an ICMPv6 neighbour solicitation from macA (what must reach Linux for IPv6
// neighbours to resolve).
func nsFrame() []byte {
	return packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr6, Dst: testbed.InAddr6, Proto: layers.IPProtocolICMPv6,
		ICMPType: 135, Size: 86}.Bytes()
}

// The bridge benchmark's ceiling redirects IPv4 frames and IPv6 UDP ones as they are and passes
// the rest.
func TestCeilingL2Verdicts(t *testing.T) {
	benchtest.NeedRoot(t)
	objs := loadTestCeiling(t, map[string]any{ceilingVarCfgL2: uint32(1)})
	for _, tc := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"ipv4", packet.Spec{SrcMAC: macA, DstMAC: macC, Src: testbed.GenAddr, Dst: testbed.BridgeSinkAddr, DstPort: 9, Size: 60}.Bytes(), 4},
		{"ipv6 udp", packet.Spec{SrcMAC: macA, DstMAC: macC, Src: testbed.GenAddr6, Dst: testbed.BridgeSinkAddr6, DstPort: 9, Size: 80}.Bytes(), 4},
		{"neighbour solicitation", nsFrame(), 2},
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

// The tc ceiling redirects IPv4 frames and IPv6 UDP ones to its ifindex, with the MACs rewritten unless l2, and
// hands everything else on to Linux.
func TestTCCeilingVerdicts(t *testing.T) {
	benchtest.NeedRoot(t)
	var eth [12]byte
	copy(eth[:6], macC)
	copy(eth[6:], macB)
	ipv4 := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr, Dst: testbed.Prefix4(1, 1), DstPort: 9, Size: 60}.Bytes()
	ipv6 := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: testbed.GenAddr6, Dst: testbed.Prefix6(1, 1), DstPort: 9, Size: 80}.Bytes()
	rewritten := append(append(append([]byte(nil), macC...), macB...), ipv4[12:]...)
	rewritten6 := append(append(append([]byte(nil), macC...), macB...), ipv6[12:]...)
	const redirect, next = 7, tcxNext // TC_ACT_REDIRECT, TCX_NEXT
	for _, l2 := range []bool{false, true} {
		p, err := loadTCCeiling(l2, eth, 1) // lo: a test run only records the redirect
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		wantIPv4, wantIPv6 := rewritten, rewritten6
		if l2 {
			wantIPv4, wantIPv6 = ipv4, ipv6
		}
		for _, tc := range []struct {
			name       string
			frame, out []byte
			verdict    int32
		}{
			{"ipv4", ipv4, wantIPv4, redirect},
			{"ipv6 udp", ipv6, wantIPv6, redirect},
			{"neighbour solicitation", nsFrame(), nsFrame(), next},
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
