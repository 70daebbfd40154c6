package testbed

import "net/netip"

// The bridged topology: the same namespaces and veths, but the DUT switches instead of routing.
//
//	gen eth0 198.18.0.2/24  <->  in0 [dut: br0 198.18.0.1/24] out0  <->  sink eth0 198.18.0.3/24
//	         2001:2::2/64              2001:2::1/64                             2001:2::3/64
//
// All three are in one subnet; the DUT's bridge br0 is created with iproute2 as a person would
// (STP off, default ageing of 300 s, learning on), with no static FDB entry: it learns where gen
// and the sink are from their frames. There is no router on the subnet, so gen and the sink send
// no IPv6 router solicitations (which would otherwise leave their stacks every few seconds to
// minutes, for ever, in the middle of benchmarks).

// BridgeName is the DUT's bridge in the bridged topology.
const BridgeName = "br0"

// Addresses of the bridged topology that differ from the routed one (gen keeps GenAddr and
// GenAddr6; br0 has InAddr and InAddr6).
var (
	BridgeSinkAddr  = netip.MustParseAddr("198.18.0.3")
	BridgeSinkAddr6 = netip.MustParseAddr("2001:2::3")
)

// NewBridge builds the bridged topology. o.Prefixes is ignored (nothing is routed); the rest of
// o means what it means for New. Names start with prefix; Close removes everything.
func NewBridge(prefix string, o Options) (*Testbed, error) {
	o.Prefixes = 0
	return build(prefix, o, layout{
		gen:    host{addr4: "198.18.0.2/24", addr6: "2001:2::2/64", noRouterSolicit: true},
		sink:   host{addr4: "198.18.0.3/24", addr6: "2001:2::3/64", noRouterSolicit: true},
		genIP:  GenAddr,
		sinkIP: BridgeSinkAddr,
		bridge: BridgeName,
		dut: func(gro string) string {
			return `
ip link add br0 type bridge
ip link set in0 master br0
ip link set out0 master br0
ip addr add 198.18.0.1/24 dev br0
ip link set in0 up
ip link set out0 up
ip link set br0 up
ip -6 addr add 2001:2::1/64 dev br0 nodad
ethtool -K in0 gro ` + gro + `
ethtool -K out0 gro ` + gro + "\n"
		},
		// gen and the sink resolve each other; the bridge learns both on the way.
		pings: func(tb *Testbed) []ping {
			return []ping{{tb.Gen, []string{BridgeSinkAddr.String(), BridgeSinkAddr6.String()}}}
		},
	})
}
