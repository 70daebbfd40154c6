// Package graph decides, from a snapshot of Linux's state, which fast-path modules each interface
// runs and why, and what data those modules read. It is a pure function of the snapshot: every
// decision comes with the reason a person reading `linuxfp status` needs.
package graph

import (
	"fmt"
	"maps"
	"net/netip"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// HookMode is the --hook option.
type HookMode string

const (
	HookAuto       HookMode = "auto"
	HookXDP        HookMode = "xdp"
	HookXDPGeneric HookMode = "xdp-generic"
	HookTC         HookMode = "tc"
)

// Options are the user's choices.
type Options struct {
	Hook       HookMode
	Interfaces []string // glob patterns; empty: every interface but lo
	Exclude    []string // glob patterns
	// FibCache: the FIB cache was asked for (linuxfp run --fib-cache). NeighEvents: the
	// watchers see every change that can alter a routing lookup as it happens, the neighbour
	// table's own included (the fence and the neighbour tracepoints): the FIB cache may be used,
	// and the tracepoints keep the STALE mirror.
	FibCache, NeighEvents bool
	// CtCache: the conntrack cache was asked for (linuxfp run --ct-cache). CtFreeEvents: the
	// watcher sees every free of a conntrack entry's object as it happens
	// (tp_btf/kmem_cache_free): the conntrack cache may be used.
	CtCache, CtFreeEvents bool
}

// Interface is the decision for one interface.
type Interface struct {
	Index int    `json:"ifindex"`
	Name  string `json:"name"`
	// Spec is the program to install; nil when the interface gets none.
	Spec *dataplane.Spec `json:"-"`
	// Notes say why: why no program, why a module or family is off, which hook and why.
	Notes []string `json:"notes,omitempty"`
	// Egress: XDP programs may redirect frames out of this interface (or why not).
	Egress     bool   `json:"egress"`
	EgressNote string `json:"egress_note,omitempty"`
	// TCEgress: tc programs may redirect skbs out of it; TCPeer: straight into its veth peer's
	// namespace (bpf_redirect_peer).
	TCEgress bool `json:"tc_egress"`
	TCPeer   bool `json:"tc_peer,omitempty"`
}

// Plan is the whole decision.
type Plan struct {
	Interfaces map[int]*Interface
	Data       dataplane.Data
	// Filter is the netfilter ruleset compiled for the filter module (nil: not read).
	Filter *Filter
	// FibCacheOff says, per family (IPv4, IPv6), why the FIB cache does not answer (none: it
	// does).
	FibCacheOff [2][]string
}

// OwnedProgram tells whether prog is one of linuxfp's own programs on ifindex.
type OwnedProgram func(ifindex int, prog uint32) bool

// Refused are the hooks at which the kernel refused to attach an interface's program, by
// ifindex, with the error: what only an attempt shows (native XDP below a macvlan that runs an
// XDP program is refused). The controller keeps them until the interface changes, so a refused
// attach is not tried again on every change.
type Refused map[int]map[dataplane.Hook]string

// Build computes the plan.
func Build(s *observe.Snapshot, o Options, owned OwnedProgram, refused Refused) *Plan {
	p := &Plan{Interfaces: map[int]*Interface{}, Filter: filterOf(s)}
	host := hostWideReasons(s)
	for _, lk := range s.Links {
		it := &Interface{Index: lk.Index, Name: lk.Name}
		it.Egress, it.EgressNote = egressReady(s, lk)
		it.Spec, it.Notes = ingress(s, o, lk, owned, host, refused[lk.Index])
		p.Interfaces[lk.Index] = it
		if it.Egress {
			p.Data.TxDevs = append(p.Data.TxDevs, lk.Index)
		}
		if tx, ok := tcEgress(s, lk); ok {
			p.Data.TCTx = append(p.Data.TCTx, tx)
			it.TCEgress, it.TCPeer = true, tx.Peer
		}
		if lk.VXLAN != nil {
			vx, why := vxlanEncap(s, lk)
			if vx != nil {
				p.Data.VXLAN = append(p.Data.VXLAN, *vx)
				n := "vxlan: IPv4 routed into it is encapsulated in the fast path (tc), as its driver would, packet by packet where nothing keeps it with the driver"
				if vx.UDPCSum {
					n += " (udpcsum: single packets whose inner checksum is left to offload; GSO trains and others: the driver)"
				}
				it.Notes = append(it.Notes, n+"; the ingress interfaces' encapsulated counter says how many")
			} else {
				it.Notes = append(it.Notes, "vxlan: packets routed into it take its driver's path: "+strings.Join(why, "; "))
			}
			if rx, why := vxlanDecap(s, lk); rx != nil {
				p.Data.VXLANRx = append(p.Data.VXLANRx, *rx)
				it.Notes = append(it.Notes, "vxlan: its IPv4 packets arriving on this host are decapsulated in the fast path (tc), as vxlan_rcv() would, "+
					"packet by packet where nothing keeps them with Linux (a checksum to verify, ECN, GRO trains ...: the underlay's vxlan_rx counter)")
			} else {
				it.Notes = append(it.Notes, "vxlan: its packets arriving on this host are decapsulated by its driver: "+strings.Join(why, "; "))
			}
		}
		if dv, notes := l2Dev(s, lk); dv != nil {
			p.Data.L2 = append(p.Data.L2, *dv)
			it.Notes = append(it.Notes, notes...)
			if lk.Kind == "bridge" {
				// Not a redirect target itself: routed packets go on to the port its FDB names.
				it.Egress = dv.Flags&dataplane.L2OutOK != 0
				it.EgressNote = ""
				if !it.Egress {
					it.EgressNote = strings.Join(notes, "; ")
				}
			}
		}
	}
	sort.Ints(p.Data.TxDevs)
	slices.SortFunc(p.Data.TCTx, func(a, b dataplane.TCTx) int { return a.Ifindex - b.Ifindex })
	slices.SortFunc(p.Data.L2, func(a, b dataplane.L2Dev) int { return a.Ifindex - b.Ifindex })
	p.Data.FDBMoves = s.FDBMoves
	for _, e := range s.FDB {
		p.Data.FDB = append(p.Data.FDB, dataplane.FDBEntry{Bridge: e.Bridge, MAC: e.MAC, Port: e.Port, Local: e.Local})
	}
	for k, st := range s.Neighbours {
		if st&nudStale != 0 {
			p.Data.StaleNeighbours = append(p.Data.StaleNeighbours, dataplane.NeighKey{Ifindex: k.Ifindex, Addr: k.Addr})
		}
	}
	slices.SortFunc(p.Data.StaleNeighbours, func(a, b dataplane.NeighKey) int {
		if a.Ifindex != b.Ifindex {
			return a.Ifindex - b.Ifindex
		}
		return a.Addr.Compare(b.Addr)
	})
	hosts := map[netip.Addr]bool{}
	for _, a := range s.Routes.LocalHosts {
		hosts[a] = true
	}
	for _, a := range s.Addrs {
		hosts[a.Prefix.Addr()] = true
	}
	for a := range hosts {
		p.Data.LocalHosts = append(p.Data.LocalHosts, a)
	}
	slices.SortFunc(p.Data.LocalHosts, func(a, b netip.Addr) int { return a.Compare(b) })
	p.Data.LocalPrefixes = s.Routes.LocalPrefixes
	p.Data.Filter = filterData(s)
	p.Data.CT = ctData(s)
	p.Data.CT.Cache = o.CtFreeEvents
	slices.SortFunc(p.Data.VXLAN, func(a, b dataplane.VXLANDev) int { return a.Ifindex - b.Ifindex })
	slices.SortFunc(p.Data.VXLANRx, func(a, b dataplane.VXLANRx) int { return a.Dev - b.Dev })
	p.Data.VXLANFDB = vxlanFDB(s, p.Data.VXLAN)
	p.Data.VX = dataplane.VXHost{
		LocalOut4: len(s.Netfilter.LocalOut4) == 0, LocalIn4: len(s.Netfilter.LocalIn4) == 0,
		HopLimit4: s.Routes.HopLimit4, DefaultTTL: s.Sysctl.IPDefaultTTL,
	}
	p.Data.RouteMTU4 = uint32(s.Routes.MinMTU4)
	p.Data.RouteMTU6 = uint32(s.Routes.MinMTU6)
	p.Data.FwdUpdatePriority4 = s.Sysctl.FwdUpdatePriority4
	p.FibCacheOff = fibCache(s, o)
	p.Data.FibCache4, p.Data.FibCache6 = len(p.FibCacheOff[0]) == 0, len(p.FibCacheOff[1]) == 0
	if p.Data.FibCache4 || p.Data.FibCache6 {
		p.Data.FibSplit = fibSplit(s)
		if n := len(p.Data.FibSplit); n > fibSplitMax {
			why := fmt.Sprintf("%d blocks split by longer routes or local addresses, more than the %d the data plane holds", n, fibSplitMax)
			p.FibCacheOff[0], p.FibCacheOff[1] = append(p.FibCacheOff[0], why), append(p.FibCacheOff[1], why)
			p.Data.FibCache4, p.Data.FibCache6, p.Data.FibSplit = false, false, nil
		}
	}
	p.Data.StaleByEvents = o.NeighEvents
	p.Data.StaleLost = s.StaleLost
	tcAfterXDP(p, o)
	// The conntrack module is built into the programs where it may run (see Spec.Conntrack4).
	for _, it := range p.Interfaces {
		if it.Spec != nil {
			it.Spec.Conntrack4, it.Spec.Conntrack6 = p.Data.CT.Active4, p.Data.CT.Active6
		}
	}
	vxlanRxRoute(s, p)
	return p
}

// tcAfterXDP lets every XDP program (--hook auto) hand to a tc program of the same modules on
// the same interface the packets it cannot redirect because only an skb can go where they go.
// This is the one place that explains why; other comments point here.
//
// Two destinations take only skbs. A veth whose peer has no XDP program and no GRO (a
// container's, as CNI plugins leave it) drops a frame redirected by XDP, because its peer has
// no XDP receive path (egressReady). A vxlan device is encapsulated into by the VXLAN module at
// tc only: it grows the skb with bpf_skb_adjust_room() and takes the outer source port from the
// skb's flow hash, as the driver does (vxlanEncap, bpf/lib/vxlan.h). A tc program may redirect
// an skb to both (tcEgress).
//
// The tc program is attached when the first such packet arrives (dataplane/companion.go), so
// the XDP programs need no change when such a destination appears or goes. The note names the
// ones there are now.
func tcAfterXDP(p *Plan, o Options) {
	if o.Hook != HookAuto && o.Hook != "" {
		return
	}
	var only []string
	for _, it := range p.Interfaces {
		if it.TCEgress && !it.Egress {
			only = append(only, it.Name)
		}
	}
	if len(p.Data.VXLAN) > 0 {
		only = append(only, "vxlan devices")
	}
	slices.Sort(only)
	if len(only) > 3 {
		only = append(only[:3], fmt.Sprintf("%d more", len(only)-3))
	}
	now := "none now"
	if len(only) > 0 {
		now = "now " + strings.Join(only, ", ")
	}
	for _, it := range p.Interfaces {
		if it.Spec != nil && it.Spec.Hook.XDP() {
			it.Spec.TCAfterXDP = true
			it.Notes = append(it.Notes, "tc after xdp: packets XDP cannot redirect because only an skb goes there ("+now+
				") are fast-pathed by a tc program of the same modules, attached when the first one arrives")
		}
	}
}

const nudStale = 0x04 // NUD_STALE

func matchAny(patterns []string, name string) bool {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	return false
}

// supportedKinds are the devices the router module runs on as an ingress. Others (bonds,
// other tunnels ...) are later modules' work; their packets are Linux's until then. A vxlan
// device's frames are the inner frames its driver has decapsulated (and learned from) already:
// at its tc ingress they are like any Ethernet device's.
var supportedKinds = map[string]bool{"": true, "veth": true, "vxlan": true}

func ingress(s *observe.Snapshot, o Options, lk *observe.Link, owned OwnedProgram, host hostWide, refused map[dataplane.Hook]string) (*dataplane.Spec, []string) {
	if lk.Name == "lo" {
		return nil, []string{"loopback: not accelerated"}
	}
	if lk.Kind == "bridge" {
		return nil, nil // frames reach a bridge through its ports; see l2Dev
	}
	if len(o.Interfaces) > 0 && !matchAny(o.Interfaces, lk.Name) {
		return nil, []string{"not selected by --interfaces"}
	}
	if matchAny(o.Exclude, lk.Name) {
		return nil, []string{"excluded by --exclude"}
	}
	var br *observe.Link
	if lk.Master != 0 {
		name := lk.MasterKind
		m := s.Links[lk.Master]
		if m != nil {
			name += " " + m.Name
		}
		if lk.MasterKind != "bridge" || m == nil || lk.Port == nil || m.Bridge == nil {
			return nil, []string{"enslaved to " + name + ": Linux handles its frames (no module for it yet)"}
		}
		br = m
	}
	if !supportedKinds[lk.Kind] {
		return nil, []string{"kind " + lk.Kind + ": no fast-path module for it yet"}
	}
	if lk.VXLAN != nil && lk.VXLAN.External {
		// Its skbs carry the tunnel's metadata as their dst; Linux's routing replaces it, a
		// redirect would carry it on.
		return nil, []string{"vxlan in external (collect_md) mode: its skbs carry tunnel metadata a redirect would keep"}
	}
	if len(lk.MAC) != 6 {
		return nil, []string{"not an Ethernet device"}
	}
	if lk.XDPProgID != 0 && !owned(lk.Index, lk.XDPProgID) {
		return nil, []string{fmt.Sprintf("XDP program id %d attached by someone else: linuxfp does not replace it", lk.XDPProgID)}
	}
	if lk.TCIngress {
		return nil, []string{"tc ingress filters attached: linuxfp's XDP or tcx program runs before them and would bypass them"}
	}
	for _, id := range lk.TCXIngress {
		if !owned(lk.Index, id) {
			return nil, []string{fmt.Sprintf("tcx ingress program id %d attached by someone else: a fast-pathed packet would bypass it", id)}
		}
	}
	if why := s.Netfilter.Ingress[lk.Name]; len(why) > 0 {
		return nil, append([]string{"netfilter ingress hook on this device (runs after XDP):"}, why...)
	}

	var notes []string
	skbSender := lk.Kind == "veth"
	// A veth's frames are skbs from the peer's stack. If that stack may leave TCP/UDP checksums
	// to offload (CHECKSUM_PARTIAL, veth's default), a native XDP redirect would lose that state
	// and the receiver would drop the packet; generic XDP redirects the skb and keeps it.
	partial := skbSender && lk.PeerOffload != observe.OffloadOff
	if !lk.Up {
		// A down device receives nothing; installing now makes `ip link set up` instant.
		notes = append(notes, "down: the program waits for it to come up")
	}
	hook := dataplane.HookXDP
	native := lk.XDPFeatures&observe.XDPActBasic != 0
	switch o.Hook {
	case HookXDPGeneric:
		hook = dataplane.HookXDPGeneric
		notes = append(notes, "hook xdp-generic: chosen by --hook")
	case HookTC:
		hook = dataplane.HookTC
		notes = append(notes, "hook tc: chosen by --hook")
	case HookXDP:
		if !native {
			return nil, []string{"driver has no native XDP (use --hook auto or xdp-generic)"}
		}
		if partial {
			return nil, []string{"native XDP would lose the checksum-offload state of skbs from the veth peer (" +
				peerOffloadNote(lk) + "); use --hook auto or xdp-generic"}
		}
		notes = append(notes, "hook xdp: chosen by --hook")
	default:
		// Native XDP where frames arrive without an skb and can leave without one; tc wherever
		// an skb exists anyway (generic XDP would copy it to run, and lose GSO trains).
		switch {
		case !native:
			hook = dataplane.HookTC
			notes = append(notes, "hook tc: the driver has no native XDP, so every frame becomes an skb before any hook runs")
		case partial:
			hook = dataplane.HookTC
			notes = append(notes, "hook tc: the veth peer is a local stack that sends skbs with checksums left to offload ("+
				peerOffloadNote(lk)+"): native XDP would lose that state, tc keeps the skb as it is")
		case vxlanUnderlay(s, lk) != "":
			hook = dataplane.HookTC
			notes = append(notes, "hook tc: the underlay of "+vxlanUnderlay(s, lk)+", whose packets the VXLAN module decapsulates at tc only (it hands them to the vxlan device's ingress, which XDP cannot)")
		default:
			notes = append(notes, "hook xdp: the driver supports native XDP and the sender leaves checksums to nobody: frames can be forwarded before any skb is built")
		}
	}
	// An attach the kernel refused: --hook auto takes the next hook (native XDP -> tc, which
	// runs the same modules on the skb the stack builds anyway); a hook chosen by --hook, or tc
	// refused too, leaves the interface to Linux with the error. The hook note is the last one.
	if err, ok := refused[hook]; ok {
		_, tcRefused := refused[dataplane.HookTC]
		if hook == dataplane.HookXDP && (o.Hook == HookAuto || o.Hook == "") && !tcRefused {
			hook = dataplane.HookTC
			notes[len(notes)-1] = "hook tc: the kernel refused native XDP (" + err + "); tried again when the interface changes"
		} else {
			return nil, append(notes, "install failed: "+err+"; tried again when the interface changes")
		}
	}

	if br != nil {
		return bridgePort(s, lk, br, hook, skbSender, notes, host)
	}

	r4, why4 := router4(s, lk, host)
	r6, why6 := router6(s, lk, host)
	for _, w := range why4 {
		notes = append(notes, "ipv4 router off: "+w)
	}
	for _, w := range why6 {
		notes = append(notes, "ipv6 router off: "+w)
	}
	notes = append(notes, filterNotes(s, r4, r6)...)
	if !r4 && !r6 {
		return nil, notes
	}
	return &dataplane.Spec{
		Ifindex: lk.Index, Name: lk.Name, MAC: dataplane.MACOf(lk.MAC), Hook: hook, Router4: r4, Router6: r6,
		// Generic XDP keeps the skb, and its SCTP CRC offload state with it.
		SkbSender:  skbSender && hook == dataplane.HookXDP,
		MarkUnsafe: markUnsafe(lk),
	}, notes
}

func peerOffloadNote(lk *observe.Link) string {
	if lk.PeerOffload == observe.OffloadUnknown {
		return "peer not inspected: " + lk.PeerOffloadErr
	}
	return "peer tx checksum offload on"
}

// hostWide are the reasons that turn a family's router off on every interface because of where
// its packets could leave (not where they arrive), found once per plan.
type hostWide struct{ v4, v6 []string }

func hostWideReasons(s *observe.Snapshot) hostWide {
	var h hostWide
	// With ip_forward_use_pmtu=1, ip_forward() sizes a packet by its route's path MTU (a PMTU
	// exception, always below the MTU metric when learnt) before the route's MTU metric;
	// bpf_fib_lookup() then checks the metric first, and the route_mtu check only the smallest
	// metric: a packet between the two would be forwarded where Linux sends frag-needed.
	// Without a metric both take the exception, then the device MTU.
	if s.Sysctl.FwdUsePMTU4 && s.Routes.MinMTU4 > 0 {
		h.v4 = append(h.v4, "net.ipv4.ip_forward_use_pmtu=1 with route MTU metrics (ip_forward() takes a learnt path MTU before the metric, bpf_fib_lookup() the metric)")
	}
	// ip6_output() drops what would leave a device with disable_ipv6=1; bpf_fib_lookup() does
	// not check that, and a route through a nexthop object outlives the switch (addrconf_ifdown()
	// removes the device's addresses and its other routes). What keeps such packets Linux's is
	// the neighbour table: the switch flushes the device's neighbours and ndisc refuses new ones
	// there, so the lookup ends in NO_NEIGH. Should an IPv6 neighbour exist on such a device
	// after all, that no longer holds.
	var off []int
	for _, lk := range s.Links {
		if s.Sysctl.IPv6Disabled[lk.Name] {
			off = append(off, lk.Index)
		}
	}
	if len(off) > 0 {
		names := map[string]bool{}
		for k := range s.Neighbours {
			if k.Addr.Is6() && slices.Contains(off, k.Ifindex) {
				names[s.Links[k.Ifindex].Name] = true
			}
		}
		for _, n := range slices.Sorted(maps.Keys(names)) {
			h.v6 = append(h.v6, "net.ipv6.conf."+n+".disable_ipv6=1 on a device with IPv6 neighbours (ip6_output() drops what would leave there; bpf_fib_lookup() does not check it)")
		}
	}
	return h
}

func router4(s *observe.Snapshot, lk *observe.Link, host hostWide) (bool, []string) {
	var why []string
	if !s.Sysctl.IPv4Forward {
		why = append(why, "net.ipv4.ip_forward=0")
	} else if !s.Sysctl.IPv4DevFwd[lk.Name] {
		why = append(why, "net.ipv4.conf."+lk.Name+".forwarding=0")
	}
	if rp := s.Sysctl.RPFilter[lk.Name]; rp != 0 {
		why = append(why, fmt.Sprintf("rp_filter=%d on %s (reverse-path filtering is not emulated)", rp, lk.Name))
	}
	why = append(why, host.v4...)
	why = append(why, familyChecks(s, s.Routes.Multipath4, s.Sysctl.MPHashPolicy4, 0)...)
	return len(why) == 0, why
}

// router6 decides IPv6 for lk, the device Linux routes from (on a bridge port: the bridge).
func router6(s *observe.Snapshot, lk *observe.Link, host hostWide) (bool, []string) {
	var why []string
	if !s.Sysctl.IPv6Forward {
		why = append(why, "net.ipv6.conf.all.forwarding=0")
	}
	if s.Sysctl.IPv6Disabled[lk.Name] {
		why = append(why, "net.ipv6.conf."+lk.Name+".disable_ipv6=1 (ip6_rcv_core() drops all IPv6 arriving there)")
	}
	if s.Sysctl.IPv6ProxyNDP {
		why = append(why, "net.ipv6.conf.all.proxy_ndp=1 (ip6_forward answers for proxied neighbours)")
	}
	why = append(why, host.v6...)
	why = append(why, familyChecks(s, s.Routes.Multipath6, s.Sysctl.MPHashPolicy6, 1)...)
	return len(why) == 0, why
}

// familyChecks are the reasons both families share: IPsec, the multipath hash, netfilter rules
// the filter module does not handle. fam is 0 for IPv4, 1 for IPv6.
func familyChecks(s *observe.Snapshot, multipath bool, hashPolicy int, fam int) []string {
	var why []string
	if s.XfrmPolicies {
		why = append(why, "IPsec (xfrm) policies exist: forwarding checks them")
	}
	if multipath && hashPolicy != 0 {
		why = append(why, fmt.Sprintf("multipath routes with fib_multipath_hash_policy=%d (only the L3 policy 0 hashes as bpf_fib_lookup does)", hashPolicy))
	}
	off, _ := netfilterWhy(s, fam)
	return append(why, off...)
}

// tcEgress: may a tc program redirect an skb out of lk, and may it deliver it straight into the
// veth peer's namespace? A redirected skb goes through dev_queue_xmit() of lk, as a packet Linux
// forwards does (qdisc, tc egress, netfilter egress all apply), so only a usable Ethernet device
// is needed. bpf_redirect_peer() skips lk's transmit path and the peer's XDP: only where both are
// empty.
func tcEgress(s *observe.Snapshot, lk *observe.Link) (dataplane.TCTx, bool) {
	tx := dataplane.TCTx{Ifindex: lk.Index}
	switch {
	case lk.Name == "lo", len(lk.MAC) != 6, !lk.Up, !lk.OperUp:
		return tx, false
	case lk.Kind == "bridge":
		// Routed packets to a bridge continue into its FDB (router -> bridge), to a port.
		return tx, false
	case lk.MasterKind != "" && lk.MasterKind != "bridge":
		// A bond or VRF member: Linux transmits through the master, never to it directly.
		return tx, false
	}
	// Straight into the peer (bpf_redirect_peer) skips this side's transmit path: only where
	// that path does nothing to the skb (no tc egress, no netfilter egress, a passive qdisc, and
	// checksum and segmentation offloads on: validate_xmit_skb() leaves it as it is).
	if lk.Kind != "veth" || lk.PeerNetnsID < 0 || lk.PeerXDP || lk.PeerMTU <= 0 || lk.TCEgress ||
		len(s.Netfilter.Egress[lk.Name]) > 0 || lk.TxOffload != observe.OffloadOn {
		return tx, true
	}
	for _, q := range lk.Qdiscs {
		if !passiveQdiscs[q] {
			return tx, true
		}
	}
	tx.Peer, tx.PeerMTU = true, lk.PeerMTU
	return tx, true
}

// passiveQdiscs do not shape, delay or reorder: bypassing them (an XDP redirect skips the egress
// qdisc) changes nothing Linux would have done to an uncongested packet.
var passiveQdiscs = map[string]bool{"noqueue": true, "pfifo_fast": true, "fq_codel": true, "mq": true,
	"pfifo": true, "bfifo": true, "fq": true, "sfq": true}

// egressReady: may a frame be redirected out of lk without being lost or skipping something
// Linux would have applied?
func egressReady(s *observe.Snapshot, lk *observe.Link) (bool, string) {
	switch {
	case !lk.Up || !lk.OperUp:
		return false, "no carrier"
	case lk.XDPFeatures&observe.XDPActNdoXmit == 0:
		if lk.Kind == "veth" {
			return false, "veth peer has no XDP program and no GRO: a redirected frame would be dropped"
		}
		return false, "driver cannot transmit XDP frames (no ndo_xdp_xmit)"
	case lk.TCEgress:
		return false, "tc egress filters attached: a redirect would bypass them"
	case len(s.Netfilter.Egress[lk.Name]) > 0:
		return false, "netfilter egress hook on this device: a redirect would bypass it"
	}
	for _, q := range lk.Qdiscs {
		if !passiveQdiscs[q] {
			return false, "qdisc " + q + " configured: a redirect would bypass it"
		}
	}
	return true, ""
}

// vxlanUnderlay names the vxlan device (the first by name) whose packets the fast path
// decapsulates and which has lk as its underlay: its IFLA_VXLAN_LINK, or, without one, the
// device holding its local address. "" for none.
func vxlanUnderlay(s *observe.Snapshot, lk *observe.Link) string {
	var names []string
	for _, vx := range s.Links {
		if vx.VXLAN == nil {
			continue
		}
		if rx, _ := vxlanDecap(s, vx); rx == nil {
			continue
		}
		under := vx.VXLAN.VtepDev == lk.Index
		if vx.VXLAN.VtepDev == 0 {
			for _, a := range s.Addrs {
				under = under || (a.Index == lk.Index && a.Prefix.Addr() == vx.VXLAN.Local)
			}
		}
		if under {
			names = append(names, vx.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return names[0]
}
