package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/packet"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The differential test for the bridge module: in0 and out0 are ports of br0, the sink sits on
// gen's subnet. The corpus mixes known unicast (which the fast path switches) with everything
// Linux's bridge does more with: flooding, learning, frames for the bridge itself and for its
// ports' own addresses, br_netfilter's validation and trimming of bridged IP, frames above the
// egress port's MTU, tags and non-IP.

var sinkL2Addr6 = netip.MustParseAddr("2001:2::3")

func TestDifferentialBridge(t *testing.T) {
	names, groups := diffHookGroups()
	for i, hooks := range groups {
		t.Run(names[i], func(t *testing.T) {
			tb := bridgeTestbed(t, hooks[0].opts, bridgeDiffSetup)
			sh(t, tb.Sink, bridgeDiffSinkSetup)
			d := newDiffEnv(t, tb, "")
			d.bridged = true
			d.reset = func(t *testing.T) { bridgeReset(t, d) }
			d.differentialHooks(t, d.bridgeCorpus(), 3*time.Second, true, hooks)
		})
	}
}

// bridgeReset puts the same FDB and neighbours in place before every run: gen and the sink
// known on their ports (as if just learned), nothing else.
func bridgeReset(t *testing.T, d *diffEnv) {
	tb := d.tb
	gen, sink := tb.GenMAC.String(), tb.SinkMAC.String()
	sh(t, tb.DUT, fmt.Sprintf(`ip link set br0 type bridge fdb_flush
bridge fdb replace %[1]s dev in0 master dynamic
bridge fdb replace %[2]s dev out0 master dynamic
ip -4 neigh flush dev br0
ip -6 neigh flush dev br0
ip neigh replace 198.18.0.2 lladdr %[1]s dev br0 nud reachable
ip neigh replace 198.18.0.3 lladdr %[2]s dev br0 nud reachable
ip -6 neigh replace 2001:2::2 lladdr %[1]s dev br0 nud reachable
ip -6 neigh replace %[3]s lladdr %[1]s dev br0 nud reachable
ip -6 neigh replace 2001:2::3 lladdr %[2]s dev br0 nud reachable`, gen, sink, d.genLL))
	// The sink answers gen directly (same subnet): its neighbours too.
	sh(t, tb.Sink, fmt.Sprintf(`ip -4 neigh flush dev eth0
ip -6 neigh flush dev eth0
ip neigh replace 198.18.0.2 lladdr %[1]s dev eth0 nud reachable
ip -6 neigh replace 2001:2::2 lladdr %[1]s dev eth0 nud reachable
ip -6 neigh replace %[2]s lladdr %[1]s dev eth0 nud reachable`, gen, d.genLL))
}

// bridgeDiffSetup and bridgeDiffSinkSetup are the DUT's and the sink's setup for the bridge
// differential tests.
const bridgeDiffSetup = ipBridge + `
ip link set out0 mtu 1400
ip -6 addr add 2001:2::1/64 dev br0 nodad`

const bridgeDiffSinkSetup = "ip -6 addr flush dev eth0 scope global\nip -6 addr add 2001:2::3/64 dev eth0 nodad"

func (d *diffEnv) bridgeCorpus() *diffCorpus {
	b := d.newBuilder(diffSeed + 1)
	r := b.r
	tb := d.tb
	brMAC := linkMAC(d, "br0")
	sinkMAC, inMAC := tb.SinkMAC, tb.InMAC
	sink4 := netip.MustParseAddr(sinkL2)
	l2v4 := func(dst net.HardwareAddr, ip netip.Addr) packet.Spec {
		s := b.v4(ip)
		s.DstMAC = dst
		return s
	}
	l2v6 := func(dst net.HardwareAddr, ip netip.Addr) packet.Spec {
		s := b.v6(ip)
		s.DstMAC = dst
		return s
	}
	sizes := []int{60, 64, 100, 256, 576, 1000, 1280, 1399, 1413, 1414}
	size := func() int { return sizes[r.Intn(len(sizes))] }
	ttl := func() uint8 { return uint8(r.Intn(256)) } // L2: any TTL is bridged, 0 and 1 too

	// Known unicast: switched by the fast path.
	for i := range 240 {
		p := protos4[i%len(protos4)]
		b.add("bridged ipv4 "+p.name, 1, true, func(int) packet.Spec {
			s := l2v4(sinkMAC, sink4)
			p.set(&s)
			s.Size, s.TTL, s.DF = size(), ttl(), r.Intn(2) == 0
			return s
		})
	}
	for i := range 160 {
		p := protos6[i%len(protos6)]
		b.add("bridged ipv6 "+p.name, 1, true, func(int) packet.Spec {
			s := l2v6(sinkMAC, sinkL2Addr6)
			p.set(&s)
			s.Size, s.TTL = size(), ttl()
			return s
		})
	}
	b.add("bridged ipv4 to another host's address", 10, true, func(int) packet.Spec { return l2v4(sinkMAC, b.route4()) })
	b.add("bridged ipv4 fragment", 10, true, func(i int) packet.Spec {
		s := l2v4(sinkMAC, sink4)
		s.MF, s.FragOffset = i%2 == 0, uint16(i%2*20)
		return s
	})
	// Ethernet padding beyond the IP length: br_netfilter trims it (bridge-nf-call-iptables=1).
	b.add("bridged ipv4 with padding", 20, true, func(int) packet.Spec { s := l2v4(sinkMAC, sink4); s.Size = 0; return s }, pad(20))
	b.add("bridged ipv6 with padding", 20, true, func(int) packet.Spec { s := l2v6(sinkMAC, sinkL2Addr6); s.Size = 0; return s }, pad(12))

	// What br_netfilter drops or parses: Linux's.
	b.add("bridged ipv4 bad checksum", 10, false, func(int) packet.Spec { return l2v4(sinkMAC, sink4) }, badCsum4)
	b.add("bridged ipv4 options", 10, false, func(int) packet.Spec {
		s := l2v4(sinkMAC, sink4)
		s.Options = []byte{1, 1, 1, 0}
		return s
	})
	b.add("bridged ipv4 total length beyond frame", 10, false, func(int) packet.Spec { return l2v4(sinkMAC, sink4) }, totLen4(+40))
	b.add("bridged ipv4 version 5", 5, false, func(int) packet.Spec { return l2v4(sinkMAC, sink4) }, setByte(14, 0x55), fixCsum4)
	b.add("bridged ipv6 payload beyond frame", 10, false, func(int) packet.Spec { return l2v6(sinkMAC, sinkL2Addr6) }, payloadLen6(+40))
	b.add("bridged ipv6 hop-by-hop", 10, false, func(int) packet.Spec {
		s := l2v6(sinkMAC, sinkL2Addr6)
		s.HopByHop = true
		return s
	})
	// Larger than out0's MTU (1400): dropped or fragmented by Linux.
	b.add("bridged ipv4 above the egress MTU", 20, false, func(i int) packet.Spec {
		s := l2v4(sinkMAC, sink4)
		s.Size, s.DF = 1415+r.Intn(86), i%2 == 0
		return s
	})
	b.add("bridged ipv6 above the egress MTU", 10, false, func(int) packet.Spec {
		s := l2v6(sinkMAC, sinkL2Addr6)
		s.Size = 1415 + r.Intn(86)
		return s
	})

	// Flooded, learned or delivered by Linux.
	b.add("broadcast ipv4", 10, false, func(int) packet.Spec { return l2v4(bcastMAC, netip.MustParseAddr("198.18.0.255")) })
	b.add("multicast ipv4", 10, false, func(int) packet.Spec { return l2v4(mcast4MAC2, netip.MustParseAddr("239.1.2.3")) })
	b.add("multicast ipv6", 10, false, func(int) packet.Spec { return l2v6(mcast6MAC2, netip.MustParseAddr("ff0e::2")) })
	b.add("unknown unicast (flooded)", 20, false, func(int) packet.Spec { return l2v4(otherMAC, sink4) })
	b.add("source MAC not learned yet", 10, false, func(i int) packet.Spec {
		s := l2v4(sinkMAC, sink4)
		s.SrcMAC = net.HardwareAddr{0x02, 0x42, 0, 0, 0x10, byte(i)}
		return s
	})
	b.add("source is the bridge's own MAC", 5, false, func(int) packet.Spec { s := l2v4(sinkMAC, sink4); s.SrcMAC = brMAC; return s })
	b.add("stp bpdu group address", 5, false, func(int) packet.Spec {
		return l2v4(net.HardwareAddr{0x01, 0x80, 0xc2, 0, 0, 0}, sink4)
	})
	b.add("arp to the sink", 10, false, func(int) packet.Spec { return l2v4(sinkMAC, sink4) }, setByte(12, 0x08), setByte(13, 0x06))
	b.add("vlan tagged", 10, false, func(int) packet.Spec { return l2v4(sinkMAC, sink4) }, setByte(12, 0x81), setByte(13, 0x00))
	b.add("802.3 length field", 5, false, func(int) packet.Spec { return l2v4(sinkMAC, sink4) }, setByte(12, 0x00), setByte(13, 0x40))

	// For the bridge itself (bridge -> router): echo and closed ports answered by br0; routed
	// back into br0 (Linux sends a redirect); a prefix nobody routes; a port's own address.
	b.add("echo to br0", 10, false, func(int) packet.Spec { s := l2v4(brMAC, testbed.InAddr); echo4(&s); return s })
	b.add("udp to br0", 10, false, func(int) packet.Spec { return l2v4(brMAC, testbed.InAddr) })
	b.add("echo6 to br0", 10, false, func(int) packet.Spec {
		s := l2v6(brMAC, netip.MustParseAddr("2001:2::1"))
		echo6(&s)
		return s
	})
	b.add("routed back into br0 (redirect)", 10, false, func(int) packet.Spec {
		s := l2v4(brMAC, sink4)
		s.Src = b.ownSource()
		return s
	})
	b.add("routed to no route", 10, false, func(int) packet.Spec {
		s := l2v4(brMAC, netip.MustParseAddr("198.19.99.1"))
		s.Src = b.ownSource()
		return s
	})
	b.add("to in0's own address (local entry)", 10, false, func(int) packet.Spec { return l2v4(inMAC, testbed.InAddr) })
	return b.done()
}

// linkMAC is the MAC of a device in the DUT.
func linkMAC(d *diffEnv, dev string) net.HardwareAddr {
	var mac net.HardwareAddr
	d.tb.DUT.Do(func() error {
		l, err := net.InterfaceByName(dev)
		if err == nil {
			mac = l.HardwareAddr
		}
		return err
	})
	return mac
}
