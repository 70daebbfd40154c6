package observe

import (
	"encoding/binary"
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// attrs encodes netlink attributes as the kernel sends them.
func attrs(t *testing.T, fill func(ae *mnl.AttributeEncoder)) []byte {
	t.Helper()
	ae := mnl.NewAttributeEncoder()
	fill(ae)
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

func TestDecodeVXLAN(t *testing.T) {
	cases := []struct {
		name string
		fill func(ae *mnl.AttributeEncoder)
		want VXLANInfo
	}{
		{name: "defaults: local bypass on, no group",
			fill: func(ae *mnl.AttributeEncoder) {
				ae.Uint32(iflaVxlanID, 42)
				ae.Bytes(iflaVxlanGroup, []byte{0, 0, 0, 0})
			},
			want: VXLANInfo{VNI: 42, LocalBypass: true}},
		{name: "flannel-like",
			fill: func(ae *mnl.AttributeEncoder) {
				ae.Uint32(iflaVxlanID, 1)
				ae.Bytes(iflaVxlanLocal, []byte{198, 18, 0, 1})
				ae.Uint32(iflaVxlanLink, 7)
				ae.Uint8(iflaVxlanTTL, 64)
				ae.Uint8(iflaVxlanTOS, 1)
				ae.Uint8(iflaVxlanLearning, 0)
				ae.Bytes(iflaVxlanPortRange, append(be16(32768), be16(61000)...))
				ae.Bytes(iflaVxlanPort, be16(8472))
				ae.Uint8(iflaVxlanUDPCSum, 1)
				ae.Uint32(iflaVxlanAgeing, 300) // ignored: learning's ageing
				ae.Uint8(iflaVxlanLocalBypass, 1)
			},
			want: VXLANInfo{VNI: 1, Local: netip.MustParseAddr("198.18.0.1"), VtepDev: 7, TTL: 64, TOS: 1,
				PortLow: 32768, PortHigh: 61000, Port: 8472, UDPCSum: true, LocalBypass: true}},
		{name: "IPv6 and v4-mapped addresses",
			fill: func(ae *mnl.AttributeEncoder) {
				ae.Bytes(iflaVxlanGroup6, netip.MustParseAddr("ff02::1").AsSlice())
				ae.Bytes(iflaVxlanLocal6, netip.MustParseAddr("::ffff:198.18.0.2").AsSlice())
			},
			want: VXLANInfo{Group: netip.MustParseAddr("ff02::1"), Local: netip.MustParseAddr("198.18.0.2"), LocalBypass: true}},
		{name: "options the fast path does not reproduce",
			fill: func(ae *mnl.AttributeEncoder) {
				ae.Flag(iflaVxlanGBP, true)
				ae.Flag(iflaVxlanGPE, true)
				ae.Flag(iflaVxlanRemCSumNoPartial, true)
				ae.Uint8(iflaVxlanRemCSumTX, 1)
				ae.Uint8(iflaVxlanUDPZeroCSum6RX, 1)
				ae.Uint8(iflaVxlanCollectMetadata, 1)
				ae.Bytes(iflaVxlanLabel, binary.BigEndian.AppendUint32(nil, 0x12345))
				ae.Uint8(iflaVxlanTTLInherit, 1)
				ae.Uint8(iflaVxlanDF, 2)
				ae.Uint8(iflaVxlanVNIFilter, 1)
				ae.Uint8(iflaVxlanLocalBypass, 0)
				ae.Bytes(iflaVxlanReservedBits, []byte{0, 0, 0, 1, 0, 0, 0, 0})
				ae.Uint8(iflaVxlanMCRoute, 1)
				ae.Uint8(99, 1)
			},
			want: VXLANInfo{GBP: true, GPE: true, RemCSumNoPartial: true, RemCSumTX: true, ZeroCSum6RX: true,
				External: true, Label: 0x12345, TTLInherit: true, DF: 2, VNIFilter: true,
				ReservedBits: []byte{0, 0, 0, 1, 0, 0, 0, 0}, MCRoute: true, Unknown: []uint16{99}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := decodeVXLAN(attrs(t, c.fill))
			if got == nil || !reflect.DeepEqual(*got, c.want) {
				t.Fatalf("decoded %+v\nwant    %+v", got, c.want)
			}
		})
	}
	if got := decodeVXLAN([]byte{8, 0, 1}); got != nil {
		t.Fatalf("a truncated attribute decoded as %+v", got)
	}
}

func TestDecodeBridge(t *testing.T) {
	b := attrs(t, func(ae *mnl.AttributeEncoder) {
		ae.Uint32(unix.IFLA_BR_AGEING_TIME, 30000)
		ae.Uint8(unix.IFLA_BR_VLAN_FILTERING, 0)
		ae.Uint8(unix.IFLA_BR_NF_CALL_IPTABLES, 1)
		ae.Uint8(unix.IFLA_BR_NF_CALL_IP6TABLES, 0)
	})
	want := BridgeInfo{AgeingTime: 300 * time.Second, NFCallIPTables: true}
	if got := decodeBridge(b); got == nil || *got != want {
		t.Fatalf("bridge %+v, want %+v", got, want)
	}
	p := attrs(t, func(ae *mnl.AttributeEncoder) {
		ae.Uint8(unix.IFLA_BRPORT_STATE, BrStateForwarding)
		ae.Uint8(unix.IFLA_BRPORT_LEARNING, 1)
		ae.Uint8(unix.IFLA_BRPORT_MODE, 1)
		ae.Uint8(unix.IFLA_BRPORT_ISOLATED, 0)
		ae.Uint8(unix.IFLA_BRPORT_NEIGH_SUPPRESS, 0)
		ae.Uint8(unix.IFLA_BRPORT_NEIGH_VLAN_SUPPRESS, 1)
		ae.Uint32(unix.IFLA_BRPORT_BACKUP_PORT, 9)
	})
	wantPort := BridgePort{State: BrStateForwarding, Learning: true, Hairpin: true, NeighSuppress: true, BackupPort: 9}
	if got := decodeBridgePort(p); got == nil || *got != wantPort {
		t.Fatalf("port %+v, want %+v", got, wantPort)
	}
}

// IFLA_LINKINFO sets what the kind says and clears what an earlier read of the link had.
func TestDecodeLinkInfo(t *testing.T) {
	info := attrs(t, func(ae *mnl.AttributeEncoder) {
		ae.String(unix.IFLA_INFO_KIND, "vxlan")
		ae.Bytes(unix.IFLA_INFO_DATA, attrs(t, func(ae *mnl.AttributeEncoder) { ae.Uint32(iflaVxlanID, 5) }))
		ae.String(unix.IFLA_INFO_SLAVE_KIND, "bridge")
		ae.Bytes(unix.IFLA_INFO_SLAVE_DATA, attrs(t, func(ae *mnl.AttributeEncoder) { ae.Uint8(unix.IFLA_BRPORT_LEARNING, 1) }))
	})
	ad, err := mnl.NewAttributeDecoder(info)
	if err != nil {
		t.Fatal(err)
	}
	lk := &Link{Bridge: &BridgeInfo{}}
	decodeLinkInfo(ad, lk)
	if lk.Bridge != nil || lk.VXLAN == nil || lk.VXLAN.VNI != 5 || lk.Port == nil || !lk.Port.Learning {
		t.Fatalf("link %+v: want a vxlan device with VNI 5 that is a learning bridge port, no bridge", lk)
	}
	if l, err := decodeLink(mnl.Message{Header: mnl.Header{Type: unix.RTM_DELLINK}, Data: make([]byte, 64)}); l != nil || err != nil {
		t.Fatalf("RTM_DELLINK decoded as %+v, %v; want nothing", l, err)
	}
}

func ifinfo(typ uint16, ifindex int32) mnl.Message {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(ifindex))
	return mnl.Message{Header: mnl.Header{Type: mnl.HeaderType(typ)}, Data: b}
}

func netconf(t *testing.T, ifindex int32) mnl.Message {
	b := append(make([]byte, 4), attrs(t, func(ae *mnl.AttributeEncoder) { ae.Int32(netconfaIfindex, ifindex) })...)
	return mnl.Message{Header: mnl.Header{Type: unix.RTM_NEWNETCONF}, Data: b}
}

// What each rtnetlink message marks dirty, and for which link.
func TestRecordRoute(t *testing.T) {
	var l changeLog
	for _, m := range []mnl.Message{
		ifinfo(unix.RTM_NEWLINK, 3),
		ifinfo(unix.RTM_NEWQDISC, 4),
		netconf(t, 5),
		netconf(t, -1), // NETCONFA_IFINDEX_ALL
		{Header: mnl.Header{Type: unix.RTM_NEWROUTE}, Data: make([]byte, 12)},
		{Header: mnl.Header{Type: unix.RTM_NEWNEIGH}, Data: []byte{unix.AF_BRIDGE, 0, 0, 0}},
	} {
		if d := rtnlDirty(m); d != 0 {
			l.recordRoute(m, d)
		}
	}
	if d := rtnlDirty(mnl.Message{Header: mnl.Header{Type: unix.RTM_NEWNEIGH}, Data: []byte{unix.AF_INET}}); d != DirtyNeigh {
		t.Fatalf("an IPv4 neighbour marks %s, want neigh", d)
	}
	wantLinks := map[int]Dirty{3: DirtyLinks | DirtySysctl | DirtyTC | DirtyXDP, 4: DirtyTC, 5: DirtySysctl}
	if !reflect.DeepEqual(l.links, wantLinks) || l.all != DirtySysctl {
		t.Fatalf("recorded links %v, all %s; want %v and sysctl", l.links, l.all, wantLinks)
	}
	// A Refresh of tc takes only tc, per link; the rest stays for the Refresh that reads it.
	cs := l.take(DirtyTC)
	if !reflect.DeepEqual(cs.links, map[int]Dirty{3: DirtyTC, 4: DirtyTC}) || cs.all != 0 {
		t.Fatalf("took %+v, want tc of links 3 and 4", cs)
	}
	if _, ok := l.links[4]; ok || l.links[3] != DirtyLinks|DirtySysctl|DirtyXDP {
		t.Fatalf("left %v, want link 3's other kinds only", l.links)
	}
}

// Which links re-read their facts: new or replaced ones, those the events named, and a veth
// whose peer changed (here or in another namespace).
func TestChangeSetNeeds(t *testing.T) {
	old := map[int]*Link{
		2: {Index: 2, Name: "eth0"},
		3: {Index: 3, Name: "veth0", Kind: "veth", Peer: 4, PeerNetnsID: -1},
		5: {Index: 5, Name: "veth1", Kind: "veth", Peer: 2, PeerNetnsID: 7},
	}
	cs := changeSet{links: map[int]Dirty{4: DirtyLinks, 2: DirtySysctl}, peers: map[peerRef]bool{{7, 2}: true}}
	for _, c := range []struct {
		k    Dirty
		lk   *Link
		want bool
	}{
		{DirtyTC, old[2], false},
		{DirtySysctl, old[2], true},
		{DirtyLinks, old[3], true},                        // its peer (4, here) changed
		{DirtyTC, old[3], false},                          // a peer's change is no reason to re-read its own tc
		{DirtyLinks, old[5], true},                        // its peer in namespace 7 changed
		{DirtyLinks, &Link{Index: 2, Name: "eth1"}, true}, // ifindex 2 is another device now
		{DirtyTC, &Link{Index: 9, Name: "new"}, true},
	} {
		if got := cs.needs(c.k, c.lk, old[c.lk.Index]); got != c.want {
			t.Errorf("%s of %s: needs %v, want %v", c.k, c.lk.Name, got, c.want)
		}
	}
	if idxs, ok := cs.namedLinks(); !ok || !reflect.DeepEqual(idxs, []int{4}) {
		t.Fatalf("named links %v %v, want [4]", idxs, ok)
	}
	if _, ok := (changeSet{all: DirtyLinks}).namedLinks(); ok {
		t.Fatal("an overflow (all links) must not be read as a list of named links")
	}
}

func TestNetdevIfindex(t *testing.T) {
	b := attrs(t, func(ae *mnl.AttributeEncoder) {
		ae.Uint64(3, 1) // NETDEV_A_DEV_XDP_FEATURES: another attribute before it
		ae.Uint32(netdevADevIfindex, 12)
	})
	if idx, ok := netdevIfindex(b); !ok || idx != 12 {
		t.Fatalf("ifindex %d %v, want 12", idx, ok)
	}
	if _, ok := netdevIfindex(nil); ok {
		t.Fatal("an empty message named a device")
	}
}

func TestPolicyRules(t *testing.T) {
	def := func(prio, table int) netlink.Rule {
		r := *netlink.NewRule()
		r.Priority, r.Table = prio, table
		return r
	}
	v4 := []netlink.Rule{def(0, unix.RT_TABLE_LOCAL), def(32766, unix.RT_TABLE_MAIN), def(32767, unix.RT_TABLE_DEFAULT)}
	if policyRules(netlink.FAMILY_V4, v4) {
		t.Fatal("the kernel's default IPv4 rules taken for policy routing")
	}
	if !policyRules(netlink.FAMILY_V6, v4) {
		t.Fatal("a rule to the default table in IPv6 (not one of its defaults) not seen")
	}
	from := def(100, 100)
	from.Src = &net.IPNet{IP: net.IPv4(198, 18, 0, 2), Mask: net.CIDRMask(32, 32)}
	if !policyRules(netlink.FAMILY_V4, append(v4, from)) {
		t.Fatal("ip rule add from 198.18.0.2 lookup 100 not seen")
	}
	sel := def(32766, unix.RT_TABLE_MAIN)
	sel.IifName = "in0"
	if !policyRules(netlink.FAMILY_V4, []netlink.Rule{def(0, unix.RT_TABLE_LOCAL), sel}) {
		t.Fatal("a main-table rule with a selector taken for the default")
	}
}
