// Package packet builds Ethernet frames for tests, the differential corpus and the benchmark
// generator, on top of gopacket's layers.
package packet

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Spec describes one frame. Zero values give a plain UDP packet with TTL 64.
type Spec struct {
	SrcMAC, DstMAC net.HardwareAddr
	Src, Dst       netip.Addr
	TTL            uint8 // TTL or hop limit; 0 means 64
	Proto          layers.IPProtocol
	SrcPort        uint16
	DstPort        uint16
	ICMPType       uint8
	ICMPCode       uint8
	TOS            uint8  // IPv4 TOS / IPv6 traffic class
	FlowLabel      uint32 // IPv6
	ID             uint16 // IPv4 identification
	DF             bool
	MF             bool
	FragOffset     uint16 // in 8-byte units
	Options        []byte // IPv4 options, padded to 4 bytes
	HopByHop       bool   // IPv6: add an empty hop-by-hop options header
	Size           int    // frame length without FCS; the payload is padded up to it
	Payload        []byte // payload start (padded with a counting pattern up to Size)
}

// Bytes serialises the frame with correct lengths and checksums.
func (s Spec) Bytes() []byte {
	if s.TTL == 0 {
		s.TTL = 64
	}
	if s.Proto == 0 {
		s.Proto = layers.IPProtocolUDP
	}
	eth := &layers.Ethernet{SrcMAC: s.SrcMAC, DstMAC: s.DstMAC}
	var ls []gopacket.SerializableLayer
	var netLayer gopacket.NetworkLayer
	hdr := 14
	if s.Dst.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{
			Version: 4, TTL: s.TTL, Protocol: s.Proto, TOS: s.TOS, Id: s.ID,
			SrcIP: s.Src.AsSlice(), DstIP: s.Dst.AsSlice(), FragOffset: s.FragOffset,
		}
		if s.DF {
			ip.Flags |= layers.IPv4DontFragment
		}
		if s.MF {
			ip.Flags |= layers.IPv4MoreFragments
		}
		if len(s.Options) > 0 {
			if s.Options[0] <= 1 || len(s.Options) < 2 { // EOL / NOP have no length byte
				ip.Options = []layers.IPv4Option{{OptionType: s.Options[0], OptionLength: 1}}
			} else {
				ip.Options = []layers.IPv4Option{{OptionType: s.Options[0], OptionLength: uint8(len(s.Options)), OptionData: s.Options[2:]}}
			}
		}
		ls = append(ls, eth, ip)
		netLayer = ip
		hdr += 20 + (len(s.Options)+3)/4*4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{
			Version: 6, HopLimit: s.TTL, NextHeader: s.Proto, TrafficClass: s.TOS, FlowLabel: s.FlowLabel,
			SrcIP: s.Src.AsSlice(), DstIP: s.Dst.AsSlice(),
		}
		ls = append(ls, eth, ip)
		netLayer = ip
		hdr += 40
		if s.HopByHop {
			ip.NextHeader = layers.IPProtocolIPv6HopByHop
			hbh := &layers.IPv6HopByHop{}
			hbh.NextHeader = s.Proto
			hbh.Options = []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: []byte{0, 0, 0, 0}}}
			ls = append(ls, hbh)
			hdr += 8
		}
	}
	switch s.Proto {
	case layers.IPProtocolUDP:
		u := &layers.UDP{SrcPort: layers.UDPPort(s.SrcPort), DstPort: layers.UDPPort(s.DstPort)}
		u.SetNetworkLayerForChecksum(netLayer)
		ls = append(ls, u)
		hdr += 8
	case layers.IPProtocolTCP:
		t := &layers.TCP{SrcPort: layers.TCPPort(s.SrcPort), DstPort: layers.TCPPort(s.DstPort), ACK: true, PSH: true, Seq: 1, Ack: 1, Window: 512}
		t.SetNetworkLayerForChecksum(netLayer)
		ls = append(ls, t)
		hdr += 20
	case layers.IPProtocolICMPv4:
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(s.ICMPType, s.ICMPCode), Id: s.SrcPort, Seq: s.DstPort})
		hdr += 8
	case layers.IPProtocolICMPv6:
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(s.ICMPType, s.ICMPCode)}
		ic.SetNetworkLayerForChecksum(netLayer)
		ls = append(ls, ic, gopacket.Payload([]byte{byte(s.SrcPort >> 8), byte(s.SrcPort), byte(s.DstPort >> 8), byte(s.DstPort)}))
		hdr += 8
	}
	payload := append([]byte(nil), s.Payload...)
	for i := len(payload); hdr+len(payload) < s.Size; i++ {
		payload = append(payload, byte(i))
	}
	if len(payload) > 0 {
		ls = append(ls, gopacket.Payload(payload))
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(fmt.Sprintf("serialise %+v: %v", s, err))
	}
	return append([]byte(nil), buf.Bytes()...)
}

// Forwarded returns what a router forwarding frame out of a device with MAC src to a
// neighbour with MAC dst emits: new MACs, TTL/hop limit minus one, IPv4 checksum updated the
// way Linux's ip_decrease_ttl() does it.
func Forwarded(frame []byte, src, dst net.HardwareAddr) []byte {
	out := append([]byte(nil), frame...)
	copy(out[0:6], dst)
	copy(out[6:12], src)
	switch binary.BigEndian.Uint16(out[12:14]) {
	case 0x0800:
		check := uint32(binary.LittleEndian.Uint16(out[24:26]))
		check += 0x0001 // htons(0x0100) read little-endian
		check = check + boolInt(check >= 0xffff)
		binary.LittleEndian.PutUint16(out[24:26], uint16(check))
		out[22]--
	case 0x86dd:
		out[21]--
	}
	return out
}

func boolInt(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// IPv4HeaderChecksum computes the header checksum of the IPv4 header at b[0:ihl*4].
func IPv4HeaderChecksum(b []byte) uint16 {
	ihl := int(b[0]&0x0f) * 4
	var sum uint32
	for i := 0; i < ihl; i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = (sum & 0xffff) + sum>>16
	}
	return ^uint16(sum)
}
