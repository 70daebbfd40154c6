package nft

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// Builders of expressions as the kernel dumps them.

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func nested(attrs ...netlink.Attribute) []byte {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		panic(err)
	}
	return b
}

func dataValue(v []byte) []byte {
	return nested(netlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: v})
}

func ex(name string, attrs map[uint16][]byte) rawExpr { return rawExpr{Name: name, Attrs: attrs} }

func payload(base, off, n uint32) rawExpr {
	return ex("payload", map[uint16][]byte{payloadDreg: u32(1), payloadBase: u32(base), payloadOffset: u32(off), payloadLen: u32(n)})
}

func meta(key uint32) rawExpr {
	return ex("meta", map[uint16][]byte{metaDreg: u32(1), metaKey: u32(key)})
}

func cmp(op uint32, data []byte) rawExpr {
	return ex("cmp", map[uint16][]byte{cmpSreg: u32(1), cmpOp: u32(op), cmpData: dataValue(data)})
}

func rng(op uint32, from, to []byte) rawExpr {
	return ex("range", map[uint16][]byte{rangeSreg: u32(1), rangeOp: u32(op), rangeFrom: dataValue(from), rangeTo: dataValue(to)})
}

func bitwise(mask, xor []byte) rawExpr {
	return ex("bitwise", map[uint16][]byte{bitwiseSreg: u32(1), bitwiseDreg: u32(1), bitwiseLen: u32(uint32(len(mask))),
		bitwiseMask: dataValue(mask), bitwiseXor: dataValue(xor)})
}

func verdict(code int32, chain string) rawExpr {
	v := []netlink.Attribute{{Type: unix.NFTA_VERDICT_CODE, Data: u32(uint32(code))}}
	if chain != "" {
		v = append(v, netlink.Attribute{Type: unix.NFTA_VERDICT_CHAIN, Data: append([]byte(chain), 0)})
	}
	data := nested(netlink.Attribute{Type: unix.NLA_F_NESTED | verdictAtt, Data: nested(v...)})
	return ex("immediate", map[uint16][]byte{immDreg: u32(0), immData: data})
}

func l4(p uint8) []rawExpr { return []rawExpr{meta(unix.NFT_META_L4PROTO), cmp(opEq, []byte{p})} }

func cat(parts ...any) []rawExpr {
	var out []rawExpr
	for _, p := range parts {
		switch p := p.(type) {
		case rawExpr:
			out = append(out, p)
		case []rawExpr:
			out = append(out, p...)
		}
	}
	return out
}

func render(r ruleResult) string {
	if r.never {
		return "never"
	}
	return (&model.Rule{Matches: r.matches, Verdict: r.verdict}).String()
}

func TestTranslate(t *testing.T) {
	port := func(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }
	ip := func(a ...byte) []byte { return a }
	cases := []struct {
		name   string
		family model.Family
		exprs  []rawExpr
		want   string
	}{
		{"prefix by length", model.IPv4, cat(payload(baseNetwork, 12, 3), cmp(opEq, ip(198, 18, 0)), verdict(nfAccept, "")),
			"-s 198.18.0.0/24 => accept"},
		{"prefix by mask, inverted", model.IPv4, cat(payload(baseNetwork, 16, 4), bitwise(ip(255, 254, 0, 0), ip(0, 0, 0, 0)), cmp(opNeq, ip(198, 18, 0, 0)), verdict(nfDrop, "")),
			"! -d 198.18.0.0/15 => drop"},
		{"non-prefix mask: unknown", model.IPv4, cat(payload(baseNetwork, 12, 4), bitwise(ip(255, 0, 255, 0), ip(0, 0, 0, 0)), cmp(opEq, ip(198, 0, 1, 0)), verdict(nfDrop, "")),
			"unknown(network header bytes 12-15 & 0xff00ff00 == 0xc6000100) => drop"},
		{"xor: unknown", model.IPv4, cat(payload(baseNetwork, 12, 4), bitwise(ip(255, 255, 255, 255), ip(0, 0, 0, 1)), cmp(opEq, ip(198, 0, 1, 0))),
			"unknown(network header bytes 12-15 (masked) == 0xc6000100) => continue"},
		{"ipv6 source", model.IPv6, cat(payload(baseNetwork, 8, 6), cmp(opEq, []byte{0x20, 0x01, 0, 2, 0, 0}), verdict(nfAccept, "")),
			"-s 2001:2::/48 => accept"},
		{"ipv4 fields in the ipv6 model are other bytes", model.IPv6, cat(payload(baseNetwork, 12, 4), cmp(opEq, ip(198, 18, 0, 1)), verdict(nfAccept, "")),
			"unknown(network header bytes 12-15 == 0xc6120001) => accept"},
		{"ip protocol", model.IPv4, cat(payload(baseNetwork, 9, 1), cmp(opEq, []byte{6}), payload(baseTransport, 2, 2), cmp(opEq, port(80))),
			"-p tcp --dport 80 => continue"},
		{"ports need a protocol", model.IPv4, cat(payload(baseTransport, 2, 2), cmp(opEq, port(22)), verdict(nfAccept, "")),
			"unknown(transport header bytes 2-3 == 0x0016) => accept"},
		{"ports after ! -p: unknown", model.IPv4, cat(meta(unix.NFT_META_L4PROTO), cmp(opNeq, []byte{17}), payload(baseTransport, 2, 2), cmp(opEq, port(22))),
			"! -p udp unknown(transport header bytes 2-3 == 0x0016) => continue"},
		{"port compares", model.IPv4, cat(l4(6), payload(baseTransport, 0, 2), cmp(opLt, port(1024)), payload(baseTransport, 2, 2), cmp(opGte, port(8000))),
			"-p tcp --sport 0:1023 --dport 8000:65535 => continue"},
		{"port < 0 never matches", model.IPv4, cat(l4(17), payload(baseTransport, 0, 2), cmp(opLt, port(0))),
			"-p udp --sport none => continue"},
		{"port range inverted", model.IPv4, cat(l4(132), payload(baseTransport, 2, 2), rng(opNeq, port(10), port(20))),
			"-p sctp ! --dport 10:20 => continue"},
		{"icmp type natively", model.IPv4, cat(l4(1), payload(baseTransport, 0, 1), cmp(opNeq, []byte{8})),
			"-p icmp ! --icmp-type 8 => continue"},
		{"exact interface", model.IPv4, cat(meta(unix.NFT_META_IIFNAME), cmp(opEq, []byte("eth0\x00"))),
			"-i eth0 => continue"},
		{"wildcard interface", model.IPv4, cat(meta(unix.NFT_META_OIFNAME), cmp(opNeq, []byte("br-"))),
			"! -o br-+ => continue"},
		{"interface with bytes after the NUL", model.IPv4, cat(meta(unix.NFT_META_IIFNAME), cmp(opEq, []byte("eth\x00x"))),
			"unknown(meta iifname == 0x6574680078) => continue"},
		{"nfproto of another family: never", model.IPv6, cat(meta(unix.NFT_META_NFPROTO), cmp(opEq, []byte{unix.NFPROTO_IPV4}), verdict(nfDrop, "")),
			"never"},
		{"nfproto of this family: no match needed", model.IPv4, cat(meta(unix.NFT_META_NFPROTO), cmp(opEq, []byte{unix.NFPROTO_IPV4}), verdict(nfDrop, "")),
			"=> drop"},
		{"stateful match then a false condition: kept", model.IPv6, cat(ex("limit", nil), meta(unix.NFT_META_NFPROTO), cmp(opEq, []byte{unix.NFPROTO_IPV4}), verdict(nfDrop, "")),
			"unknown(limit, stateful) => continue"},
		{"break verdict: never", model.IPv4, cat(verdict(nftBreak, "")), "never"},
		{"jump", model.IPv4, cat(ex("counter", nil), verdict(nftJump, "DOCKER")), "=> jump DOCKER"},
		{"goto", model.IPv4, cat(verdict(nftGoto, "X")), "=> goto X"},
		{"queue", model.IPv4, cat(verdict(3|5<<16, "")), "=> linux (verdict 327683 (queue, stolen, ...))"},
		{"expressions after a verdict never run", model.IPv4, cat(verdict(nfAccept, ""), ex("log", nil)), "=> accept"},
		{"unknown expression: Linux", model.IPv4, cat(payload(baseNetwork, 12, 4), cmp(opEq, ip(198, 18, 0, 1)), ex("brandnew", nil), verdict(nfAccept, "")),
			"-s 198.18.0.1/32 => linux (brandnew)"},
		{"ct state established,related", model.IPv4, cat(ctState(), bitwise(ip(6, 0, 0, 0), ip(0, 0, 0, 0)), cmp(opNeq, ip(0, 0, 0, 0)), verdict(nfAccept, "")),
			"-m conntrack --ctstate RELATED,ESTABLISHED => accept"},
		{"ct state ! invalid", model.IPv4, cat(ctState(), bitwise(ip(1, 0, 0, 0), ip(0, 0, 0, 0)), cmp(opEq, ip(0, 0, 0, 0)), verdict(nfAccept, "")),
			"-m conntrack --ctstate NEW,RELATED,ESTABLISHED,UNTRACKED => accept"},
		{"ct state == new", model.IPv4, cat(ctState(), cmp(opEq, ip(8, 0, 0, 0)), verdict(nfDrop, "")),
			"-m conntrack --ctstate NEW => drop"},
		{"ct state == two states: none", model.IPv4, cat(ctState(), cmp(opEq, ip(6, 0, 0, 0)), verdict(nfDrop, "")),
			"-m conntrack --ctstate none => drop"},
		{"ct state > new: unknown", model.IPv4, cat(ctState(), cmp(opGt, ip(8, 0, 0, 0)), verdict(nfDrop, "")),
			"unknown(ct state > 0x08000000) => drop"},
		{"ct state in a set: unknown", model.IPv4, cat(ctState(), ex("lookup", map[uint16][]byte{lookupSreg: u32(1), lookupSet: []byte("__set1\x00")}), verdict(nfAccept, "")),
			"unknown(ct state in set @__set1) => accept"},
		{"ct direction: unknown", model.IPv4, cat(ex("ct", map[uint16][]byte{ctKey: u32(unix.NFT_CT_DIRECTION), ctDreg: u32(1)}), cmp(opEq, []byte{0}), verdict(nfAccept, "")),
			"unknown(ct direction == 0x00) => accept"},
		{"ct status: unknown", model.IPv4, cat(ex("ct", map[uint16][]byte{ctKey: u32(unix.NFT_CT_STATUS), ctDreg: u32(1)}), bitwise(ip(0x20, 0, 0, 0), ip(0, 0, 0, 0)), cmp(opNeq, ip(0, 0, 0, 0)), verdict(nfAccept, "")),
			"unknown(ct status (masked) != 0x00000000) => accept"},
		{"ct set: Linux", model.IPv4, cat(ex("ct", map[uint16][]byte{ctKey: u32(unix.NFT_CT_MARK), ctSreg: u32(1)})), "=> linux (ct set)"},
		{"meta set: Linux", model.IPv4, cat(ex("meta", map[uint16][]byte{metaKey: u32(unix.NFT_META_MARK), metaSreg: u32(1)})),
			"=> linux (meta set (the rule changes packet metadata))"},
		{"nat", model.IPv4, cat(ex("masq", nil)), "=> linux (masq translates the packet)"},
		{"lookup", model.IPv4, cat(l4(6), payload(baseTransport, 2, 2), ex("lookup", map[uint16][]byte{lookupSreg: u32(1), lookupSet: []byte("__set0\x00")}), verdict(nfAccept, "")),
			"-p tcp unknown(transport header bytes 2-3 in set @__set0 (set not read)) => accept"},
		{"mark with mask", model.IPv4, cat(meta(unix.NFT_META_MARK), bitwise(binary.NativeEndian.AppendUint32(nil, 0x4000), make([]byte, 4)), cmp(opEq, binary.NativeEndian.AppendUint32(nil, 0x4000)), verdict(nftReturn, "")),
			"-m mark --mark 0x4000/0x4000 => return"},
		{"mark inverted", model.IPv4, cat(meta(unix.NFT_META_MARK), cmp(opNeq, binary.NativeEndian.AppendUint32(nil, 1))),
			"-m mark ! --mark 0x1 => continue"},
		{"mark value outside the mask", model.IPv4, cat(meta(unix.NFT_META_MARK), bitwise(binary.NativeEndian.AppendUint32(nil, 0xff), make([]byte, 4)), cmp(opEq, binary.NativeEndian.AppendUint32(nil, 0x100))),
			"unknown(meta mark & 0xff000000 == 0x00010000) => continue"},
		{"a later load replaces an earlier one", model.IPv4, cat(payload(baseNetwork, 12, 4), meta(unix.NFT_META_IIFNAME), cmp(opEq, []byte("lo\x00"))),
			"-i lo => continue"},
	}
	for _, c := range cases {
		tr := &translator{family: c.family}
		if got := render(tr.translate(c.exprs)); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestXT(t *testing.T) {
	ne := binary.NativeEndian
	multiport := func(flags byte, ports []uint16, pflags []int, invert byte) []byte {
		b := make([]byte, 48)
		b[0], b[1] = flags, byte(len(ports))
		for i, p := range ports {
			ne.PutUint16(b[2+2*i:], p)
		}
		for _, i := range pflags {
			b[32+i] = 1
		}
		b[47] = invert
		return b
	}
	setV4 := func(index uint16, dim, flags byte, pktOp byte, retFlags uint32) []byte {
		b := make([]byte, 48)
		ne.PutUint16(b, index)
		b[2], b[3] = dim, flags
		b[16] = pktOp
		ne.PutUint32(b[40:], retFlags)
		return b
	}
	sets := map[uint16]*model.IPSet{3: {Name: "blocked", Index: 3}}
	tcp := uint8(model.ProtoTCP)
	cases := []struct {
		name  string
		proto uint8
		xt    string
		rev   uint32
		info  []byte
		want  string
	}{
		{"multiport dports with range", tcp, "multiport", 1, multiport(1, []uint16{80, 443, 8000, 8080}, []int{2}, 0), "-m multiport --dports 80,443,8000:8080"},
		{"multiport ! sports", tcp, "multiport", 1, multiport(0, []uint16{80, 443}, nil, 1), "-m multiport ! --sports 80,443"},
		{"multiport ports", tcp, "multiport", 1, multiport(2, []uint16{22}, nil, 0), "-m multiport --ports 22"},
		{"multiport range without end", tcp, "multiport", 1, multiport(1, []uint16{80}, []int{0}, 0), "unknown(xt match multiport rev 1)"},
		{"multiport without -p", 0, "multiport", 1, multiport(1, []uint16{80}, nil, 0), "unknown(xt match multiport rev 1: without -p tcp/udp/sctp/dccp/udplite in the rule)"},
		{"set src,dst", 0, "set", 4, setV4(3, 2, 0x02, 0, 0), "-m set --match-set blocked src,dst"},
		{"set ! dst", 0, "set", 4, setV4(3, 1, 0x01, 0, 0), "-m set ! --match-set blocked dst"},
		{"set unknown index", 0, "set", 4, setV4(9, 1, 0x02, 0, 0), "unknown(xt match set rev 4: set index 9 not found)"},
		{"set counter match", 0, "set", 4, setV4(3, 1, 0x02, 1, 0), "unknown(xt match set rev 4: --packets-*/--bytes-* counter matches)"},
		{"set return-nomatch", 0, "set", 4, setV4(3, 1, 0x02, 0, 1<<7), "unknown(xt match set rev 4: flags 0x80)"},
		{"set skip counter update", 0, "set", 4, setV4(3, 1, 0x02, 0, 1<<3), "-m set --match-set blocked src"},
		{"icmp", model.ProtoICMP, "icmp", 0, []byte{3, 4, 4, 0, 0, 0, 0, 0}, "--icmp-type 3/4"},
		{"icmp any inverted", model.ProtoICMP, "icmp", 0, []byte{255, 0, 255, 1, 0, 0, 0, 0}, "! --icmp-type any"},
		{"icmp without -p icmp", tcp, "icmp", 0, []byte{8, 0, 255, 0}, "unknown(xt match icmp rev 0)"},
		{"comment", 0, "comment", 0, []byte("hello\x00"), ""},
		{"-m udp without ports", model.ProtoUDP, "udp", 0, []byte{0, 0, 0xff, 0xff, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}, ""},
		{"xt udp ports", model.ProtoUDP, "udp", 0, []byte{53, 0, 53, 0, 0, 0, 0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0}, "! --sport 53"},
		{"xt tcp dport range", tcp, "tcp", 0, []byte{0, 0, 0xff, 0xff, 80, 0, 90, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "--dport 80:90"},
		{"xt tcp option", tcp, "tcp", 0, []byte{0, 0, 0xff, 0xff, 0, 0, 0xff, 0xff, 2, 0, 0, 0, 0, 0, 0, 0}, "unknown(xt match tcp rev 0)"},
		{"xt tcp on udp", model.ProtoUDP, "tcp", 0, []byte{0, 0, 0xff, 0xff, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}, "unknown(xt match tcp rev 0)"},
		{"conntrack: too short", 0, "conntrack", 3, nil, "unknown(xt match conntrack rev 3)"},
		{"conntrack rev 1", 0, "conntrack", 1, ctInfo(1, 1, 0, 0x06), "-m conntrack --ctstate RELATED,ESTABLISHED"},
		{"conntrack rev 2 inverted", 0, "conntrack", 2, ctInfo(2, 1, 1, 0x01), "-m conntrack ! --ctstate INVALID"},
		{"conntrack rev 3 untracked", 0, "conntrack", 3, ctInfo(3, 1, 0, 0x100|0x08), "-m conntrack --ctstate NEW,UNTRACKED"},
		{"conntrack snat", 0, "conntrack", 3, ctInfo(3, 1, 0, 0x40), "unknown(xt match conntrack --ctstate SNAT/DNAT)"},
		{"conntrack state and status", 0, "conntrack", 3, ctInfo(3, 1|1<<6, 0, 0x02), "-m conntrack --ctstate ESTABLISHED unknown(xt match conntrack (flags 0x40 besides --ctstate))"},
		{"conntrack state alias", 0, "conntrack", 3, ctInfo(3, 1|1<<13, 0, 0x08), "-m conntrack --ctstate NEW"},
		{"conntrack no condition", 0, "conntrack", 3, ctInfo(3, 0, 0, 0), "unknown(xt match conntrack without conditions)"},
		{"conntrack rev 4", 0, "conntrack", 4, ctInfo(3, 1, 0, 2), "unknown(xt match conntrack rev 4)"},
		{"state", 0, "state", 0, []byte{0x0a, 0, 0, 0}, "-m conntrack --ctstate NEW,ESTABLISHED"},
		{"limit: stateful", 0, "limit", 0, nil, "unknown(xt match limit rev 0, stateful)"},
		{"never heard of it: stateful", 0, "frobnicate", 0, nil, "unknown(xt match frobnicate rev 0, stateful)"},
		{"statistic random", 0, "statistic", 0, []byte{0, 0, 0, 0}, "unknown(xt match statistic --mode random)"},
		{"statistic nth", 0, "statistic", 0, []byte{1, 0, 0, 0}, "unknown(xt match statistic rev 0, stateful)"},
	}
	for _, c := range cases {
		tr := &translator{family: model.IPv4, setsByIndex: sets, proto: c.proto, hasProto: c.proto != 0}
		var parts []string
		for _, m := range tr.xtMatch(c.xt, c.rev, c.info) {
			parts = append(parts, m.String())
		}
		if got := strings.Join(parts, " "); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func ctState() rawExpr {
	return ex("ct", map[uint16][]byte{ctKey: u32(unix.NFT_CT_STATE), ctDreg: u32(1)})
}

// ctInfo builds struct xt_conntrack_mtinfo1/2/3 with the flags, inversions and state mask given.
func ctInfo(rev int, flags, inv, state uint16) []byte {
	b := make([]byte, map[int]int{1: 152, 2: 156, 3: 164}[rev])
	binary.NativeEndian.PutUint16(b[146:], flags)
	binary.NativeEndian.PutUint16(b[148:], inv)
	if rev == 1 {
		b[150] = uint8(state)
	} else {
		binary.NativeEndian.PutUint16(b[150:], state)
	}
	return b
}

// The addrtype forms iptables cannot write (rev 0, odd inversions, an inet table) and the
// family-dependent ones; live_test.go loads those it can.
func TestXTAddrtype(t *testing.T) {
	v0 := func(src, dst uint16, invSrc, invDst uint32) []byte {
		b := make([]byte, 12)
		binary.NativeEndian.PutUint16(b, src)
		binary.NativeEndian.PutUint16(b[2:], dst)
		binary.NativeEndian.PutUint32(b[4:], invSrc)
		binary.NativeEndian.PutUint32(b[8:], invDst)
		return b
	}
	v1 := func(src, dst uint16, flags uint32) []byte {
		b := make([]byte, 8)
		binary.NativeEndian.PutUint16(b, src)
		binary.NativeEndian.PutUint16(b[2:], dst)
		binary.NativeEndian.PutUint32(b[4:], flags)
		return b
	}
	const local, multicast, unicast = 1 << 2, 1 << 5, 1 << 1
	cases := []struct {
		name   string
		family model.Family
		table  uint8
		rev    uint32
		info   []byte
		want   string
	}{
		{"rev 0 both sides", model.IPv4, unix.NFPROTO_IPV4, 0, v0(local, local, 1, 0), "-m addrtype ! --src-type LOCAL -m addrtype --dst-type LOCAL"},
		{"rev 0 inversion 2: always true", model.IPv4, unix.NFPROTO_IPV4, 0, v0(0, local, 0, 2), "unknown(xt match addrtype rev 0: invert 0/2)"},
		{"rev 0 short", model.IPv4, unix.NFPROTO_IPV4, 0, v0(0, local, 0, 0)[:8], "unknown(xt match addrtype rev 0: layout)"},
		{"rev 0 in ip6", model.IPv6, unix.NFPROTO_IPV6, 0, v0(0, local, 0, 0), "unknown(xt match addrtype rev 0: layout)"},
		{"rev 1 local", model.IPv6, unix.NFPROTO_IPV6, 1, v1(0, local, 0), "-m addrtype --dst-type LOCAL"},
		{"rev 1 ipv4 limit-iface-out", model.IPv4, unix.NFPROTO_IPV4, 1, v1(0, local, 2|8), "-m addrtype ! --dst-type LOCAL --limit-iface"},
		{"rev 1 ipv6 limit-iface-out", model.IPv6, unix.NFPROTO_IPV6, 1, v1(local, 0, 8), "unknown(xt match addrtype rev 1: --src-type mask 0x4 --limit-iface)"},
		{"rev 1 multicast ipv4", model.IPv4, unix.NFPROTO_IPV4, 1, v1(multicast, 0, 1|4), "! -s 224.0.0.0/4"},
		{"rev 1 multicast ipv6", model.IPv6, unix.NFPROTO_IPV6, 1, v1(0, multicast, 0), "-d ff00::/8"},
		{"rev 1 unicast and local", model.IPv4, unix.NFPROTO_IPV4, 1, v1(unicast, local, 0), "unknown(xt match addrtype rev 1: --src-type mask 0x2) -m addrtype --dst-type LOCAL"},
		{"rev 1 unknown flag", model.IPv4, unix.NFPROTO_IPV4, 1, v1(0, local, 0x10), "unknown(xt match addrtype rev 1: flags 0x10)"},
		{"rev 1 in an inet table", model.IPv6, unix.NFPROTO_INET, 1, v1(0, local, 0), "unknown(xt match addrtype rev 1: not in an ip or ip6 table)"},
		{"rev 1 no type", model.IPv4, unix.NFPROTO_IPV4, 1, v1(0, 0, 0), ""},
		{"rev 2", model.IPv4, unix.NFPROTO_IPV4, 2, v1(0, local, 0), "unknown(xt match addrtype rev 2: layout)"},
	}
	for _, c := range cases {
		tr := &translator{family: c.family, tableFamily: c.table}
		var parts []string
		for _, m := range tr.xtMatch("addrtype", c.rev, c.info) {
			if u, ok := m.(model.Unknown); ok && u.SideEffect {
				t.Errorf("%s: %s has side effects", c.name, u)
			}
			parts = append(parts, m.String())
		}
		if got := strings.Join(parts, " "); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// A lookup of a concatenation becomes one rule per element up to maxConcatElems elements; a
// larger set's lookups are Unknown, saying so.
func TestConcatLookupCap(t *testing.T) {
	load := func(base, off, n, dreg uint32) rawExpr {
		return ex("payload", map[uint16][]byte{payloadDreg: u32(dreg), payloadBase: u32(base), payloadOffset: u32(off), payloadLen: u32(n)})
	}
	exprs := cat(l4(6), load(baseNetwork, 16, 4, unix.NFT_REG32_00), load(baseTransport, 2, 2, unix.NFT_REG32_01),
		ex("lookup", map[uint16][]byte{lookupSreg: u32(unix.NFT_REG32_00), lookupSet: []byte("s\x00")}), verdict(nfDrop, ""))
	for _, n := range []int{maxConcatElems, maxConcatElems + 1} {
		s := &nftSet{ref: setRef{unix.NFPROTO_IPV4, "t", "s"}, keyLen: 8}
		for i := range n {
			k := []byte{198, 19, byte(i >> 8), byte(i), 0, 80, 0, 0}
			s.ranges = append(s.ranges, keyRange{k, k})
		}
		tr := &translator{family: model.IPv4, tableFamily: unix.NFPROTO_IPV4, table: "t", nftSets: map[setRef]*nftSet{s.ref: s}}
		r := tr.translate(exprs)
		switch {
		case n <= maxConcatElems && len(r.expand) != n:
			t.Errorf("%d elements: %d rules, want one per element", n, len(r.expand))
		case n <= maxConcatElems && render(r.expand[n-1]) != "-p tcp -d 198.19.63.255/32 --dport 80 => drop":
			t.Errorf("%d elements: last rule %s", n, render(r.expand[n-1]))
		case n > maxConcatElems && (r.expand != nil || !strings.Contains(render(r), "(a concatenation: 16385 elements (more than 16384))")):
			t.Errorf("%d elements: %s (%d rules), want the lookup Unknown", n, render(r), len(r.expand))
		}
	}
}
