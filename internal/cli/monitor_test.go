package cli

import (
	"net"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/linuxfp/linuxfp/internal/status"
)

// Each monitor line names the protocol, addresses and ports the packet's headers carry, past
// IPv6 extension headers, and what it can of a packet cut short by the snap length.
func TestMonitorLine(t *testing.T) {
	mac1, mac2 := net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2}
	frame := func(ls ...gopacket.SerializableLayer) []byte {
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	eth := func(t layers.EthernetType) *layers.Ethernet {
		return &layers.Ethernet{SrcMAC: mac1, DstMAC: mac2, EthernetType: t}
	}
	ip4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 1, Protocol: layers.IPProtocolUDP,
		SrcIP: net.ParseIP("198.18.0.2"), DstIP: net.ParseIP("198.19.4.1")}
	udp := &layers.UDP{SrcPort: 4000, DstPort: 53}
	udp.SetNetworkLayerForChecksum(ip4)
	udp4 := frame(eth(layers.EthernetTypeIPv4), ip4, udp, gopacket.Payload("hello"))

	ip6 := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolIPv6HopByHop,
		SrcIP: net.ParseIP("2001:2::2"), DstIP: net.ParseIP("2001:2:0:f100::9")}
	hbh := &layers.IPv6HopByHop{}
	hbh.NextHeader = layers.IPProtocolICMPv6
	hbh.Options = []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: []byte{0, 0, 0, 0}}}
	icmp6 := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
	icmp6.SetNetworkLayerForChecksum(ip6)
	hbh6 := frame(eth(layers.EthernetTypeIPv6), ip6, hbh, icmp6, gopacket.Payload("ping"))

	arp := frame(eth(layers.EthernetTypeARP), &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest, SourceHwAddress: mac1,
		SourceProtAddress: []byte{198, 18, 0, 2}, DstHwAddress: make([]byte, 6), DstProtAddress: []byte{198, 18, 0, 1}})

	at := time.Date(2026, 1, 2, 10, 4, 5, 123456789, time.UTC)
	cases := []struct {
		name string
		data []byte
		len  int
		want string
	}{
		{"udp", udp4, len(udp4), "10:04:05.123456 in0 pass ttl_exceeded xdp: udp 198.18.0.2:4000 > 198.19.4.1:53 ttl 1 len 60"},
		{"ipv6 hop-by-hop icmpv6", hbh6, len(hbh6), "10:04:05.123456 in0 pass ttl_exceeded xdp: icmpv6 2001:2::2 > 2001:2:0:f100::9 type 128 code 0 ttl 255 len 70"},
		{"arp", arp, len(arp), "10:04:05.123456 in0 pass ttl_exceeded xdp: arp 198.18.0.2 > 198.18.0.1 len 60"},
		{"cut after the ip header", udp4[:34], len(udp4), "10:04:05.123456 in0 pass ttl_exceeded xdp: udp 198.18.0.2 > 198.19.4.1 ttl 1 len 60"},
		{"cut in the ethernet header", udp4[:10], len(udp4), "10:04:05.123456 in0 pass ttl_exceeded xdp: (no headers captured) len 60"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := &status.MonitorEvent{Time: at, Interface: "in0", Ifindex: 2, Type: "pass", Reason: "ttl_exceeded", Hook: "xdp", Len: c.len, Data: c.data}
			if got := decodePacket(ev).text(); got != c.want {
				t.Errorf("\n got %s\nwant %s", got, c.want)
			}
		})
	}
}
