package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/difftest"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/packet"
)

// The bridge differential test with MAC moves: br0 has three ports, in0 (gen), out0 (the sink)
// and out1 (a third host, the mover). A MAC is learned on in0 from gen's side, the sink sends
// frames to it (the fast path switches them to in0 once it has mirrored the entry), then a frame
// with that source MAC arrives on out1 (unicast, which the fast path hands to Linux as a source
// on another port, or broadcast and ARP, which only Linux sees), and the sink's next frames to
// it must come out of out1 as with Linux alone; then the MAC moves back to in0 the same ways.
// The bridge learns the moves in its data path, not over netlink, so the fast path follows them
// only through its FDB mirror's tracepoints (bpf/netlink_watch.c).

func TestDifferentialBridgeMoves(t *testing.T) {
	for _, hook := range diffHooks[:2] {
		t.Run(hook.name, func(t *testing.T) {
			tb := bridgeTestbedAs(t, "brm-e2e", hook.opts, bridgeDiffSetup)
			sh(t, tb.Sink, bridgeDiffSinkSetup)
			mover, err := nsutil.New("brm-e2e-mover")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mover.Close() })
			sh(t, tb.DUT, "ip link add out1 type veth peer name eth1 netns "+mover.Name+`
ip link set out1 master br0
ethtool -K out1 gro on
ip link set out1 up`)
			// As the testbed's hosts: NAPI on the receiving side (XDP redirects into it are
			// dropped otherwise), checksums as the hook's hosts compute them.
			moverSetup := "ip link set eth1 up\nethtool -K eth1 gro on"
			if hook.opts.TxChecksumOff {
				moverSetup += "\nethtool -K eth1 tx off"
			}
			sh(t, mover, moverSetup)
			d := newDiffEnv(t, tb, "")
			d.hook, d.args, d.bridged = hook.name, hook.args, true
			d.via = []difftest.Endpoint{{Name: "mover", NS: mover, Device: "eth1"}}
			d.fastAt, d.fastTo = "out0", "gen"
			d.reset = func(t *testing.T) { bridgeReset(t, d) }
			d.differential(t, d.bridgeMovesCorpus(), time.Second, true)
		})
	}
}

// Frames from the moving MACs to the sink's MAC are addressed to nobody, so the sink drops them
// without an answer (it does not forward).
var nobody4, nobody6 = netip.MustParseAddr("198.18.0.230"), netip.MustParseAddr("2001:2::230")

// moveKinds are the frames that move a MAC to a port: a unicast frame (to the sink: the fast
// path sees it and hands it to Linux, its source being learned on another port) and a
// broadcast or ARP request only Linux sees.
var moveKinds = []struct {
	name  string
	frame func(b *corpusBuilder, mac net.HardwareAddr, src netip.Addr) (packet.Spec, []func([]byte) []byte)
}{
	{"unicast ipv4", func(b *corpusBuilder, mac net.HardwareAddr, src netip.Addr) (packet.Spec, []func([]byte) []byte) {
		s := b.v4(nobody4)
		s.SrcMAC, s.DstMAC, s.Src = mac, b.tb.SinkMAC, src
		return s, nil
	}},
	{"unicast ipv6", func(b *corpusBuilder, mac net.HardwareAddr, _ netip.Addr) (packet.Spec, []func([]byte) []byte) {
		s := b.v6(nobody6)
		s.SrcMAC, s.DstMAC = mac, b.tb.SinkMAC
		return s, nil
	}},
	{"broadcast ipv4", func(b *corpusBuilder, mac net.HardwareAddr, src netip.Addr) (packet.Spec, []func([]byte) []byte) {
		s := b.v4(netip.MustParseAddr("198.18.0.255"))
		s.SrcMAC, s.DstMAC, s.Src = mac, bcastMAC, src
		return s, nil
	}},
	// For an address nobody has: the bridge floods it, br0 does not answer.
	{"arp request", func(b *corpusBuilder, mac net.HardwareAddr, src netip.Addr) (packet.Spec, []func([]byte) []byte) {
		s := b.v4(netip.MustParseAddr("198.18.0.250"))
		s.SrcMAC, s.DstMAC = mac, bcastMAC
		return s, []func([]byte) []byte{arpRequest(mac, src, netip.MustParseAddr("198.18.0.250"))}
	}},
}

func (d *diffEnv) bridgeMovesCorpus() *diffCorpus {
	b := d.newBuilder(diffSeed + 2)
	sinkMAC := d.tb.SinkMAC
	sink4 := netip.MustParseAddr(sinkL2)
	// from adds n frames of a case sent by host via ("" is gen).
	from := func(via, name string, n int, fast bool, spec func(int) packet.Spec, post ...func([]byte) []byte) {
		b.add(name, n, fast, spec, post...)
		for i := len(b.items) - n; i < len(b.items); i++ {
			b.items[i].via = via
		}
	}
	k := 0
	for _, away := range moveKinds {
		for _, back := range moveKinds {
			if back.name == "unicast ipv6" || back.name == "broadcast ipv4" {
				continue // the way back: one kind the fast path sees, one it does not
			}
			k++
			mac := net.HardwareAddr{0x02, 0x42, 0xac, 0x12, 0x00, byte(k)}
			ip := netip.AddrFrom4([4]byte{198, 18, 0, byte(200 + k)})
			// To the moving MAC from the sink's port, v4 and v6 alternating.
			toMAC := func(int) packet.Spec {
				var s packet.Spec
				if b.r.Intn(2) == 0 {
					s = b.v4(ip)
					s.Src = sink4
				} else {
					s = b.v6(netip.MustParseAddr(fmt.Sprintf("2001:2::%x", 0x200+k)))
					s.Src = sinkL2Addr6
				}
				s.SrcMAC, s.DstMAC = sinkMAC, mac
				return s
			}
			fromMAC := func(int) packet.Spec {
				s := b.v4(nobody4)
				s.SrcMAC, s.DstMAC, s.Src = mac, sinkMAC, ip
				return s
			}
			sc := fmt.Sprintf("move %d (away by %s, back by %s): ", k, away.name, back.name)
			from("", sc+"learned on in0", 2, false, fromMAC)
			// Linux learns the MAC at once, the fast path once it has read the entry (a few
			// ms): the later frames are the fast path's.
			from("sink", sc+"to it on in0, before the mirror", 20, false, toMAC)
			from("sink", sc+"to it on in0", 20, true, toMAC)
			s, post := away.frame(b, mac, ip)
			from("mover", sc+"moved to out1", 1, false, func(int) packet.Spec { return s }, post...)
			from("sink", sc+"to it on out1", 30, false, toMAC)
			from("mover", sc+"from it on out1", 5, false, fromMAC)
			s, post = back.frame(b, mac, ip)
			from("", sc+"moved back to in0", 1, false, func(int) packet.Spec { return s }, post...)
			from("sink", sc+"to it back on in0", 30, false, toMAC)
		}
	}
	return b.inOrder()
}
