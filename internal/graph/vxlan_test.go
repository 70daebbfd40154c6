package graph

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/observe"
)

func TestVXLANEncap(t *testing.T) {
	flannel := flannelSnapshot
	p := Build(flannel(), Options{Hook: HookAuto}, notOwned, nil)
	if len(p.Data.VXLAN) != 1 || p.Data.VXLAN[0].PortMin != 32768 || p.Data.VXLAN[0].PortMax != 60999 {
		t.Fatalf("vxlan devices %+v", p.Data.VXLAN)
	}
	if got := len(p.Data.VXLANFDB); got != 3 { // mac 1, mac 2, the all-zeros default
		t.Fatalf("fdb %+v, want the single-remote IPv4 entries without a device", p.Data.VXLANFDB)
	}
	for _, e := range p.Data.VXLANFDB {
		switch e.MAC[5] {
		case 1:
			if e.VNI != 1 || e.Port != 0 {
				t.Fatalf("entry without a vni or port: the device's vni, port 0: %+v", e)
			}
		case 2:
			if e.VNI != 9 || e.Port != 4789 {
				t.Fatalf("entry with its own vni and port: %+v", e)
			}
		}
	}
	// eth0 holds flannel.1's local address: its packets arrive there, and the VXLAN module
	// decapsulates at tc only. Where Linux decapsulates anyway (learning), eth0 keeps XDP.
	if sp := p.Interfaces[2].Spec; sp == nil || sp.Hook != dataplane.HookTC ||
		!strings.Contains(strings.Join(p.Interfaces[2].Notes, "\n"), "hook tc: the underlay of flannel.1") {
		t.Errorf("eth0, flannel.1's underlay: %+v %q", sp, p.Interfaces[2].Notes)
	}
	learning := flannel()
	learning.Links[7].VXLAN.Learning = true
	if sp := Build(learning, Options{Hook: HookAuto}, notOwned, nil).Interfaces[2].Spec; sp == nil || sp.Hook != dataplane.HookXDP {
		t.Errorf("eth0 under a vxlan device Linux decapsulates: %+v, want xdp", sp)
	}
	withLink := flannel()
	withLink.Links[7].VXLAN.Local = netip.MustParseAddr("198.18.9.9") // not eth0's
	withLink.Links[7].VXLAN.VtepDev = 2
	if sp := Build(withLink, Options{Hook: HookAuto}, notOwned, nil).Interfaces[2].Spec; sp == nil || sp.Hook != dataplane.HookTC {
		t.Errorf("eth0 as the vxlan device's link: %+v, want tc", sp)
	}
	for _, c := range []struct {
		why    string
		mutate func(*observe.Snapshot)
	}{
		{"external", func(s *observe.Snapshot) { s.Links[7].VXLAN.External = true }},
		{"df", func(s *observe.Snapshot) { s.Links[7].VXLAN.DF = 1 }},
		{"ttl inherit", func(s *observe.Snapshot) { s.Links[7].VXLAN.TTLInherit = true }},
		{"GBP", func(s *observe.Snapshot) { s.Links[7].VXLAN.GBP = true }},
		{"no IPv4 local", func(s *observe.Snapshot) { s.Links[7].VXLAN.Local = netip.Addr{} }},
		{"options linuxfp does not know", func(s *observe.Snapshot) { s.Links[7].VXLAN.Unknown = []uint16{40} }},
		{"tc egress", func(s *observe.Snapshot) { s.Links[7].TCEgress = true }},
		{"qdisc tbf", func(s *observe.Snapshot) { s.Links[7].Qdiscs = []string{"tbf"} }},
		{"down", func(s *observe.Snapshot) { s.Links[7].OperUp = false }},
	} {
		s := flannel()
		c.mutate(s)
		p := Build(s, Options{Hook: HookAuto}, notOwned, nil)
		notes := strings.Join(p.Interfaces[7].Notes, "\n")
		if len(p.Data.VXLAN) != 0 || len(p.Data.VXLANFDB) != 0 || !strings.Contains(notes, c.why) {
			t.Errorf("%s: devices %+v, notes %q", c.why, p.Data.VXLAN, notes)
		}
	}
}

// flannelSnapshot: eth0 with flannel.1 on it, as flanneld configures it.
func flannelSnapshot() *observe.Snapshot {
	s := snapshot()
	s.Links[7] = &observe.Link{Index: 7, Name: "flannel.1", Kind: "vxlan", Up: true, OperUp: true,
		MAC: net.HardwareAddr{2, 0, 0, 0, 0, 7}, Qdiscs: []string{"noqueue"},
		VXLAN: &observe.VXLANInfo{VNI: 1, Local: netip.MustParseAddr("198.18.0.1"), Port: 8472, LocalBypass: true}}
	s.Sysctl.LocalPortLow, s.Sysctl.LocalPortHigh = 32768, 60999
	mac := func(b byte) net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 1, b} }
	s.VXLANFDB = []observe.VXLANFDBEntry{
		{Dev: 7, MAC: mac(1), Dst: netip.MustParseAddr("198.18.0.2")},
		{Dev: 7, MAC: mac(2), Dst: netip.MustParseAddr("198.18.0.3"), HasVNI: true, VNI: 9, Port: 4789},
		{Dev: 7, MAC: mac(3), Dst: netip.MustParseAddr("198.18.0.4")}, // two remotes: replication
		{Dev: 7, MAC: mac(3), Dst: netip.MustParseAddr("198.18.0.5")},
		{Dev: 7, MAC: mac(4), Dst: netip.MustParseAddr("2001:2::4")},
		{Dev: 7, MAC: mac(5), Dst: netip.MustParseAddr("198.18.0.6"), Ifindex: 2},
		{Dev: 7, MAC: net.HardwareAddr{0, 0, 0, 0, 0, 0}, Dst: netip.MustParseAddr("198.18.0.7")},
	}
	return s
}

// The underlay routes what it decapsulates for flannel.1 only where flannel.1's own program
// would route it the same: anything else on flannel.1's receive path, or a program there that
// would not route IPv4 as the underlay's does, keeps the redirect into flannel.1.
func TestVXLANRxRoute(t *testing.T) {
	base := func() *observe.Snapshot {
		s := flannelSnapshot()
		s.Sysctl.IPv4DevFwd["flannel.1"] = true
		return s
	}
	p := Build(base(), Options{Hook: HookAuto}, notOwned, nil)
	if sp := p.Interfaces[2].Spec; sp == nil || sp.Hook != dataplane.HookTC || !sp.VXLANRxRoute {
		t.Fatalf("eth0 under flannel.1: %+v, want tc routing what it decapsulates", sp)
	}
	if notes := strings.Join(p.Interfaces[7].Notes, "\n"); !strings.Contains(notes, "routed by the underlay's program") {
		t.Errorf("flannel.1's notes %q", notes)
	}
	for _, c := range []struct {
		why    string
		mutate func(*observe.Snapshot)
	}{
		{"does not route IPv4", func(s *observe.Snapshot) { s.Sysctl.RPFilter["flannel.1"] = 1 }},
		{"does not route IPv4", func(s *observe.Snapshot) { s.Sysctl.IPv4DevFwd["flannel.1"] = false }},
		{"no fast-path program", func(s *observe.Snapshot) { s.Links[7].TCIngress = true }},
		{"no fast-path program", func(s *observe.Snapshot) { s.Links[7].TCXIngress = []uint32{99} }},
		{"no fast-path program", func(s *observe.Snapshot) { s.Links[7].XDPProgID = 99 }},
		{"no fast-path program", func(s *observe.Snapshot) { s.Netfilter.Ingress["flannel.1"] = []string{"a chain"} }},
		{"packet socket", func(s *observe.Snapshot) { s.PacketTaps = map[int]bool{7: true} }},
		{"packet socket", func(s *observe.Snapshot) { s.PacketTaps = map[int]bool{0: true} }},
	} {
		s := base()
		c.mutate(s)
		p := Build(s, Options{Hook: HookAuto}, notOwned, nil)
		notes := strings.Join(p.Interfaces[7].Notes, "\n")
		if sp := p.Interfaces[2].Spec; sp == nil || sp.VXLANRxRoute || !strings.Contains(notes, c.why) {
			t.Errorf("%s: eth0 %+v, flannel.1's notes %q", c.why, sp, notes)
		}
	}
}
