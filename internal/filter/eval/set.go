package eval

import (
	"net/netip"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// SetTest tells whether the packet is in set s as `-m set --match-set s dirs` tests it (before
// the rule's `!`), following the kernel (net/netfilter/ipset, xt_set.c). known false: the set
// is missing or not modelled.
//
//   - A set matches only packets of its family, and only if the rule gives at least as many
//     directions as the set has dimensions (ip_set_test returns 0 otherwise).
//   - hash:ip looks up the address masked to the set's netmask; a masked address of zero does
//     not match (hash_ip4_kadt returns -EINVAL).
//   - hash:net and hash:net,port find the most specific entry containing the address (with the
//     same protocol and port); a nomatch entry there means no match.
//   - The port dimension is the packet's source or destination port for TCP, UDP, SCTP and
//     UDPlite, type<<8|code for ICMP and ICMPv6, 0 for any other protocol (ip_set_get_port);
//     IPv4 protocol 0 does not match.
func SetTest(s *model.IPSet, dirs []model.Dir, p Packet) (in, known bool) {
	if s == nil || s.Unsupported != "" {
		return false, false
	}
	dim := model.Dimensions(s.Type)
	if dim == 0 {
		return false, false
	}
	if len(dirs) < dim || s.Family != p.Family {
		return false, true
	}
	addr := p.Src
	if dirs[0] == model.Dst {
		addr = p.Dst
	}
	switch s.Type {
	case "hash:ip":
		if s.Netmask > 0 {
			pf, _ := addr.Prefix(s.Netmask)
			addr = pf.Addr()
		}
		if addr.IsUnspecified() {
			return false, true
		}
		for _, e := range s.Entries {
			if e.Prefix.Addr() == addr {
				return true, true
			}
		}
		return false, true
	case "hash:net":
		return lpm(s.Entries, addr, func(model.SetEntry) bool { return true }), true
	case "hash:ip,port", "hash:net,port":
		proto, port, ok := portKey(p, dirs[1])
		if !ok {
			return false, true
		}
		same := func(e model.SetEntry) bool { return e.Proto == proto && e.Port == port }
		if s.Type == "hash:net,port" {
			return lpm(s.Entries, addr, same), true
		}
		for _, e := range s.Entries {
			if e.Prefix.Addr() == addr && same(e) {
				return true, true
			}
		}
		return false, true
	}
	return false, false
}

// lpm: the most specific entry (among those ok accepts) that contains a decides.
func lpm(entries []model.SetEntry, a netip.Addr, ok func(model.SetEntry) bool) bool {
	best := -1
	match := false
	for _, e := range entries {
		if ok(e) && e.Prefix.Contains(a) && e.Prefix.Bits() > best {
			best, match = e.Prefix.Bits(), !e.NoMatch
		}
	}
	return match
}

// portKey is the (protocol, port) the kernel looks up for the port dimension.
func portKey(p Packet, d model.Dir) (proto uint8, port uint16, ok bool) {
	if p.Family == model.IPv4 && p.Proto == 0 {
		return 0, 0, false
	}
	switch p.Proto {
	case model.ProtoTCP, model.ProtoUDP, model.ProtoSCTP, model.ProtoUDPLite:
		if d == model.Src {
			return p.Proto, p.SrcPort, true
		}
		return p.Proto, p.DstPort, true
	case model.ProtoICMP, model.ProtoICMPv6:
		return p.Proto, uint16(p.ICMPType)<<8 | uint16(p.ICMPCode), true
	}
	return p.Proto, 0, true
}
