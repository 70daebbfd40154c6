package graph

import (
	"fmt"
	"slices"
	"strings"

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

// vxlanRxRoute decides whether the tc programs route the frames they decapsulate themselves, as
// the vxlan device's own program would after receiving them (bpf/lib/vxlan.h,
// cfg_vxlan_rx_route), instead of handing them to the device's receive path, where that program
// runs: one backlog queue, one receive round and one program run less per packet. The underlay's
// program routes with its own settings, for the device's address, MAC, counters, gate and rules,
// and sends whatever it would not forward into the device's receive path as before: exact only
// where that receive path holds nothing but the device's program (a device without one, with
// tc filters, a netfilter ingress hook or someone else's program was given none by ingress())
// and that program routes IPv4 with what the underlay's program has too: the conntrack module
// (the same in every program), and neither the bridge module nor the veth's skb-sender check
// (a vxlan device is neither a bridge port, it would not route, nor a veth). The inner
// copy leaves only into containers (router.h says why). Every device decapsulated for must
// qualify, or no program routes inline: the setting is the program's, not the device's. A
// packet socket tapping the device (tcpdump -i flannel.1, or -i any) keeps the redirect too:
// the device's receive path shows it the frames. Nothing announces such a socket, so that is
// followed by polling (observe.readPacketTaps): a capture started meanwhile misses frames
// routed inline until the programs are replaced (a few hundred ms). A
// bridge port's program is left without it: its stack is at the verifier's limit, and VXLAN
// arrives at a host's underlay, which is no bridge port where Flannel configures it.
func vxlanRxRoute(s *observe.Snapshot, p *Plan) {
	if len(p.Data.VXLANRx) == 0 {
		return
	}
	whyNot := map[int][]string{}
	for _, rx := range p.Data.VXLANRx {
		it := p.Interfaces[rx.Dev]
		var why []string
		switch {
		case it == nil || it.Spec == nil:
			why = append(why, "no fast-path program of its own")
		case it.Spec.Hook != dataplane.HookTC || it.Spec.TCAfterXDP:
			why = append(why, "its program is not a tc one")
		case !it.Spec.Router4:
			why = append(why, "its program does not route IPv4")
		case it.Spec.Bridge || it.Spec.SkbSender:
			why = append(why, "its program runs the bridge module or the veth checks")
		case s.PacketTaps[rx.Dev]:
			// Its receive path shows every frame to such a socket before tc ingress.
			why = append(why, "a packet socket (tcpdump) receives every frame on it")
		case s.PacketTaps[0]:
			why = append(why, "a packet socket (tcpdump -i any) receives every frame on every device, or the list of packet sockets could not be read")
		}
		if len(why) > 0 {
			whyNot[rx.Dev] = why
		}
	}
	inline := len(whyNot) == 0
	for _, rx := range p.Data.VXLANRx {
		it := p.Interfaces[rx.Dev]
		if it == nil {
			continue
		}
		if inline {
			it.Notes = append(it.Notes, "vxlan: the frames decapsulated for it in the fast path are routed by the underlay's program as its own program would route them "+
				"(what that program would not forward is handed to its receive path)")
			continue
		}
		why := whyNot[rx.Dev]
		if len(why) == 0 {
			why = []string{"another vxlan device decapsulated for does not qualify"}
		}
		it.Notes = append(it.Notes, "vxlan: the frames decapsulated for it in the fast path go through its receive path: "+strings.Join(why, "; "))
	}
	if !inline {
		return
	}
	for _, it := range p.Interfaces {
		if sp := it.Spec; sp != nil && sp.Router4 && !sp.Bridge && (sp.Hook == dataplane.HookTC || sp.TCAfterXDP) {
			sp.VXLANRxRoute = true
		}
	}
}
