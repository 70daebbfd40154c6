package observe

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	mnl "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// VXLANInfo are a vxlan device's options (IFLA_VXLAN_*), all of them: the fast path encapsulates
// and decapsulates for a device only when every option is one whose effect it reproduces.
type VXLANInfo struct {
	VNI      uint32
	Local    netip.Addr // source address of the outer header (invalid: any)
	Group    netip.Addr // default remote or multicast group (invalid: none)
	VtepDev  int        // IFLA_VXLAN_LINK: the underlay device (0: none)
	Port     uint16     // destination UDP port
	PortLow  uint16     // source port range (0, 0: the namespace's ip_local_port_range)
	PortHigh uint16
	TTL      uint8 // 0: the route's hop limit
	TOS      uint8 // 1: inherit
	Label    uint32
	Learning bool
	Proxy    bool
	RSC      bool
	L2Miss   bool
	L3Miss   bool
	UDPCSum  bool // IPv4 outer UDP checksum
	// Options whose effect the fast path does not reproduce; set means "not the default".
	ZeroCSum6TX, ZeroCSum6RX bool
	RemCSumTX, RemCSumRX     bool
	RemCSumNoPartial         bool
	GBP, GPE                 bool
	TTLInherit               bool
	DF                       uint8 // 0 unset, 1 set, 2 inherit
	VNIFilter                bool
	External                 bool // collect_md: tunnel metadata from the skb, not the device
	LocalBypass              bool // IFLA_VXLAN_LOCALBYPASS (default on)
	ReservedBits             []byte
	MCRoute                  bool
	Unknown                  []uint16 // attributes this code does not know
}

// IFLA_VXLAN_* (include/uapi/linux/if_link.h).
const (
	iflaVxlanID = iota + 1
	iflaVxlanGroup
	iflaVxlanLink
	iflaVxlanLocal
	iflaVxlanTTL
	iflaVxlanTOS
	iflaVxlanLearning
	iflaVxlanAgeing
	iflaVxlanLimit
	iflaVxlanPortRange
	iflaVxlanProxy
	iflaVxlanRSC
	iflaVxlanL2Miss
	iflaVxlanL3Miss
	iflaVxlanPort
	iflaVxlanGroup6
	iflaVxlanLocal6
	iflaVxlanUDPCSum
	iflaVxlanUDPZeroCSum6TX
	iflaVxlanUDPZeroCSum6RX
	iflaVxlanRemCSumTX
	iflaVxlanRemCSumRX
	iflaVxlanGBP
	iflaVxlanRemCSumNoPartial
	iflaVxlanCollectMetadata
	iflaVxlanLabel
	iflaVxlanGPE
	iflaVxlanTTLInherit
	iflaVxlanDF
	iflaVxlanVNIFilter
	iflaVxlanLocalBypass
	iflaVxlanLabelPolicy
	iflaVxlanReservedBits
	iflaVxlanMCRoute
)

// decodeVXLAN decodes IFLA_INFO_DATA of a vxlan device. Hand-written: vishvananda/netlink does
// not decode DF, TTL inheritance, GPE, remote checksum offload, VNI filtering, local bypass,
// reserved bits or multicast routing, each of which changes what the device does to a packet.
func decodeVXLAN(b []byte) *VXLANInfo {
	v := &VXLANInfo{LocalBypass: true}
	ad, err := mnl.NewAttributeDecoder(b)
	if err != nil {
		return nil
	}
	addr := func(b []byte) netip.Addr {
		a, _ := netip.AddrFromSlice(b)
		if a.IsUnspecified() {
			return netip.Addr{}
		}
		return a.Unmap()
	}
	u8 := func() bool { return len(ad.Bytes()) > 0 && ad.Bytes()[0] != 0 }
	for ad.Next() {
		switch ad.Type() {
		case iflaVxlanID:
			v.VNI = ad.Uint32()
		case iflaVxlanGroup, iflaVxlanGroup6:
			if a := addr(ad.Bytes()); a.IsValid() {
				v.Group = a
			}
		case iflaVxlanLocal, iflaVxlanLocal6:
			if a := addr(ad.Bytes()); a.IsValid() {
				v.Local = a
			}
		case iflaVxlanLink:
			v.VtepDev = int(ad.Uint32())
		case iflaVxlanTTL:
			v.TTL = ad.Uint8()
		case iflaVxlanTOS:
			v.TOS = ad.Uint8()
		case iflaVxlanLearning:
			v.Learning = u8()
		case iflaVxlanPortRange:
			if p := ad.Bytes(); len(p) >= 4 {
				v.PortLow, v.PortHigh = binary.BigEndian.Uint16(p[0:]), binary.BigEndian.Uint16(p[2:])
			}
		case iflaVxlanProxy:
			v.Proxy = u8()
		case iflaVxlanRSC:
			v.RSC = u8()
		case iflaVxlanL2Miss:
			v.L2Miss = u8()
		case iflaVxlanL3Miss:
			v.L3Miss = u8()
		case iflaVxlanPort:
			if p := ad.Bytes(); len(p) >= 2 {
				v.Port = binary.BigEndian.Uint16(p)
			}
		case iflaVxlanUDPCSum:
			v.UDPCSum = u8()
		case iflaVxlanUDPZeroCSum6TX:
			v.ZeroCSum6TX = u8()
		case iflaVxlanUDPZeroCSum6RX:
			v.ZeroCSum6RX = u8()
		case iflaVxlanRemCSumTX:
			v.RemCSumTX = u8()
		case iflaVxlanRemCSumRX:
			v.RemCSumRX = u8()
		case iflaVxlanGBP:
			v.GBP = true // a flag attribute: present means on
		case iflaVxlanRemCSumNoPartial:
			v.RemCSumNoPartial = true
		case iflaVxlanCollectMetadata:
			v.External = u8()
		case iflaVxlanLabel:
			if p := ad.Bytes(); len(p) >= 4 {
				v.Label = binary.BigEndian.Uint32(p)
			}
		case iflaVxlanGPE:
			v.GPE = true
		case iflaVxlanTTLInherit:
			v.TTLInherit = u8() // a u8, always reported
		case iflaVxlanDF:
			v.DF = ad.Uint8()
		case iflaVxlanVNIFilter:
			v.VNIFilter = u8()
		case iflaVxlanLocalBypass:
			v.LocalBypass = u8()
		case iflaVxlanReservedBits:
			v.ReservedBits = append([]byte(nil), ad.Bytes()...)
		case iflaVxlanMCRoute:
			v.MCRoute = u8()
		case iflaVxlanAgeing, iflaVxlanLimit, iflaVxlanLabelPolicy:
			// Learning's ageing and limit; IPv6 flow label policy: no effect on IPv4 unicast.
		default:
			v.Unknown = append(v.Unknown, ad.Type())
		}
	}
	return v
}

// VXLANFDBEntry is one remote of a vxlan device's own forwarding database (bridge fdb ... dev
// vxlan0 dst X, an NTF_SELF entry): frames to MAC go to Dst. A MAC with several remotes appears
// once per remote.
type VXLANFDBEntry struct {
	Dev     int
	MAC     net.HardwareAddr
	Dst     netip.Addr
	Port    uint16 // 0: the device's
	VNI     uint32 // 0: the device's (the kernel reports the device's when unset)
	HasVNI  bool
	Ifindex int // NDA_IFINDEX: the outer route's output device (0: any)
	Flags   uint8
	NHID    uint32 // a nexthop group instead of a destination
	State   uint16
}

// readVXLANFDB reads the forwarding databases of the vxlan devices in links. Hand-written: the
// netlink library does not decode NDA_PORT, NDA_IFINDEX, NDA_NH_ID or NDA_SRC_VNI.
func readVXLANFDB(links map[int]*Link) ([]VXLANFDBEntry, error) {
	any := false
	for _, lk := range links {
		any = any || lk.VXLAN != nil
	}
	if !any {
		return nil, nil
	}
	c, err := mnl.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return nil, fmt.Errorf("dial rtnetlink: %w", err)
	}
	defer c.Close()
	// struct ndmsg: family, pad1, pad2, ifindex, state, flags, type
	req := make([]byte, 12)
	req[0] = unix.AF_BRIDGE
	msgs, err := retryDump(func() ([]mnl.Message, error) {
		return c.Execute(mnl.Message{Header: mnl.Header{Type: unix.RTM_GETNEIGH, Flags: mnl.Request | mnl.Dump}, Data: req})
	})
	if err != nil {
		return nil, fmt.Errorf("list vxlan fdb: %w", err)
	}
	var out []VXLANFDBEntry
	for _, m := range msgs {
		if len(m.Data) < 12 {
			continue
		}
		idx := int(int32(binary.NativeEndian.Uint32(m.Data[4:8])))
		lk := links[idx]
		if lk == nil || lk.VXLAN == nil {
			continue
		}
		e := VXLANFDBEntry{Dev: idx, State: binary.NativeEndian.Uint16(m.Data[8:10]), Flags: m.Data[10]}
		ad, err := mnl.NewAttributeDecoder(m.Data[12:])
		if err != nil {
			return nil, err
		}
		for ad.Next() {
			switch ad.Type() {
			case unix.NDA_LLADDR:
				e.MAC = append(net.HardwareAddr(nil), ad.Bytes()...)
			case unix.NDA_DST:
				a, _ := netip.AddrFromSlice(ad.Bytes())
				e.Dst = a.Unmap()
			case unix.NDA_PORT:
				if p := ad.Bytes(); len(p) >= 2 {
					e.Port = binary.BigEndian.Uint16(p)
				}
			case unix.NDA_VNI:
				e.VNI, e.HasVNI = ad.Uint32(), true
			case unix.NDA_IFINDEX:
				e.Ifindex = int(ad.Uint32())
			case ndaNHID:
				e.NHID = ad.Uint32()
			}
		}
		if len(e.MAC) == 6 {
			out = append(out, e)
		}
	}
	return out, nil
}

const ndaNHID = 13 // NDA_NH_ID (include/uapi/linux/neighbour.h)
