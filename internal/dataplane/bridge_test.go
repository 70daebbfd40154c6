package dataplane

import (
	"bytes"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/packet"
)

// The bridge module, run with BPF_PROG_TEST_RUN as a program on bridge port bp1 of br0, with a
// forwarding database written by hand: every rule of bpf/lib/bridge.h and fdb.h, the bytes that
// leave, and the refresh requests it makes.

var (
	macBr  = net.HardwareAddr{0x02, 0, 0, 0, 1, 0x00} // br0
	macBp2 = net.HardwareAddr{0x02, 0, 0, 0, 1, 0x02} // bp2's own address (a local entry)
	macA   = net.HardwareAddr{0x02, 0, 0, 0, 1, 0x0a} // a host behind bp1
	macB   = net.HardwareAddr{0x02, 0, 0, 0, 1, 0x0b} // a host behind bp2
	macC   = net.HardwareAddr{0x02, 0, 0, 0, 1, 0x0c} // a host behind bp3 (isolated, MTU 1400)
	macD   = net.HardwareAddr{0x02, 0, 0, 0, 1, 0x0d} // a host behind bp4 (not a redirect target)
	macZ   = net.HardwareAddr{0x02, 0, 0, 0, 1, 0x0f} // unknown
)

const bridgeTopology = `
ip link add br0 address 02:00:00:00:01:00 type bridge
ip link add bp1 address 02:00:00:00:01:01 type veth peer name bp1p
ip link add bp2 address 02:00:00:00:01:02 type veth peer name bp2p
ip link add bp3 type veth peer name bp3p
ip link add bp4 type veth peer name bp4p
ip link set bp1 master br0
ip link set bp2 master br0
ip link set bp3 master br0
ip link set bp4 master br0
ip link set br0 up
ip addr add 198.18.4.1/24 dev br0
ip neigh replace 198.18.4.11 lladdr 02:00:00:00:01:0b dev br0 nud permanent
ip neigh replace 198.18.4.15 lladdr 02:00:00:00:01:0f dev br0 nud permanent
ip route add 198.19.9.0/24 via 198.18.4.11
ip route add 198.19.10.0/24 via 198.18.4.15
`

type bridgeEnv struct {
	*testEnv
	br, bp1, bp2, bp3, bp4 int
	base                   Data
}

func newBridgeEnv(t testing.TB) *bridgeEnv {
	e := &bridgeEnv{testEnv: newTestEnv(t)}
	idx := func(name string) int {
		var i int
		e.ns.Do(func() error {
			l, err := netlink.LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			i = l.Attrs().Index
			return nil
		})
		return i
	}
	e.br, e.bp1, e.bp2, e.bp3, e.bp4 = idx("br0"), idx("bp1"), idx("bp2"), idx("bp3"), idx("bp4")
	port := L2Forwarding | L2InOK | L2Learning
	e.base = Data{
		TxData: txTo(e.out, e.in, e.bp1, e.bp2, e.bp3),
		BridgeData: BridgeData{L2: []L2Dev{
			{Ifindex: e.br, Bridge: e.br, Flags: L2Bridge | L2OutOK, MTU: 1500},
			{Ifindex: e.bp1, Bridge: e.br, Flags: port | L2NF4 | L2NF6, MTU: 1500, BrMAC: macBr},
			{Ifindex: e.bp2, Bridge: e.br, Flags: port, MTU: 1500, BrMAC: macBr},
			{Ifindex: e.bp3, Bridge: e.br, Flags: port | L2Isolated, MTU: 1400, BrMAC: macBr},
			{Ifindex: e.bp4, Bridge: e.br, Flags: port, MTU: 1500, BrMAC: macBr},
		}, FDB: []FDBEntry{
			{Bridge: e.br, MAC: macBr, Port: e.br, Local: true},
			{Bridge: e.br, MAC: macBp2, Port: e.bp2, Local: true},
			{Bridge: e.br, MAC: macA, Port: e.bp1},
			{Bridge: e.br, MAC: macB, Port: e.bp2},
			{Bridge: e.br, MAC: macC, Port: e.bp3},
			{Bridge: e.br, MAC: macD, Port: e.bp4},
		}},
	}
	return e
}

// sync writes the base data changed by f.
func (e *bridgeEnv) sync(t testing.TB, f func(d *Data)) {
	t.Helper()
	d := e.base
	d.L2 = append([]L2Dev(nil), e.base.L2...)
	d.FDB = append([]FDBEntry(nil), e.base.FDB...)
	if f != nil {
		f(&d)
	}
	// Devmap entries are resolved in the caller's namespace.
	if err := e.ns.Do(func() error { return e.dp.Sync(d) }); err != nil {
		t.Fatal(err)
	}
}

// refreshed marks every mirrored entry as refreshed in Linux just now (fdb_refresh_due), so
// that the next frames from learned sources show what the bridge module does with them, not
// the one frame per interval that goes to Linux for the refresh (TestBridgeRefresh).
func (e *bridgeEnv) refreshed(t testing.TB) {
	t.Helper()
	now := jiffies(t)
	var k linuxfpLfpFdbKey
	var v linuxfpLfpFdbVal
	var keys []linuxfpLfpFdbKey
	var vals []linuxfpLfpFdbVal
	for it := e.dp.maps.LfpFdb.Iterate(); it.Next(&k, &v); {
		v.Seen = now << 16
		keys, vals = append(keys, k), append(vals, v)
	}
	for i := range keys {
		if err := e.dp.maps.LfpFdb.Put(keys[i], vals[i]); err != nil {
			t.Fatal(err)
		}
	}
	// The slots' entries, under their generations (struct lfp_fdb_slot).
	w := e.dp.bridgeMaps.words
	for i := range e.dp.bridgeMaps.slots {
		gen := atomic.LoadUint64(&w[i*fdbSlotWords]) & 0xffff
		atomic.StoreUint64(&w[i*fdbSlotWords+4], now<<16|gen)
	}
}

// jiffies is the kernel's jiffies_64 now (the data plane's clock for the FDB refresh), as
// /proc/timer_list shows it.
func jiffies(t testing.TB) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/timer_list")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "jiffies: "); ok {
			j, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return j
		}
	}
	t.Fatal("no jiffies in /proc/timer_list")
	return 0
}

func (e *bridgeEnv) portProg(t testing.TB, r4 bool) *ebpf.Program {
	p, err := e.dp.LoadProgram(Spec{Ifindex: e.bp1, Name: "bp1", Hook: e.hook, Conntrack4: true, Conntrack6: true, Router4: r4, Router6: true,
		Bridge: true, L3Ifindex: e.br}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func setFlags(d *Data, ifindex int, f func(L2Flags) L2Flags) {
	for i := range d.L2 {
		if d.L2[i].Ifindex == ifindex {
			d.L2[i].Flags = f(d.L2[i].Flags)
		}
	}
}

func TestBridge(t *testing.T) {
	e := newBridgeEnv(t)
	l2 := func(src, dst net.HardwareAddr, size int) packet.Spec {
		return packet.Spec{SrcMAC: src, DstMAC: dst, Src: netip.MustParseAddr("198.18.4.10"), Dst: netip.MustParseAddr("198.18.4.11"),
			SrcPort: 1000, DstPort: 2000, Size: size}
	}
	l2v6 := func(src, dst net.HardwareAddr) packet.Spec {
		return packet.Spec{SrcMAC: src, DstMAC: dst, Src: netip.MustParseAddr("2001:2:0:f400::10"), Dst: netip.MustParseAddr("2001:2:0:f400::11"),
			SrcPort: 1000, DstPort: 2000, Size: 80}
	}
	mutate := func(b []byte, f func([]byte)) []byte { b = append([]byte(nil), b...); f(b); return b }
	ab := l2(macA, macB, 60)
	// A 42-byte IPv4 frame padded to 60 bytes (packet.Spec pads as a NIC does).
	padded := l2(macA, macB, 0).Bytes()
	small := padded[:14+28]
	small6 := l2v6(macA, macB)
	small6.Size = 0
	padded6 := append(small6.Bytes(), make([]byte, 8)...)
	toBr := l2(macA, macBr, 60)
	toBr.Dst = netip.MustParseAddr("198.19.0.9") // routed out of out0 (router topology)

	type tc struct {
		name   string
		pkt    []byte
		noR4   bool        // the port's program has no IPv4 router
		data   func(*Data) // changes to the base data
		want   Reason
		output []byte // expected bytes out (default: unchanged for Bridged)
	}
	off := func(ifindex int, f L2Flags) func(*Data) {
		return func(d *Data) { setFlags(d, ifindex, func(x L2Flags) L2Flags { return x &^ f }) }
	}
	without := func(ifindex int) func(*Data) {
		return func(d *Data) {
			d.L2 = slices.DeleteFunc(d.L2, func(x L2Dev) bool { return x.Ifindex == ifindex })
		}
	}
	on := func(ifindex int, f L2Flags) func(*Data) {
		return func(d *Data) { setFlags(d, ifindex, func(x L2Flags) L2Flags { return x | f }) }
	}
	cases := []tc{
		{name: "known unicast ipv4 bridged", pkt: ab.Bytes(), want: Bridged},
		{name: "known unicast ipv6 bridged", pkt: l2v6(macA, macB).Bytes(), want: Bridged},
		{name: "padding trimmed as br_validate_ipv4 does", pkt: padded, want: Bridged, output: small},
		{name: "ipv6 padding trimmed as br_validate_ipv6 does", pkt: padded6, want: Bridged, output: small6.Bytes()},
		{name: "padding kept without br_netfilter", pkt: padded, data: off(e.bp1, L2NF4), want: Bridged, output: padded},
		{name: "bad ipv4 checksum: br_netfilter drops it", pkt: mutate(ab.Bytes(), func(b []byte) { b[24] ^= 0x55 }), want: PassBridgeNetfilter},
		{name: "ipv4 options: br_netfilter parses them", pkt: func() []byte { s := l2(macA, macB, 0); s.Options = []byte{1, 1, 1, 0}; return s.Bytes() }(), want: PassBridgeNetfilter},
		{name: "ipv4 total length beyond frame", pkt: mutate(ab.Bytes(), func(b []byte) { b[16], b[17] = 0x05, 0xdc; fixCsum(b) }), want: PassBridgeNetfilter},
		{name: "ipv6 hop-by-hop: br_netfilter parses it", pkt: func() []byte { s := l2v6(macA, macB); s.HopByHop = true; return s.Bytes() }(), want: PassBridgeNetfilter},
		{name: "iptables rules could see bridged ipv4", pkt: ab.Bytes(), data: on(e.bp1, L2IP4Off), want: PassBridgeNetfilter},
		{name: "iptables rules could see bridged ipv6", pkt: l2v6(macA, macB).Bytes(), data: on(e.bp1, L2IP6Off), want: PassBridgeNetfilter},
		{name: "broadcast", pkt: l2(macA, net.HardwareAddr{255, 255, 255, 255, 255, 255}, 60).Bytes(), want: PassBridgeFlood},
		{name: "multicast", pkt: l2(macA, net.HardwareAddr{1, 0, 0x5e, 0, 0, 1}, 60).Bytes(), want: PassBridgeFlood},
		{name: "stp group address", pkt: l2(macA, net.HardwareAddr{1, 0x80, 0xc2, 0, 0, 0}, 60).Bytes(), want: PassBridgeFlood},
		{name: "arp", pkt: mutate(ab.Bytes(), func(b []byte) { b[12], b[13] = 0x08, 0x06 }), want: PassNotIP},
		{name: "vlan tagged", pkt: mutate(ab.Bytes(), func(b []byte) { b[12], b[13] = 0x81, 0x00 }), want: PassNotIP},
		{name: "multicast source", pkt: l2(net.HardwareAddr{1, 0, 0, 0, 0, 1}, macB, 60).Bytes(), want: PassMalformed},
		{name: "zero source", pkt: l2(net.HardwareAddr{0, 0, 0, 0, 0, 0}, macB, 60).Bytes(), want: PassMalformed},
		{name: "source not learned", pkt: l2(macZ, macB, 60).Bytes(), want: PassBridgeSrcUnknown},
		{name: "source learned on another port (moved)", pkt: l2(macD, macB, 60).Bytes(), want: PassBridgeSrcUnknown},
		{name: "source is the bridge's own address", pkt: l2(macBr, macB, 60).Bytes(), want: PassBridgeSrcUnknown},
		{name: "destination unknown: Linux floods", pkt: l2(macA, macZ, 60).Bytes(), want: PassBridgeDstUnknown},
		{name: "destination is a port's own address", pkt: l2(macA, macBp2, 60).Bytes(), want: PassBridgeLocal},
		{name: "destination behind the ingress port", pkt: l2(macA, macA, 60).Bytes(), want: PassBridgeEgress},
		{name: "ingress port not forwarding", pkt: ab.Bytes(), data: off(e.bp1, L2Forwarding), want: PassBridgePortState},
		{name: "ingress port options Linux handles", pkt: ab.Bytes(), data: off(e.bp1, L2InOK), want: PassBridgeConfig},
		{name: "ingress port not mirrored", pkt: ab.Bytes(), data: without(e.bp1), want: PassBridgeConfig},
		{name: "egress port not forwarding", pkt: ab.Bytes(), data: off(e.bp2, L2Forwarding), want: PassBridgeEgress},
		{name: "egress port not mirrored", pkt: ab.Bytes(), data: without(e.bp2), want: PassBridgeEgress},
		{name: "egress port not a redirect target", pkt: l2(macA, macD, 60).Bytes(), want: PassEgressNotReady},
		{name: "to an isolated port", pkt: l2(macA, macC, 60).Bytes(), want: Bridged},
		{name: "isolated to isolated", pkt: l2(macA, macC, 60).Bytes(), data: on(e.bp1, L2Isolated), want: PassBridgeEgress},
		{name: "larger than the egress port's MTU", pkt: l2(macA, macC, 1415).Bytes(), want: PassBridgeEgress},
		{name: "exactly the egress port's MTU", pkt: l2(macA, macC, 1414).Bytes(), want: Bridged},
		{name: "to the bridge's MAC: routed from br0", pkt: toBr.Bytes(), want: Forwarded, output: packet.Forwarded(toBr.Bytes(), macOut, macNext)},
		{name: "to the bridge's MAC: router off", pkt: toBr.Bytes(), noR4: true, want: PassFamilyOff},
		{name: "to the bridge's MAC from an unknown source", pkt: func() []byte { s := toBr; s.SrcMAC = macZ; return s.Bytes() }(), want: PassBridgeSrcUnknown},
		{name: "routed back into br0: hairpin", pkt: func() []byte { s := toBr; s.Dst = netip.MustParseAddr("198.19.9.1"); return s.Bytes() }(), want: PassHairpin},
	}
	for _, hook := range hooks {
		e.hook = hook
		progR, progNoR4 := e.portProg(t, true), e.portProg(t, false)
		for _, c := range cases {
			t.Run(string(hook)+"/"+c.name, func(t *testing.T) {
				e.sync(t, c.data)
				e.refreshed(t)
				prog := progR
				if c.noR4 {
					prog = progNoR4
				}
				ret, out, reason := e.runOn(t, prog, c.pkt, e.bp1)
				if reason != c.want {
					t.Fatalf("reason %v, want %v", reason, c.want)
				}
				if !c.want.FastPathed() {
					if ret != xdpPass {
						t.Fatalf("verdict %d, want XDP_PASS", ret)
					}
					if !bytes.Equal(out, c.pkt) {
						t.Fatalf("packet handed to Linux was modified:\n got %s\nwant %s", hex.EncodeToString(out), hex.EncodeToString(c.pkt))
					}
					return
				}
				if ret != xdpRedirect {
					t.Fatalf("verdict %d, want XDP_REDIRECT", ret)
				}
				want := c.output
				if want == nil {
					want = c.pkt
				}
				if !bytes.Equal(out, want) {
					t.Fatalf("output differs:\n got %s\nwant %s", hex.EncodeToString(out), hex.EncodeToString(want))
				}
			})
		}
	}
}

// Router -> bridge: a route out of br0 continues into br0's FDB.
func TestRouterToBridge(t *testing.T) {
	e := newBridgeEnv(t)
	pkt := v4("198.18.0.2", "198.19.9.1").Bytes()
	cases := []struct {
		name string
		pkt  []byte
		data func(*Data)
		want Reason
	}{
		{name: "to a host behind bp2", pkt: pkt, want: Forwarded},
		{name: "neighbour's MAC not in the FDB: Linux floods", pkt: v4("198.18.0.2", "198.19.10.1").Bytes(), want: PassBridgeDstUnknown},
		{name: "bridge transmit path not modelled", pkt: pkt, want: PassBridgeConfig,
			data: func(d *Data) { setFlags(d, e.br, func(f L2Flags) L2Flags { return f &^ L2OutOK }) }},
		{name: "port not forwarding", pkt: pkt, want: PassBridgeEgress,
			data: func(d *Data) { setFlags(d, e.bp2, func(f L2Flags) L2Flags { return f &^ L2Forwarding }) }},
		{name: "no bridge known: br0 is not a redirect target", pkt: pkt, want: PassEgressNotReady,
			data: func(d *Data) { d.L2 = nil }},
	}
	for _, hook := range hooks {
		e.hook = hook
		prog := e.prog(t, true, true)
		for _, c := range cases {
			t.Run(string(hook)+"/"+c.name, func(t *testing.T) {
				e.sync(t, c.data)
				e.refreshed(t)
				ret, out, reason := e.run(t, prog, c.pkt)
				if reason != c.want {
					t.Fatalf("reason %v, want %v", reason, c.want)
				}
				if c.want != Forwarded {
					if ret != xdpPass || !bytes.Equal(out, c.pkt) {
						t.Fatalf("verdict %d, packet modified: %v", ret, !bytes.Equal(out, c.pkt))
					}
					return
				}
				if want := packet.Forwarded(c.pkt, macBr, macB); ret != xdpRedirect || !bytes.Equal(out, want) {
					t.Fatalf("verdict %d, output:\n got %s\nwant %s", ret, hex.EncodeToString(out), hex.EncodeToString(want))
				}
			})
		}
	}
}

// A learned source's FDB entry stays fresh in Linux: at most once per FDBRefreshInterval one of
// its frames goes to Linux (bridge_refresh), whose bridge refreshes the entry from it; only on
// ports that learn.
func TestBridgeRefresh(t *testing.T) {
	e := newBridgeEnv(t)
	prog := e.portProg(t, true)
	frame := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: netip.MustParseAddr("198.18.4.10"),
		Dst: netip.MustParseAddr("198.18.4.11"), SrcPort: 1, DstPort: 2, Size: 60}.Bytes()
	run := func(want ...Reason) {
		t.Helper()
		for i, w := range want {
			ret, out, r := e.runOn(t, prog, frame, e.bp1)
			if r != w {
				t.Fatalf("frame %d: reason %v, want %v", i, r, w)
			}
			if r == PassBridgeRefresh && (ret != xdpPass || !bytes.Equal(out, frame)) {
				t.Fatalf("the refresh's frame: verdict %d, modified %v: not handed to Linux untouched", ret, !bytes.Equal(out, frame))
			}
		}
	}
	e.sync(t, nil)
	// A new entry's first frame, then none for the interval.
	run(PassBridgeRefresh, Bridged, Bridged, Bridged, Bridged)
	// A port that does not learn: Linux would not refresh either.
	e.sync(t, func(d *Data) { setFlags(d, e.bp1, func(f L2Flags) L2Flags { return f &^ L2Learning }) })
	time.Sleep(FDBRefreshInterval)
	run(Bridged, Bridged)
	// Learning again, more than the interval later: one more.
	e.sync(t, nil)
	run(PassBridgeRefresh, Bridged)
}

// br_netfilter: bridged IP through the filter module with br0 as input and output device, and
// through the conntrack module where netfilter tracks connections.
func TestBridgeNetfilter(t *testing.T) {
	e := newBridgeEnv(t)
	idx := []int{0, 1}
	prog := &compile.Program{
		Family: model.IPv4,
		Rules: []compile.Rule{
			// udp to port 53 in and out of br0 (bit 0): drop
			{Tests: []compile.Test{{Kind: compile.TestProto, A: 17}, {Kind: compile.TestDport, A: 53, B: 53},
				{Kind: compile.TestIif, A: 0}, {Kind: compile.TestOif, A: 0}}, Action: compile.ActDrop},
			// tcp: Linux
			{Tests: []compile.Test{{Kind: compile.TestProto, A: 6}}, Action: compile.ActLinux},
		},
		Cut:      compile.CutDst,
		Leaves:   []compile.Leaf{{Rules: idx}},
		Prefixes: []compile.LeafPrefix{{Prefix: pfx("0.0.0.0/0"), Leaf: 0}},
	}
	withFilter := func(d *Data) {
		d.Filter = FilterData{Prog4: prog, Ifaces: []FilterIface{{Ifindex: e.br, Bits: [2]uint64{1, 1}},
			{Ifindex: e.bp1}, {Ifindex: e.bp2}}}
	}
	frame := func(proto layers.IPProtocol, dport uint16, f func(*packet.Spec)) []byte {
		s := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: netip.MustParseAddr("198.18.4.10"), Dst: netip.MustParseAddr("198.18.4.11"),
			Proto: proto, SrcPort: 1000, DstPort: dport, Size: 60}
		if f != nil {
			f(&s)
		}
		return s.Bytes()
	}
	cases := []struct {
		name string
		pkt  []byte
		data func(*Data)
		want Reason
	}{
		{name: "rule drops it", pkt: frame(layers.IPProtocolUDP, 53, nil), data: withFilter, want: FilterDropped},
		{name: "no rule matches", pkt: frame(layers.IPProtocolUDP, 54, nil), data: withFilter, want: Bridged},
		{name: "a rule Linux must evaluate", pkt: frame(layers.IPProtocolTCP, 80, nil), data: withFilter, want: PassFilter},
		{name: "fragment", pkt: frame(layers.IPProtocolUDP, 54, func(s *packet.Spec) { s.MF = true }), data: withFilter, want: PassFragment},
		{name: "call-iptables off: the rules do not see it", pkt: frame(layers.IPProtocolUDP, 53, nil),
			data: func(d *Data) {
				withFilter(d)
				setFlags(d, e.bp1, func(f L2Flags) L2Flags { return f &^ (L2NF4 | L2NF6) })
			}, want: Bridged},
		{name: "tracked: a new connection", pkt: frame(layers.IPProtocolUDP, 54, nil),
			data: func(d *Data) { withFilter(d); d.CT = CT{Active4: true} }, want: PassCTNew},
	}
	for _, hook := range hooks {
		e.hook = hook
		p := e.portProg(t, true)
		for _, c := range cases {
			t.Run(string(hook)+"/"+c.name, func(t *testing.T) {
				e.sync(t, c.data)
				e.refreshed(t)
				ret, out, reason := e.runOn(t, p, c.pkt, e.bp1)
				if reason != c.want {
					t.Fatalf("reason %v, want %v", reason, c.want)
				}
				switch {
				case c.want == FilterDropped:
					if ret != xdpDrop {
						t.Fatalf("verdict %d, want drop", ret)
					}
				case c.want == Bridged:
					if ret != xdpRedirect || !bytes.Equal(out, c.pkt) {
						t.Fatalf("verdict %d, output changed %v", ret, !bytes.Equal(out, c.pkt))
					}
				default:
					if ret != xdpPass || !bytes.Equal(out, c.pkt) {
						t.Fatalf("verdict %d, modified %v: not handed to Linux untouched", ret, !bytes.Equal(out, c.pkt))
					}
				}
			})
		}
	}
}

// The bridge FDB watcher's counts of moves (bpf/include/fdb_map.h): an entry is used only while
// its bucket's count is the one it was read with, whenever it was written.
func TestBridgeMoves(t *testing.T) {
	e := newBridgeEnv(t)
	prog := e.portProg(t, true)
	frame := func(src, dst net.HardwareAddr) []byte {
		return packet.Spec{SrcMAC: src, DstMAC: dst, Src: netip.MustParseAddr("198.18.4.10"),
			Dst: netip.MustParseAddr("198.18.4.11"), SrcPort: 1, DstPort: 2, Size: 60}.Bytes()
	}
	expect := func(pkt []byte, want Reason) {
		t.Helper()
		if _, _, r := e.runOn(t, prog, pkt, e.bp1); r != want {
			t.Fatalf("reason %v, want %v", r, want)
		}
	}
	// A distinct count in every bucket: the data plane and the controller must agree on each
	// entry's bucket.
	counts := make([]uint64, fdbMoveBuckets)
	for i := range counts {
		counts[i] = uint64(1000 + 3*i)
		if err := e.dp.maps.LfpFdbMoves.Put(uint32(i), counts[i]); err != nil {
			t.Fatal(err)
		}
	}
	move := func(mac net.HardwareAddr) {
		k := linuxfpLfpFdbKey{Bridge: uint32(e.br)}
		copy(k.Mac[:], mac)
		b := fdbBucket(k)
		counts[b]++
		if err := e.dp.maps.LfpFdbMoves.Put(uint32(b), counts[b]); err != nil {
			t.Fatal(err)
		}
	}
	read := func() []uint64 {
		moves, err := e.dp.FDBMoves()
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(moves)
	}
	withMoves := func(moves []uint64) func(*Data) { return func(d *Data) { d.FDBMoves = moves } }

	e.sync(t, withMoves(read()))
	// The source's first frame refreshes its entry in Linux (TestBridgeRefresh).
	expect(frame(macA, macB), PassBridgeRefresh)
	expect(frame(macA, macB), Bridged)

	// The destination moves: Linux's.
	before := read()
	move(macB)
	expect(frame(macA, macB), PassBridgeDstUnknown)
	// An apply that read the FDB before the move writes after it: still Linux's.
	e.sync(t, withMoves(before))
	expect(frame(macA, macB), PassBridgeDstUnknown)
	// The next apply reads it again.
	e.sync(t, withMoves(read()))
	expect(frame(macA, macB), Bridged)

	// The source moves: Linux learns where it is.
	move(macA)
	expect(frame(macA, macB), PassBridgeSrcUnknown)
	e.sync(t, withMoves(read()))
	expect(frame(macA, macB), PassBridgeRefresh)
	expect(frame(macA, macB), Bridged)
}

// The FDB's direct-mapped copy (lfp_fdb_slots, bpf/lib/fdb.h): a frame finds an entry in its
// slot when the slot holds its key and was written whole, and in the hash map otherwise.
func TestBridgeFDBSlots(t *testing.T) {
	e := newBridgeEnv(t)
	slotOf := func(mac net.HardwareAddr) uint32 {
		k := linuxfpLfpFdbKey{Bridge: uint32(e.br)}
		copy(k.Mac[:], mac)
		return fdbSlotOf(k, e.dp.bridgeMaps.slotBits)
	}
	// collide is a MAC of slot mac's slot.
	collide := func(mac net.HardwareAddr) net.HardwareAddr {
		for i := 1; i < 1<<24; i++ {
			c := net.HardwareAddr{0x02, 0x01, byte(i >> 16), byte(i >> 8), byte(i), mac[5]}
			if slotOf(c) == slotOf(mac) {
				return c
			}
		}
		t.Fatal("no MAC of the same slot")
		return nil
	}
	holds := func(mac net.HardwareAddr) bool {
		s, ok := e.dp.bridgeMaps.slots[slotOf(mac)]
		return ok && bytes.Equal(s.key.Mac[:], mac)
	}
	frame := func(src, dst net.HardwareAddr, size int) []byte {
		return packet.Spec{SrcMAC: src, DstMAC: dst, Src: netip.MustParseAddr("198.18.4.10"),
			Dst: netip.MustParseAddr("198.18.4.11"), SrcPort: 1, DstPort: 2, Size: size}.Bytes()
	}
	// x shares macB's slot and is behind the ingress port: a frame to x that took macB's entry
	// would be bridged to bp2. y shares macA's slot and is behind bp1, a source.
	x, y := collide(macB), collide(macA)
	withX := func(d *Data) {
		d.FDB = append(d.FDB, FDBEntry{Bridge: e.br, MAC: x, Port: e.bp1}, FDBEntry{Bridge: e.br, MAC: y, Port: e.bp1})
	}
	withoutB := func(d *Data) {
		withX(d)
		d.FDB = slices.DeleteFunc(d.FDB, func(f FDBEntry) bool { return bytes.Equal(f.MAC, macB) })
	}
	for _, hook := range hooks {
		e.hook = hook
		prog := e.portProg(t, true)
		t.Run(string(hook), func(t *testing.T) {
			expect := func(pkt []byte, want Reason) {
				t.Helper()
				if _, _, r := e.runOn(t, prog, pkt, e.bp1); r != want {
					t.Fatalf("reason %v, want %v", r, want)
				}
			}
			check := func() {
				t.Helper()
				e.refreshed(t)
				expect(frame(macA, macB, 60), Bridged)
				expect(frame(macA, x, 60), PassBridgeEgress)
				expect(frame(y, macB, 60), Bridged)
			}
			// macB and macA in their slots (there first), x and y in the hash map alone.
			e.sync(t, nil)
			e.sync(t, withX)
			if !holds(macB) || !holds(macA) || holds(x) || holds(y) {
				t.Fatal("macB and macA not in their slots")
			}
			check()
			// The other way round: x and y there first.
			e.sync(t, withoutB)
			e.sync(t, func(d *Data) {
				withoutB(d)
				d.FDB = slices.DeleteFunc(d.FDB, func(f FDBEntry) bool { return bytes.Equal(f.MAC, macA) })
			})
			expect(frame(macA, x, 60), PassBridgeSrcUnknown)
			e.sync(t, withX)
			if holds(macB) || holds(macA) || !holds(x) || !holds(y) {
				t.Fatal("x and y not in their slots")
			}
			check()
			// An entry removed is gone from its slot too.
			e.sync(t, nil)
			if !holds(macB) {
				t.Fatal("macB not in its slot")
			}
			e.sync(t, func(d *Data) {
				d.FDB = slices.DeleteFunc(d.FDB, func(f FDBEntry) bool { return bytes.Equal(f.MAC, macB) })
			})
			e.refreshed(t)
			expect(frame(macA, macB, 60), PassBridgeDstUnknown)

			// The key's bridge counts: macZ's entry on another bridge whose (bridge, macZ) has the
			// slot br0's would have is not br0's.
			other := func() uint32 {
				z := linuxfpLfpFdbKey{Bridge: uint32(e.br)}
				copy(z.Mac[:], macZ)
				for b := uint32(e.br) + 1; b < 1<<24; b++ {
					o := linuxfpLfpFdbKey{Bridge: b, Mac: z.Mac}
					if fdbSlotOf(o, e.dp.bridgeMaps.slotBits) == fdbSlotOf(z, e.dp.bridgeMaps.slotBits) {
						return b
					}
				}
				t.Fatal("no bridge of the same slot")
				return 0
			}()
			e.sync(t, func(d *Data) { d.FDB = append(d.FDB, FDBEntry{Bridge: int(other), MAC: macZ, Port: e.bp2}) })
			if !holds(macZ) {
				t.Fatal("macZ of the other bridge not in the slot")
			}
			e.refreshed(t)
			expect(frame(macA, macZ, 60), PassBridgeDstUnknown)

			// The slot is what the frame reads: macB's slot rewritten whole, by hand, with bp1 as
			// its port, sends the frame back out of its ingress port (Linux's).
			e.sync(t, nil)
			e.refreshed(t)
			expect(frame(macA, macB, 60), Bridged)
			w := e.dp.bridgeMaps.words[slotOf(macB)*fdbSlotWords:]
			gen := atomic.LoadUint64(&w[0]) & 0xffff
			set := func(word int, v uint64) { atomic.StoreUint64(&w[word], v&^0xffff|gen) }
			port := atomic.LoadUint64(&w[2])
			set(2, uint64(e.bp1)<<32)
			expect(frame(macA, macB, 60), PassBridgeEgress)
			// A slot being written: its words of two generations, the new port with the next one.
			// The frame takes the hash map's entry.
			atomic.StoreUint64(&w[2], uint64(e.bp1)<<32|(gen+1)&0xffff)
			expect(frame(macA, macB, 60), Bridged)
			set(2, port)
			expect(frame(macA, macB, 60), Bridged)
		})
	}
}
