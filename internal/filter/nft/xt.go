package nft

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// xtables matches that iptables-nft (1.8.9) cannot express natively reach the kernel as
// nft_compat "match" expressions: the extension's name, revision and its info struct in the
// kernel's layout (host byte order, x86-64 alignment; padded to 8 bytes). The layouts below were
// checked against iptables-restore output on this kernel (see the package tests).

// pureXT are xt matches that only read the packet or state Linux keeps anyway (conntrack): an
// unknown but side-effect-free condition. Any other match not decoded below is treated as having
// side effects (rate limits, `recent` lists, nfacct counters, quota), and so are matches we do
// not know at all.
var pureXT = map[string]bool{
	"conntrack": true, "state": true, "mark": true, "connmark": true, "addrtype": true,
	"physdev": true, "pkttype": true, "length": true, "tos": true, "dscp": true, "ecn": true,
	"ttl": true, "hl": true, "iprange": true, "mac": true, "owner": true, "policy": true,
	"helper": true, "connbytes": true, "devgroup": true, "realm": true, "cgroup": true,
	"socket": true, "rpfilter": true, "ipvs": true, "u32": true, "string": true, "tcpmss": true,
	"esp": true, "ah": true, "frag": true, "ipv6header": true, "rt": true, "hbh": true,
	"dst": true, "mh": true, "sctp": true, "dccp": true, "tcp": true, "udp": true, "icmp": true,
	"icmp6": true, "multiport": true, "set": true, "connlabel": true, "cpu": true, "time": true,
	"osf": true, "cluster": true, "l2tp": true, "ipcomp": true, "rateest": true, "comment": true,
}

// xtMatch translates one xt match. It returns no match at all for comments.
func (t *translator) xtMatch(name string, rev uint32, info []byte) []model.Match {
	unknown := func(why string) []model.Match {
		what := fmt.Sprintf("xt match %s rev %d", name, rev)
		if why != "" {
			what += ": " + why
		}
		return []model.Match{model.Unknown{What: what, SideEffect: !pureXT[name]}}
	}
	switch name {
	case "comment":
		return nil
	case "multiport":
		if !model.HasPorts(t.proto) {
			return unknown("without -p tcp/udp/sctp/dccp/udplite in the rule")
		}
		m, ok := xtMultiport(rev, info)
		if !ok {
			return unknown("")
		}
		return []model.Match{m}
	case "icmp", "icmp6":
		want := uint8(model.ProtoICMP)
		if name == "icmp6" {
			want = model.ProtoICMPv6
		}
		if t.proto != want || len(info) < 4 || rev != 0 {
			return unknown("")
		}
		// struct ipt_icmp / ip6t_icmp { u8 type; u8 code[2]; u8 invflags; }
		m := model.ICMP{Type: info[0], CodeMin: info[1], CodeMax: info[2], Invert: info[3]&0x01 != 0}
		if info[3]&^0x01 != 0 {
			return unknown("invflags")
		}
		// xt_icmp treats type 0xff as "any" (icmp_type_code_match); ip6t_icmp6 does not.
		if name == "icmp" && m.Type == 0xff {
			m.AnyType = true
		}
		return []model.Match{m}
	case "set":
		m, why := t.xtSet(rev, info)
		if why != "" {
			return unknown(why)
		}
		return []model.Match{m}
	case "tcp", "udp":
		want := uint8(model.ProtoTCP)
		if name == "udp" {
			want = model.ProtoUDP
		}
		if t.proto != want || rev != 0 {
			return unknown("")
		}
		ms, ok := xtTCPUDP(name, info)
		if !ok {
			return unknown("")
		}
		return ms
	case "conntrack":
		return xtConntrack(rev, info)
	case "state":
		// struct xt_state_info { unsigned int statemask; }: nftables' state bits.
		if rev != 0 || len(info) < 4 {
			return unknown("")
		}
		mask := binary.NativeEndian.Uint32(info)
		return []model.Match{model.CtState{States: uint8(mask) & model.CtStates}}
	case "addrtype":
		return t.xtAddrtype(rev, info)
	case "statistic":
		// struct xt_statistic { u16 mode; ... }: mode 0 (random) draws a number per packet and
		// keeps no state; nth counts packets.
		if len(info) >= 2 && binary.NativeEndian.Uint16(info) == 0 {
			return []model.Match{model.Unknown{What: "xt match statistic --mode random"}}
		}
		return unknown("")
	}
	return unknown("")
}

// xtMultiport decodes struct xt_multiport (rev 0) and xt_multiport_v1 (rev 1):
//
//	u8 flags; u8 count; u16 ports[15]; (v1:) u8 pflags[15]; u8 invert;
//
// Ports are in host byte order. flags: 0 source, 1 destination, 2 either. In v1, pflags[i] makes
// ports[i]..ports[i+1] a range.
func xtMultiport(rev uint32, info []byte) (model.Ports, bool) {
	const n = 15
	var m model.Ports
	if len(info) < 2+2*n || (rev == 1 && len(info) < 2+2*n+n+1) || rev > 1 {
		return m, false
	}
	switch info[0] {
	case 0:
		m.Dir = model.Src
	case 1:
		m.Dir = model.Dst
	case 2:
		m.Dir = model.Either
	default:
		return m, false
	}
	count := int(info[1])
	if count > n {
		return m, false
	}
	port := func(i int) uint16 { return binary.NativeEndian.Uint16(info[2+2*i:]) }
	for i := 0; i < count; i++ {
		if rev == 1 && info[2+2*n+i] != 0 {
			if i+1 >= count {
				return m, false // a range without its end: the kernel would read past count
			}
			m.Ranges = append(m.Ranges, model.PortRange{From: port(i), To: port(i + 1)})
			i++
			continue
		}
		m.Ranges = append(m.Ranges, model.PortRange{From: port(i), To: port(i)})
	}
	if rev == 1 {
		switch info[2+2*n+n] {
		case 0:
		case 1:
			m.Invert = true
		default:
			return m, false
		}
	}
	return m, true
}

// xtTCPUDP decodes struct xt_tcp and xt_udp (iptables-nft emits them for `-m tcp` / `-m udp`
// without port options; ports it encodes natively):
//
//	u16 spts[2]; u16 dpts[2]; (tcp:) u8 option; u8 flg_mask; u8 flg_cmp; u8 invflags  (udp:) u8 invflags
//
// Each port range matches (port in [min,max]) ^ inverted (port_match() in xt_tcpudp.c). TCP options
// and flags are not modelled.
func xtTCPUDP(name string, info []byte) ([]model.Match, bool) {
	const invSrc, invDst = 0x01, 0x02
	var inv byte
	switch name {
	case "tcp":
		if len(info) < 12 || info[8] != 0 || info[9] != 0 || info[10] != 0 {
			return nil, false
		}
		inv = info[11]
	case "udp":
		if len(info) < 9 {
			return nil, false
		}
		inv = info[8]
	}
	if inv&^(invSrc|invDst) != 0 {
		return nil, false
	}
	var ms []model.Match
	for i, d := range []model.Dir{model.Src, model.Dst} {
		r := model.PortRange{From: binary.NativeEndian.Uint16(info[4*i:]), To: binary.NativeEndian.Uint16(info[4*i+2:])}
		invert := inv&(1<<i) != 0
		if r.From == 0 && r.To == 0xffff && !invert {
			continue // every port
		}
		ms = append(ms, model.Ports{Dir: d, Ranges: []model.PortRange{r}, Invert: invert})
	}
	return ms, true
}

// Constants of include/uapi/linux/netfilter/ipset/ip_set.h.
const (
	ipsetInvMatch          = 1 << 0 // in xt_set_info.flags; bit N (1..6) = dimension N is src
	ipsetDimMax            = 6
	ipsetSkipCounterUpdate = 1 << 3 // in xt_set_info_match_v3/v4.flags
	ipsetSkipSubCounter    = 1 << 4
)

// xtSet decodes xt_set_info_match_v1 (rev 1, 2), _v3 (rev 3) and _v4 (rev 4):
//
//	struct xt_set_info { u16 index; u8 dim; u8 flags; };               // 4 bytes, then padding to 8
//	v3: struct ip_set_counter_match0 { u8 op; u64 value; } packets, bytes; u32 flags;
//	v4: struct ip_set_counter_match  { u64 value; u8 op; } packets, bytes; u32 flags;
//
// The set is named by its kernel index; sets are looked up by it.
func (t *translator) xtSet(rev uint32, info []byte) (model.Set, string) {
	var m model.Set
	if len(info) < 4 {
		return m, "short info"
	}
	index := binary.NativeEndian.Uint16(info)
	dim, flags := int(info[2]), info[3]
	switch rev {
	case 1, 2:
	case 3, 4:
		if len(info) < 44 {
			return m, "short info"
		}
		pktOp, byteOp := info[8], info[24]
		if rev == 4 {
			pktOp, byteOp = info[16], info[32]
		}
		if pktOp != 0 || byteOp != 0 {
			return m, "--packets-*/--bytes-* counter matches"
		}
		if f := binary.NativeEndian.Uint32(info[40:]); f&^(ipsetSkipCounterUpdate|ipsetSkipSubCounter) != 0 {
			// --return-nomatch, counter matching, ...
			return m, fmt.Sprintf("flags %#x", f)
		}
	default:
		return m, "revision"
	}
	if dim < 1 || dim > ipsetDimMax {
		return m, fmt.Sprintf("dimension %d", dim)
	}
	if extra := flags &^ byte(ipsetInvMatch|(1<<(dim+1)-2)); extra != 0 {
		// Bits past the dimensions given: IPSET_RETURN_NOMATCH (1<<7) in rev 1 and 2.
		return m, fmt.Sprintf("set flags %#x", extra)
	}
	s := t.setsByIndex[index]
	if s == nil {
		if t.missingSet != nil {
			*t.missingSet = true
		}
		return m, fmt.Sprintf("set index %d not found", index)
	}
	m.Name = s.Name
	m.Invert = flags&ipsetInvMatch != 0
	for d := 1; d <= dim; d++ {
		if flags&(1<<d) != 0 {
			m.Dirs = append(m.Dirs, model.Src)
		} else {
			m.Dirs = append(m.Dirs, model.Dst)
		}
	}
	return m, ""
}

// xt_addrtype's type bits (1 << RTN_*) and rev 1 flags.
const (
	xtAddrtypeLocal     = 1 << 2
	xtAddrtypeMulticast = 1 << 5

	xtAddrtypeInvSrc   = 1 << 0
	xtAddrtypeInvDst   = 1 << 1
	xtAddrtypeIfaceIn  = 1 << 2
	xtAddrtypeIfaceOut = 1 << 3
)

// xtAddrtype decodes struct xt_addrtype_info (rev 0, IPv4 only) and xt_addrtype_info_v1 (rev 1):
//
//	u16 source; u16 dest;  (rev 0:) u32 invert_source; u32 invert_dest;  (rev 1:) u32 flags;
//
// source and dest are masks of route types (1 << RTN_*), 0 for no test; the address matches
// when its type is in the mask (xt_addrtype.c). Each side becomes a match of its own, source
// first, as the kernel tests them (a conjunction without side effects). Two masks are modelled:
//
//   - LOCAL alone is model.FibLocal. IPv4 asks inet_dev_addr_type(), which is what nft's `fib
//     daddr type` asks; with --limit-iface-in/out the answer is local only when the local route's
//     device is that interface, which is still false wherever no local route covers the address,
//     and FibLocal decides nothing else. IPv6 without an interface asks a route lookup of the
//     address alone and finds it local when the route is RTF_LOCAL, a local route the router's
//     maps hold (nft's lookup also carries the source; that changes which route is found, never
//     that an uncovered address is not local). IPv6 with --limit-iface-in/out is not a route
//     question: it asks whether the address is configured on the interface (ipv6_chk_addr), which
//     holds for a nodad address before addrconf has installed its local route: Unknown.
//   - MULTICAST alone is the multicast prefix: inet_dev_addr_type() answers RTN_MULTICAST for
//     224.0.0.0/4 before any lookup and never otherwise; IPv6 tests ipv6_addr_type() and skips
//     the lookup when the mask holds no LOCAL, ANYCAST or UNREACHABLE bit. The interface does not
//     enter either.
//
// Other types are Unknown: IPv4 UNICAST, BROADCAST, BLACKHOLE ... are the route type the lookup
// finds in the local table (which shares its trie with main until a policy rule is added),
// which the maps do not hold; IPv6 UNICAST is three excluded prefixes, a disjunction when
// inverted; and a mask of several types is a disjunction in IPv4 and a conjunction of the
// class and the lookup in IPv6.
func (t *translator) xtAddrtype(rev uint32, info []byte) []model.Match {
	unknown := func(why string) []model.Match {
		return []model.Match{model.Unknown{What: fmt.Sprintf("xt match addrtype rev %d: %s", rev, why)}}
	}
	var src, dst uint16
	var invSrc, invDst, iface bool
	switch {
	case rev == 0 && len(info) >= 12 && t.family == model.IPv4:
		is, id := binary.NativeEndian.Uint32(info[4:]), binary.NativeEndian.Uint32(info[8:])
		if is > 1 || id > 1 {
			// The kernel XORs the u32 into a bool: 2 and above make the side always true.
			return unknown(fmt.Sprintf("invert %d/%d", is, id))
		}
		invSrc, invDst = is == 1, id == 1
	case rev == 1 && len(info) >= 8:
		flags := binary.NativeEndian.Uint32(info[4:])
		if flags&^(xtAddrtypeInvSrc|xtAddrtypeInvDst|xtAddrtypeIfaceIn|xtAddrtypeIfaceOut) != 0 {
			return unknown(fmt.Sprintf("flags %#x", flags))
		}
		invSrc, invDst = flags&xtAddrtypeInvSrc != 0, flags&xtAddrtypeInvDst != 0
		iface = flags&(xtAddrtypeIfaceIn|xtAddrtypeIfaceOut) != 0
	default:
		return unknown("layout")
	}
	// Only ip and ip6 tables: in an inet table the kernel takes every packet's header as IPv4.
	if t.tableFamily != unix.NFPROTO_IPV4 && t.tableFamily != unix.NFPROTO_IPV6 {
		return unknown("not in an ip or ip6 table")
	}
	src, dst = binary.NativeEndian.Uint16(info), binary.NativeEndian.Uint16(info[2:])
	var ms []model.Match
	for _, side := range []struct {
		dir  model.Dir
		mask uint16
		inv  bool
		flag string
	}{{model.Src, src, invSrc, "--src-type"}, {model.Dst, dst, invDst, "--dst-type"}} {
		if side.mask == 0 {
			continue
		}
		switch {
		case side.mask == xtAddrtypeLocal && (!iface || t.family == model.IPv4):
			xt := "-m addrtype " + map[bool]string{true: "! ", false: ""}[side.inv] + side.flag + " LOCAL"
			if iface {
				xt += " --limit-iface"
			}
			ms = append(ms, model.FibLocal{Dir: side.dir, Invert: side.inv, XT: xt})
		case side.mask == xtAddrtypeMulticast:
			p := netip.MustParsePrefix("224.0.0.0/4")
			if t.family == model.IPv6 {
				p = netip.MustParsePrefix("ff00::/8")
			}
			ms = append(ms, model.Addr{Dir: side.dir, Prefix: p, Invert: side.inv})
		default:
			what := fmt.Sprintf("xt match addrtype rev %d: %s mask %#x", rev, side.flag, side.mask)
			if iface {
				what += " --limit-iface"
			}
			ms = append(ms, model.Unknown{What: what})
		}
	}
	return ms // none: no type given, true for every packet (iptables refuses it)
}

// natTargets translate addresses or ports.
var natTargets = map[string]bool{
	"DNAT": true, "SNAT": true, "MASQUERADE": true, "REDIRECT": true, "NETMAP": true,
}

// xt_conntrack's match_flags (and invert_flags).
const (
	xtCtState      = 1 << 0
	xtCtStateAlias = 1 << 13 // -m state written as conntrack: only how iptables prints it
	// State bits beyond nftables': the connection is source or destination translated, and
	// UNTRACKED (xt_state and nftables have it at 1 << 6, where conntrack has SNAT).
	xtCtSNAT      = 1 << 6
	xtCtDNAT      = 1 << 7
	xtCtUntracked = 1 << 8
)

// xtConntrack decodes struct xt_conntrack_mtinfo1 (rev 1), 2 and 3:
//
//	union nf_inet_addr origsrc_addr, origsrc_mask, origdst_addr, origdst_mask,
//	                   replsrc_addr, replsrc_mask, repldst_addr, repldst_mask; // 128 bytes
//	u32 expires_min, expires_max; u16 l4proto; be16 origsrc_port, origdst_port,
//	replsrc_port, repldst_port; u16 match_flags, invert_flags;
//	rev 1: u8 state_mask, status_mask; rev 2, 3: u16 state_mask, status_mask; (rev 3: port ranges)
//
// conntrack_mt(): every flagged condition must hold. --ctstate becomes a CtState match (unless it
// asks for the SNAT or DNAT pseudo-states, which read the entry's status); every other condition
// (--ctstatus, --ctorigdst, --ctdir, --ctexpire ...) is an Unknown match, without side effects.
func xtConntrack(rev uint32, info []byte) []model.Match {
	const off = 146
	need := off + 6
	if rev >= 2 {
		need = off + 8
	}
	if rev < 1 || rev > 3 || len(info) < need {
		return []model.Match{model.Unknown{What: fmt.Sprintf("xt match conntrack rev %d", rev)}}
	}
	flags := binary.NativeEndian.Uint16(info[off:])
	inv := binary.NativeEndian.Uint16(info[off+2:])
	var state uint16
	if rev == 1 {
		state = uint16(info[off+4])
	} else {
		state = binary.NativeEndian.Uint16(info[off+4:])
	}
	var ms []model.Match
	if flags&xtCtState != 0 {
		if state&(xtCtSNAT|xtCtDNAT) != 0 {
			ms = append(ms, model.Unknown{What: "xt match conntrack --ctstate SNAT/DNAT"})
		} else {
			m := model.CtState{States: uint8(state) & (model.CtStates &^ model.CtUntracked), Invert: inv&xtCtState != 0}
			if state&xtCtUntracked != 0 {
				m.States |= model.CtUntracked
			}
			ms = append(ms, m)
		}
	}
	if rest := flags &^ (xtCtState | xtCtStateAlias); rest != 0 {
		ms = append(ms, model.Unknown{What: fmt.Sprintf("xt match conntrack (flags %#x besides --ctstate)", rest)})
	}
	if len(ms) == 0 {
		// No condition: conntrack_mt() is then true for a tracked packet only.
		ms = append(ms, model.Unknown{What: "xt match conntrack without conditions"})
	}
	return ms
}
