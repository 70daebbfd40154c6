package graph

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/observe"
)

func snapshot() *observe.Snapshot {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	return &observe.Snapshot{
		Links: map[int]*observe.Link{
			1: {Index: 1, Name: "lo", Up: true, OperUp: true},
			2: {Index: 2, Name: "eth0", Up: true, OperUp: true, MAC: mac, XDPFeatures: observe.XDPActBasic | observe.XDPActNdoXmit, Qdiscs: []string{"mq", "fq_codel"}},
			3: {Index: 3, Name: "veth0", Kind: "veth", Up: true, OperUp: true, MAC: mac, XDPFeatures: observe.XDPActBasic},
		},
		Addrs: []observe.Addr{{Index: 2, Prefix: netip.MustParsePrefix("198.18.0.1/24")}},
		Routes: observe.Routes{
			LocalHosts:    []netip.Addr{netip.MustParseAddr("198.18.0.255")},
			LocalPrefixes: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/18")},
			MinMTU4:       1400,
		},
		Neighbours: map[observe.NeighKey]uint16{
			{Ifindex: 2, Addr: netip.MustParseAddr("198.18.0.2")}: 0x02, // REACHABLE
			{Ifindex: 2, Addr: netip.MustParseAddr("198.18.0.3")}: 0x04, // STALE
		},
		Sysctl: observe.Sysctls{
			IPv4Forward: true, IPv6Forward: true,
			IPv4DevFwd: map[string]bool{"eth0": true, "veth0": true},
			RPFilter:   map[string]int{},
		},
		Netfilter: observe.Netfilter{Ingress: map[string][]string{}, Egress: map[string][]string{}},
	}
}

func notOwned(int, uint32) bool { return false }

// ownedID42: program 42 is linuxfp's own.
func ownedID42(_ int, id uint32) bool { return id == 42 }

func TestBuild(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*observe.Snapshot, *Options)
		iface  int
		r4, r6 bool   // expected families (both false: no program)
		hook   string // the hook expected (default xdp, when there is a program)
		note   string // a note that must be present
	}{
		{name: "plain router", iface: 2, r4: true, r6: true, note: "hook xdp: the driver supports native XDP"},
		{name: "loopback", iface: 1, note: "loopback"},
		{name: "ip_forward off", iface: 2, r6: true, note: "net.ipv4.ip_forward=0",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Sysctl.IPv4Forward = false }},
		{name: "device forwarding off", iface: 2, r6: true, note: "net.ipv4.conf.eth0.forwarding=0",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Sysctl.IPv4DevFwd["eth0"] = false }},
		{name: "rp_filter", iface: 2, r6: true, note: "rp_filter=2",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Sysctl.RPFilter["eth0"] = 2 }},
		{name: "ipv6 forwarding off", iface: 2, r4: true, note: "net.ipv6.conf.all.forwarding=0",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Sysctl.IPv6Forward = false }},
		{name: "proxy_ndp", iface: 2, r4: true, note: "proxy_ndp",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Sysctl.IPv6ProxyNDP = true }},
		{name: "disable_ipv6 on the ingress", iface: 2, r4: true, note: "ipv6 router off: net.ipv6.conf.eth0.disable_ipv6=1",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Sysctl.IPv6Disabled = map[string]bool{"eth0": true} }},
		{name: "disable_ipv6 on another device, no neighbours there", iface: 2, r4: true, r6: true,
			mutate: func(s *observe.Snapshot, _ *Options) { s.Sysctl.IPv6Disabled = map[string]bool{"veth0": true} }},
		{name: "disable_ipv6 on another device, IPv4 neighbours there", iface: 2, r4: true, r6: true,
			mutate: func(s *observe.Snapshot, _ *Options) {
				s.Sysctl.IPv6Disabled = map[string]bool{"veth0": true}
				s.Neighbours[observe.NeighKey{Ifindex: 3, Addr: netip.MustParseAddr("198.18.9.2")}] = 0x02
			}},
		{name: "disable_ipv6 on a device with IPv6 neighbours", iface: 2, r4: true,
			note: "ipv6 router off: net.ipv6.conf.veth0.disable_ipv6=1 on a device with IPv6 neighbours",
			mutate: func(s *observe.Snapshot, _ *Options) {
				s.Sysctl.IPv6Disabled = map[string]bool{"veth0": true}
				s.Neighbours[observe.NeighKey{Ifindex: 3, Addr: netip.MustParseAddr("2001:2:0:9::2")}] = 0x80 // PERMANENT
			}},
		{name: "ip_forward_use_pmtu with a route MTU metric", iface: 2, r6: true, note: "net.ipv4.ip_forward_use_pmtu=1",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Sysctl.FwdUsePMTU4 = true }},
		{name: "ip_forward_use_pmtu without route MTU metrics", iface: 2, r4: true, r6: true,
			mutate: func(s *observe.Snapshot, _ *Options) { s.Sysctl.FwdUsePMTU4 = true; s.Routes.MinMTU4 = 0 }},
		{name: "netfilter v4", iface: 2, r6: true, note: "netfilter sees forwarded packets: nftables ip filter FORWARD",
			mutate: func(s *observe.Snapshot, _ *Options) {
				s.Netfilter.V4 = []string{"nftables ip filter FORWARD (hook forward): 1 rules"}
			}},
		{name: "netfilter both", iface: 2, note: "inet",
			mutate: func(s *observe.Snapshot, _ *Options) {
				s.Netfilter.V4 = []string{"nftables inet t f"}
				s.Netfilter.V6 = []string{"nftables inet t f"}
			}},
		{name: "netdev ingress chain", iface: 2, note: "netfilter ingress hook",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Netfilter.Ingress["eth0"] = []string{"x"} }},
		{name: "xfrm", iface: 2, note: "xfrm",
			mutate: func(s *observe.Snapshot, _ *Options) { s.XfrmPolicies = true }},
		{name: "multipath with L4 hash", iface: 2, r6: true, note: "fib_multipath_hash_policy=1",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Routes.Multipath4 = true; s.Sysctl.MPHashPolicy4 = 1 }},
		{name: "multipath with L3 hash", iface: 2, r4: true, r6: true,
			mutate: func(s *observe.Snapshot, _ *Options) { s.Routes.Multipath4 = true }},
		{name: "down", iface: 2, r4: true, r6: true, note: "down: the program waits",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Links[2].Up = false }},
		{name: "bridge port", iface: 3, note: "enslaved to bridge br0",
			mutate: func(s *observe.Snapshot, _ *Options) {
				s.Links[4] = &observe.Link{Index: 4, Name: "br0", Kind: "bridge", Up: true}
				s.Links[3].Master, s.Links[3].MasterKind = 4, "bridge"
			}},
		{name: "vxlan: decapsulated frames at tc", iface: 3, r4: true, r6: true, hook: "tc", note: "hook tc",
			mutate: func(s *observe.Snapshot, _ *Options) {
				s.Links[3].Kind, s.Links[3].XDPFeatures, s.Links[3].VXLAN = "vxlan", 0, &observe.VXLANInfo{VNI: 1}
			}},
		{name: "vxlan in external mode", iface: 3, note: "collect_md",
			mutate: func(s *observe.Snapshot, _ *Options) {
				s.Links[3].Kind, s.Links[3].XDPFeatures, s.Links[3].VXLAN = "vxlan", 0, &observe.VXLANInfo{External: true}
			}},
		{name: "ipip", iface: 3, note: "kind ipip",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Links[3].Kind = "ipip" }},
		{name: "foreign xdp", iface: 2, note: "attached by someone else",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Links[2].XDPProgID = 99 }},
		{name: "tc ingress", iface: 2, note: "tc ingress",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Links[2].TCIngress = true }},
		{name: "excluded", iface: 2, note: "--exclude",
			mutate: func(_ *observe.Snapshot, o *Options) { o.Exclude = []string{"eth*"} }},
		{name: "not selected", iface: 3, note: "--interfaces",
			mutate: func(_ *observe.Snapshot, o *Options) { o.Interfaces = []string{"eth0"} }},
		{name: "--hook xdp without native support", iface: 2, note: "no native XDP",
			mutate: func(s *observe.Snapshot, o *Options) { o.Hook = HookXDP; s.Links[2].XDPFeatures = 0 }},
		{name: "veth whose peer offloads checksums: tc", iface: 3, r4: true, r6: true, hook: "tc", note: "hook tc: the veth peer is a local stack",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Links[3].PeerOffload = observe.OffloadOn }},
		{name: "veth whose peer is unknown: tc", iface: 3, r4: true, r6: true, hook: "tc", note: "peer not inspected",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Links[3].PeerOffloadErr = "gone" }},
		{name: "veth whose peer computes checksums: native", iface: 3, r4: true, r6: true, note: "hook xdp: the driver supports native XDP",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Links[3].PeerOffload = observe.OffloadOff }},
		{name: "--hook xdp on a veth whose peer offloads", iface: 3, note: "would lose the checksum-offload state",
			mutate: func(s *observe.Snapshot, o *Options) { o.Hook = HookXDP; s.Links[3].PeerOffload = observe.OffloadOn }},
		{name: "auto falls back to tc", iface: 2, r4: true, r6: true, hook: "tc", note: "hook tc: the driver has no native XDP",
			mutate: func(s *observe.Snapshot, _ *Options) { s.Links[2].XDPFeatures = 0 }},
		{name: "--hook xdp-generic", iface: 2, r4: true, r6: true, hook: "xdp-generic", note: "chosen by --hook",
			mutate: func(_ *observe.Snapshot, o *Options) { o.Hook = HookXDPGeneric }},
		{name: "--hook tc", iface: 2, r4: true, r6: true, hook: "tc", note: "chosen by --hook",
			mutate: func(_ *observe.Snapshot, o *Options) { o.Hook = HookTC }},
		{name: "foreign tcx ingress program", iface: 2, note: "tcx ingress program id 7 attached by someone else",
			mutate: func(s *observe.Snapshot, o *Options) { o.Hook = HookTC; s.Links[2].TCXIngress = []uint32{7} }},
		{name: "own tcx ingress program", iface: 2, r4: true, r6: true, hook: "tc",
			mutate: func(s *observe.Snapshot, o *Options) { o.Hook = HookTC; s.Links[2].TCXIngress = []uint32{42} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := snapshot()
			o := Options{Hook: HookAuto}
			if c.mutate != nil {
				c.mutate(s, &o)
			}
			it := Build(s, o, ownedID42, nil).Interfaces[c.iface]
			r4, r6 := false, false
			if it.Spec != nil {
				r4, r6 = it.Spec.Router4, it.Spec.Router6
				if !r4 && !r6 {
					t.Fatal("a program with no family")
				}
				want := c.hook
				if want == "" {
					want = "xdp"
				}
				if string(it.Spec.Hook) != want {
					t.Fatalf("hook %s, want %s; notes %q", it.Spec.Hook, want, it.Notes)
				}
			}
			if r4 != c.r4 || r6 != c.r6 {
				t.Fatalf("router4 %v router6 %v, want %v %v; notes %q", r4, r6, c.r4, c.r6, it.Notes)
			}
			if c.note != "" && !strings.Contains(strings.Join(it.Notes, "\n"), c.note) {
				t.Fatalf("notes %q lack %q", it.Notes, c.note)
			}
		})
	}
}

// A hook the kernel refused: --hook auto takes the next one (native XDP -> tc, without what only
// XDP has: the tc program after XDP, the SCTP offload check); a hook chosen by --hook, or tc
// refused too, leaves the interface to Linux with the error.
func TestBuildRefused(t *testing.T) {
	const refusedXDP = "attach xdp to veth0: another XDP program is attached to it or to a device on top of it"
	cases := []struct {
		name    string
		hook    HookMode
		refused map[dataplane.Hook]string
		offload bool   // the veth peer leaves checksums to offload (auto picks tc)
		want    string // the hook installed, "" for none
		note    string
	}{
		{name: "auto: native xdp refused, tc", hook: HookAuto, refused: map[dataplane.Hook]string{dataplane.HookXDP: refusedXDP},
			want: "tc", note: "hook tc: the kernel refused native XDP (" + refusedXDP + ")"},
		{name: "auto: xdp and tc refused", hook: HookAuto, want: "",
			refused: map[dataplane.Hook]string{dataplane.HookXDP: refusedXDP, dataplane.HookTC: "attach tc to veth0: x"},
			note:    "install failed: attach xdp to veth0"},
		{name: "auto: tc chosen and refused", hook: HookAuto, offload: true, want: "",
			refused: map[dataplane.Hook]string{dataplane.HookTC: "attach tc to veth0: x"}, note: "install failed: attach tc to veth0: x"},
		{name: "auto: a refusal at another hook changes nothing", hook: HookAuto, offload: true, want: "tc",
			refused: map[dataplane.Hook]string{dataplane.HookXDP: refusedXDP}, note: "hook tc: the veth peer is a local stack"},
		{name: "--hook xdp refused: no fallback", hook: HookXDP, refused: map[dataplane.Hook]string{dataplane.HookXDP: refusedXDP},
			want: "", note: "install failed: " + refusedXDP + "; tried again when the interface changes"},
		{name: "--hook xdp-generic refused: no fallback", hook: HookXDPGeneric, want: "",
			refused: map[dataplane.Hook]string{dataplane.HookXDPGeneric: "attach xdp-generic to veth0: x"}, note: "install failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := snapshot()
			s.Links[3].PeerOffload = observe.OffloadOff
			if c.offload {
				s.Links[3].PeerOffload = observe.OffloadOn
			}
			it := Build(s, Options{Hook: c.hook}, notOwned, Refused{3: c.refused}).Interfaces[3]
			got := ""
			if it.Spec != nil {
				got = string(it.Spec.Hook)
			}
			if got != c.want {
				t.Fatalf("hook %q, want %q; notes %q", got, c.want, it.Notes)
			}
			if !strings.Contains(strings.Join(it.Notes, "\n"), c.note) {
				t.Fatalf("notes %q lack %q", it.Notes, c.note)
			}
			if strings.Contains(strings.Join(it.Notes, "\n"), "hook xdp:") && got == "tc" {
				t.Fatalf("notes %q still give the refused hook", it.Notes)
			}
			if it.Spec != nil && it.Spec.Hook == dataplane.HookTC && (it.Spec.TCAfterXDP || it.Spec.SkbSender) {
				t.Fatalf("tc spec with XDP-only parts: %+v", *it.Spec)
			}
		})
	}
}

func TestOwnProgramIsNotForeign(t *testing.T) {
	s := snapshot()
	s.Links[2].XDPProgID = 7
	it := Build(s, Options{Hook: HookAuto}, func(idx int, id uint32) bool { return idx == 2 && id == 7 }, nil).Interfaces[2]
	if it.Spec == nil {
		t.Fatalf("own program treated as foreign: %q", it.Notes)
	}
}

func TestEgress(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*observe.Snapshot)
		iface  int
		ok     bool
		note   string
	}{
		{name: "nic with ndo_xdp_xmit and passive qdiscs", iface: 2, ok: true},
		{name: "veth whose peer has no NAPI", iface: 3, note: "no XDP program and no GRO"},
		{name: "no carrier", iface: 2, note: "no carrier", mutate: func(s *observe.Snapshot) { s.Links[2].OperUp = false }},
		{name: "shaping qdisc", iface: 2, note: "qdisc tbf", mutate: func(s *observe.Snapshot) { s.Links[2].Qdiscs = []string{"tbf"} }},
		{name: "tc egress", iface: 2, note: "tc egress", mutate: func(s *observe.Snapshot) { s.Links[2].TCEgress = true }},
		{name: "netdev egress chain", iface: 2, note: "netfilter egress", mutate: func(s *observe.Snapshot) { s.Netfilter.Egress["eth0"] = []string{"x"} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := snapshot()
			if c.mutate != nil {
				c.mutate(s)
			}
			p := Build(s, Options{Hook: HookAuto}, notOwned, nil)
			it := p.Interfaces[c.iface]
			if it.Egress != c.ok || !strings.Contains(it.EgressNote, c.note) {
				t.Fatalf("egress %v %q, want %v %q", it.Egress, it.EgressNote, c.ok, c.note)
			}
			inTx := false
			for _, idx := range p.Data.TxDevs {
				inTx = inTx || idx == c.iface
			}
			if inTx != c.ok {
				t.Fatalf("in the redirect map: %v, want %v", inTx, c.ok)
			}
		})
	}
}

func TestData(t *testing.T) {
	p := Build(snapshot(), Options{Hook: HookAuto}, notOwned, nil)
	want := map[string]bool{"198.18.0.1": true, "198.18.0.255": true}
	for _, a := range p.Data.LocalHosts {
		delete(want, a.String())
	}
	if len(want) > 0 {
		t.Fatalf("local hosts %v lack %v", p.Data.LocalHosts, want)
	}
	if len(p.Data.LocalPrefixes) != 1 || p.Data.RouteMTU4 != 1400 || len(p.Data.StaleNeighbours) != 1 || p.Data.StaleNeighbours[0].Addr.String() != "198.18.0.3" {
		t.Fatalf("data %+v", p.Data)
	}
}

func TestTCEgress(t *testing.T) {
	pod := func(s *observe.Snapshot) {
		lk := s.Links[3]
		lk.PeerNetnsID, lk.PeerMTU, lk.Qdiscs, lk.TxOffload = 5, 1500, []string{"noqueue"}, observe.OffloadOn
	}
	cases := []struct {
		name     string
		mutate   func(*observe.Snapshot)
		iface    int
		ok, peer bool
	}{
		{name: "nic", iface: 2, ok: true},
		// Unlike XDP, a tc redirect goes through the device's qdisc and tc egress: still fine.
		{name: "nic with tc egress and a shaping qdisc", iface: 2, ok: true,
			mutate: func(s *observe.Snapshot) { s.Links[2].TCEgress = true; s.Links[2].Qdiscs = []string{"tbf"} }},
		{name: "no carrier", iface: 2, mutate: func(s *observe.Snapshot) { s.Links[2].OperUp = false }},
		{name: "loopback", iface: 1},
		{name: "veth with its peer here", iface: 3, ok: true,
			mutate: func(s *observe.Snapshot) { s.Links[3].PeerNetnsID = -1; s.Links[3].PeerMTU = 1500 }},
		{name: "veth into a container", iface: 3, ok: true, peer: true, mutate: pod},
		{name: "container veth with tc egress", iface: 3, ok: true,
			mutate: func(s *observe.Snapshot) { pod(s); s.Links[3].TCEgress = true }},
		{name: "container veth with a shaping qdisc", iface: 3, ok: true,
			mutate: func(s *observe.Snapshot) { pod(s); s.Links[3].Qdiscs = []string{"tbf"} }},
		{name: "container veth with a netfilter egress chain", iface: 3, ok: true,
			mutate: func(s *observe.Snapshot) { pod(s); s.Netfilter.Egress["veth0"] = []string{"x"} }},
		// Its transmit path would complete checksums or cut TCP trains: not skipped.
		{name: "container veth without transmit offloads", iface: 3, ok: true,
			mutate: func(s *observe.Snapshot) { pod(s); s.Links[3].TxOffload = observe.OffloadOff }},
		{name: "container veth whose offloads are unknown", iface: 3, ok: true,
			mutate: func(s *observe.Snapshot) { pod(s); s.Links[3].TxOffload = observe.OffloadUnknown }},
		{name: "container veth whose peer runs XDP", iface: 3, ok: true,
			mutate: func(s *observe.Snapshot) { pod(s); s.Links[3].PeerXDP = true }},
		{name: "bond member", iface: 3,
			mutate: func(s *observe.Snapshot) { pod(s); s.Links[3].Master, s.Links[3].MasterKind = 9, "bond" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := snapshot()
			if c.mutate != nil {
				c.mutate(s)
			}
			p := Build(s, Options{Hook: HookAuto}, notOwned, nil)
			var got *dataplane.TCTx
			for i := range p.Data.TCTx {
				if p.Data.TCTx[i].Ifindex == c.iface {
					got = &p.Data.TCTx[i]
				}
			}
			if (got != nil) != c.ok {
				t.Fatalf("in TCTx %v, want %v", got != nil, c.ok)
			}
			if got != nil && (got.Peer != c.peer || (got.Peer && got.PeerMTU != 1500)) {
				t.Fatalf("peer %v mtu %d, want %v 1500", got.Peer, got.PeerMTU, c.peer)
			}
		})
	}
}

// An XDP program gets a tc program after it (--hook auto) when some destination takes skbs only.
func TestTCAfterXDP(t *testing.T) {
	pod := func(s *observe.Snapshot) {
		lk := s.Links[3] // a container's veth: its peer has no XDP program and no GRO
		lk.PeerNetnsID, lk.PeerMTU, lk.Qdiscs, lk.TxOffload = 5, 1500, []string{"noqueue"}, observe.OffloadOn
		lk.XDPFeatures = observe.XDPActBasic
	}
	s := snapshot()
	pod(s)
	p := Build(s, Options{Hook: HookAuto}, notOwned, nil)
	eth0 := p.Interfaces[2]
	if eth0.Spec == nil || eth0.Spec.Hook != dataplane.HookXDP || !eth0.Spec.TCAfterXDP ||
		!strings.Contains(strings.Join(eth0.Notes, "\n"), "tc after xdp: ") {
		t.Fatalf("eth0 with a container veth beside it: %+v %q", eth0.Spec, eth0.Notes)
	}
	if sp := Build(s, Options{Hook: HookXDP}, notOwned, nil).Interfaces[2].Spec; sp == nil || sp.TCAfterXDP {
		t.Errorf("--hook xdp: %+v, want XDP alone", sp)
	}
	// Every destination takes XDP frames: the XDP program is the same (no reload when a
	// destination that takes skbs only appears), and nothing is named.
	plain := snapshot()
	plain.Links[3].XDPFeatures |= observe.XDPActNdoXmit // the veth takes XDP frames
	it := Build(plain, Options{Hook: HookAuto}, notOwned, nil).Interfaces[2]
	if it.Spec == nil || *it.Spec != *eth0.Spec || !strings.Contains(strings.Join(it.Notes, "\n"), "(none now)") {
		t.Errorf("every destination takes XDP frames: %+v %q, want the same XDP program", it.Spec, it.Notes)
	}
}

// net.ipv4.ip_forward_update_priority reaches the data plane, which sets the skb priority from the
// TOS (tc) only when it is 1.
func TestForwardUpdatePriority(t *testing.T) {
	for _, on := range []bool{true, false} {
		s := snapshot()
		s.Sysctl.FwdUpdatePriority4 = on
		if got := Build(s, Options{Hook: HookAuto}, notOwned, nil).Data.FwdUpdatePriority4; got != on {
			t.Fatalf("ip_forward_update_priority %v: data plane told %v", on, got)
		}
	}
}
