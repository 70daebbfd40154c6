package difftest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Policy is the comparison policy of the forwarding differential tests: what the promise "same
// bytes out, same ICMP errors back" covers, and what it does not.
//
//   - Every frame that carries a corpus marker (forwarded frames, fragments of them, ICMP errors
//     and redirects quoting them) is compared exactly, whatever it is.
//   - Neighbour resolution is compared as a set: a broadcast ARP request or a multicast neighbour
//     solicitation is keyed by the address it asks for and must appear in both runs or in
//     neither (Linux trying to resolve an address is part of its behaviour, how many times it
//     asks depends on timers). Unicast ARP/ND (reachability probes of known neighbours, replies),
//     DAD, router solicitations and advertisements, MLD and IGMP are noise: they follow the
//     neighbour and multicast timers of each stack, not the packets sent.
//   - Everything else is compared exactly after normalisation (below).
type Policy struct {
	// Originated tells whether an IPv4 source address is one of the testbed's own stacks
	// (the DUT's addresses, the sink's), whose packets are generated rather than forwarded.
	Originated func(netip.Addr) bool
	// VXLANPort, if not 0, is the UDP port of the VXLAN packets between the testbed's nodes
	// (Flannel's 8472). Their outer headers are a node's own (its vxlan device builds them), so
	// the outer IPv4 ID goes as for any packet a node generates when Originated says the outer
	// source is one; and the inner frame is normalised as a frame of its own (an answer a pod
	// generated, carried across: its ID differs from run to run inside the tunnel as well).
	VXLANPort uint16
}

// Classify is a Classifier.
func (p Policy) Classify(_ string, frame []byte) (Verdict, []byte) {
	if _, marked := FindMarker(frame); !marked {
		if v, key, ok := neighbourNoise(frame); ok {
			return v, key
		}
	}
	return Exact, p.normalise(frame)
}

// normalise clears what two runs of Linux alone produce differently, and nothing else.
func (p Policy) normalise(frame []byte) []byte {
	out := p.normaliseIPv4(frame)
	start, ok := p.vxlanInner(frame)
	if !ok {
		return out
	}
	inner := p.normalise(frame[start:])
	if bytes.Equal(inner, frame[start:]) {
		return out
	}
	// The outer UDP checksum covers the inner frame (what udp_set_csum() leaves in it when the
	// inner checksum is left to offload, or a complete one), so it goes with what went inside.
	out = append(slices.Clip(out[:start]), inner...)
	l4 := 14 + int(frame[14]&0x0f)*4
	out[l4+6], out[l4+7] = 0, 0
	return out
}

// vxlanInner returns where the inner Ethernet frame of a VXLAN packet (IPv4, UDP to
// p.VXLANPort, not a fragment) starts.
func (p Policy) vxlanInner(f []byte) (int, bool) {
	if p.VXLANPort == 0 || len(f) < 14+20 || binary.BigEndian.Uint16(f[12:14]) != 0x0800 || f[14]>>4 != 4 || f[14+9] != 17 {
		return 0, false
	}
	if binary.BigEndian.Uint16(f[14+6:])&0x3fff != 0 { // a fragment
		return 0, false
	}
	l4 := 14 + int(f[14]&0x0f)*4
	start := l4 + 8 + 8 // UDP, VXLAN header
	if l4 < 14+20 || len(f) < start+14 || binary.BigEndian.Uint16(f[l4+2:]) != p.VXLANPort {
		return 0, false
	}
	return start, true
}

// normaliseIPv4 clears the IPv4 ID of a packet a testbed stack generated (see normalise).
func (p Policy) normaliseIPv4(frame []byte) []byte {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:14]) != 0x0800 || p.Originated == nil {
		return frame
	}
	src := netip.AddrFrom4([4]byte(frame[26:30]))
	if !p.Originated(src) {
		return frame
	}
	// A packet Linux generates itself (ICMP error, echo reply, TCP reset) gets its IPv4 ID from
	// ip_select_ident(): a hashed per-destination counter advanced by a random amount with time,
	// so it differs from run to run (and with DF set on a socket without a peer it is 0). The
	// header checksum covers the ID, so it goes too. Forwarded packets keep the sender's ID and
	// are compared with it (unless they carry an Originated source address, which a corpus
	// spoofing one accepts). IPv6 needs nothing of the kind: there is no ID, and the flow label
	// Linux puts on what it generates is a hash of the flow with a per-boot secret, the same in
	// both runs.
	out := append([]byte(nil), frame...)
	out[14+4], out[14+5] = 0, 0   // identification
	out[14+10], out[14+11] = 0, 0 // header checksum
	return out
}

// neighbourNoise classifies ARP, ND, MLD and IGMP frames; ok is false for anything else.
func neighbourNoise(f []byte) (Verdict, []byte, bool) {
	if len(f) < 14 {
		return 0, nil, false
	}
	group := f[0]&1 == 1 // broadcast or multicast destination MAC
	switch binary.BigEndian.Uint16(f[12:14]) {
	case 0x0806: // ARP
		a := f[14:]
		if len(a) < 28 || binary.BigEndian.Uint16(a[0:2]) != 1 || binary.BigEndian.Uint16(a[2:4]) != 0x0800 {
			return Ignore, nil, true
		}
		if binary.BigEndian.Uint16(a[6:8]) == 1 && group {
			return Seen, fmt.Appendf(nil, "arp request for %s", netip.AddrFrom4([4]byte(a[24:28]))), true
		}
		return Ignore, nil, true
	case 0x0800:
		if len(f) >= 14+20 && f[14+9] == 2 { // IGMP
			return Ignore, nil, true
		}
	case 0x86dd:
		if len(f) < 14+40 {
			return 0, nil, false
		}
		off, nh := 14+40, f[14+6]
		if nh == 0 && len(f) >= off+8 { // MLD comes behind a hop-by-hop header (router alert)
			nh = f[off]
			off += (int(f[off+1]) + 1) * 8
		}
		if nh != 58 || len(f) < off+1 {
			return 0, nil, false
		}
		switch f[off] {
		case 130, 131, 132, 143, 133, 134, 136: // MLD, router solicitation/advertisement, NA
			return Ignore, nil, true
		case 135: // neighbour solicitation
			src := netip.AddrFrom16([16]byte(f[14+8 : 14+24]))
			if len(f) >= off+24 && group && !src.IsUnspecified() {
				return Seen, fmt.Appendf(nil, "neighbour solicitation for %s", netip.AddrFrom16([16]byte(f[off+8:off+24]))), true
			}
			return Ignore, nil, true
		}
	}
	return 0, nil, false
}

// Describe is a one-line summary of a frame for reports.
func Describe(frame []byte) string {
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Lazy)
	var parts []string
	if eth, ok := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); ok {
		parts = append(parts, fmt.Sprintf("%s > %s", eth.SrcMAC, eth.DstMAC))
	}
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.IPv4:
			parts = append(parts, fmt.Sprintf("IPv4 %s > %s ttl %d id %d len %d proto %d ihl %d flags %s frag %d",
				l.SrcIP, l.DstIP, l.TTL, l.Id, l.Length, l.Protocol, l.IHL, l.Flags, l.FragOffset))
		case *layers.IPv6:
			parts = append(parts, fmt.Sprintf("IPv6 %s > %s hlim %d plen %d next %d flow %#x",
				l.SrcIP, l.DstIP, l.HopLimit, l.Length, l.NextHeader, l.FlowLabel))
		case *layers.ICMPv4:
			parts = append(parts, "ICMP "+l.TypeCode.String())
		case *layers.ICMPv6:
			parts = append(parts, "ICMPv6 "+l.TypeCode.String())
		case *layers.UDP:
			parts = append(parts, fmt.Sprintf("UDP %d > %d", l.SrcPort, l.DstPort))
		case *layers.TCP:
			parts = append(parts, fmt.Sprintf("TCP %d > %d", l.SrcPort, l.DstPort))
		case *layers.ARP:
			parts = append(parts, fmt.Sprintf("ARP op %d %s asks %s", l.Operation,
				netipOf(l.SourceProtAddress), netipOf(l.DstProtAddress)))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%d bytes, undecodable", len(frame))
	}
	return fmt.Sprintf("%d bytes: %s", len(frame), strings.Join(parts, ", "))
}

func netipOf(b []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(b)
	return a
}
