package graph

import (
	"fmt"
	"slices"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// vxlanEncap: may the fast path encapsulate IPv4 packets the router sends into vxlan device lk
// itself (bpf/lib/vxlan.h), and with what? Otherwise (why) they take the driver's path, through
// a redirect to the device. Every option whose effect the BPF code does not reproduce keeps the
// device with its driver.
func vxlanEncap(s *observe.Snapshot, lk *observe.Link) (*dataplane.VXLANDev, []string) {
	v := lk.VXLAN
	if v == nil {
		return nil, nil
	}
	var why []string
	add := func(cond bool, w string) {
		if cond {
			why = append(why, w)
		}
	}
	add(!lk.Up || !lk.OperUp, "down")
	add(v.External, "external (collect_md)")
	add(!v.Local.Is4(), "no IPv4 local address (the outer source would be chosen per route)")
	add(v.Port == 0, "no destination port")
	add(v.DF != 0, "df set or inherit")
	add(v.TTLInherit, "ttl inherit")
	add(v.GBP || v.GPE, "GBP or GPE extensions")
	add(v.RemCSumTX || v.RemCSumRX, "remote checksum offload")
	add(v.RSC, "route short circuit")
	add(v.VNIFilter, "vni filtering")
	add(len(v.Unknown) > 0, fmt.Sprintf("options linuxfp does not know (IFLA_VXLAN_* %v)", v.Unknown))
	add(s.XfrmPolicies, "IPsec policies could transform the outer packet")
	// Linux would pass the inner frame through the vxlan device's own transmit path first.
	add(lk.TCEgress, "tc egress filters on it")
	add(len(s.Netfilter.Egress[lk.Name]) > 0, "a netfilter egress hook on it")
	for _, q := range lk.Qdiscs {
		add(!passiveQdiscs[q], "qdisc "+q+" on it")
	}
	if len(why) > 0 {
		return nil, why
	}
	lo, hi := v.PortLow, v.PortHigh
	if lo >= hi {
		// udp_flow_src_port() with no range: the namespace's ip_local_port_range.
		lo, hi = uint16(s.Sysctl.LocalPortLow), uint16(s.Sysctl.LocalPortHigh)
	}
	return &dataplane.VXLANDev{Ifindex: lk.Index, VNI: v.VNI, Local: v.Local, Port: v.Port,
		PortMin: lo, PortMax: hi, TTL: v.TTL, TOS: v.TOS, UDPCSum: v.UDPCSum}, nil
}

// vxlanFDB are the remotes of the encapsulating devices that the BPF code uses: one remote per
// MAC (several mean replication: the driver's), a unicast IPv4 destination, no output device
// of its own and no nexthop group.
func vxlanFDB(s *observe.Snapshot, devs []dataplane.VXLANDev) []dataplane.VXLANFDBEntry {
	vni := map[int]uint32{}
	for _, d := range devs {
		vni[d.Ifindex] = d.VNI
	}
	type key struct {
		dev int
		mac [6]byte
	}
	count := map[key]int{}
	for _, e := range s.VXLANFDB {
		var k key
		k.dev = e.Dev
		copy(k.mac[:], e.MAC)
		count[k]++
	}
	var out []dataplane.VXLANFDBEntry
	for _, e := range s.VXLANFDB {
		dv, ok := vni[e.Dev]
		if !ok || e.MAC[0]&1 != 0 || !e.Dst.Is4() || e.Dst.IsMulticast() || e.Dst.IsUnspecified() ||
			e.Ifindex != 0 || e.NHID != 0 {
			continue
		}
		var k key
		k.dev = e.Dev
		copy(k.mac[:], e.MAC)
		if count[k] != 1 {
			continue
		}
		if e.HasVNI {
			dv = e.VNI
		}
		out = append(out, dataplane.VXLANFDBEntry{Dev: e.Dev, MAC: e.MAC, Dst: e.Dst, Port: e.Port, VNI: dv})
	}
	slices.SortFunc(out, func(a, b dataplane.VXLANFDBEntry) int {
		if a.Dev != b.Dev {
			return a.Dev - b.Dev
		}
		return slices.Compare(a.MAC, b.MAC)
	})
	return out
}

// vxlanDecap: may the fast path decapsulate VXLAN packets for lk that arrive on this host
// (bpf/lib/vxlan.h, vxlan_rx)? Only where vxlan_rcv() would do nothing the BPF code does not.
func vxlanDecap(s *observe.Snapshot, lk *observe.Link) (*dataplane.VXLANRx, []string) {
	v := lk.VXLAN
	if v == nil {
		return nil, nil
	}
	var why []string
	add := func(cond bool, w string) {
		if cond {
			why = append(why, w)
		}
	}
	add(!lk.Up || !lk.OperUp || len(lk.MAC) != 6, "down")
	add(v.External, "external (collect_md)")
	add(!v.Local.Is4(), "no IPv4 local address")
	add(v.Port == 0, "no port")
	add(v.Learning, "learning (vxlan_rcv() learns the remote)")
	add(v.GBP || v.GPE, "GBP or GPE extensions")
	add(v.RemCSumRX, "remote checksum offload")
	add(v.VNIFilter, "vni filtering")
	add(len(v.Unknown) > 0, fmt.Sprintf("options linuxfp does not know (IFLA_VXLAN_* %v)", v.Unknown))
	add(s.XfrmPolicies, "IPsec policies could apply to the outer packet")
	if len(why) > 0 {
		return nil, why
	}
	return &dataplane.VXLANRx{Dev: lk.Index, Port: v.Port, VNI: v.VNI, Local: v.Local, MAC: lk.MAC}, nil
}
