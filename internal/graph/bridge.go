package graph

import (
	"fmt"
	"strings"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// minAgeing: bridges that age their FDB faster are Linux's. The data plane refreshes the entries
// it uses at most once per dataplane.FDBRefreshInterval, so an address that falls silent may age
// out up to that much later than with Linux alone; with a short ageing time (or ageing 0, which
// makes a bridge forget every address at once) that difference would matter.
const minAgeing = 10 * dataplane.FDBRefreshInterval

// bridgePort is the program of a bridge port: the bridge module, and the router for frames
// addressed to the bridge's own MAC, routed as if received by the bridge device (bridge ->
// router). Per-frame conditions that change often (STP state, bridge options) are data in
// lfp_l2 (see l2Dev); what is frozen here is what makes the program.
func bridgePort(s *observe.Snapshot, lk, br *observe.Link, hook dataplane.Hook, skbSender bool, notes []string, host hostWide) (*dataplane.Spec, []string) {
	notes = append(notes, "bridge port of "+br.Name+": bridge module")
	// The router's checks are the bridge device's, which receives the frames to its MAC; frames
	// bridged between ports meet neither its nor the ports' IP settings (disable_ipv6 included:
	// br_netfilter's IPv6 checks do not read it).
	r4, why4 := router4(s, br, host)
	r6, why6 := router6(s, br, host)
	up := bridgeUpNotes(s, br)
	if len(up) > 0 {
		r4, r6 = false, false
	}
	for _, w := range append(up, why4...) {
		notes = append(notes, "routing via "+br.Name+" (ipv4) off: "+w)
	}
	for _, w := range append(up, why6...) {
		notes = append(notes, "routing via "+br.Name+" (ipv6) off: "+w)
	}
	notes = append(notes, filterNotes(s, r4, r6)...)
	// No MAC: the bridge's is data (lfp_l2), so a bridge whose MAC follows its ports does not
	// reload every port's program when it changes.
	return &dataplane.Spec{
		Ifindex: lk.Index, Name: lk.Name, Hook: hook, Router4: r4, Router6: r6,
		SkbSender: skbSender && hook == dataplane.HookXDP,
		Bridge:    true, L3Ifindex: br.Index, MarkUnsafe: markUnsafe(lk),
	}, notes
}

// bridgeUpNotes: why frames a port passes up to the bridge device would meet something there
// that the fast path would skip (br_pass_frame_up() runs the bridge device's receive path).
func bridgeUpNotes(s *observe.Snapshot, br *observe.Link) []string {
	var why []string
	if br.XDPProgID != 0 {
		why = append(why, fmt.Sprintf("XDP program id %d on the bridge device", br.XDPProgID))
	}
	if br.TCIngress || len(br.TCXIngress) > 0 {
		why = append(why, "tc ingress filters or tcx programs on the bridge device")
	}
	if len(s.Netfilter.Ingress[br.Name]) > 0 {
		why = append(why, "netfilter ingress hook on the bridge device")
	}
	return why
}

// l2Dev is the lfp_l2 entry of a bridge or a bridge port, with notes saying what it allows.
func l2Dev(s *observe.Snapshot, lk *observe.Link) (*dataplane.L2Dev, []string) {
	switch {
	case lk.Kind == "bridge" && lk.Bridge != nil:
		dv := &dataplane.L2Dev{Ifindex: lk.Index, Bridge: lk.Index, Flags: dataplane.L2Bridge, MTU: lk.MTU}
		why := bridgeOutNotes(s, lk)
		if len(why) == 0 {
			dv.Flags |= dataplane.L2OutOK
			return dv, []string{"bridge: its ports run the bridge module; routed packets leaving through it go to the port its FDB names (router -> bridge)"}
		}
		notes := []string{"bridge: its ports run the bridge module"}
		for _, w := range why {
			notes = append(notes, "routed packets through it go to Linux: "+w)
		}
		return dv, notes
	case lk.Port != nil:
		br := s.Links[lk.Master]
		if br == nil || br.Bridge == nil {
			return nil, nil
		}
		return bridgePortDev(s, lk, br)
	}
	return nil, nil
}

// bridgeOutNotes: why a routed packet leaving through bridge br cannot skip br_dev_xmit().
func bridgeOutNotes(s *observe.Snapshot, br *observe.Link) []string {
	var why []string
	if !br.Up || !br.OperUp {
		why = append(why, "bridge down or without carrier")
	}
	if br.Bridge.VlanFiltering {
		why = append(why, "vlan_filtering on (VLAN semantics not modelled)")
	}
	if br.TCEgress {
		why = append(why, "tc egress filters on the bridge device")
	}
	for _, q := range br.Qdiscs {
		if !passiveQdiscs[q] {
			why = append(why, "qdisc "+q+" on the bridge device")
		}
	}
	if len(s.Netfilter.Egress[br.Name]) > 0 {
		why = append(why, "netfilter egress hook on the bridge device")
	}
	for _, w := range s.Netfilter.Bridge {
		why = append(why, "bridge-family netfilter: "+w)
	}
	return why
}

// bridgePortDev is a port's lfp_l2 entry: what frames received on it, and frames forwarded to it,
// may do in the fast path. Everything here is data: an STP state change or a bridge option
// updates a map entry, not the program.
func bridgePortDev(s *observe.Snapshot, lk, br *observe.Link) (*dataplane.L2Dev, []string) {
	p, b := lk.Port, br.Bridge
	dv := &dataplane.L2Dev{Ifindex: lk.Index, Bridge: br.Index, MTU: lk.MTU, BrMAC: br.MAC}
	var notes, in []string
	if p.State == observe.BrStateForwarding && lk.Up {
		dv.Flags |= dataplane.L2Forwarding
	} else {
		notes = append(notes, fmt.Sprintf("port not forwarding (STP state %s): its frames go to Linux and none are sent to it", stpState(p.State)))
	}
	if p.Learning {
		dv.Flags |= dataplane.L2Learning
	}
	if p.Isolated {
		dv.Flags |= dataplane.L2Isolated
	}
	if !br.Up {
		in = append(in, "bridge "+br.Name+" down")
	}
	if b.VlanFiltering {
		in = append(in, "vlan_filtering on "+br.Name+" (VLAN semantics not modelled)")
	}
	if br.Promisc {
		in = append(in, br.Name+" is promiscuous (Linux also passes every frame up to it)")
	}
	if b.AgeingTime < minAgeing {
		in = append(in, fmt.Sprintf("ageing_time %s on %s is below %s (see the FDB refresh)", b.AgeingTime, br.Name, minAgeing))
	}
	if p.Locked || p.MAB {
		in = append(in, "locked port / MAB (802.1X authorisation is Linux's)")
	}
	for _, q := range s.Links {
		if q.Master == br.Index && q.Port != nil && q.Port.NeighSuppress {
			in = append(in, "neigh_suppress on port "+q.Name+" (the bridge answers neighbour discovery)")
			break
		}
	}
	for _, w := range s.Netfilter.Bridge {
		in = append(in, "bridge-family netfilter: "+w)
	}
	if len(in) == 0 {
		dv.Flags |= dataplane.L2InOK
	}
	for _, w := range in {
		notes = append(notes, "frames received go to Linux: "+w)
	}
	// br_netfilter: bridged IP meets the iptables hooks when bridge-nf-call-iptables is on
	// (the namespace's sysctl or the bridge's own nf_call_iptables).
	// The rules see a bridged packet with the bridge as input and output device; those the
	// filter module takes over for routed packets it takes over for bridged ones too.
	if s.Sysctl.BrNFCallIPTables || b.NFCallIPTables {
		dv.Flags |= dataplane.L2NF4
		if n, off := bridgedNetfilter(s, br, 0); off {
			dv.Flags |= dataplane.L2IP4Off
			notes = append(notes, n)
		} else if n != "" {
			notes = append(notes, n)
		}
	}
	if s.Sysctl.BrNFCallIP6Tables || b.NFCallIP6Tables {
		dv.Flags |= dataplane.L2NF6
		if n, off := bridgedNetfilter(s, br, 1); off {
			dv.Flags |= dataplane.L2IP6Off
			notes = append(notes, n)
		} else if n != "" {
			notes = append(notes, n)
		}
	}
	return dv, notes
}

// bridgedNetfilter: what br_netfilter's IP hooks mean for family fam's bridged packets on br:
// off when they must go to Linux, and a note.
func bridgedNetfilter(s *observe.Snapshot, br *observe.Link, fam int) (string, bool) {
	rules := [][]string{s.Netfilter.V4, s.Netfilter.V6}[fam]
	name := []string{"IPv4", "IPv6"}[fam]
	sysctl := []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables"}[fam]
	if len(rules) == 0 {
		return "", false
	}
	if off, _ := netfilterWhy(s, fam); len(off) > 0 {
		return "bridged " + name + " goes to Linux: " + sysctl + "=1 and " + strings.Join(off, "; "), true
	}
	n := "bridged " + name + ": " + sysctl + "=1: through the filter module with " + br.Name + " as input and output device"
	if ctActive(s, fam) {
		n += ", and the conntrack module"
	}
	return n, false
}

func stpState(st uint8) string {
	switch st {
	case 0:
		return "disabled"
	case 1:
		return "listening"
	case 2:
		return "learning"
	case 3:
		return "forwarding"
	case 4:
		return "blocking"
	}
	return fmt.Sprint(st)
}
