// Package observe reads the Linux networking state of the current network namespace and tells
// when it changes, by events: rtnetlink (links, addresses, routes, rules, nexthops, neighbours,
// netconf, tc), generic netlink (XDP features), nf_tables notifications, XFRM notifications and
// a cgroup/sysctl BPF hook for sysctls that have no netlink event.
package observe

import (
	"net"
	"net/netip"
	"time"
)

// Snapshot is what linuxfp knows of the namespace at one moment.
type Snapshot struct {
	Links      map[int]*Link
	Addrs      []Addr
	Routes     Routes
	Neighbours map[NeighKey]uint16 // NUD state of every neighbour entry
	// StaleLost: the STALE neighbours the neighbour tracepoints could not mirror
	// (bpf/include/neigh_map.h), counted before Neighbours was read (0 without
	// Observer.StaleLost).
	StaleLost uint64
	FDB       []FDBEntry // every bridge's forwarding database
	// FDBMoves: the bridge FDB watcher's counts of moves (bpf/include/fdb_map.h), read just
	// before FDB (nil without Observer.FDBMoves).
	FDBMoves  []uint64
	VXLANFDB  []VXLANFDBEntry // every vxlan device's own forwarding database
	Sysctl    Sysctls
	Netfilter Netfilter
	// XfrmPolicies: IPsec policies exist; forwarding consults them (xfrm4_policy_check).
	XfrmPolicies bool
	// PacketTaps: the devices a packet socket of every protocol receives on, by ifindex (0:
	// every device), read with the links and when the poll sees them change (readPacketTaps).
	PacketTaps map[int]bool
	// Rules is the netfilter ruleset with its ipsets (nil until read); graph compiles it.
	Rules *Ruleset
}

// Link is one network device.
type Link struct {
	Index  int
	Name   string
	Kind   string // "veth", "bridge", "" for a physical device ...
	MTU    int
	MAC    net.HardwareAddr
	Up     bool // administratively up
	OperUp bool // carrier: can transmit
	Master int  // ifindex of the bridge/bond/vrf it is enslaved to, 0 if none
	// MasterKind is the Kind of Master.
	MasterKind string
	// Peer is the veth peer's ifindex and PeerNetnsID the id of its namespace as seen from
	// here (-1: this namespace).
	Peer        int
	PeerNetnsID int
	// PeerOffload: may the veth peer's stack send skbs with checksums left to offload?
	PeerOffload    Offload
	PeerOffloadErr string // why the peer could not be inspected
	// TxOffload (veths): this side's own transmit checksum offload and TCP segmentation offload
	// are both on. Off, its transmit path completes checksums and cuts TCP GSO trains in
	// software (validate_xmit_skb()), which a redirect straight into the peer would skip.
	TxOffload Offload
	// PeerMTU and PeerXDP: the peer's MTU (0: unknown) and whether an XDP program is attached
	// to it.
	PeerMTU int
	PeerXDP bool
	// XDPProgID is the XDP program attached now (0: none).
	XDPProgID uint32
	// XDPFeatures is the device's NETDEV_XDP_ACT_* mask (generic netlink "netdev" family).
	XDPFeatures uint64
	// Qdiscs are the kinds of its egress qdiscs, root and children ("noqueue", "fq_codel", ...).
	Qdiscs []string
	// TCIngress / TCEgress: classic tc filters on the ingress / egress hooks (clsact, ingress
	// qdisc); TCEgress also tcx egress programs. TCXIngress lists the tcx ingress programs
	// (linuxfp's own among them).
	TCIngress  bool
	TCXIngress []uint32
	TCEgress   bool
	// Promisc: IFF_PROMISC (a bridge in promiscuous mode also passes every frame up to itself).
	Promisc bool
	// Bridge holds a bridge's options (Kind "bridge"), Port a bridge port's (MasterKind "bridge").
	Bridge *BridgeInfo
	Port   *BridgePort
	// VXLAN holds a vxlan device's options (Kind "vxlan").
	VXLAN *VXLANInfo
}

// BridgeInfo are the options of a bridge device (IFLA_BR_*).
type BridgeInfo struct {
	AgeingTime      time.Duration
	VlanFiltering   bool
	NFCallIPTables  bool // per-bridge nf_call_iptables (or the net.bridge sysctl)
	NFCallIP6Tables bool
}

// BridgePort are the options of a bridge port (IFLA_BRPORT_*).
type BridgePort struct {
	State         uint8 // BR_STATE_*: 3 is forwarding
	Learning      bool
	Hairpin       bool
	Isolated      bool
	Locked        bool
	MAB           bool
	NeighSuppress bool // neigh_suppress or neigh_vlan_suppress
	BackupPort    int
}

// BrStateForwarding is BR_STATE_FORWARDING.
const BrStateForwarding = 3

// FDBEntry is one bridge forwarding-database entry (VLAN 0 only, see readFDB).
type FDBEntry struct {
	Bridge int
	Port   int // the port's ifindex, or the bridge's for its own address
	MAC    net.HardwareAddr
	Local  bool // NUD_PERMANENT: the bridge's own address (a local entry)
}

// XDP feature bits (include/uapi/linux/netdev.h).
const (
	XDPActBasic   = 1 << 0
	XDPActNdoXmit = 1 << 2
)

// Addr is an address on a device.
type Addr struct {
	Index  int
	Prefix netip.Prefix
}

// Routes is what the router module needs to know of the routing tables (it forwards with the
// kernel's own FIB, so it does not need the routes themselves).
type Routes struct {
	// LocalHosts / LocalPrefixes: destinations of local, broadcast, anycast and multicast
	// routes in any table. A packet from one of these is martian for Linux.
	LocalHosts    []netip.Addr
	LocalPrefixes []netip.Prefix
	// MinMTU4 / MinMTU6 are the smallest MTU metric on an IPv4 / IPv6 route, 0 if none.
	MinMTU4, MinMTU6 int
	// Multipath: ECMP routes or nexthop groups exist (per family).
	Multipath4, Multipath6 bool
	// HopLimit4: some IPv4 route has a hoplimit metric (the TTL of packets this host sends on it;
	// bpf_fib_lookup does not report it).
	HopLimit4 bool
	// MTULocked4 / MTULocked6: some route's MTU metric is locked (forwarding then honours a
	// learnt path MTU below it).
	MTULocked4, MTULocked6 bool
	// PolicyRules4 / PolicyRules6: fib rules other than the kernel's defaults exist (lookups may
	// depend on the source, marks, ports, the input device ...).
	PolicyRules4, PolicyRules6 bool
	// Long4 / Long6: the prefixes of routes (any type, any table) longer than a FIB cache
	// block (FibBlock4, FibBlock6): they split the block they lie in.
	Long4, Long6 []netip.Prefix
	// SourceRoutes6: an IPv6 route has a source prefix (ip -6 route add ... from ...).
	// Expiring6: an IPv6 route expires (learnt from a router advertisement, or `expires`).
	SourceRoutes6, Expiring6 bool
}

// FibBlock4 / FibBlock6: the prefix length of the FIB cache's blocks (LFP_FIB_BLOCK4 and
// LFP_FIB_BLOCK6 in bpf/include/fibcache_map.h).
const (
	FibBlock4 = 24
	FibBlock6 = 64
)

// NeighKey identifies a neighbour entry.
type NeighKey struct {
	Ifindex int
	Addr    netip.Addr
}

// Sysctls are the settings that change forwarding.
type Sysctls struct {
	IPv4Forward   bool            // net.ipv4.ip_forward
	IPv4DevFwd    map[string]bool // net.ipv4.conf.<dev>.forwarding
	RPFilter      map[string]int  // effective rp_filter: max(all, <dev>)
	IPv6Forward   bool            // net.ipv6.conf.all.forwarding
	IPv6ProxyNDP  bool            // net.ipv6.conf.all.proxy_ndp
	IPv6Disabled  map[string]bool // net.ipv6.conf.<dev>.disable_ipv6
	MPHashPolicy4 int             // net.ipv4.fib_multipath_hash_policy
	MPHashPolicy6 int             // net.ipv6.fib_multipath_hash_policy
	// FwdUpdatePriority4: net.ipv4.ip_forward_update_priority (ip_forward() sets the skb
	// priority from the TOS); FwdUsePMTU4: net.ipv4.ip_forward_use_pmtu (ip_forward() sizes
	// packets by the path MTU before the route's MTU metric).
	FwdUpdatePriority4, FwdUsePMTU4 bool
	// IgnoreLinkdown4: net.ipv4.conf.<dev>.ignore_routes_with_linkdown (effective: all or the
	// device's) is set for some device: routes follow its carrier.
	IgnoreLinkdown4 map[string]bool
	// IgnoreLinkdown6: the same for IPv6 (net.ipv6.conf.<dev>.ignore_routes_with_linkdown).
	IgnoreLinkdown6 map[string]bool
	// AcceptRA6: the device takes routes and default routers from router advertisements:
	// ipv6_accept_ra() (accept_ra >= 1 where the device does not forward, accept_ra = 2 where it
	// does).
	AcceptRA6 map[string]bool
	// BrNFCallIPTables / BrNFCallIP6Tables: net.bridge.bridge-nf-call-iptables / -ip6tables
	// (br_netfilter passes bridged IPv4 / IPv6 through the iptables hooks).
	BrNFCallIPTables, BrNFCallIP6Tables bool
	// Conntrack: the net.netfilter.nf_conntrack_* settings the conntrack module follows.
	Conntrack ConntrackSysctls
	// IPDefaultTTL: net.ipv4.ip_default_ttl (the TTL of locally built packets, e.g. a vxlan
	// device's outer header); LocalPortLow/High: net.ipv4.ip_local_port_range (a vxlan device
	// without a source port range hashes its source ports into it).
	IPDefaultTTL                int
	LocalPortLow, LocalPortHigh int
	// rpFilterAll: net.ipv4.conf.all.rp_filter, which RPFilter folds into every device's value.
	rpFilterAll int
	// linkdownAll / linkdownAll6: net.ipv4 / net.ipv6.conf.all.ignore_routes_with_linkdown,
	// folded into IgnoreLinkdown4 / IgnoreLinkdown6.
	linkdownAll, linkdownAll6 bool
	// conntrackRead: the nf_conntrack sysctls were there to read.
	conntrackRead bool
}

// ConntrackSysctls are net.netfilter.nf_conntrack_* (timeouts in seconds).
type ConntrackSysctls struct {
	TCPBeLiberal          bool
	Checksum              bool // nf_conntrack_checksum
	TCPTimeoutEstablished int
	TCPTimeoutCloseWait   int
	TCPTimeoutUnack       int
	TCPTimeoutMaxRetrans  int
	TCPMaxRetrans         int
	UDPTimeoutStream      int
	UDPTimeout            int // unreplied
}

// Netfilter says which forwarded traffic netfilter could see.
type Netfilter struct {
	// Backend: "nf_tables" or "nf_tables+legacy" when legacy x_tables are loaded too.
	Backend string
	// V4, V6: why forwarded IPv4/IPv6 packets could meet a rule (empty: they cannot).
	V4, V6 []string
	// Ingress / Egress: netdev-family chains hooked on a device, by device name.
	Ingress, Egress map[string][]string
	// Bridge: why bridged frames could meet a bridge-family rule (empty: they cannot).
	Bridge []string
	// LocalOut4/6 and LocalIn4/6: why packets this host sends (output, postrouting) or receives
	// (prerouting, input) could meet a rule other than a nat chain's (which sees only a
	// connection's first packet). A vxlan device's outer packets take these paths.
	LocalOut4, LocalOut6, LocalIn4, LocalIn6 []string
	// LegacyV4 / LegacyV6: loaded iptables-legacy tables (invisible to nf_tables: the filter
	// module cannot see their rules).
	LegacyV4, LegacyV6 []string
}
