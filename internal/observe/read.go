package observe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/mdlayher/genetlink"
	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// retryDump retries a netlink dump the kernel interrupted because the table changed meanwhile
// (the CNI plugins' netlinksafe does the same).
func retryDump[T any](f func() (T, error)) (T, error) {
	var v T
	var err error
	for range 10 {
		v, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}

// readXDPFeatures fills Link.XDPFeatures from the "netdev" generic netlink family. For a veth,
// the kernel sets NDO_XMIT only when the peer can receive redirected frames (it has an XDP program
// or GRO, hence NAPI): exactly the condition under which an XDP redirect into it is not dropped.
func readXDPFeatures(links map[int]*Link) error {
	c, err := genetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("dial generic netlink: %w", err)
	}
	defer c.Close()
	f, err := c.GetFamily("netdev")
	if err != nil {
		return fmt.Errorf("generic netlink family netdev: %w", err)
	}
	msgs, err := c.Execute(genetlink.Message{Header: genetlink.Header{Command: netdevCmdDevGet, Version: f.Version}},
		f.ID, mnl.Request|mnl.Dump)
	if err != nil {
		return fmt.Errorf("netdev dev-get: %w", err)
	}
	for _, m := range msgs {
		ad, err := mnl.NewAttributeDecoder(m.Data)
		if err != nil {
			return err
		}
		var idx int
		var feat uint64
		for ad.Next() {
			switch ad.Type() {
			case netdevADevIfindex:
				idx = int(ad.Uint32())
			case netdevADevXDPFeatures:
				feat = ad.Uint64()
			}
		}
		if lk := links[idx]; lk != nil {
			lk.XDPFeatures = feat
		}
	}
	return nil
}

// include/uapi/linux/netdev.h
const (
	netdevCmdDevGet       = 1
	netdevADevIfindex     = 1
	netdevADevXDPFeatures = 3
	netdevMcgrpMgmt       = "mgmt"
)

// readTC fills the qdisc and tc-filter fields: XDP runs before tc ingress and an XDP redirect
// bypasses the egress qdisc and tc egress, so whatever is configured there matters.
// Only the links need names are read (a link event names one link; the others keep their facts).
func readTC(h *netlink.Handle, links map[int]*Link, need func(*Link) bool) error {
	todo := map[int]*Link{}
	for idx, lk := range links {
		if need(lk) {
			todo[idx] = lk
		}
	}
	if len(todo) == 0 {
		return nil
	}
	qs, err := retryDump(func() ([]netlink.Qdisc, error) { return h.QdiscList(nil) })
	if err != nil {
		return fmt.Errorf("list qdiscs: %w", err)
	}
	for _, lk := range todo {
		lk.Qdiscs, lk.TCIngress, lk.TCEgress = nil, false, false
	}
	for _, q := range qs {
		a := q.Attrs()
		lk := todo[a.LinkIndex]
		if lk == nil {
			continue
		}
		switch {
		case q.Type() != "ingress" && q.Type() != "clsact":
			lk.Qdiscs = append(lk.Qdiscs, q.Type())
		default:
			// FilterList needs only the index.
			l := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: lk.Index}}
			in, _ := retryDump(func() ([]netlink.Filter, error) { return h.FilterList(l, netlink.HANDLE_MIN_INGRESS) })
			lk.TCIngress = lk.TCIngress || len(in) > 0
			if q.Type() == "clsact" {
				eg, _ := retryDump(func() ([]netlink.Filter, error) { return h.FilterList(l, netlink.HANDLE_MIN_EGRESS) })
				lk.TCEgress = lk.TCEgress || len(eg) > 0
			}
		}
	}
	// tcx programs (bpf_link based, no qdisc) are found by querying the attach points. Ingress
	// ones are listed (linuxfp's own are among them); any on egress counts.
	for _, lk := range todo {
		lk.TCXIngress = nil
		if res, err := link.QueryPrograms(link.QueryOptions{Target: lk.Index, Attach: ebpf.AttachTCXIngress}); err == nil {
			for _, p := range res.Programs {
				lk.TCXIngress = append(lk.TCXIngress, uint32(p.ID))
			}
		}
		if res, err := link.QueryPrograms(link.QueryOptions{Target: lk.Index, Attach: ebpf.AttachTCXEgress}); err == nil && len(res.Programs) > 0 {
			lk.TCEgress = true
		}
	}
	return nil
}

func readAddrs(h *netlink.Handle) ([]Addr, error) {
	as, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	out := make([]Addr, 0, len(as))
	for _, a := range as {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, Addr{Index: a.LinkIndex, Prefix: netip.PrefixFrom(ip.Unmap(), ones)})
	}
	return out, nil
}

// alreadyMartian: sources the BPF router rejects by address class anyway, so they need no entry
// in the local-source maps (this keeps 127.0.0.0/8 from forcing an LPM lookup per packet).
func alreadyMartian(p netip.Prefix) bool {
	for _, m := range martianPrefixes {
		if m.Bits() <= p.Bits() && m.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

var martianPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("224.0.0.0/3"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("::/127"),
	netip.MustParsePrefix("::ffff:0:0/96"),
}

func readRoutes(h *netlink.Handle) (Routes, error) {
	var r Routes
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := retryDump(func() ([]netlink.Route, error) {
			return h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		})
		if err != nil {
			return r, fmt.Errorf("list routes: %w", err)
		}
		for _, rt := range rs {
			switch rt.Type {
			case unix.RTN_LOCAL, unix.RTN_BROADCAST, unix.RTN_ANYCAST, unix.RTN_MULTICAST:
				if rt.Dst == nil {
					continue
				}
				ip, _ := netip.AddrFromSlice(rt.Dst.IP)
				ones, _ := rt.Dst.Mask.Size()
				p := netip.PrefixFrom(ip.Unmap(), ones)
				if alreadyMartian(p) {
					continue
				}
				if p.IsSingleIP() {
					r.LocalHosts = append(r.LocalHosts, p.Addr())
				} else {
					r.LocalPrefixes = append(r.LocalPrefixes, p)
				}
			}
			if rt.Dst != nil {
				ones, bits := rt.Dst.Mask.Size()
				if bits == 32 && ones > FibBlock4 {
					ip, _ := netip.AddrFromSlice(rt.Dst.IP)
					r.Long4 = append(r.Long4, netip.PrefixFrom(ip.Unmap(), ones))
				} else if bits == 128 && ones > FibBlock6 {
					ip, _ := netip.AddrFromSlice(rt.Dst.IP)
					r.Long6 = append(r.Long6, netip.PrefixFrom(ip, ones))
				}
			}
			if rt.MTU > 0 {
				m := &r.MinMTU4
				if fam == netlink.FAMILY_V6 {
					m = &r.MinMTU6
				}
				if *m == 0 || rt.MTU < *m {
					*m = rt.MTU
				}
			}
			if fam == netlink.FAMILY_V4 && rt.Hoplimit > 0 {
				r.HopLimit4 = true
			}
			if rt.MTU > 0 && rt.MTULock {
				if fam == netlink.FAMILY_V4 {
					r.MTULocked4 = true
				} else {
					r.MTULocked6 = true
				}
			}
			if len(rt.MultiPath) > 1 {
				if fam == netlink.FAMILY_V4 {
					r.Multipath4 = true
				} else {
					r.Multipath6 = true
				}
			}
		}
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := retryDump(func() ([]netlink.Rule, error) { return h.RuleList(fam) })
		if err != nil {
			return r, fmt.Errorf("list rules: %w", err)
		}
		custom := policyRules(fam, rules)
		if fam == netlink.FAMILY_V4 {
			r.PolicyRules4 = custom
		} else {
			r.PolicyRules6 = custom
		}
	}
	var err error
	if r.SourceRoutes6, r.Expiring6, err = ipv6RouteKinds(); err != nil {
		return r, err
	}
	groups, err := nexthopGroups()
	if err != nil {
		return r, err
	}
	if groups {
		// Routes that use nexthop objects (FRR) may point at a group: ECMP for both families.
		r.Multipath4, r.Multipath6 = true, true
	}
	return r, nil
}

// policyRules tells whether rules holds a rule besides the kernel's own: local (priority 0),
// main (32766) and, for IPv4, default (32767), each matching every packet.
func policyRules(fam int, rules []netlink.Rule) bool {
	defaults := map[[2]int]bool{{0, unix.RT_TABLE_LOCAL}: true, {32766, unix.RT_TABLE_MAIN}: true}
	if fam == netlink.FAMILY_V4 {
		defaults[[2]int{32767, unix.RT_TABLE_DEFAULT}] = true
	}
	for _, ru := range rules {
		plain := ru.Src == nil && ru.Dst == nil && ru.IifName == "" && ru.OifName == "" &&
			ru.Tos == 0 && ru.Mark == 0 && ru.Mask == nil && !ru.Invert && ru.Goto <= 0 &&
			ru.UIDRange == nil && ru.Sport == nil && ru.Dport == nil && ru.IPProto <= 0 &&
			ru.Type <= unix.FR_ACT_TO_TBL
		if !plain || !defaults[[2]int{ru.Priority, ru.Table}] {
			return true
		}
	}
	return false
}

// ipv6RouteKinds tells whether some IPv6 route has a source prefix, and whether some IPv6 route
// expires (struct rta_cacheinfo's rta_expires): the netlink library reads neither.
func ipv6RouteKinds() (source, expiring bool, err error) {
	c, err := mnl.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return false, false, err
	}
	defer c.Close()
	// struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags (u32).
	req := mnl.Message{
		Header: mnl.Header{Type: unix.RTM_GETROUTE, Flags: mnl.Request | mnl.Dump},
		Data:   []byte{unix.AF_INET6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	}
	msgs, err := retryDump(func() ([]mnl.Message, error) { return c.Execute(req) })
	if err != nil {
		return false, false, fmt.Errorf("list routes: %w", err)
	}
	for _, m := range msgs {
		if len(m.Data) < unix.SizeofRtMsg || m.Data[0] != unix.AF_INET6 {
			continue
		}
		if m.Data[2] > 0 {
			source = true
		}
		ad, err := mnl.NewAttributeDecoder(m.Data[unix.SizeofRtMsg:])
		if err != nil {
			continue
		}
		for ad.Next() {
			// struct rta_cacheinfo: clntref, lastuse, expires (s32), ...
			if ad.Type() == unix.RTA_CACHEINFO {
				if b := ad.Bytes(); len(b) >= 12 && binary.NativeEndian.Uint32(b[8:12]) != 0 {
					expiring = true
				}
			}
		}
	}
	return source, expiring, nil
}

// nexthopGroups tells whether any nexthop object is a group (RTM_GETNEXTHOP dump; the
// netlink library does not cover nexthop objects).
func nexthopGroups() (bool, error) {
	c, err := mnl.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return false, err
	}
	defer c.Close()
	// struct nhmsg: family, scope, protocol, resvd, flags(u32)
	req := mnl.Message{
		Header: mnl.Header{Type: unix.RTM_GETNEXTHOP, Flags: mnl.Request | mnl.Dump},
		Data:   make([]byte, 8),
	}
	msgs, err := c.Execute(req)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
			return false, nil
		}
		return false, fmt.Errorf("list nexthops: %w", err)
	}
	for _, m := range msgs {
		if len(m.Data) < 8 {
			continue
		}
		ad, err := mnl.NewAttributeDecoder(m.Data[8:])
		if err != nil {
			continue
		}
		for ad.Next() {
			if ad.Type() == nhaGroup {
				return true, nil
			}
		}
	}
	return false, nil
}

const nhaGroup = 2 // NHA_GROUP

func readNeighbours(h *netlink.Handle) (map[NeighKey]uint16, error) {
	out := map[NeighKey]uint16{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		ns, err := retryDump(func() ([]netlink.Neigh, error) { return h.NeighList(0, fam) })
		if err != nil {
			return nil, fmt.Errorf("list neighbours: %w", err)
		}
		for _, n := range ns {
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok {
				continue
			}
			out[NeighKey{Ifindex: n.LinkIndex, Addr: ip.Unmap()}] = uint16(n.State)
		}
	}
	return out, nil
}

func readSysctl(path string) int { return readSysctlOr(path, 0) }

// sysctlRead, when set (tests), is told every sysctl readSysctls reads.
var sysctlRead func(path string)

// readSysctlOr reads an integer sysctl; def when it cannot be read.
func readSysctlOr(path string, def int) int {
	if sysctlRead != nil {
		sysctlRead(path)
	}
	b, err := os.ReadFile(filepath.Join("/proc/sys", path))
	if err != nil {
		return def
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return def
	}
	return v
}

// forwardingSysctl: a write of the sysctl name (under /proc/sys, as the cgroup/sysctl hook gives
// it) may change what readSysctls reads, and so the fast path. Writes of any other sysctl do not
// keep the fence closed. TestForwardingSysctlsCoverReads keeps it in step with readSysctls.
// With fibCache (the FIB cache may be on), an IPv6 device's forwarding, accept_ra,
// ignore_routes_with_linkdown and mtu matter too: the cache's answers depend on them
// (graph/fibcache.go; an answer lets through the device's mtu where the route has none). Each
// keeps the fence closed until an apply after the value is stored, which moves the cache on.
// (bpf/sysctl_watch.c hands over an accept_ra write only when it is not 0.)
func forwardingSysctl(name string, fibCache bool) bool {
	switch name {
	case "net/ipv4/ip_forward", "net/ipv4/ip_forward_update_priority", "net/ipv4/ip_forward_use_pmtu",
		"net/ipv4/ip_default_ttl", "net/ipv4/ip_local_port_range",
		"net/ipv4/fib_multipath_hash_policy", "net/ipv6/fib_multipath_hash_policy",
		"net/ipv6/conf/all/forwarding", "net/ipv6/conf/all/proxy_ndp",
		"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables":
		return true
	}
	if strings.HasPrefix(name, "net/netfilter/nf_conntrack_") {
		return true
	}
	dev, knob, ok := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(name, "net/ipv4/conf/"), "net/ipv6/conf/"), "/")
	if !ok || dev == "" || strings.Contains(knob, "/") || len(name) >= SysctlNameMax-1 {
		// Not a device's knob; or a name the hook cut: it may be anything.
		return len(name) >= SysctlNameMax-1
	}
	switch {
	case strings.HasPrefix(name, "net/ipv4/conf/"):
		// all/forwarding is ip_forward; all/rp_filter counts with each device's.
		return knob == "forwarding" || knob == "rp_filter" || knob == "ignore_routes_with_linkdown"
	case strings.HasPrefix(name, "net/ipv6/conf/"):
		return knob == "disable_ipv6" ||
			(fibCache && (knob == "forwarding" || knob == "accept_ra" || knob == "ignore_routes_with_linkdown" || knob == "mtu"))
	}
	return false
}

// SysctlNameMax is the longest name the cgroup/sysctl hook hands over, with its NUL
// (LFP_SYSCTL_NAME in bpf/sysctl_watch.c).
const SysctlNameMax = 128

// readSysctls reads the sysctls: the namespace-wide ones when global (a write seen by the cgroup
// hook, a netconf event for "all" or "default") or never read, and the per-device ones of the
// links need names; the rest keep prev's values (a link event changes only its own).
func readSysctls(links map[int]*Link, prev Sysctls, global bool, need func(*Link) bool) Sysctls {
	if !global && prev.IPv4DevFwd != nil {
		s := prev
		s.IPv4DevFwd, s.RPFilter = make(map[string]bool, len(links)), make(map[string]int, len(links))
		s.IPv6Disabled = make(map[string]bool, len(links))
		s.IgnoreLinkdown4, s.IgnoreLinkdown6, s.AcceptRA6 = map[string]bool{}, map[string]bool{}, map[string]bool{}
		s.readDevices(links, prev, need)
		return s
	}
	s := Sysctls{
		IPv4Forward:   readSysctl("net/ipv4/ip_forward") == 1,
		IPv6Forward:   readSysctl("net/ipv6/conf/all/forwarding") == 1,
		IPv6ProxyNDP:  readSysctl("net/ipv6/conf/all/proxy_ndp") != 0,
		MPHashPolicy4: readSysctl("net/ipv4/fib_multipath_hash_policy"),
		MPHashPolicy6: readSysctl("net/ipv6/fib_multipath_hash_policy"),
		// Unreadable: the kernel's default, 1.
		FwdUpdatePriority4: readSysctlOr("net/ipv4/ip_forward_update_priority", 1) != 0,
		FwdUsePMTU4:        readSysctl("net/ipv4/ip_forward_use_pmtu") != 0,
		// Absent when no bridge was ever created in this namespace: then nothing is bridged.
		BrNFCallIPTables:  readSysctl("net/bridge/bridge-nf-call-iptables") != 0,
		BrNFCallIP6Tables: readSysctl("net/bridge/bridge-nf-call-ip6tables") != 0,
		IPv4DevFwd:        map[string]bool{},
		IPv6Disabled:      map[string]bool{},
		RPFilter:          map[string]int{},
		IgnoreLinkdown4:   map[string]bool{},
		IgnoreLinkdown6:   map[string]bool{},
		AcceptRA6:         map[string]bool{},
		Conntrack: ConntrackSysctls{
			TCPBeLiberal:          readSysctl("net/netfilter/nf_conntrack_tcp_be_liberal") != 0,
			Checksum:              readSysctl("net/netfilter/nf_conntrack_checksum") != 0,
			TCPTimeoutEstablished: readSysctl("net/netfilter/nf_conntrack_tcp_timeout_established"),
			TCPTimeoutCloseWait:   readSysctl("net/netfilter/nf_conntrack_tcp_timeout_close_wait"),
			TCPTimeoutUnack:       readSysctl("net/netfilter/nf_conntrack_tcp_timeout_unacknowledged"),
			TCPTimeoutMaxRetrans:  readSysctl("net/netfilter/nf_conntrack_tcp_timeout_max_retrans"),
			TCPMaxRetrans:         readSysctl("net/netfilter/nf_conntrack_tcp_max_retrans"),
			UDPTimeoutStream:      readSysctl("net/netfilter/nf_conntrack_udp_timeout_stream"),
			UDPTimeout:            readSysctl("net/netfilter/nf_conntrack_udp_timeout"),
		},
		IPDefaultTTL: readSysctl("net/ipv4/ip_default_ttl"),
	}
	if sysctlRead != nil {
		sysctlRead("net/ipv4/ip_local_port_range")
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &s.LocalPortLow, &s.LocalPortHigh)
	}
	s.rpFilterAll = readSysctl("net/ipv4/conf/all/rp_filter")
	_, err := os.Stat("/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal")
	s.conntrackRead = err == nil
	s.linkdownAll = readSysctl("net/ipv4/conf/all/ignore_routes_with_linkdown") != 0
	s.linkdownAll6 = readSysctl("net/ipv6/conf/all/ignore_routes_with_linkdown") != 0
	s.readDevices(links, prev, need)
	return s
}

// readDevices reads the per-device sysctls of the links need names, or prev lacks.
func (s *Sysctls) readDevices(links map[int]*Link, prev Sysctls, need func(*Link) bool) {
	all := s.rpFilterAll
	for _, lk := range links {
		fwd, ok1 := prev.IPv4DevFwd[lk.Name]
		rp, ok2 := prev.RPFilter[lk.Name]
		off6, ok3 := prev.IPv6Disabled[lk.Name]
		ld, ok4 := prev.IgnoreLinkdown4[lk.Name]
		ld6, ok5 := prev.IgnoreLinkdown6[lk.Name]
		ra6, ok6 := prev.AcceptRA6[lk.Name]
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || need(lk) || all != prev.rpFilterAll ||
			s.linkdownAll != prev.linkdownAll || s.linkdownAll6 != prev.linkdownAll6 {
			fwd = readSysctl("net/ipv4/conf/"+lk.Name+"/forwarding") == 1
			rp = max(all, readSysctl("net/ipv4/conf/"+lk.Name+"/rp_filter"))
			off6 = readSysctl("net/ipv6/conf/"+lk.Name+"/disable_ipv6") != 0
			ld = s.linkdownAll || readSysctl("net/ipv4/conf/"+lk.Name+"/ignore_routes_with_linkdown") != 0
			ld6 = s.linkdownAll6 || readSysctl("net/ipv6/conf/"+lk.Name+"/ignore_routes_with_linkdown") != 0
			ra := readSysctl("net/ipv6/conf/" + lk.Name + "/accept_ra")
			if readSysctl("net/ipv6/conf/"+lk.Name+"/forwarding") == 1 {
				ra6 = ra == 2
			} else {
				ra6 = ra >= 1
			}
		}
		s.IPv4DevFwd[lk.Name], s.RPFilter[lk.Name], s.IPv6Disabled[lk.Name] = fwd, rp, off6
		s.IgnoreLinkdown4[lk.Name], s.IgnoreLinkdown6[lk.Name], s.AcceptRA6[lk.Name] = ld, ld6, ra6
	}
}

func readXfrm(h *netlink.Handle) (bool, error) {
	ps, err := h.XfrmPolicyList(netlink.FAMILY_ALL)
	if err != nil {
		return false, fmt.Errorf("list xfrm policies: %w", err)
	}
	return len(ps) > 0, nil
}
