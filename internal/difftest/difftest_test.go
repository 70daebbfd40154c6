package difftest

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/linuxfp/linuxfp/internal/packet"
)

// These tests show that the comparison can fail: every kind of difference a transparency defect
// could make (a frame missing, one too many, one byte changed, an ICMP error not sent) is
// reported, and normalisation hides only what it says it hides.

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
	dut  = netip.MustParseAddr("198.18.0.1")
	host = netip.MustParseAddr("198.18.0.2")
)

func policy() Policy {
	return Policy{Originated: func(a netip.Addr) bool { return a == dut }}
}

func udp(id int, mutate func(*packet.Spec)) []byte {
	s := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: host, Dst: netip.MustParseAddr("198.19.1.1"),
		SrcPort: 1000, DstPort: 2000, Size: 100, ID: 7, Payload: Marker(id)}
	if mutate != nil {
		mutate(&s)
	}
	return s.Bytes()
}

// icmpError is what the DUT would send back: an ICMP time exceeded quoting frame.
func icmpError(quoted []byte, ipid uint16) []byte {
	s := packet.Spec{SrcMAC: macB, DstMAC: macA, Src: dut, Dst: host, Proto: layers.IPProtocolICMPv4,
		ICMPType: 11, ID: ipid, Payload: quoted[14:]}
	return s.Bytes()
}

func arp(op uint16, dst net.HardwareAddr, target string) []byte {
	buf := gopacket.NewSerializeBuffer()
	gopacket.SerializeLayers(buf, gopacket.SerializeOptions{},
		&layers.Ethernet{SrcMAC: macB, DstMAC: dst, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: op, SourceHwAddress: macB, SourceProtAddress: dut.AsSlice(), DstHwAddress: make([]byte, 6),
			DstProtAddress: netip.MustParseAddr(target).AsSlice()})
	return buf.Bytes()
}

func capture(frames ...[]byte) *Capture {
	c := &Capture{Packets: map[string][]Packet{"sink": nil}}
	for _, f := range frames {
		c.Packets["sink"] = append(c.Packets["sink"], Packet{Data: f})
	}
	return c
}

func TestCompare(t *testing.T) {
	f1, f2 := udp(1, nil), udp(2, nil)
	ttl := udp(2, func(s *packet.Spec) { s.TTL = 63 })
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	cases := []struct {
		name string
		a, b *Capture
		want int // mismatches
	}{
		{"same frames", capture(f1, f2), capture(f1, f2), 0},
		{"order differs", capture(f1, f2, f2), capture(f2, f1, f2), 0},
		{"frame missing", capture(f1, f2), capture(f1), 1},
		{"extra copy", capture(f1, f2), capture(f1, f2, f2), 1},
		{"one byte differs", capture(f1, f2), capture(f1, ttl), 2},
		{"icmp error missing", capture(f1, icmpError(f1, 1)), capture(f1), 1},
		{"icmp errors differ only in id", capture(icmpError(f1, 1)), capture(icmpError(f1, 999)), 0},
		{"icmp errors differ in quote", capture(icmpError(f1, 1)), capture(icmpError(f2, 1)), 2},
		{"forwarded frames differ in id", capture(f1), capture(udp(1, func(s *packet.Spec) { s.ID = 8 })), 2},
		{"arp asked more often", capture(arp(1, bcast, "198.18.1.99")), capture(arp(1, bcast, "198.18.1.99"), arp(1, bcast, "198.18.1.99")), 0},
		{"arp not asked", capture(arp(1, bcast, "198.18.1.99")), capture(), 1},
		{"arp for another address", capture(arp(1, bcast, "198.18.1.99")), capture(arp(1, bcast, "198.18.1.98")), 2},
		{"unicast probe is noise", capture(arp(1, macA, "198.18.1.2")), capture(), 0},
		{"arp reply is noise", capture(arp(2, macA, "198.18.1.2")), capture(), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms := Compare(c.a, c.b, policy().Classify)
			if len(ms) != c.want {
				t.Errorf("got %d mismatches, want %d:\n%s", len(ms), c.want, Report(ms, nil, "a", "b"))
			}
		})
	}
}

func TestNeighbourSolicitation(t *testing.T) {
	// An NS to the solicited-node group is Seen, keyed by its target; a marked one (a corpus
	// frame that happens to be an NS) is compared exactly.
	target := netip.MustParseAddr("2001:2:0:1::99")
	ns := func(payload []byte) []byte {
		return packet.Spec{SrcMAC: macB, DstMAC: net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 0x99},
			Src: netip.MustParseAddr("2001:2:0:1::1"), Dst: netip.MustParseAddr("ff02::1:ff00:99"), TTL: 255,
			Proto: layers.IPProtocolICMPv6, ICMPType: 135, Payload: append(target.AsSlice(), payload...)}.Bytes()
	}
	if v, key := policy().Classify("sink", ns(nil)); v != Seen || !strings.Contains(string(key), target.String()) {
		t.Errorf("solicitation: %s %q, want seen, keyed by %s", v, key, target)
	}
	if v, _ := policy().Classify("sink", ns(Marker(3))); v != Exact {
		t.Errorf("marked solicitation: %s, want exact", v)
	}
}

func TestMarker(t *testing.T) {
	f := udp(123456, nil)
	if id, ok := FindMarker(f); !ok || id != 123456 {
		t.Fatalf("FindMarker = %d, %v; want 123456, true", id, ok)
	}
	if _, ok := FindMarker(f[:40]); ok {
		t.Fatal("found a marker in a frame cut before it")
	}
	corpus := make([]Frame, 123457)
	corpus[123456].Name = "udp"
	if got := Origin(icmpError(f, 1), corpus); !strings.Contains(got, `"udp"`) {
		t.Fatalf("Origin of an ICMP error quoting the frame = %s", got)
	}
}

// vxlan wraps inner in the VXLAN packet a node at src would send to the node at host (outer IPv4
// ID id, UDP source port sport, VNI 1).
func vxlan(inner []byte, id, sport uint16, vni byte) []byte {
	return packet.Spec{SrcMAC: macB, DstMAC: macA, Src: dut, Dst: host, ID: id, SrcPort: sport, DstPort: 8472,
		Payload: append([]byte{0x08, 0, 0, 0, 0, 0, vni, 0}, inner...)}.Bytes()
}

// VXLAN packets: the outer IPv4 ID is a node's own (normalised like any packet it generates),
// the inner frame is compared as a frame of its own; everything else counts.
func TestCompareVXLAN(t *testing.T) {
	p := Policy{Originated: func(a netip.Addr) bool { return a == dut || a == netip.MustParseAddr("198.19.1.1") }, VXLANPort: 8472}
	fwd := udp(1, nil)
	answer := func(id uint16) []byte { // an ICMP error a remote stack generated, tunnelled
		s := packet.Spec{SrcMAC: macB, DstMAC: macA, Src: netip.MustParseAddr("198.19.1.1"), Dst: host,
			Proto: layers.IPProtocolICMPv4, ICMPType: 3, ICMPCode: 3, ID: id, Payload: fwd[14:]}
		return s.Bytes()
	}
	cases := []struct {
		name string
		a, b []byte
		want int
	}{
		{"outer ids differ", vxlan(fwd, 1, 5000, 1), vxlan(fwd, 2, 5000, 1), 0},
		{"inner answers' ids differ", vxlan(answer(1), 1, 5000, 1), vxlan(answer(2), 3, 5000, 1), 0},
		{"inner forwarded frame differs", vxlan(fwd, 1, 5000, 1), vxlan(udp(1, func(s *packet.Spec) { s.TTL = 63 }), 1, 5000, 1), 2},
		{"inner forwarded ids differ", vxlan(fwd, 1, 5000, 1), vxlan(udp(1, func(s *packet.Spec) { s.ID = 8 }), 1, 5000, 1), 2},
		{"outer source port differs", vxlan(fwd, 1, 5000, 1), vxlan(fwd, 1, 5001, 1), 2},
		{"vni differs", vxlan(fwd, 1, 5000, 1), vxlan(fwd, 1, 5000, 2), 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if ms := Compare(capture(c.a), capture(c.b), p.Classify); len(ms) != c.want {
				t.Errorf("got %d mismatches, want %d:\n%s", len(ms), c.want, Report(ms, nil, "a", "b"))
			}
		})
	}
	// Without VXLANPort, a tunnelled answer is compared with its inner ID.
	if ms := Compare(capture(vxlan(answer(1), 1, 5000, 1)), capture(vxlan(answer(2), 1, 5000, 1)), policy().Classify); len(ms) != 2 {
		t.Errorf("without VXLANPort: %d mismatches, want 2", len(ms))
	}
}

func TestVnetHdrPartial(t *testing.T) {
	// struct virtio_net_hdr: flags NEEDS_CSUM, no GSO, csum_start 34, csum_offset 6 (UDP).
	want := []byte{1, 0, 0, 0, 0, 0, 34, 0, 6, 0}
	if got := vnetHdrPartial(34, 6); string(got) != string(want) {
		t.Errorf("vnetHdrPartial(34, 6) = %v, want %v", got, want)
	}
}

func TestVnetHdrGSO(t *testing.T) {
	s := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: host, Dst: dut, Proto: layers.IPProtocolTCP, Size: 4000}
	f := Frame{Data: s.Bytes(), CsumStart: 34, CsumOffset: 16, GSOSize: 1400}
	h := vnetHdrPartial(f.CsumStart, f.CsumOffset)
	if err := vnetHdrGSO(h, f); err != nil {
		t.Fatal(err)
	}
	// gso_type TCPV4, hdr_len 54 (Ethernet, IPv4, TCP), gso_size 1400.
	want := []byte{1, 1, 54, 0, 0x78, 0x05, 34, 0, 16, 0}
	if string(h) != string(want) {
		t.Errorf("virtio_net_hdr %v, want %v", h, want)
	}
	s.Proto = layers.IPProtocolUDP
	if err := vnetHdrGSO(vnetHdrPartial(34, 6), Frame{Data: s.Bytes(), CsumStart: 34, CsumOffset: 6, GSOSize: 1400}); err == nil {
		t.Error("a UDP frame accepted as a TCP GSO train")
	}
}
