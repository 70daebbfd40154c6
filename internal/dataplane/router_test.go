package dataplane

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/packet"
)

func TestRouter(t *testing.T) {
	env := newTestEnv(t)
	good4 := v4("198.18.0.2", "198.19.0.9")
	good6 := v6("2001:2::2", "2001:2:0:f100::9")

	type tc struct {
		name    string
		pkt     []byte
		off4    bool // program built with the IPv4 router off
		want    Reason
		output  []byte // expected bytes when forwarded (default: packet.Forwarded)
		xdpOnly bool   // a frame BPF_PROG_TEST_RUN cannot give a tc program
	}
	mutate := func(b []byte, f func([]byte)) []byte { b = append([]byte(nil), b...); f(b); return b }
	with := func(s packet.Spec, f func(*packet.Spec)) []byte { f(&s); return s.Bytes() }
	cases := []tc{
		{name: "ipv4 forwarded", pkt: good4.Bytes(), want: Forwarded},
		{name: "ipv4 tcp forwarded", pkt: with(good4, func(s *packet.Spec) { s.Proto = layers.IPProtocolTCP }), want: Forwarded},
		{name: "ipv4 icmp echo forwarded", pkt: with(good4, func(s *packet.Spec) { s.Proto = layers.IPProtocolICMPv4; s.ICMPType = 8 }), want: Forwarded},
		{name: "ipv4 1400 bytes (egress mtu) forwarded", pkt: with(good4, func(s *packet.Spec) { s.Size = 1414; s.DF = true }), want: Forwarded},
		{name: "ipv6 forwarded", pkt: good6.Bytes(), want: Forwarded},
		{name: "ipv4 ttl 2 forwarded", pkt: with(good4, func(s *packet.Spec) { s.TTL = 2 }), want: Forwarded},
		{name: "ipv4 checksum edge (ttl 255)", pkt: with(good4, func(s *packet.Spec) { s.TTL = 255; s.ID = 0xffff }), want: Forwarded},
		{name: "ipv4 padded frame is trimmed", pkt: append(with(good4, func(s *packet.Spec) { s.Size = 0 }), make([]byte, 14)...), want: Forwarded,
			output: packet.Forwarded(with(good4, func(s *packet.Spec) { s.Size = 0 }), macOut, macNext)[:14+28]},

		{name: "broadcast frame", pkt: with(good4, func(s *packet.Spec) { s.DstMAC = net.HardwareAddr{255, 255, 255, 255, 255, 255} }), want: PassNotForUs},
		{name: "multicast frame", pkt: with(good4, func(s *packet.Spec) { s.DstMAC = net.HardwareAddr{1, 0, 0x5e, 0, 0, 1} }), want: PassNotForUs},
		{name: "frame for another host", pkt: with(good4, func(s *packet.Spec) { s.DstMAC = macNext }), want: PassNotForUs},
		{name: "arp", pkt: mutate(good4.Bytes(), func(b []byte) { b[12], b[13] = 0x08, 0x06 }), want: PassNotIP},
		{name: "vlan tagged", pkt: mutate(good4.Bytes(), func(b []byte) { b[12], b[13] = 0x81, 0x00 }), want: PassNotIP},
		{name: "ipv4 router off", pkt: good4.Bytes(), off4: true, want: PassFamilyOff},
		{name: "truncated ipv4 header", pkt: good4.Bytes()[:30], want: PassMalformed, xdpOnly: true},
		{name: "ipv4 version 5", pkt: mutate(good4.Bytes(), func(b []byte) { b[14] = 0x55 }), want: PassMalformed},
		{name: "ipv4 ihl 4", pkt: mutate(good4.Bytes(), func(b []byte) { b[14] = 0x44 }), want: PassMalformed},
		{name: "ipv4 total length beyond frame", pkt: mutate(good4.Bytes(), func(b []byte) { b[16], b[17] = 0x05, 0xdc; fixCsum(b) }), want: PassMalformed},
		{name: "ipv4 total length below header", pkt: mutate(good4.Bytes(), func(b []byte) { b[16], b[17] = 0, 19; fixCsum(b) }), want: PassMalformed},
		{name: "ipv4 options", pkt: with(good4, func(s *packet.Spec) { s.Options = []byte{1, 1, 1, 0} }), want: PassIPOptions},
		{name: "ipv4 first fragment", pkt: with(good4, func(s *packet.Spec) { s.MF = true }), want: PassFragment},
		{name: "ipv4 later fragment", pkt: with(good4, func(s *packet.Spec) { s.FragOffset = 10 }), want: PassFragment},
		{name: "ipv4 bad checksum", pkt: mutate(good4.Bytes(), func(b []byte) { b[24] ^= 0x55 }), want: PassBadChecksum},
		{name: "ipv4 ttl 1", pkt: with(good4, func(s *packet.Spec) { s.TTL = 1 }), want: PassTTL},
		{name: "ipv4 ttl 0", pkt: mutate(with(good4, func(s *packet.Spec) { s.TTL = 1 }), func(b []byte) { b[22] = 0; fixCsum(b) }), want: PassTTL},
		{name: "ipv4 source 0.0.0.0", pkt: with(good4, func(s *packet.Spec) { s.Src = netip.MustParseAddr("0.0.0.0") }), want: PassMartianSrc},
		{name: "ipv4 source loopback", pkt: with(good4, func(s *packet.Spec) { s.Src = netip.MustParseAddr("127.0.0.1") }), want: PassMartianSrc},
		{name: "ipv4 source multicast", pkt: with(good4, func(s *packet.Spec) { s.Src = netip.MustParseAddr("224.0.0.1") }), want: PassMartianSrc},
		{name: "ipv4 source limited broadcast", pkt: with(good4, func(s *packet.Spec) { s.Src = netip.MustParseAddr("255.255.255.255") }), want: PassMartianSrc},
		{name: "ipv4 destination loopback", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("127.0.0.1") }), want: PassMartianDst},
		{name: "ipv4 destination 0/8", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("0.1.2.3") }), want: PassMartianDst},
		{name: "ipv4 destination multicast", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("239.1.1.1") }), want: PassMartianDst},
		{name: "ipv4 source is local", pkt: with(good4, func(s *packet.Spec) { s.Src = netip.MustParseAddr("198.18.1.1") }), want: PassLocalSrc},
		{name: "ipv4 source is subnet broadcast", pkt: with(good4, func(s *packet.Spec) { s.Src = netip.MustParseAddr("198.18.1.255") }), want: PassLocalSrc},
		{name: "ipv4 source in a local prefix", pkt: with(good4, func(s *packet.Spec) { s.Src = netip.MustParseAddr("198.18.200.7") }), want: PassLocalSrc},
		{name: "ipv4 icmp error", pkt: with(good4, func(s *packet.Spec) { s.Proto = layers.IPProtocolICMPv4; s.ICMPType = 3 }), want: PassICMPError},
		{name: "ipv4 destination local", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.18.1.1") }), want: PassFIBNotForwarded},
		{name: "ipv4 destination subnet broadcast", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.18.1.255") }), want: PassFIBNotForwarded},
		{name: "ipv4 blackhole", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.19.1.1") }), want: PassFIBBlackhole},
		{name: "ipv4 unreachable", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.19.2.1") }), want: PassFIBUnreachable},
		{name: "ipv4 no route", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("203.0.113.1") }), want: PassFIBNotForwarded},
		{name: "ipv4 prohibit", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.19.3.1") }), want: PassFIBProhibit},
		{name: "ipv4 neighbour unresolved", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.19.5.1") }), want: PassFIBNoNeighbour},
		{name: "ipv4 too big for egress mtu, DF", pkt: with(good4, func(s *packet.Spec) { s.Size = 1415; s.DF = true }), want: PassFIBFragNeeded},
		{name: "ipv4 too big for egress mtu, no DF", pkt: with(good4, func(s *packet.Spec) { s.Size = 1415 }), want: PassFIBFragNeeded},
		{name: "ipv4 above a route mtu", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.19.8.1"); s.Size = 1480 }), want: PassRouteMTU},
		{name: "ipv4 back out the ingress device", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.19.7.1") }), want: PassHairpin},
		{name: "ipv4 egress cannot take a redirect", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.19.6.1") }), want: PassEgressNotReady},
		{name: "ipv4 neighbour stale: first packet to Linux", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.19.4.1") }), want: PassNeighbourStale},
		{name: "ipv4 neighbour stale: then DELAY, forwarded", pkt: with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.19.4.1") }), want: Forwarded,
			output: packet.Forwarded(with(good4, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("198.19.4.1") }), macOut, macStale)},

		{name: "truncated ipv6 header", pkt: good6.Bytes()[:40], want: PassMalformed, xdpOnly: true},
		{name: "ipv6 version 4 in an ipv6 frame", pkt: mutate(good6.Bytes(), func(b []byte) { b[14] = 0x40 | b[14]&0x0f }), want: PassMalformed},
		{name: "ipv6 payload beyond frame", pkt: mutate(good6.Bytes(), func(b []byte) { b[18], b[19] = 0x05, 0xdc }), want: PassMalformed},
		{name: "ipv6 hop-by-hop", pkt: with(good6, func(s *packet.Spec) { s.HopByHop = true }), want: PassV6HopByHop},
		{name: "ipv6 hop limit 1", pkt: with(good6, func(s *packet.Spec) { s.TTL = 1 }), want: PassTTL},
		{name: "ipv6 source link-local", pkt: with(good6, func(s *packet.Spec) { s.Src = netip.MustParseAddr("fe80::1") }), want: PassMartianSrc},
		{name: "ipv6 source multicast", pkt: with(good6, func(s *packet.Spec) { s.Src = netip.MustParseAddr("ff02::1") }), want: PassMartianSrc},
		{name: "ipv6 source v4-mapped", pkt: with(good6, func(s *packet.Spec) { s.Src = netip.MustParseAddr("::ffff:198.18.0.2") }), want: PassMartianSrc},
		{name: "ipv6 destination loopback", pkt: with(good6, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("::1") }), want: PassMartianDst},
		{name: "ipv6 destination link-local", pkt: with(good6, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("fe80::2") }), want: PassMartianDst},
		{name: "ipv6 source is local", pkt: with(good6, func(s *packet.Spec) { s.Src = netip.MustParseAddr("2001:2:0:1::1") }), want: PassLocalSrc},
		{name: "ipv6 icmp error", pkt: with(good6, func(s *packet.Spec) { s.Proto = layers.IPProtocolICMPv6; s.ICMPType = 1 }), want: PassICMPError},
		{name: "ipv6 icmp echo forwarded", pkt: with(good6, func(s *packet.Spec) { s.Proto = layers.IPProtocolICMPv6; s.ICMPType = 128 }), want: Forwarded},
		{name: "ipv6 destination local", pkt: with(good6, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("2001:2:0:1::1") }), want: PassFIBNotForwarded},
		{name: "ipv6 blackhole", pkt: with(good6, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("2001:2:0:f200::1") }), want: PassFIBBlackhole},
		{name: "ipv6 no route", pkt: with(good6, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("2001:db8::1") }), want: PassFIBNotForwarded},
		{name: "ipv6 above a route mtu", pkt: with(good6, func(s *packet.Spec) { s.Dst = netip.MustParseAddr("2001:2:0:f300::1"); s.Size = 1360 }), want: PassRouteMTU},
		{name: "ipv6 too big for egress mtu", pkt: with(good6, func(s *packet.Spec) { s.Size = 1415 }), want: PassFIBFragNeeded},
	}
	for _, hook := range hooks {
		env.hook = hook
		env.resetStale(t)
		for _, c := range cases {
			t.Run(string(hook)+"/"+c.name, func(t *testing.T) {
				if hook == HookTC && c.xdpOnly {
					// BPF_PROG_TEST_RUN refuses an skb whose IP header is not all there.
					t.Skip("not representable as a test skb")
				}
				env.checkRouted(t, env.prog(t, !c.off4, true), c.pkt, c.want, c.output)
			})
		}
	}
}

// resetStale unmarks the STALE neighbour entries (the data plane marks one when it hands Linux
// the packet that moves it to DELAY), as a new STALE event would.
func (env *testEnv) resetStale(t *testing.T) {
	t.Helper()
	env.dp.mu.Lock()
	defer env.dp.mu.Unlock()
	for k, v := range env.dp.stale {
		if err := env.dp.maps.LfpStale.Put(k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// checkRouted runs pkt through prog and checks the reason, that a packet handed to Linux is
// untouched, and that a forwarded one leaves as output (default: packet.Forwarded to out0's
// nexthop).
func (env *testEnv) checkRouted(t *testing.T, prog *ebpf.Program, pkt []byte, want Reason, output []byte) {
	t.Helper()
	env.checkRoutedOn(t, prog, pkt, env.in, want, output)
}

// checkRoutedOn is checkRouted for a packet received on ifindex.
func (env *testEnv) checkRoutedOn(t *testing.T, prog *ebpf.Program, pkt []byte, ifindex int, want Reason, output []byte) {
	t.Helper()
	ret, out, reason := env.runOn(t, prog, pkt, ifindex)
	if reason != want {
		t.Fatalf("reason %v, want %v", reason, want)
	}
	if want != Forwarded {
		if ret != xdpPass {
			t.Fatalf("verdict %d, want XDP_PASS", ret)
		}
		if !bytes.Equal(out, pkt) {
			t.Fatalf("packet handed to Linux was modified:\n got %s\nwant %s", hex.EncodeToString(out), hex.EncodeToString(pkt))
		}
		return
	}
	if ret != xdpRedirect {
		t.Fatalf("verdict %d, want XDP_REDIRECT", ret)
	}
	if output == nil {
		output = packet.Forwarded(pkt, macOut, macNext)
	}
	if !bytes.Equal(out, output) {
		t.Fatalf("output differs:\n got %s\nwant %s", hex.EncodeToString(out), hex.EncodeToString(output))
	}
	if out[12] == 0x08 && out[13] == 0 && packet.IPv4HeaderChecksum(out[14:]) != uint16(out[24])<<8|uint16(out[25]) {
		t.Fatalf("IPv4 checksum wrong after forwarding")
	}
}

func fixCsum(b []byte) {
	b[24], b[25] = 0, 0
	c := packet.IPv4HeaderChecksum(b[14:])
	b[24], b[25] = byte(c>>8), byte(c)
}

// The verifier must remove the IPv6 router from a program built without it: specialisation is
// what makes per-interface programs cheap.
func TestSpecialisationShrinksProgram(t *testing.T) {
	env := newTestEnv(t)
	size := func(p *ebpf.Program) int {
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		insns, err := info.Instructions()
		if err != nil {
			t.Skipf("cannot read xlated instructions: %v", err)
		}
		return len(insns)
	}
	both := size(env.prog(t, true, true))
	only4 := size(env.prog(t, true, false))
	if only4 >= both {
		t.Fatalf("IPv4-only program has %d instructions, the IPv4+IPv6 one %d: dead code was not removed", only4, both)
	}
	t.Logf("xlated instructions: v4+v6 %d, v4 only %d", both, only4)
}

// What only the tc build does: GSO trains, the skb priority ip_forward() sets, delivery into a
// veth peer's namespace.
func TestRouterTC(t *testing.T) {
	env := newTestEnv(t)
	env.hook = HookTC
	prog := env.prog(t, true, true)
	good4 := v4("198.18.0.2", "198.19.0.9")
	good6 := v6("2001:2::2", "2001:2:0:f100::9")
	with := func(s packet.Spec, f func(*packet.Spec)) []byte { f(&s); return s.Bytes() }
	tcp := func(s packet.Spec, size int) []byte {
		return with(s, func(s *packet.Spec) { s.Proto = layers.IPProtocolTCP; s.Size = size; s.DF = true })
	}
	cases := []struct {
		name     string
		pkt      []byte
		gso      uint32 // skb gso_size
		want     Reason
		priority uint32 // skb priority after a forward
	}{
		// out0's MTU is 1400: a train of 20 + 20 + 1360-byte segments fits, 1361 does not.
		{name: "ipv4 tcp gso train, segments fit", pkt: tcp(good4, 3000), gso: 1360, want: Forwarded},
		{name: "ipv4 tcp gso train, segments too big", pkt: tcp(good4, 3000), gso: 1361, want: PassFIBFragNeeded},
		{name: "ipv4 udp gso train", pkt: with(good4, func(s *packet.Spec) { s.Size = 3000 }), gso: 1000, want: PassGSO},
		// The smallest IPv6 route MTU here is 1300 (the fast path's conservative check).
		{name: "ipv6 tcp gso train, segments fit", pkt: tcp(good6, 3000), gso: 1240, want: Forwarded},
		{name: "ipv6 tcp gso train, segments too big", pkt: tcp(good6, 3000), gso: 1241, want: PassRouteMTU},
		{name: "ipv4 tos lowdelay: interactive priority", pkt: with(good4, func(s *packet.Spec) { s.TOS = 0x10 }), want: Forwarded, priority: 6},
		{name: "ipv4 tos throughput: bulk priority", pkt: with(good4, func(s *packet.Spec) { s.TOS = 0x08 }), want: Forwarded, priority: 2},
		{name: "ipv4 tos mincost: best effort", pkt: with(good4, func(s *packet.Spec) { s.TOS = 0x02 }), want: Forwarded, priority: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ret, out, reason := env.runSkb(t, prog, c.pkt, skbMD{Ifindex: uint32(env.in), GSOSize: c.gso, Priority: 3})
			if reason != c.want {
				t.Fatalf("reason %v, want %v", reason, c.want)
			}
			if c.want != Forwarded {
				if ret != xdpPass || !bytes.Equal(out, c.pkt) || env.ctxOut.Priority != 3 {
					t.Fatalf("verdict %d, modified %v, priority %d: not handed to Linux untouched", ret, !bytes.Equal(out, c.pkt), env.ctxOut.Priority)
				}
				return
			}
			want := packet.Forwarded(c.pkt, macOut, macNext)
			if ret != xdpRedirect || !bytes.Equal(out, want) {
				t.Fatalf("verdict %d, output:\n got %s\nwant %s", ret, hex.EncodeToString(out), hex.EncodeToString(want))
			}
			wantPrio := c.priority
			if c.pkt[12] == 0x86 {
				wantPrio = 3 // ip6_forward() leaves the priority alone
			}
			if env.ctxOut.Priority != wantPrio {
				t.Fatalf("priority %d, want %d", env.ctxOut.Priority, wantPrio)
			}
		})
	}

	// net.ipv4.ip_forward_update_priority=0: ip_forward() leaves the priority as it came.
	if err := env.ns.Do(func() error {
		return env.dp.Sync(Data{TxData: txTo(env.out)})
	}); err != nil {
		t.Fatal(err)
	}
	lowdelay := with(good4, func(s *packet.Spec) { s.TOS = 0x10 })
	ret, _, reason := env.runSkb(t, prog, lowdelay, skbMD{Ifindex: uint32(env.in), Priority: 3})
	if reason != Forwarded || ret != xdpRedirect || env.ctxOut.Priority != 3 {
		t.Fatalf("ip_forward_update_priority=0: reason %v verdict %d priority %d, want forwarded with priority 3", reason, ret, env.ctxOut.Priority)
	}

	// out0 as a veth into a container whose end has MTU 1300: delivered with
	// bpf_redirect_peer(), priority zeroed as veth_xmit() does; above the peer's MTU, Linux's.
	if err := env.ns.Do(func() error {
		return env.dp.Sync(Data{TxData: TxData{TxDevs: []int{env.out}, TCTx: []TCTx{{Ifindex: env.out, Peer: true, PeerMTU: 1300}}}})
	}); err != nil {
		t.Fatal(err)
	}
	pkt := with(good4, func(s *packet.Spec) { s.TOS = 0x10; s.Size = 1314 })
	ret, out, reason := env.runSkb(t, prog, pkt, skbMD{Ifindex: uint32(env.in), Priority: 3})
	if reason != Forwarded || ret != xdpRedirect || !bytes.Equal(out, packet.Forwarded(pkt, macOut, macNext)) || env.ctxOut.Priority != 0 {
		t.Fatalf("into the peer: reason %v verdict %d priority %d", reason, ret, env.ctxOut.Priority)
	}
	pkt = with(good4, func(s *packet.Spec) { s.Size = 1315 })
	if ret, out, reason = env.runSkb(t, prog, pkt, skbMD{Ifindex: uint32(env.in)}); reason != PassEgressNotReady || ret != xdpPass || !bytes.Equal(out, pkt) {
		t.Fatalf("above the peer's MTU: reason %v verdict %d", reason, ret)
	}
	// A GSO train is never refused by veth_xmit() for its length.
	pkt = tcp(good4, 3000)
	if _, _, reason = env.runSkb(t, prog, pkt, skbMD{Ifindex: uint32(env.in), GSOSize: 1360}); reason != Forwarded {
		t.Fatalf("gso train into the peer: reason %v", reason)
	}
}

// With the neighbour tracepoints keeping the STALE set, the data plane looks a nexthop up in it
// only where its bucket counts an entry (lfp_stale_filter): the entry the controller wrote
// (seeded) is found, so the controller counts it in the bucket the data plane computes. A
// nexthop whose bucket is empty is forwarded without the lookup.
func TestNeighStaleByEvents(t *testing.T) {
	env := newTestEnv(t)
	staleAddr := netip.MustParseAddr("198.18.1.4")
	data := Data{
		TxData:     txTo(env.out, env.in),
		RouterData: RouterData{RouteMTU4: 1450, RouteMTU6: 1300, FwdUpdatePriority4: true},
	}
	// The set as the controller alone wrote it goes first: the tracepoints' mode starts empty.
	sync := func(d Data) {
		t.Helper()
		if err := env.ns.Do(func() error { return env.dp.Sync(d) }); err != nil {
			t.Fatal(err)
		}
	}
	sync(data)
	data.NeighData = NeighData{StaleByEvents: true, StaleNeighbours: []NeighKey{{env.out, staleAddr}}}
	sync(data)
	key := linuxfpLfpNeighKey{Ifindex: uint32(env.out), Family: unix.AF_INET, Addr: addrWords(staleAddr)}
	stale := v4("198.18.0.2", "198.19.4.1").Bytes()
	for _, hook := range hooks {
		env.hook = hook
		// Unmarked, as a new STALE event would leave it.
		if err := env.dp.maps.LfpStale.Put(key, linuxfpLfpStaleVal{}); err != nil {
			t.Fatal(err)
		}
		t.Run(string(hook), func(t *testing.T) {
			env.checkRouted(t, env.prog(t, true, true), stale, PassNeighbourStale, nil)
			env.checkRouted(t, env.prog(t, true, true), stale, Forwarded, packet.Forwarded(stale, macOut, macStale))
			env.checkRouted(t, env.prog(t, true, true), v4("198.18.0.2", "198.19.0.1").Bytes(), Forwarded, nil)
		})
	}
}

// A FIB cache answer keeps whether its next hop was in the STALE set when it was filled, and
// the data plane skips the set only for one that was not: an answer filled for a STALE next hop
// still hands the first packet to Linux, and a next hop that becomes STALE later (added to the
// set, then the generation moved on, as the neighbour tracepoints do) gets its first packet
// handed to Linux too.
func TestFibCacheNeighbourStale(t *testing.T) {
	env := newTestEnv(t)
	staleAddr := netip.MustParseAddr("198.18.1.4")
	data := Data{
		TxData:       txTo(env.out, env.in),
		NeighData:    NeighData{StaleByEvents: true, StaleNeighbours: []NeighKey{{env.out, staleAddr}}},
		FibCacheData: FibCacheData{FibCache4: true},
	}
	// The set as the controller alone wrote it goes first (newTestEnv's): the tracepoints'
	// mode starts empty and is seeded.
	if err := env.ns.Do(func() error { return env.dp.Sync(Data{TxData: data.TxData}) }); err != nil {
		t.Fatal(err)
	}
	if err := env.ns.Do(func() error { return env.dp.Sync(data) }); err != nil {
		t.Fatal(err)
	}
	prog := env.prog(t, true, false)
	toStale := v4("198.18.0.2", "198.19.4.1").Bytes() // via 198.18.1.4, STALE
	env.checkRouted(t, prog, toStale, PassNeighbourStale, nil)
	env.checkRouted(t, prog, toStale, Forwarded, packet.Forwarded(toStale, macOut, macStale))
	env.checkRouted(t, prog, toStale, Forwarded, packet.Forwarded(toStale, macOut, macStale))

	toNext := v4("198.18.0.2", "198.19.0.9").Bytes() // via 198.18.1.2
	env.checkRouted(t, prog, toNext, Forwarded, nil)
	env.checkRouted(t, prog, toNext, Forwarded, nil)
	// 198.18.1.2 becomes STALE.
	env.markStale(t, env.out, netip.MustParseAddr("198.18.1.2"))
	env.checkRouted(t, prog, toNext, PassNeighbourStale, nil)
	env.checkRouted(t, prog, toNext, Forwarded, nil)
}

// markStale makes IPv4 neighbour a on device dev STALE as the tracepoints do: counted in its
// bucket, added to the set, then the FIB cache's generation moved on (bpf/netlink_watch.c,
// neigh_changed()).
func (e *testEnv) markStale(t *testing.T, dev int, a netip.Addr) {
	t.Helper()
	key := linuxfpLfpNeighKey{Ifindex: uint32(dev), Family: unix.AF_INET, Addr: addrWords(a)}
	b := neighBucket(key)
	var c int64
	if err := e.dp.maps.LfpStaleFilter.Lookup(b, &c); err != nil {
		t.Fatal(err)
	}
	if err := e.dp.maps.LfpStaleFilter.Put(b, c+1); err != nil {
		t.Fatal(err)
	}
	if err := e.dp.maps.LfpStale.Put(key, linuxfpLfpStaleVal{}); err != nil {
		t.Fatal(err)
	}
	var g linuxfpLfpFibGen
	if err := e.dp.maps.LfpFibGen.Lookup(uint32(0), &g); err != nil {
		t.Fatal(err)
	}
	g.Gen[0]++
	if err := e.dp.maps.LfpFibGen.Put(uint32(0), g); err != nil {
		t.Fatal(err)
	}
}

// The FIB cache on a connected subnet keeps each destination's own answer (its neighbour's MAC)
// beside its block's, which is marked per destination: destinations of one block, asked in turn
// and again, each get their own next hop, as bpf_fib_lookup() gives.
func TestFibCachePerDestination(t *testing.T) {
	env := newTestEnv(t)
	macs := map[string]string{"198.18.1.8": "02:00:00:00:00:08", "198.18.1.9": "02:00:00:00:00:09", "198.18.1.10": "02:00:00:00:00:0a"}
	for a, m := range macs {
		if err := env.ns.Script("ip neigh replace " + a + " lladdr " + m + " dev out0 nud permanent"); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.ns.Do(func() error {
		return env.dp.Sync(Data{TxData: txTo(env.out, env.in), FibCacheData: FibCacheData{FibCache4: true}})
	}); err != nil {
		t.Fatal(err)
	}
	prog := env.prog(t, true, true)
	for round := range 3 {
		for _, a := range []string{"198.18.1.8", "198.18.1.9", "198.18.1.10"} {
			ret, out, reason := env.run(t, prog, v4("198.18.0.2", a).Bytes())
			if ret != xdpRedirect || reason != Forwarded {
				t.Fatalf("round %d, to %s: verdict %d reason %v", round, a, ret, reason)
			}
			if got := net.HardwareAddr(out[0:6]).String(); got != macs[a] {
				t.Errorf("round %d, to %s: destination MAC %s, want %s", round, a, got, macs[a])
			}
		}
	}
}

// fibCacheSetOf is bpf/lib/fibcache.h's fib_cache_set_of(), for IPv4 keys: the set of
// lfp_fib_cache a key is kept in on CPU 0.
func fibCacheSetOf(k linuxfpLfpFibKey) uint32 {
	h := (k.Ifindex ^ k.Flow) * 0x9e3779b1
	h = (h ^ k.Dst[0]) * 0x85ebca6b
	return h >> (32 - 10)
}

// Keys of one set of the FIB cache (lib/fibcache.h: two places, found by a hash of the key) get
// each their own answer: three keys (block, TOS) of one set, from blocks routed to different
// next hops, asked in turn and again, each get their block's next hop, though two of them share
// the set's places and the third replaces one. Fails if a place answered for any key of its set
// (the key compare). All runs on CPU 0: each CPU has its own sets, and the test reads CPU 0's to
// check that the keys did meet in it.
func TestFibCacheSetShared(t *testing.T) {
	env := newTestEnv(t)
	nexthops := []struct{ block, via, mac string }{
		{"198.19.0.0", "198.18.1.2", "02:00:00:00:00:03"},
		{"198.19.40.0", "198.18.1.20", "02:00:00:00:00:20"},
		{"198.19.41.0", "198.18.1.21", "02:00:00:00:00:21"},
	}
	for _, n := range nexthops[1:] {
		if err := env.ns.Script("ip neigh replace " + n.via + " lladdr " + n.mac + " dev out0 nud permanent\n" +
			"ip route add " + n.block + "/24 via " + n.via); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.ns.Do(func() error {
		return env.dp.Sync(Data{TxData: txTo(env.out, env.in), FibCacheData: FibCacheData{FibCache4: true}})
	}); err != nil {
		t.Fatal(err)
	}
	// The first set that three keys fall in, two of them from different blocks.
	type cand struct {
		block int
		tos   uint8
		key   linuxfpLfpFibKey
	}
	sets := map[uint32][]cand{}
	var pick []cand
	for tos := 0; tos < 256 && pick == nil; tos++ {
		for b, n := range nexthops {
			k := linuxfpLfpFibKey{Ifindex: uint32(env.in), Flow: uint32(tos), Dst: addrWords(netip.MustParseAddr(n.block)), Family: unix.AF_INET}
			s := fibCacheSetOf(k)
			sets[s] = append(sets[s], cand{b, uint8(tos), k})
			if c := sets[s]; len(c) == 3 && (c[0].block != c[1].block || c[1].block != c[2].block) {
				pick = c
				break
			}
		}
	}
	if pick == nil {
		t.Fatal("no three keys of one set")
	}
	if pick[0].block == pick[1].block {
		pick[1], pick[2] = pick[2], pick[1]
	}
	set := fibCacheSetOf(pick[0].key)
	prog := env.prog(t, true, false)
	const cpu = 0
	var mask unix.CPUSet
	mask.Set(cpu)
	err := env.ns.Do(func() error {
		var orig unix.CPUSet
		if err := unix.SchedGetaffinity(0, &orig); err != nil {
			return err
		}
		if err := unix.SchedSetaffinity(0, &mask); err != nil {
			return err
		}
		defer unix.SchedSetaffinity(0, &orig)
		send := func(c cand) error {
			n := nexthops[c.block]
			s := v4("198.18.0.2", strings.TrimSuffix(n.block, ".0")+".9")
			s.TOS = c.tos
			pkt := s.Bytes()
			out := make([]byte, len(pkt)+256)
			ret, err := prog.Run(&ebpf.RunOptions{Data: pkt, DataOut: out, Context: xdpMD{DataEnd: uint32(len(pkt)), IngressIfindex: uint32(env.in)}})
			if err != nil {
				return err
			}
			if got := net.HardwareAddr(out[0:6]).String(); ret != xdpRedirect || got != n.mac {
				return fmt.Errorf("to %s tos %#x: verdict %d, destination MAC %s, want %s", n.block, c.tos, ret, got, n.mac)
			}
			return nil
		}
		for _, c := range pick[:2] {
			if err := send(c); err != nil {
				return err
			}
		}
		var val linuxfpLfpFibSet
		if err := env.dp.maps.LfpFibCache.Lookup(set, &val); err != nil {
			return err
		}
		if w := val.Way; !(w[0].Key == pick[0].key && w[1].Key == pick[1].key || w[0].Key == pick[1].key && w[1].Key == pick[0].key) {
			return fmt.Errorf("set %d holds %+v and %+v, want the two keys sent", set, w[0].Key, w[1].Key)
		}
		for round := range 3 {
			for _, c := range pick {
				if err := send(c); err != nil {
					return fmt.Errorf("round %d: %w", round, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
