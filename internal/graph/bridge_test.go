package graph

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// bridged: snapshot() plus br0 (4) with ports veth0 (3) and eth1 (5).
func bridged() *observe.Snapshot {
	s := snapshot()
	brMAC := net.HardwareAddr{2, 0, 0, 0, 0, 4}
	s.Links[4] = &observe.Link{Index: 4, Name: "br0", Kind: "bridge", Up: true, OperUp: true, MAC: brMAC, MTU: 1500,
		Qdiscs: []string{"noqueue"}, Bridge: &observe.BridgeInfo{AgeingTime: 300 * time.Second}}
	s.Links[5] = &observe.Link{Index: 5, Name: "eth1", Up: true, OperUp: true, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 5}, MTU: 1400,
		XDPFeatures: observe.XDPActBasic | observe.XDPActNdoXmit}
	for _, i := range []int{3, 5} {
		s.Links[i].Master, s.Links[i].MasterKind = 4, "bridge"
		s.Links[i].Port = &observe.BridgePort{State: observe.BrStateForwarding, Learning: true}
	}
	s.Sysctl.IPv4DevFwd["br0"] = true
	s.Sysctl.BrNFCallIPTables, s.Sysctl.BrNFCallIP6Tables = true, true
	s.FDB = []observe.FDBEntry{{Bridge: 4, Port: 4, MAC: brMAC, Local: true}, {Bridge: 4, Port: 5, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}}}
	return s
}

func l2Of(p *Plan, ifindex int) *dataplane.L2Dev {
	for i := range p.Data.L2 {
		if p.Data.L2[i].Ifindex == ifindex {
			return &p.Data.L2[i]
		}
	}
	return nil
}

func TestBridgePort(t *testing.T) {
	p := Build(bridged(), Options{Hook: HookAuto}, notOwned, nil)
	it := p.Interfaces[5]
	if it.Spec == nil || !it.Spec.Bridge || it.Spec.L3Ifindex != 4 || it.Spec.MAC != (dataplane.MAC{}) ||
		!it.Spec.Router4 || !it.Spec.Router6 {
		t.Fatalf("port spec %+v, notes %q", it.Spec, it.Notes)
	}
	if m := it.Spec.Modules(); strings.Join(m, ">") != "bridge>router" {
		t.Fatalf("modules %v", m)
	}
	dv := l2Of(p, 5)
	want := dataplane.L2Forwarding | dataplane.L2InOK | dataplane.L2Learning | dataplane.L2NF4 | dataplane.L2NF6
	if dv == nil || dv.Flags != want || dv.Bridge != 4 || dv.MTU != 1400 || dv.BrMAC.String() != "02:00:00:00:00:04" {
		t.Fatalf("port entry %+v, want flags %b", dv, want)
	}
	br := l2Of(p, 4)
	if br == nil || br.Flags != dataplane.L2Bridge|dataplane.L2OutOK || !p.Interfaces[4].Egress || p.Interfaces[4].Spec != nil {
		t.Fatalf("bridge entry %+v, interface %+v", br, p.Interfaces[4])
	}
	if len(p.Data.FDB) != 2 || !p.Data.FDB[0].Local || p.Data.FDB[1].Port != 5 {
		t.Fatalf("fdb %+v", p.Data.FDB)
	}
}

func TestBridgeFlags(t *testing.T) {
	cases := []struct {
		name     string
		mutate   func(*observe.Snapshot)
		set, clr dataplane.L2Flags // flags of port eth1 that must be set / clear
		brClr    dataplane.L2Flags // flags of br0 that must be clear
		noR4     bool              // routing via br0 off (IPv4)
		note     string
	}{
		{name: "stp blocking", set: dataplane.L2InOK, clr: dataplane.L2Forwarding, note: "STP state blocking",
			mutate: func(s *observe.Snapshot) { s.Links[5].Port.State = 4 }},
		{name: "port down", clr: dataplane.L2Forwarding, note: "not forwarding",
			mutate: func(s *observe.Snapshot) { s.Links[5].Up = false }},
		{name: "vlan filtering", clr: dataplane.L2InOK, brClr: dataplane.L2OutOK, note: "vlan_filtering",
			mutate: func(s *observe.Snapshot) { s.Links[4].Bridge.VlanFiltering = true }},
		{name: "promiscuous bridge", clr: dataplane.L2InOK, note: "promiscuous",
			mutate: func(s *observe.Snapshot) { s.Links[4].Promisc = true }},
		{name: "short ageing", clr: dataplane.L2InOK, note: "ageing_time",
			mutate: func(s *observe.Snapshot) { s.Links[4].Bridge.AgeingTime = 0 }},
		{name: "locked port", clr: dataplane.L2InOK, note: "locked",
			mutate: func(s *observe.Snapshot) { s.Links[5].Port.Locked = true }},
		{name: "neigh_suppress on another port", clr: dataplane.L2InOK, note: "neigh_suppress on port veth0",
			mutate: func(s *observe.Snapshot) { s.Links[3].Port.NeighSuppress = true }},
		{name: "bridge-family nft", clr: dataplane.L2InOK, brClr: dataplane.L2OutOK, note: "bridge-family netfilter",
			mutate: func(s *observe.Snapshot) { s.Netfilter.Bridge = []string{"nftables bridge t c"} }},
		{name: "learning off", set: dataplane.L2InOK, clr: dataplane.L2Learning,
			mutate: func(s *observe.Snapshot) { s.Links[5].Port.Learning = false }},
		{name: "isolated", set: dataplane.L2Isolated,
			mutate: func(s *observe.Snapshot) { s.Links[5].Port.Isolated = true }},
		{name: "iptables rules with call-iptables", set: dataplane.L2NF4 | dataplane.L2IP4Off, clr: dataplane.L2IP6Off, noR4: true,
			note:   "bridged IPv4 goes to Linux: bridge-nf-call-iptables=1 and netfilter sees forwarded packets",
			mutate: func(s *observe.Snapshot) { s.Netfilter.V4 = []string{"x"} }},
		{name: "iptables rules the filter module takes over, call-iptables on", set: dataplane.L2NF4, clr: dataplane.L2IP4Off,
			note: "bridged IPv4: bridge-nf-call-iptables=1: through the filter module with br0 as input and output device",
			mutate: func(s *observe.Snapshot) {
				s.Netfilter.V4 = []string{"x"}
				s.Rules = forwardDrop()
			}},
		{name: "and nat chains", set: dataplane.L2NF4, clr: dataplane.L2IP4Off,
			note: "and the conntrack module",
			mutate: func(s *observe.Snapshot) {
				s.Netfilter.V4 = []string{"x"}
				s.Sysctl.Conntrack.TCPTimeoutEstablished = 432000
				s.Rules = forwardDrop("nat chains")
			}},
		{name: "iptables rules, call-iptables off", clr: dataplane.L2NF4 | dataplane.L2IP4Off, noR4: true,
			mutate: func(s *observe.Snapshot) { s.Netfilter.V4 = []string{"x"}; s.Sysctl.BrNFCallIPTables = false }},
		{name: "the bridge's own nf_call_iptables", set: dataplane.L2NF4 | dataplane.L2IP4Off, noR4: true,
			mutate: func(s *observe.Snapshot) {
				s.Netfilter.V4 = []string{"x"}
				s.Sysctl.BrNFCallIPTables = false
				s.Links[4].Bridge.NFCallIPTables = true
			}},
		{name: "tc ingress on the bridge device", set: dataplane.L2InOK, noR4: true, note: "tc ingress filters or tcx programs on the bridge device",
			mutate: func(s *observe.Snapshot) { s.Links[4].TCIngress = true }},
		{name: "br0 forwarding off", set: dataplane.L2InOK, noR4: true, note: "net.ipv4.conf.br0.forwarding=0",
			mutate: func(s *observe.Snapshot) { s.Sysctl.IPv4DevFwd["br0"] = false }},
		{name: "tc egress on the bridge device", brClr: dataplane.L2OutOK,
			mutate: func(s *observe.Snapshot) { s.Links[4].TCEgress = true }},
		{name: "shaping qdisc on the bridge device", brClr: dataplane.L2OutOK,
			mutate: func(s *observe.Snapshot) { s.Links[4].Qdiscs = []string{"tbf"} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := bridged()
			c.mutate(s)
			p := Build(s, Options{Hook: HookAuto}, notOwned, nil)
			dv, br, it := l2Of(p, 5), l2Of(p, 4), p.Interfaces[5]
			if dv.Flags&c.set != c.set || dv.Flags&c.clr != 0 {
				t.Fatalf("port flags %b: want %b set and %b clear; notes %q", dv.Flags, c.set, c.clr, it.Notes)
			}
			if br.Flags&c.brClr != 0 {
				t.Fatalf("bridge flags %b: want %b clear", br.Flags, c.brClr)
			}
			if it.Spec == nil || it.Spec.Router4 == c.noR4 {
				t.Fatalf("spec %+v, want router4 %v; notes %q", it.Spec, !c.noR4, it.Notes)
			}
			notes := strings.Join(append(append([]string(nil), it.Notes...), p.Interfaces[4].Notes...), "\n")
			if c.note != "" && !strings.Contains(notes, c.note) {
				t.Fatalf("notes %q lack %q", notes, c.note)
			}
		})
	}
}

// disable_ipv6 on the bridge turns off routing IPv6 from its ports (ip6_rcv_core() drops what the
// bridge device receives); bridging IPv6 between them goes on, as in Linux, and the ports' own
// setting changes neither.
func TestBridgeDisableIPv6(t *testing.T) {
	for _, c := range []struct {
		dev string
		r6  bool
	}{{"br0", false}, {"eth1", true}} {
		t.Run(c.dev, func(t *testing.T) {
			s := bridged()
			s.Sysctl.IPv6Disabled = map[string]bool{c.dev: true}
			p := Build(s, Options{Hook: HookAuto}, notOwned, nil)
			it, dv := p.Interfaces[5], l2Of(p, 5)
			if it.Spec == nil || !it.Spec.Router4 || it.Spec.Router6 != c.r6 {
				t.Fatalf("spec %+v, want router6 %v; notes %q", it.Spec, c.r6, it.Notes)
			}
			if want := dataplane.L2Forwarding | dataplane.L2InOK; dv.Flags&want != want || dv.Flags&dataplane.L2IP6Off != 0 {
				t.Fatalf("port flags %b: bridging must go on", dv.Flags)
			}
			if !c.r6 && !strings.Contains(strings.Join(it.Notes, "\n"), "routing via br0 (ipv6) off: net.ipv6.conf.br0.disable_ipv6=1") {
				t.Fatalf("notes %q", it.Notes)
			}
		})
	}
}
