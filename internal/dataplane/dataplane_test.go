package dataplane

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/packet"
)

// The modules' tests run the programs with BPF_PROG_TEST_RUN on crafted packets inside a
// namespace that holds the routes, neighbours and addresses bpf_fib_lookup() consults. Each case
// gives the expected verdict, the reason counted, and (when forwarded) the exact output bytes.
// This file holds what they share: the namespace, the data plane, and running a program.

var (
	macIn    = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01} // in0, the ingress device
	macOut   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02} // out0, the egress device
	macNext  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03} // the nexthop on out0
	macStale = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x04} // a STALE neighbour on out0
	macPeer  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x05} // a host on in0
	macSlow  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x06} // a neighbour on slow0 (no XDP redirect)
)

const topology = `
ip link add in0 address 02:00:00:00:00:01 type veth peer name in0p
ip link add out0 address 02:00:00:00:00:02 type veth peer name out0p
ip link add slow0 type veth peer name slow0p
ip link add big0 type veth peer name big0p
ip link set big0 mtu 9000
ip link set big0p mtu 9000
ip link set big0 up
ip link set big0p up
ip addr add 198.18.3.1/24 dev big0
ip neigh replace 198.18.3.2 lladdr 02:00:00:00:00:03 dev big0 nud permanent
ip link set in0 up
ip link set in0p up
ip link set out0 up
ip link set out0p up
ip link set slow0 up
ip link set slow0p up
ip link set out0 mtu 1400
ip addr add 198.18.0.1/24 dev in0
ip addr add 198.18.1.1/24 dev out0
ip addr add 198.18.2.1/24 dev slow0
ip -6 addr add 2001:2:0:0::1/64 dev in0 nodad
ip -6 addr add 2001:2:0:1::1/64 dev out0 nodad
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.ipv6.conf.all.forwarding=1
ip neigh replace 198.18.1.2 lladdr 02:00:00:00:00:03 dev out0 nud permanent
ip neigh replace 198.18.1.4 lladdr 02:00:00:00:00:04 dev out0 nud stale
ip neigh replace 198.18.2.2 lladdr 02:00:00:00:00:06 dev slow0 nud permanent
ip neigh replace 198.18.0.2 lladdr 02:00:00:00:00:05 dev in0 nud permanent
ip -6 neigh replace 2001:2:0:1::2 lladdr 02:00:00:00:00:03 dev out0 nud permanent
ip route add 198.19.0.0/24 via 198.18.1.2
ip route add 198.19.4.0/24 via 198.18.1.4
ip route add 198.19.5.0/24 via 198.18.1.9
ip route add 198.19.6.0/24 via 198.18.2.2
ip route add 198.19.7.0/24 via 198.18.0.2
ip route add 198.19.8.0/24 via 198.18.3.2 mtu 1450
ip route add blackhole 198.19.1.0/24
ip route add unreachable 198.19.2.0/24
ip route add prohibit 198.19.3.0/24
ip -6 route add 2001:2:0:f100::/64 via 2001:2:0:1::2
ip -6 route add blackhole 2001:2:0:f200::/64
ip -6 route add 2001:2:0:f300::/64 via 2001:2:0:1::2 mtu 1300
`

type testEnv struct {
	ns       *nsutil.NS
	dp       *Dataplane
	in, out  int
	vx       int  // flannel.1 (the vxlan tests)
	hook     Hook // the hook prog() builds for
	progs    map[progKey]*ebpf.Program
	counters []Counter
	// ctxOut: the __sk_buff a tc program left (priority ...), after runOn.
	ctxOut skbMD
}

type progKey struct {
	hook   Hook
	r4, r6 bool
}

// hooks are the two builds of the data plane every table runs through.
var hooks = []Hook{HookXDP, HookTC}

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	requireRoot(t)
	ns, err := nsutil.New("lfp-dptest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	if err := ns.Script(topology + bridgeTopology); err != nil {
		t.Fatal(err)
	}
	env := &testEnv{ns: ns, hook: HookXDP, progs: map[progKey]*ebpf.Program{}}
	err = ns.Do(func() error {
		dp, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
		if err != nil {
			return err
		}
		env.dp = dp
		in, _ := netlink.LinkByName("in0")
		out, _ := netlink.LinkByName("out0")
		env.in, env.out = in.Attrs().Index, out.Attrs().Index
		big, _ := netlink.LinkByName("big0")
		return dp.Sync(Data{
			TxData:    txTo(env.out, env.in, big.Attrs().Index), // slow0 is not a redirect target
			NeighData: NeighData{StaleNeighbours: []NeighKey{{env.out, netip.MustParseAddr("198.18.1.4")}}},
			RouterData: RouterData{LocalHosts: []netip.Addr{
				netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.1.1"),
				netip.MustParseAddr("198.18.1.255"), netip.MustParseAddr("2001:2:0:1::1"),
			},
				LocalPrefixes: []netip.Prefix{netip.MustParsePrefix("198.18.128.0/17")},
				RouteMTU4:     1450,
				RouteMTU6:     1300,
				// net.ipv4.ip_forward_update_priority's default.
				FwdUpdatePriority4: true,
			},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range env.progs {
			p.Close()
		}
		env.dp.Close()
	})
	return env
}

func requireRoot(t testing.TB) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, BPF)")
	}
}

// tcTx: the tc egress entries (plain redirects) of these devices.
func tcTx(idx ...int) []TCTx {
	var out []TCTx
	for _, i := range idx {
		out = append(out, TCTx{Ifindex: i})
	}
	return out
}

// txTo: these devices as the egress of XDP and tc programs (plain redirects).
func txTo(idx ...int) TxData { return TxData{TxDevs: idx, TCTx: tcTx(idx...)} }

func (e *testEnv) prog(t testing.TB, r4, r6 bool) *ebpf.Program {
	key := progKey{e.hook, r4, r6}
	if p := e.progs[key]; p != nil {
		return p
	}
	p, err := e.dp.LoadProgram(Spec{Ifindex: e.in, Name: "in0", MAC: MACOf(macIn), Hook: e.hook, Router4: r4, Router6: r6, Conntrack4: true, Conntrack6: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.progs[key] = p
	return p
}

// run runs one packet through the program as if received on in0.
func (e *testEnv) run(t *testing.T, prog *ebpf.Program, pkt []byte) (uint32, []byte, Reason) {
	t.Helper()
	return e.runOn(t, prog, pkt, e.in)
}

// runOn runs one packet through the program as if received on ifindex. A tc program's verdict
// is returned as the XDP verdict of the same meaning (TCX_NEXT: XDP_PASS ...), so one table
// checks both builds.
func (e *testEnv) runOn(t *testing.T, prog *ebpf.Program, pkt []byte, ifindex int) (uint32, []byte, Reason) {
	return e.runSkb(t, prog, pkt, skbMD{Ifindex: uint32(ifindex)})
}

// runSkb is runOn with a given __sk_buff for a tc program (its Ifindex is the ingress device).
func (e *testEnv) runSkb(t testing.TB, prog *ebpf.Program, pkt []byte, skb skbMD) (uint32, []byte, Reason) {
	t.Helper()
	before, err := e.dp.Counters(0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(pkt)+256)
	opts := &ebpf.RunOptions{
		Data:    pkt,
		DataOut: out,
		Context: xdpMD{DataEnd: uint32(len(pkt)), IngressIfindex: skb.Ifindex},
	}
	tc := prog.Type() == ebpf.SchedCLS
	if tc {
		opts.Context = skb
		e.ctxOut = skbMD{}
		opts.ContextOut = &e.ctxOut
	}
	var ret uint32
	err = e.ns.Do(func() error {
		var err error
		ret, err = prog.Run(opts)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if tc {
		switch int32(ret) {
		case tcActUnspec:
			ret = xdpPass
		case tcActRedirect:
			ret = xdpRedirect
		case tcActShot:
			ret = xdpDrop
		default:
			ret = 1000 + ret // TC_ACT_OK and the rest: never a linuxfp verdict
		}
	}
	after, _ := e.dp.Counters(0)
	reason := Reason(1 << 30)
	for r := range after {
		if after[r].Packets != before[r].Packets {
			reason = Reason(r)
		}
	}
	return ret, opts.DataOut, reason
}

// xdpMD is struct xdp_md, the context given to BPF_PROG_TEST_RUN.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// skbMD is struct __sk_buff, the context given to BPF_PROG_TEST_RUN for tc programs: only the
// fields the kernel lets a test set (or returns) are named.
type skbMD struct {
	_        [2]uint32 // len, pkt_type
	Mark     uint32
	_        [5]uint32 // queue_mapping, protocol, vlan_present, vlan_tci, vlan_proto
	Priority uint32
	_        uint32 // ingress_ifindex
	Ifindex  uint32
	_        [27]uint32 // tc_index ... flow_keys
	Tstamp   uint64
	WireLen  uint32
	GSOSegs  uint32
	_        [2]uint32 // sk
	GSOSize  uint32
	_        uint32 // tstamp_type, padding
	Hwtstamp uint64
}

const (
	xdpDrop     = 1
	xdpPass     = 2
	xdpRedirect = 4

	tcActUnspec   = -1
	tcActShot     = 2
	tcActRedirect = 7
)

func v4(src, dst string) packet.Spec {
	return packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
		SrcPort: 1000, DstPort: 2000, Size: 60}
}

func v6(src, dst string) packet.Spec {
	return packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
		SrcPort: 1000, DstPort: 2000, Size: 80}
}

// Every map in the object is one of the shared ones: a program with a private map would keep
// data nobody writes or reads (it happened with a ring buffer).
func TestEveryMapShared(t *testing.T) {
	env := newTestEnv(t)
	spec, err := loadLinuxfp()
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue // .rodata, .data, .bss: each program's own
		}
		if env.dp.shared[name] == nil {
			t.Errorf("map %s (%s) is not shared between the programs", name, m.Type)
		}
	}
}
