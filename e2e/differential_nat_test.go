package e2e

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/packet"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// NAT rules on the DUT, tracked UDP flows through it: each flow's first datagram makes Linux
// create the conntrack entry (and the translation), the later ones the fast path forwards
// untranslated or translates as the entry says. The sink must receive the same bytes (IPv4 ID
// included: forwarded packets keep theirs) as with Linux alone. The same rules for IPv6, whose
// DNAT also moves the port.
const diffNATSetup = `iptables -t nat -A POSTROUTING -o out0 -p udp --dport 5000:5999 -j MASQUERADE
iptables -t nat -A POSTROUTING -o out0 -p udp --dport 6000:6999 -j SNAT --to-source 198.18.1.1
iptables -t nat -A PREROUTING -d 198.19.40.0/24 -p udp -j DNAT --to-destination 198.19.41.7
iptables -A FORWARD -p udp --dport 7777 -j DROP
ip route add unreachable 198.19.201.0/24
ip6tables -t nat -A POSTROUTING -o out0 -p udp --dport 5000:5999 -j MASQUERADE
ip6tables -t nat -A POSTROUTING -o out0 -p udp --dport 6000:6999 -j SNAT --to-source 2001:2:0:1::5:1
ip6tables -t nat -A PREROUTING -d 2001:2:0:f128::/64 -p udp -j DNAT --to-destination [2001:2:0:f129::7]:9000
ip6tables -A FORWARD -p udp --dport 7777 -j DROP
ip -6 route add unreachable 2001:2:0:f1c9::/64`

// checkNoCTNAT fails the test if in0 or out0 handed a translated connection's packet to Linux
// for being translated (ct_nat): with no rule but nat chains' on prerouting and postrouting,
// the fast path translates every family's.
func checkNoCTNAT(t *testing.T, tb *testbed.Testbed) {
	t.Helper()
	st, err := testbed.StatusClientIn(tb.DUT).Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range st.Interfaces {
		if n := it.Passed["ct_nat"].Packets; (it.Name == "in0" || it.Name == "out0") && n > 0 {
			t.Errorf("%s handed %d packets of translated connections to Linux (ct_nat), want 0", it.Name, n)
		}
	}
}

func TestDifferentialNAT(t *testing.T) {
	for _, hook := range diffHooks[:2] {
		t.Run(hook.name, func(t *testing.T) {
			tb := newTestbed(t, hook.opts)
			d := newDiffEnv(t, tb, diffNATSetup)
			d.hook = hook.name
			// Masqueraded and SNAT'd datagrams carry the DUT's out0 address: forwarded all the
			// same, their IDs are compared (the ICMP errors the DUT sends gen come from in0's).
			d.originated = func(a netip.Addr) bool { return a == testbed.SinkAddr || a == testbed.InAddr }
			d.preRun = func(t *testing.T) {
				// Every run starts with no connection tracked.
				flushConntrack(t, tb.DUT)
			}
			d.differential(t, d.natCorpus(), time.Second, true)
			checkNoCTNAT(t, tb)
		})
	}
}

func (d *diffEnv) natCorpus() *diffCorpus {
	b := d.newBuilder(11)
	const per = 3 // datagrams per flow
	flow := func(name string, fast bool, spec packet.Spec, post ...func([]byte) []byte) {
		// The first datagram of a flow (whichever comes first after the shuffle) is Linux's;
		// the builder counts every one as fast, the harness wants 90% of what it counts.
		b.add(name, per, fast, func(i int) packet.Spec { return spec }, post...)
	}
	zeroUDPCsum := func(f []byte) []byte { f[14+20+6], f[14+20+7] = 0, 0; return f }
	zeroUDPCsum6 := func(f []byte) []byte { f[14+40+6], f[14+40+7] = 0, 0; return f }
	for i := 0; i < 25; i++ {
		s := b.v4(b.route4())
		s.DstPort = uint16(5000 + b.r.Intn(1000))
		flow("masquerade", true, s)
		s = b.v4(b.route4())
		s.DstPort = uint16(6000 + b.r.Intn(1000))
		flow("snat", true, s)
		s = b.v4(testbed.Prefix4(40, 1+b.r.Intn(254)))
		flow("dnat", true, s)
		s = b.v4(testbed.Prefix4(40, 1+b.r.Intn(254)))
		flow("dnat, no udp checksum", true, s, zeroUDPCsum)
		s = b.v4(b.route4())
		s.DstPort = uint16(8000 + b.r.Intn(1000))
		flow("tracked, untranslated", true, s)
		s = b.v4(b.route4())
		s.DstPort = 7777
		flow("dropped by a rule", false, s)
	}
	for i := 0; i < 15; i++ {
		s := b.v6(b.route6())
		s.DstPort = uint16(5000 + b.r.Intn(1000))
		flow("ipv6 masquerade", true, s)
		s = b.v6(b.route6())
		s.DstPort = uint16(6000 + b.r.Intn(1000))
		flow("ipv6 snat", true, s)
		s = b.v6(b.in6(40))
		flow("ipv6 dnat", true, s)
		s = b.v6(b.in6(40))
		flow("ipv6 dnat, no udp checksum", true, s, zeroUDPCsum6)
		s = b.v6(b.route6())
		s.DstPort = uint16(8000 + b.r.Intn(1000))
		flow("ipv6 tracked, untranslated", true, s)
		s = b.v6(b.route6())
		s.DstPort = 7777
		flow("ipv6 dropped by a rule", false, s)
	}
	for i := 0; i < 5; i++ {
		// ICMP errors back to gen: Linux's answers, quoting the datagram (masqueraded or not).
		s := b.v4(testbed.Prefix4(201, 1+b.r.Intn(254)))
		s.Src = b.ownSource()
		s.DstPort = uint16(5000 + b.r.Intn(1000))
		b.add("unreachable", 1, false, func(int) packet.Spec { return s })
		s = b.v6(b.in6(0xc9))
		s.DstPort = uint16(5000 + b.r.Intn(1000))
		b.add("ipv6 unreachable", 1, false, func(int) packet.Spec { return s })
	}
	c := b.done()
	// A flow's first datagram goes to Linux (ct_new).
	c.fast = c.fast * (per - 1) / per
	return c
}

// The same NAT rules, with connections that were opened (and became ASSURED) before linuxfp
// started, and replies: a responder at the sink answers every datagram (the reply carries the
// datagram's marker), so translated replies come back through out0 and are un-translated, by
// Linux alone or by the fast path. gen has a socket for every flow (its kernel sends no port
// unreachable about the replies); the sink has none, so its kernel answers every datagram
// with a port unreachable about the translated flow too, which Linux translates back (the
// fast path hands ICMP to Linux). gen and the sink must see the same bytes.
func TestDifferentialNATReplies(t *testing.T) {
	for _, hook := range diffHooks[:2] {
		t.Run(hook.name, func(t *testing.T) {
			tb := newTestbed(t, hook.opts)
			d := newDiffEnv(t, tb, diffNATSetup)
			d.hook = hook.name
			if err := tb.Gen.Script(diffNoRateLimits); err != nil {
				t.Fatal(err)
			}
			d.originated = func(a netip.Addr) bool { return a == testbed.SinkAddr || a == testbed.InAddr }
			c, flows := d.natRepliesCorpus()
			for _, f := range flows {
				ln := listenUDP(t, tb.Gen, netip.AddrPortFrom(f.Src, f.SrcPort))
				t.Cleanup(func() { ln.Close() })
			}
			stop := udpResponder(t, tb)
			defer stop()
			d.preRun = func(t *testing.T) {
				flushConntrack(t, tb.DUT)
				// Each flow: a datagram and its reply (SEEN_REPLY), and after conntrack's 2 s
				// another one, which makes the entry ASSURED (udp_packet()). Before linuxfp
				// starts, in linuxfp's run.
				for round := range 2 {
					if round == 1 {
						time.Sleep(2100 * time.Millisecond)
					}
					var frames [][]byte
					for _, f := range flows {
						s := f
						s.Payload = []byte("warm-up")
						frames = append(frames, s.Bytes())
					}
					sendFrames(t, tb.Gen, tb.GenIfindex, frames)
					time.Sleep(100 * time.Millisecond)
				}
			}
			d.differential(t, c, time.Second, true)
			checkNoCTNAT(t, tb)
			st, err := testbed.StatusClientIn(tb.DUT).Status()
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range st.Interfaces {
				if it.Name != "out0" {
					continue
				}
				t.Logf("out0 (replies): forwarded %d, passed to Linux %s", it.Forwarded.Packets, passed(it.Passed))
				if want := uint64(len(c.frames)) * 9 / 10; it.Forwarded.Packets < want {
					t.Errorf("out0 fast-pathed %d replies, want at least %d of the %d", it.Forwarded.Packets, want, len(c.frames))
				}
			}
		})
	}
}

// natRepliesCorpus: per datagrams of each of several flows per kind of translation; every flow
// is established before the run (see preRun), so all its datagrams are the fast path's.
func (d *diffEnv) natRepliesCorpus() (*diffCorpus, []packet.Spec) {
	b := d.newBuilder(12)
	const per = 4
	var flows []packet.Spec
	flow := func(name string, s packet.Spec) {
		s.Size = 0 // the marker ends the payload: the responder's reply carries it back
		flows = append(flows, s)
		b.add(name, per, true, func(int) packet.Spec { return s })
	}
	for range 15 {
		s := b.v4(b.route4())
		s.DstPort = uint16(5000 + b.r.Intn(1000))
		flow("masquerade", s)
		s = b.v4(b.route4())
		s.DstPort = uint16(6000 + b.r.Intn(1000))
		flow("snat", s)
		s = b.v4(testbed.Prefix4(40, 1+b.r.Intn(254)))
		flow("dnat", s)
		s = b.v4(b.route4())
		s.DstPort = uint16(8000 + b.r.Intn(1000))
		flow("tracked, untranslated", s)
		// To the sink's own address: its kernel answers with a port unreachable about the
		// masqueraded datagram as well.
		s = b.v4(testbed.SinkAddr)
		s.DstPort = uint16(5000 + b.r.Intn(1000))
		flow("masquerade, port unreachable back", s)
	}
	for range 10 {
		s := b.v6(b.route6())
		s.DstPort = uint16(5000 + b.r.Intn(1000))
		flow("ipv6 masquerade", s)
		s = b.v6(b.route6())
		s.DstPort = uint16(6000 + b.r.Intn(1000))
		flow("ipv6 snat", s)
		s = b.v6(b.in6(40))
		flow("ipv6 dnat", s)
		s = b.v6(b.route6())
		s.DstPort = uint16(8000 + b.r.Intn(1000))
		flow("ipv6 tracked, untranslated", s)
		s = b.v6(testbed.SinkAddr6)
		s.DstPort = uint16(5000 + b.r.Intn(1000))
		flow("ipv6 masquerade, port unreachable back", s)
	}
	return b.done(), flows
}

func listenUDP(t *testing.T, ns *nsutil.NS, a netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	if err := ns.Do(func() (err error) { c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(a)); return err }); err != nil {
		t.Fatal(err)
	}
	return c
}

// sendFrames sends frames out of ifindex in ns through a packet socket.
func sendFrames(t *testing.T, ns *nsutil.NS, ifindex int, frames [][]byte) {
	t.Helper()
	if err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, f := range frames {
			to := &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: htons(binary.BigEndian.Uint16(f[12:])), Halen: 6}
			copy(to.Addr[:], f[:6])
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return err
			}
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// udpResponder answers, from the sink's eth0, every UDP datagram that arrives there with one
// going back: addresses and ports swapped, the same payload, TTL (hop limit) 64 and the
// datagram's IPv4 ID or IPv6 flow label (so that runs compare). It stops when stop is called.
func udpResponder(t *testing.T, tb *testbed.Testbed) (stop func()) {
	t.Helper()
	var fd int
	if err := tb.Sink.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: tb.SinkIfindex})
	}); err != nil {
		t.Fatal(err)
	}
	tv := unix.Timeval{Usec: 50000}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		buf := make([]byte, 4096)
		for {
			select {
			case <-done:
				return
			default:
			}
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype != unix.PACKET_HOST {
				continue // not addressed to the sink (its own replies among them)
			}
			p := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
			udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if udp == nil {
				continue
			}
			reply := packet.Spec{SrcMAC: tb.SinkMAC, DstMAC: tb.OutMAC, Proto: layers.IPProtocolUDP,
				SrcPort: uint16(udp.DstPort), DstPort: uint16(udp.SrcPort), Payload: slices.Clone(udp.Payload)}
			if ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ip != nil {
				if ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
					continue
				}
				reply.Src, _ = netip.AddrFromSlice(ip.DstIP)
				reply.Dst, _ = netip.AddrFromSlice(ip.SrcIP)
				reply.ID = ip.Id
			} else if ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ip != nil && ip.NextHeader == layers.IPProtocolUDP {
				reply.Src, _ = netip.AddrFromSlice(ip.DstIP)
				reply.Dst, _ = netip.AddrFromSlice(ip.SrcIP)
				reply.FlowLabel = ip.FlowLabel
			} else {
				continue
			}
			f := reply.Bytes()
			to := &unix.SockaddrLinklayer{Ifindex: tb.SinkIfindex, Protocol: htons(binary.BigEndian.Uint16(f[12:])), Halen: 6}
			copy(to.Addr[:], f[:6])
			unix.Sendto(fd, f, 0, to)
		}
	}()
	return func() {
		close(done)
		<-finished
		unix.Close(fd)
	}
}
