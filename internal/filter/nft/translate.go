package nft

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// How iptables-nft 1.8.9 encodes what the model supports (from `nft --debug=netlink` on this
// machine; the package tests load each form and check the translation):
//
//	-s 198.18.0.0/24         payload load 3b @ network header + 12 => reg 1; cmp eq reg 1 0x000012c6
//	-d 198.18.0.0/23         payload load 4b @ network header + 16; bitwise & 0x00feffff ^ 0; cmp eq
//	! -s X                   the same with cmp neq
//	-s 2001:2::/48           payload load 6b @ network header + 8; cmp eq (ip6: saddr at 8, daddr at 24)
//	-p tcp, ! -p udp, -p 47  meta load l4proto => reg 1; cmp eq|neq reg 1 0x06
//	--dport 80, ! --dport 53 (after -p) payload load 2b @ transport header + 2; cmp eq|neq
//	--sport 1000:2000        payload load 2b @ transport header + 0; range eq|neq 1000 2000
//	--dport 1024:, :1024     range eq 1024 65535; cmp lte 1024
//	-i eth0, ! -o eth1       meta load iifname|oifname; cmp eq|neq "eth0\x00" (the name and its NUL)
//	-i veth+                 cmp eq "veth" (no NUL: a prefix compare); `-i +` is a load with no compare
//	-j ACCEPT|DROP|RETURN    immediate reg 0 accept|drop|return; -j X / -g X: jump|goto X
//	rule counters            counter (always present)
//	-m multiport, -m set, --icmp-type, --icmpv6-type, -m comment, -m conntrack, -m state,
//	-m statistic, -m addrtype ...      match name NAME rev N (xt info blob, see xt.go)
//	-j REJECT, LOG, DNAT, SNAT, MASQUERADE, MARK, CONNMARK, TCPMSS, CT ...  target name NAME
//	-j NFLOG                 log group N (native)
//	-m mark --mark V/M       meta load mark; bitwise & M (absent for M = 0xffffffff); cmp eq|neq V
//	--tcp-flags              payload @ transport header + 13, bitwise, cmp (Unknown)
//
// Native nft rules use the same expressions (plus lookups, ct, fib, ...). Expressions are
// interpreted with the packet's family known: a model is per family, so an inet rule's
// `ip saddr` loads are read as IPv4 fields in the IPv4 model and as whatever those bytes are in
// the IPv6 model, as the kernel would.

// translator translates rules of one family.
type translator struct {
	family      model.Family
	setsByIndex map[uint16]*model.IPSet
	// missingSet: a rule named a set index setsByIndex does not hold.
	missingSet *bool
	// The table of the rules translated (lookups name sets of their table), the nf_tables sets
	// the rules look up (readSets), and the sets: an address set looked up is added to them
	// (under SetName), an ipset of that name makes it Unknown.
	tableFamily uint8
	table       string
	nftSets     map[setRef]*nftSet
	sets        map[string]*model.IPSet

	// Per rule.
	regs     map[uint32]*regVal // by first 32-bit register
	proto    uint8              // transport protocol the rule requires so far (valid if hasProto)
	hasProto bool
	// setPorts: a protocol set the rule requires holds only protocols with ports (protoSet).
	setPorts   bool
	sideEffect bool // a stateful Unknown match came before
	matches    []model.Match
	// concat: a lookup of a concatenated key in the rule, expanded when the rule is done.
	concat *concatLookup
}

type valKind uint8

const (
	valPayload valKind = iota
	valMeta
	valStatic  // known for every packet of the family (meta nfproto, meta protocol)
	valUnknown // something the model does not read (ct status, fib, ...)
	valCtState // ct state: one of the model.Ct* bits, a host-order u32
	valFibType // fib saddr|daddr type (no other flag): a route type, a host-order u32 (dir)
)

// regVal is what a register holds.
type regVal struct {
	kind   valKind
	base   uint32 // payload base
	offset uint32 // payload offset
	key    uint32 // meta key
	n      int    // length in bytes
	mask   []byte // bitwise AND applied (nil: none)
	static []byte
	what   string
	dir    model.Dir // valFibType: the address looked up
}

// Expression attributes (include/uapi/linux/netfilter/nf_tables.h).
const (
	payloadDreg, payloadBase, payloadOffset, payloadLen, payloadSreg = 1, 2, 3, 4, 5
	metaDreg, metaKey, metaSreg                                      = 1, 2, 3
	cmpSreg, cmpOp, cmpData                                          = 1, 2, 3
	rangeSreg, rangeOp, rangeFrom, rangeTo                           = 1, 2, 3, 4
	bitwiseSreg, bitwiseDreg, bitwiseLen, bitwiseMask, bitwiseXor    = 1, 2, 3, 4, 5
	bitwiseOp, bitwiseData                                           = 6, 7
	immDreg, immData                                                 = 1, 2
	lookupSet, lookupSreg, lookupDreg                                = 1, 2, 3
	xtName, xtRev, xtInfo                                            = 1, 2, 3
	ctDreg, ctKey, ctDir, ctSreg                                     = 1, 2, 3, 4
	exthdrSreg                                                       = 7
	fibDreg, fibResult, fibFlags                                     = 1, 2, 3

	// nft_fib's flags and result (NFTA_FIB_F_*, NFT_FIB_RESULT_*), and the route type RTN_LOCAL.
	fibFSaddr, fibFDaddr = 1 << 0, 1 << 1
	fibResultAddrType    = 3
	rtnLocal             = 2

	opEq, opNeq, opLt, opLte, opGt, opGte = 0, 1, 2, 3, 4, 5

	baseLL, baseNetwork, baseTransport = 0, 1, 2
)

var opNames = []string{"==", "!=", "<", "<=", ">", ">="}

func opName(op uint32) string {
	if int(op) < len(opNames) {
		return opNames[op]
	}
	return fmt.Sprintf("op%d", op)
}

// metaNames names the meta keys a reader of an Unknown needs most.
var metaNames = map[uint32]string{
	unix.NFT_META_LEN: "length", unix.NFT_META_PROTOCOL: "protocol", unix.NFT_META_PRIORITY: "priority",
	unix.NFT_META_MARK: "mark", unix.NFT_META_IIF: "iif", unix.NFT_META_OIF: "oif",
	unix.NFT_META_IIFNAME: "iifname", unix.NFT_META_OIFNAME: "oifname", unix.NFT_META_IIFTYPE: "iiftype",
	unix.NFT_META_OIFTYPE: "oiftype", unix.NFT_META_SKUID: "skuid", unix.NFT_META_SKGID: "skgid",
	unix.NFT_META_NFTRACE: "nftrace", unix.NFT_META_RTCLASSID: "rtclassid", unix.NFT_META_SECMARK: "secmark",
	unix.NFT_META_NFPROTO: "nfproto", unix.NFT_META_L4PROTO: "l4proto", unix.NFT_META_PKTTYPE: "pkttype",
	unix.NFT_META_CPU: "cpu", unix.NFT_META_IIFGROUP: "iifgroup", unix.NFT_META_OIFGROUP: "oifgroup",
	unix.NFT_META_CGROUP: "cgroup", unix.NFT_META_PRANDOM: "random",
}

var ctNames = map[uint32]string{
	unix.NFT_CT_STATE: "state", unix.NFT_CT_DIRECTION: "direction", unix.NFT_CT_STATUS: "status",
	unix.NFT_CT_MARK: "mark", unix.NFT_CT_SECMARK: "secmark", unix.NFT_CT_EXPIRATION: "expiration",
	unix.NFT_CT_HELPER: "helper", unix.NFT_CT_L3PROTOCOL: "l3proto", unix.NFT_CT_SRC: "original saddr",
	unix.NFT_CT_DST: "original daddr", unix.NFT_CT_PROTOCOL: "protocol", unix.NFT_CT_PROTO_SRC: "proto-src",
	unix.NFT_CT_PROTO_DST: "proto-dst", unix.NFT_CT_LABELS: "label", unix.NFT_CT_PKTS: "packets",
	unix.NFT_CT_BYTES: "bytes", unix.NFT_CT_ZONE: "zone",
}

// pureLoads load something into a register without side effects; comparing it is an Unknown match.
var pureLoads = map[string]bool{
	"ct": true, "exthdr": true, "fib": true, "rt": true, "socket": true, "osf": true,
	"hash": true, "xfrm": true, "tunnel": true, "byteorder": true,
}

// statefulMatches decide and keep state (tokens, quotas, counts): Unknown and stateful.
var statefulMatches = map[string]bool{
	"limit": true, "quota": true, "connlimit": true, "last": true, "numgen": true,
	"objref": true, "dynset": true,
}

// describe says what a register holds, for Unknown matches.
func (v *regVal) describe() string {
	if v == nil {
		return "a register nothing loaded"
	}
	var s string
	switch v.kind {
	case valPayload:
		base := map[uint32]string{baseLL: "link layer", baseNetwork: "network header", baseTransport: "transport header"}[v.base]
		if base == "" {
			base = fmt.Sprintf("payload base %d", v.base)
		}
		s = fmt.Sprintf("%s bytes %d-%d", base, v.offset, int(v.offset)+v.n-1)
	case valCtState:
		s = "ct state"
	case valMeta:
		name := metaNames[v.key]
		if name == "" {
			name = fmt.Sprintf("key %d", v.key)
		}
		s = "meta " + name
	default:
		s = v.what
	}
	if v.mask != nil {
		s += " & 0x" + hex.EncodeToString(v.mask)
	}
	return s
}

// ruleResult is one rule translated for one family.
type ruleResult struct {
	matches []model.Match
	verdict model.Verdict
	// never: no packet of the family ever gets past the rule's matches, and nothing before the
	// failing match has side effects: the rule can be left out.
	never bool
	// expand: the rule is these rules, in order (a verdict map lookup, one rule per element).
	expand []ruleResult
	// sub: the rule jumps (verdict.Chain is left for the caller to fill in) to a chain of these
	// rules, made for the rule alone (a negated lookup of a concatenated key: expandConcat);
	// subName says what it is.
	sub     []ruleResult
	subName string
}

// translate translates a rule's expressions for t.family.
func (t *translator) translate(exprs []rawExpr) ruleResult {
	t.regs = map[uint32]*regVal{}
	t.proto, t.hasProto, t.setPorts, t.sideEffect, t.matches, t.concat = 0, false, false, false, nil, nil
	r := t.exprs(exprs)
	if t.concat == nil || r.never {
		return r
	}
	return t.expandConcat(r)
}

// exprs translates the expressions of a rule.
func (t *translator) exprs(exprs []rawExpr) ruleResult {
	linux := func(reason string, nat bool) ruleResult {
		return ruleResult{matches: t.matches, verdict: model.Verdict{Kind: model.Linux, Reason: reason, NAT: nat}}
	}
	for _, e := range exprs {
		switch e.Name {
		case "counter":
			// Rule counters: kept per rule by whoever evaluates the model.
		case "payload":
			if e.has(payloadSreg) {
				return linux("payload write (the rule rewrites the packet)", false)
			}
			dreg, ok1 := e.u32(payloadDreg)
			base, ok2 := e.u32(payloadBase)
			off, ok3 := e.u32(payloadOffset)
			n, ok4 := e.u32(payloadLen)
			if !ok1 || !ok2 || !ok3 || !ok4 || n == 0 || n > 64 {
				return linux("malformed payload expression", false)
			}
			t.set(dreg, &regVal{kind: valPayload, base: base, offset: off, n: int(n)})
		case "meta":
			if e.has(metaSreg) {
				return linux("meta set (the rule changes packet metadata)", false)
			}
			dreg, ok1 := e.u32(metaDreg)
			key, ok2 := e.u32(metaKey)
			if !ok1 || !ok2 {
				return linux("malformed meta expression", false)
			}
			t.set(dreg, t.metaVal(key))
		case "bitwise":
			if !t.bitwise(e) {
				return linux("malformed bitwise expression", false)
			}
		case "cmp":
			if r, stop := t.cmp(e); stop {
				return r
			}
		case "range":
			if r, stop := t.rangeExpr(e); stop {
				return r
			}
		case "lookup":
			dreg, isMap := e.u32(lookupDreg)
			if isMap && dreg == unix.NFT_REG_VERDICT {
				if r, ok := t.vmap(e); ok {
					return r
				}
			}
			if m := t.lookup(e, isMap); m != nil {
				t.matches = append(t.matches, m)
			}
			if isMap {
				if dreg == unix.NFT_REG_VERDICT {
					return linux("verdict map", false)
				}
				t.set(dreg, &regVal{kind: valUnknown, n: 16, what: "map value of @" + e.str(lookupSet)})
			}
		case "immediate":
			if r, stop := t.immediate(e); stop {
				return r
			}
		case "match":
			name := e.str(xtName)
			rev, _ := e.u32(xtRev)
			for _, m := range t.xtMatch(name, rev, e.Attrs[xtInfo]) {
				if u, ok := m.(model.Unknown); ok && u.SideEffect {
					t.sideEffect = true
				}
				t.matches = append(t.matches, m)
			}
		case "target":
			name := e.str(xtName)
			if natTargets[name] {
				return linux(name+" translates the packet", true)
			}
			return linux("target "+name, false)
		case "nat", "masq", "redir":
			return linux(e.Name+" translates the packet", true)
		default:
			switch {
			case e.Name == "ct" && !e.has(ctSreg) && !e.has(ctDir) && e.has(ctDreg) && ctKeyIs(e, unix.NFT_CT_STATE):
				dreg, _ := e.u32(ctDreg)
				t.set(dreg, &regVal{kind: valCtState, n: 4})
			case e.Name == "fib":
				t.fib(e)
			case pureLoads[e.Name]:
				if (e.Name == "ct" && e.has(ctSreg)) || (e.Name == "exthdr" && e.has(exthdrSreg)) {
					return linux(e.Name+" set", false)
				}
				what := e.Name
				if e.Name == "ct" {
					k, _ := e.u32(ctKey)
					what = "ct " + ctNames[k]
				}
				// Which attribute names the destination register differs between these
				// expressions; every register is taken as overwritten.
				t.clobber(what)
			case statefulMatches[e.Name]:
				t.matches = append(t.matches, model.Unknown{What: e.Name, SideEffect: true})
				t.sideEffect = true
				t.clobber(e.Name)
			default:
				// log, reject, queue, dup, fwd, notrack, tproxy, synproxy, flow_offload, ...
				return linux(e.Name, false)
			}
		}
	}
	return ruleResult{matches: t.matches, verdict: model.Verdict{Kind: model.Continue}}
}

// fib loads a route lookup's answer. Only the address type of the source or destination with no
// other flag (`fib daddr type`) is read (model.FibLocal says how); with iif, oif or mark, or the
// oif/oifname results, the answer depends on devices and marks: an unknown value saying which.
func (t *translator) fib(e rawExpr) {
	dreg, ok1 := e.u32(fibDreg)
	result, ok2 := e.u32(fibResult)
	flags, ok3 := e.u32(fibFlags)
	if !ok1 || !ok2 || !ok3 {
		t.clobber("fib")
		return
	}
	what := "fib"
	for _, f := range []struct {
		bit  uint32
		name string
	}{{fibFSaddr, "saddr"}, {fibFDaddr, "daddr"}, {1 << 2, "mark"}, {1 << 3, "iif"}, {1 << 4, "oif"}, {1 << 5, "present"}} {
		if flags&f.bit != 0 {
			what += " " + f.name
		}
	}
	what += " " + map[uint32]string{1: "oif", 2: "oifname", 3: "type"}[result]
	if result == fibResultAddrType && (flags == fibFSaddr || flags == fibFDaddr) {
		dir := model.Src
		if flags == fibFDaddr {
			dir = model.Dst
		}
		t.set(dreg, &regVal{kind: valFibType, n: 4, dir: dir, what: what})
		return
	}
	t.set(dreg, &regVal{kind: valUnknown, n: 16, what: what})
}

// never ends a rule whose next condition is false for every packet of the family.
func (t *translator) never() (ruleResult, bool) {
	if t.sideEffect {
		// The stateful match before it still runs for every packet that gets there.
		return ruleResult{matches: t.matches, verdict: model.Verdict{Kind: model.Continue}}, true
	}
	return ruleResult{never: true}, true
}

// reg32 maps a register number to its first 32-bit register (NFT_REG_1..4 are 16 bytes each).
func reg32(r uint32) uint32 {
	if r >= unix.NFT_REG_1 && r <= unix.NFT_REG_4 {
		return unix.NFT_REG32_00 + (r-unix.NFT_REG_1)*4
	}
	return r
}

func (t *translator) set(r uint32, v *regVal) {
	start := reg32(r)
	end := start + uint32((v.n+3)/4)
	for s, o := range t.regs {
		oend := s + uint32((o.n+3)/4)
		if s < end && start < oend {
			delete(t.regs, s)
		}
	}
	t.regs[start] = v
}

func (t *translator) get(r uint32) *regVal { return t.regs[reg32(r)] }

func (t *translator) clobber(what string) {
	for s := range t.regs {
		t.regs[s] = &regVal{kind: valUnknown, n: t.regs[s].n, what: what}
	}
	// A load into a register not used before: any later read of it is this load.
	t.regs[unix.NFT_REG32_00] = &regVal{kind: valUnknown, n: 64, what: what}
}

func (t *translator) metaVal(key uint32) *regVal {
	switch key {
	case unix.NFT_META_NFPROTO:
		p := uint8(unix.NFPROTO_IPV4)
		if t.family == model.IPv6 {
			p = unix.NFPROTO_IPV6
		}
		return &regVal{kind: valStatic, n: 1, static: []byte{p}, what: "meta nfproto"}
	case unix.NFT_META_PROTOCOL:
		eth := []byte{0x08, 0x00}
		if t.family == model.IPv6 {
			eth = []byte{0x86, 0xdd}
		}
		return &regVal{kind: valStatic, n: 2, static: eth, what: "meta protocol"}
	case unix.NFT_META_L4PROTO:
		return &regVal{kind: valMeta, key: key, n: 1}
	case unix.NFT_META_IIFNAME, unix.NFT_META_OIFNAME:
		return &regVal{kind: valMeta, key: key, n: 16}
	}
	return &regVal{kind: valMeta, key: key, n: 4}
}

func (t *translator) bitwise(e rawExpr) bool {
	if op, ok := e.u32(bitwiseOp); (ok && op != 0) || e.has(bitwiseData) {
		// Shifts and (6.13+) register-to-register operations: an unknown value.
		dreg, _ := e.u32(bitwiseDreg)
		t.set(dreg, &regVal{kind: valUnknown, n: 16, what: "bitwise operation"})
		return true
	}
	sreg, ok1 := e.u32(bitwiseSreg)
	dreg, ok2 := e.u32(bitwiseDreg)
	n, ok3 := e.u32(bitwiseLen)
	mask, ok4 := e.data(bitwiseMask)
	xor, ok5 := e.data(bitwiseXor)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || len(mask) != int(n) || len(xor) != int(n) {
		return false
	}
	src := t.get(sreg)
	if src == nil || src.kind == valUnknown || src.kind == valStatic || src.n != int(n) || !allZero(xor) {
		t.set(dreg, &regVal{kind: valUnknown, n: int(n), what: src.describe() + " (masked)"})
		return true
	}
	v := *src
	v.mask = append([]byte(nil), mask...)
	if src.mask != nil {
		for i := range v.mask {
			v.mask[i] &= src.mask[i]
		}
	}
	t.set(dreg, &v)
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func allOnes(b []byte) bool {
	for _, c := range b {
		if c != 0xff {
			return false
		}
	}
	return true
}

func (t *translator) unknown(v *regVal, op uint32, data ...[]byte) {
	what := v.describe() + " " + opName(op)
	for _, d := range data {
		what += " 0x" + hex.EncodeToString(d)
	}
	t.matches = append(t.matches, model.Unknown{What: what})
}

// cmp translates a compare. stop: the rule ends here (with the result).
func (t *translator) cmp(e rawExpr) (ruleResult, bool) {
	sreg, ok1 := e.u32(cmpSreg)
	op, ok2 := e.u32(cmpOp)
	data, ok3 := e.data(cmpData)
	if !ok1 || !ok2 || !ok3 || op > opGte {
		return ruleResult{matches: t.matches, verdict: model.Verdict{Kind: model.Linux, Reason: "malformed cmp expression"}}, true
	}
	v := t.get(sreg)
	if v == nil || v.kind == valUnknown || len(data) > v.n {
		t.unknown(v, op, data)
		return ruleResult{}, false
	}
	switch v.kind {
	case valStatic:
		c := bytes.Compare(v.static[:len(data)], data)
		ok := map[uint32]bool{opEq: c == 0, opNeq: c != 0, opLt: c < 0, opLte: c <= 0, opGt: c > 0, opGte: c >= 0}[op]
		if !ok {
			return t.never()
		}
		return ruleResult{}, false
	case valMeta:
		switch v.key {
		case unix.NFT_META_L4PROTO:
			if v.mask == nil && len(data) == 1 && (op == opEq || op == opNeq) {
				t.addProto(data[0], op == opNeq)
				return ruleResult{}, false
			}
		case unix.NFT_META_IIFNAME, unix.NFT_META_OIFNAME:
			if m, ok := iface(v, op, data); ok {
				t.matches = append(t.matches, m)
				return ruleResult{}, false
			}
		case unix.NFT_META_MARK:
			// The mark is a host-order u32 in the register, and so are mask and value.
			if len(data) == 4 && (op == opEq || op == opNeq) {
				m := model.Mark{Value: binary.NativeEndian.Uint32(data), Mask: 0xffffffff, Invert: op == opNeq}
				if v.mask != nil {
					m.Mask = binary.NativeEndian.Uint32(v.mask)
				}
				if m.Value&^m.Mask == 0 {
					t.matches = append(t.matches, m)
					return ruleResult{}, false
				}
			}
		}
	case valCtState:
		if len(data) == 4 && (op == opEq || op == opNeq) {
			t.matches = append(t.matches, ctStateCmp(v.mask, binary.NativeEndian.Uint32(data), op == opNeq))
			return ruleResult{}, false
		}
	case valFibType:
		if v.mask == nil && len(data) == 4 && (op == opEq || op == opNeq) && binary.NativeEndian.Uint32(data) == rtnLocal {
			t.matches = append(t.matches, model.FibLocal{Dir: v.dir, Invert: op == opNeq})
			return ruleResult{}, false
		}
	case valPayload:
		if m, ok := t.payloadCmp(v, op, data); ok {
			if m != nil {
				t.matches = append(t.matches, m)
			}
			return ruleResult{}, false
		}
	}
	t.unknown(v, op, data)
	return ruleResult{}, false
}

func (t *translator) addProto(p uint8, invert bool) {
	t.matches = append(t.matches, model.Proto{Proto: p, Invert: invert})
	if !invert {
		if t.hasProto && t.proto != p {
			// Two different protocols required: the model still evaluates both matches (one
			// is false); ports after this are read for neither.
			t.proto = 0
			return
		}
		t.proto, t.hasProto = p, true
	}
}

// iface translates a compare of iifname/oifname: the name with its NUL is an exact name; without
// one, a prefix (iptables' `+`).
func iface(v *regVal, op uint32, data []byte) (model.Iface, bool) {
	m := model.Iface{Out: v.key == unix.NFT_META_OIFNAME, Invert: op == opNeq}
	if v.mask != nil || (op != opEq && op != opNeq) || len(data) == 0 {
		return m, false
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		if !allZero(data[i:]) {
			return m, false
		}
		m.Name = string(data[:i])
	} else {
		m.Name, m.Wildcard = string(data), true
	}
	return m, true
}

// field is where an address lives in the network header.
type field struct {
	dir      model.Dir
	off, len uint32
}

func (t *translator) addrFields() []field {
	if t.family == model.IPv6 {
		return []field{{model.Src, 8, 16}, {model.Dst, 24, 16}}
	}
	return []field{{model.Src, 12, 4}, {model.Dst, 16, 4}}
}

// payloadCmp translates a compare of packet bytes. ok false: not modelled.
func (t *translator) payloadCmp(v *regVal, op uint32, data []byte) (model.Match, bool) {
	switch v.base {
	case baseNetwork:
		if t.family == model.IPv4 && v.offset == 9 && v.n == 1 && v.mask == nil && (op == opEq || op == opNeq) {
			// ip protocol: in IPv4 the same as meta l4proto.
			t.addProto(data[0], op == opNeq)
			return nil, true
		}
		for _, f := range t.addrFields() {
			if v.offset == f.off && uint32(v.n) <= f.len && (op == opEq || op == opNeq) {
				return addrMatch(f, v, op, data)
			}
		}
	case baseTransport:
		if v.mask != nil && !allOnes(v.mask) {
			return nil, false
		}
		if t.hasPorts() && v.n == 2 && len(data) == 2 && (v.offset == 0 || v.offset == 2) {
			dir := model.Src
			if v.offset == 2 {
				dir = model.Dst
			}
			p := binary.BigEndian.Uint16(data)
			m := model.Ports{Dir: dir}
			switch op {
			case opEq, opNeq:
				m.Ranges, m.Invert = []model.PortRange{{From: p, To: p}}, op == opNeq
			case opLt:
				if p > 0 {
					m.Ranges = []model.PortRange{{From: 0, To: p - 1}}
				} // else: no port is below 0, no range: never matches
			case opLte:
				m.Ranges = []model.PortRange{{From: 0, To: p}}
			case opGt:
				if p < 0xffff {
					m.Ranges = []model.PortRange{{From: p + 1, To: 0xffff}}
				}
			case opGte:
				m.Ranges = []model.PortRange{{From: p, To: 0xffff}}
			}
			return m, true
		}
		icmp := uint8(model.ProtoICMP)
		if t.family == model.IPv6 {
			icmp = model.ProtoICMPv6
		}
		if t.hasProto && t.proto == icmp && v.offset == 0 && v.n == 1 && len(data) == 1 && (op == opEq || op == opNeq) {
			return model.ICMP{Type: data[0], CodeMin: 0, CodeMax: 0xff, Invert: op == opNeq}, true
		}
	}
	return nil, false
}

// addrMatch turns a (masked) compare of the first bytes of an address into a prefix.
func addrMatch(f field, v *regVal, op uint32, data []byte) (model.Match, bool) {
	mask := make([]byte, f.len)
	val := make([]byte, f.len)
	copy(val, data)
	for i := range data {
		mask[i] = 0xff
		if v.mask != nil {
			mask[i] = v.mask[i]
		}
	}
	bits, ok := prefixBits(mask)
	if !ok {
		return nil, false // e.g. -s 198.18.0.0/255.255.0.255
	}
	for i := range val {
		if val[i]&^mask[i] != 0 {
			return nil, false // can never be equal; not produced by iptables
		}
	}
	a, _ := netip.AddrFromSlice(val)
	return model.Addr{Dir: f.dir, Prefix: netip.PrefixFrom(a, bits), Invert: op == opNeq}, true
}

// prefixBits: the number of leading one bits, if the mask is ones then zeros.
func prefixBits(mask []byte) (int, bool) {
	bits, zero := 0, false
	for _, b := range mask {
		for i := 7; i >= 0; i-- {
			if b&(1<<i) != 0 {
				if zero {
					return 0, false
				}
				bits++
			} else {
				zero = true
			}
		}
	}
	return bits, true
}

func (t *translator) rangeExpr(e rawExpr) (ruleResult, bool) {
	sreg, ok1 := e.u32(rangeSreg)
	op, ok2 := e.u32(rangeOp)
	from, ok3 := e.data(rangeFrom)
	to, ok4 := e.data(rangeTo)
	if !ok1 || !ok2 || !ok3 || !ok4 || (op != opEq && op != opNeq) {
		return ruleResult{matches: t.matches, verdict: model.Verdict{Kind: model.Linux, Reason: "malformed range expression"}}, true
	}
	v := t.get(sreg)
	if v != nil && v.kind == valPayload && v.base == baseTransport && v.mask == nil && v.n == 2 &&
		(v.offset == 0 || v.offset == 2) && t.hasPorts() && len(from) == 2 && len(to) == 2 {
		dir := model.Src
		if v.offset == 2 {
			dir = model.Dst
		}
		t.matches = append(t.matches, model.Ports{
			Dir:    dir,
			Ranges: []model.PortRange{{From: binary.BigEndian.Uint16(from), To: binary.BigEndian.Uint16(to)}},
			Invert: op == opNeq,
		})
		return ruleResult{}, false
	}
	t.unknown(v, op, from, to)
	return ruleResult{}, false
}

// Verdict codes (include/uapi/linux/netfilter.h, nf_tables.h).
const (
	nfDrop     = 0
	nfAccept   = 1
	nftCont    = -1
	nftBreak   = -2
	nftJump    = -3
	nftGoto    = -4
	nftReturn  = -5
	verdictAtt = 2 // NFTA_DATA_VERDICT
)

// immediate translates a verdict (which ends the rule: expressions after it never run) or a
// value loaded for a later statement.
func (t *translator) immediate(e rawExpr) (ruleResult, bool) {
	done := func(v model.Verdict) (ruleResult, bool) { return ruleResult{matches: t.matches, verdict: v}, true }
	dreg, ok := e.u32(immDreg)
	if !ok {
		return done(model.Verdict{Kind: model.Linux, Reason: "malformed immediate expression"})
	}
	if dreg != unix.NFT_REG_VERDICT {
		t.set(dreg, &regVal{kind: valUnknown, n: 16, what: "immediate value"})
		return ruleResult{}, false
	}
	code, chain, ok := verdictData(e.Attrs[immData])
	if !ok {
		return done(model.Verdict{Kind: model.Linux, Reason: "malformed verdict"})
	}
	switch code {
	case nftCont:
		return done(model.Verdict{Kind: model.Continue})
	case nftBreak:
		return t.never()
	}
	return done(verdictOf(code, chain))
}

// verdictOf is the model's verdict for an nf_tables verdict that ends the rule.
func verdictOf(code int32, chain string) model.Verdict {
	switch code {
	case nfAccept:
		return model.Verdict{Kind: model.Accept}
	case nfDrop:
		return model.Verdict{Kind: model.Drop}
	case nftReturn:
		return model.Verdict{Kind: model.Return}
	case nftJump:
		return model.Verdict{Kind: model.Jump, Chain: chain}
	case nftGoto:
		return model.Verdict{Kind: model.Goto, Chain: chain}
	}
	return model.Verdict{Kind: model.Linux, Reason: fmt.Sprintf("verdict %d (queue, stolen, ...)", code)}
}

// keyField is one field of a concatenated key (a verdict map's or a set's) as the rule loads it.
type keyField struct {
	kind keyFieldKind
	dir  model.Dir
	n    int // bytes of the field (its register space: rounded up to 4)
}

type keyFieldKind uint8

const (
	keyAddr keyFieldKind = iota
	keyProto
	keyPort
)

// keyFields reads the fields of a lookup's key of keyLen bytes from the registers from sreg on:
// each field in its own 32-bit registers, padded to 4 bytes. hasProto: a field is the transport
// protocol. ok false: a field the model does not read (or a masked one).
func (t *translator) keyFields(sreg, keyLen uint32) (fields []keyField, hasProto, ok bool) {
	for pos, left := reg32(sreg), int(keyLen); left > 0; {
		v := t.regs[pos]
		if v == nil || v.mask != nil {
			return nil, false, false
		}
		f := keyField{n: v.n}
		switch {
		case v.kind == valMeta && v.key == unix.NFT_META_L4PROTO && v.n == 1,
			v.kind == valPayload && t.family == model.IPv4 && v.base == baseNetwork && v.offset == 9 && v.n == 1:
			f.kind, hasProto = keyProto, true
		case v.kind == valPayload && v.base == baseTransport && v.n == 2 && (v.offset == 0 || v.offset == 2):
			f.kind, f.dir = keyPort, model.Src
			if v.offset == 2 {
				f.dir = model.Dst
			}
		case v.kind == valPayload && v.base == baseNetwork:
			found := false
			for _, af := range t.addrFields() {
				if v.offset == af.off && uint32(v.n) == af.len {
					f.kind, f.dir, found = keyAddr, af.dir, true
				}
			}
			if !found {
				return nil, false, false
			}
		default:
			return nil, false, false
		}
		fields = append(fields, f)
		padded := (v.n + 3) / 4 * 4
		pos += uint32(padded / 4)
		left -= padded
		if left < 0 {
			return nil, false, false
		}
	}
	return fields, hasProto, true
}

// keyMatches is an exact key as matches: its addresses and protocol, then its ports (after the
// protocol, which the model's port matches need). found false: no packet has this key (the
// registers' padding is zero for every packet, and the element's is not). portsOK false: the
// key has a port where the packet may have none: the rule has no protocol with ports so far
// (portsKnown false) and the key's protocol field, if any, is not one.
func keyMatches(fields []keyField, key []byte, portsKnown bool) (ms []model.Match, found, portsOK bool) {
	var ports []model.Match
	elemPorts := false
	off := 0
	found = true
	for _, f := range fields {
		b := key[off : off+f.n]
		found = found && allZero(key[off+f.n:off+(f.n+3)/4*4])
		off += (f.n + 3) / 4 * 4
		switch f.kind {
		case keyAddr:
			a, _ := netip.AddrFromSlice(b)
			ms = append(ms, model.Addr{Dir: f.dir, Prefix: netip.PrefixFrom(a, a.BitLen())})
		case keyProto:
			ms = append(ms, model.Proto{Proto: b[0]})
			elemPorts = model.HasPorts(b[0])
		case keyPort:
			p := binary.BigEndian.Uint16(b)
			ports = append(ports, model.Ports{Dir: f.dir, Ranges: []model.PortRange{{From: p, To: p}}})
		}
	}
	return append(ms, ports...), found, len(ports) == 0 || portsKnown || elemPorts
}

// vmap translates a verdict map lookup (`ip daddr . meta l4proto . th dport vmap @service-ips`,
// `meta l4proto . th dport vmap @m`, `ip saddr vmap { ... }`) whose key fields are addresses,
// the transport protocol and ports, in a map of exact keys: the rule becomes one rule per
// element, the matches before the lookup and the element's key as matches, with the element's
// verdict. Keys are distinct, so at most one of these rules matches a packet, as at most one
// element is found; a jump that returns continues after them as after the lookup's rule. The
// expressions after a verdict map lookup never run (a verdict ends the rule, no element ends it
// too). ok false: not modelled (the caller makes the lookup Unknown).
func (t *translator) vmap(e rawExpr) (ruleResult, bool) {
	flags, _ := e.u32(nftaLookupFlags)
	s := t.nftSets[setRef{t.tableFamily, t.table, e.str(lookupSet)}]
	if flags != 0 || t.sideEffect || t.concat != nil || s == nil || !s.verdictMap || s.unsupported != "" {
		return ruleResult{}, false
	}
	sreg, _ := e.u32(lookupSreg)
	fields, _, ok := t.keyFields(sreg, s.keyLen)
	if !ok {
		return ruleResult{}, false
	}
	out := ruleResult{expand: []ruleResult{}}
	for _, el := range s.vmap {
		ms, found, portsOK := keyMatches(fields, el.key, t.hasPorts())
		if !found {
			continue
		}
		if !portsOK {
			return ruleResult{}, false
		}
		code, chain, ok := verdictData(el.data)
		if !ok || code == nftCont || code == nftBreak {
			return ruleResult{}, false
		}
		out.expand = append(out.expand, ruleResult{matches: append(slices.Clone(t.matches), ms...), verdict: verdictOf(code, chain)})
	}
	if len(out.expand) == 0 {
		return ruleResult{never: true}, true
	}
	return out, true
}

func verdictData(b []byte) (code int32, chain string, ok bool) {
	rd, err := parseAttrs(b)
	if err != nil {
		return 0, "", false
	}
	vb, ok := rd.Attrs[verdictAtt]
	if !ok {
		return 0, "", false
	}
	vd, err := parseAttrs(vb)
	if err != nil {
		return 0, "", false
	}
	c, ok := vd.u32(unix.NFTA_VERDICT_CODE)
	if !ok {
		return 0, "", false
	}
	return int32(c), vd.str(unix.NFTA_VERDICT_CHAIN), true
}

func ctKeyIs(e rawExpr, key uint32) bool {
	k, ok := e.u32(ctKey)
	return ok && k == key
}

// ctStateCmp translates `(ct state & mask) == value` (or !=): conntrack gives a packet exactly one
// state bit, so the compare holds for the states whose bit, masked, is value.
func ctStateCmp(mask []byte, value uint32, neq bool) model.CtState {
	m := ^uint32(0)
	if mask != nil {
		m = binary.NativeEndian.Uint32(mask)
	}
	var states uint8
	for b := uint8(1); b != 0; b <<= 1 {
		if b&model.CtStates != 0 && uint32(b)&m == value {
			states |= b
		}
	}
	if neq {
		// Not in states is in the others (a packet has exactly one): as a user writes it.
		states = model.CtStates &^ states
	}
	return model.CtState{States: states}
}

// lookup translates a set lookup (`ip daddr @s`, `tcp dport != { 22, 80 }`) in a set whose key
// is one field the model reads: the source or destination address (a Set match on the set's
// addresses) or a port (a Ports match). A lookup of a concatenation the translator expands is no
// match (nil: concatLookup keeps it for expandConcat). Everything else is an Unknown match saying
// why.
func (t *translator) lookup(e rawExpr, isMap bool) model.Match {
	sreg, _ := e.u32(lookupSreg)
	name := e.str(lookupSet)
	v := t.get(sreg)
	flags, _ := e.u32(nftaLookupFlags)
	invert := flags&nftLookupInv != 0
	op := "in"
	if invert {
		op = "not in"
	}
	unknown := func(why string) model.Match {
		what := fmt.Sprintf("%s %s set @%s", v.describe(), op, name)
		if why != "" {
			what += " (" + why + ")"
		}
		return model.Unknown{What: what}
	}
	s := t.nftSets[setRef{t.tableFamily, t.table, name}]
	switch {
	case isMap:
		return unknown("")
	case flags&^nftLookupInv != 0:
		return unknown(fmt.Sprintf("lookup flags %#x", flags))
	case v == nil || (v.kind != valPayload && !(v.kind == valMeta && v.key == unix.NFT_META_L4PROTO)) || v.mask != nil:
		return unknown("")
	case s == nil:
		return unknown("set not read")
	case s.unsupported != "":
		return unknown(s.unsupported)
	case uint32(v.n) < s.keyLen:
		if why := t.concatLookup(sreg, name, s, invert, unknown); why != "" {
			return unknown(why)
		}
		return nil
	case uint32(v.n) != s.keyLen:
		return unknown("")
	}
	if v.kind == valMeta || (t.family == model.IPv4 && v.base == baseNetwork && v.offset == 9 && v.n == 1) {
		// meta l4proto, or ip protocol (in IPv4 the same).
		return t.protoSet(s.ranges, invert)
	}
	switch v.base {
	case baseNetwork:
		for _, f := range t.addrFields() {
			if v.offset != f.off || uint32(v.n) != f.len {
				continue
			}
			as := s.addrSet(t.family)
			if o := t.sets[as.Name]; o != nil && !o.Nft {
				return unknown("an ipset has the name " + as.Name)
			}
			t.sets[as.Name] = as
			return model.Set{Name: as.Name, Dirs: []model.Dir{f.dir}, Invert: invert, Nft: true}
		}
	case baseTransport:
		if t.hasPorts() && v.n == 2 && (v.offset == 0 || v.offset == 2) {
			dir := model.Src
			if v.offset == 2 {
				dir = model.Dst
			}
			// The model's Ports are false for packets without ports, inverted or not: so is
			// this lookup, after the rule's protocol match.
			return model.Ports{Dir: dir, Ranges: s.portRanges(), Invert: invert}
		}
	}
	return unknown("")
}

// protoSet is the match of a protocol set lookup. A set of protocols that all have ports lets
// port matches after it be modelled, as a single protocol with ports does.
func (t *translator) protoSet(ranges []keyRange, invert bool) model.Match {
	m := model.Protos{Invert: invert}
	for _, r := range ranges {
		for p := int(r.from[0]); p <= int(r.to[0]); p++ {
			m.Protos = append(m.Protos, uint8(p))
		}
	}
	if !invert && len(m.Protos) > 0 && !slices.ContainsFunc(m.Protos, func(p uint8) bool { return !model.HasPorts(p) }) {
		t.setPorts = true
	}
	return m
}

// hasPorts: the rule so far requires a protocol with ports, so port matches can be modelled.
func (t *translator) hasPorts() bool {
	return t.hasProto && model.HasPorts(t.proto) || t.setPorts
}

// maxConcatElems bounds the concatenated sets whose lookups are modelled: each element becomes a
// rule of the model (expandConcat), as a verdict map's do.
const maxConcatElems = maxVmapElems

// concatLookup is a lookup of a concatenated key in a set of exact keys (`ip daddr . tcp dport
// @s`, `ip saddr . ip daddr != { a . b, c . d }`), which the rule becomes several rules for once
// its other expressions are read (expandConcat).
type concatLookup struct {
	at     int             // the position of the lookup among the rule's matches
	keys   [][]model.Match // each element's key as matches (elements no packet has left out)
	invert bool
	set    string
	// unknown makes the lookup an Unknown match saying why, for a rule whose verdict
	// expandConcat cannot keep with a negated lookup.
	unknown func(why string) model.Match
}

// concatLookup reads a lookup of a concatenated key in s for expandConcat, or says why it is
// not modelled.
func (t *translator) concatLookup(sreg uint32, name string, s *nftSet, invert bool, unknown func(string) model.Match) string {
	switch {
	case t.concat != nil:
		return "a second lookup of a concatenation in the rule"
	case t.sideEffect:
		// The rule becomes several: a stateful match before the lookup would run in each.
		return "a concatenation after a stateful match"
	case s.flags&unix.NFT_SET_INTERVAL != 0:
		return "a concatenation with intervals"
	case len(s.ranges) > maxConcatElems:
		return fmt.Sprintf("a concatenation: %d elements (more than %d)", len(s.ranges), maxConcatElems)
	}
	fields, _, ok := t.keyFields(sreg, s.keyLen)
	if !ok {
		return fmt.Sprintf("a concatenation of %d bytes, not of addresses, the protocol and ports", s.keyLen)
	}
	c := &concatLookup{at: len(t.matches), keys: [][]model.Match{}, invert: invert, set: name, unknown: unknown}
	for _, r := range s.ranges {
		if !bytes.Equal(r.from, r.to) {
			return "a concatenation with intervals"
		}
		ms, found, portsOK := keyMatches(fields, r.from, t.hasPorts())
		if !portsOK {
			return "a concatenation with a port, of packets that may have none"
		}
		if found {
			c.keys = append(c.keys, ms)
		}
	}
	t.concat = c
	return ""
}

// expandConcat turns rule r, read with a lookup of a concatenated key (t.concat), into rules the
// model holds. A set of exact keys holds at most one element a packet's key equals.
//
// A lookup (`ip daddr . tcp dport @s accept`) becomes one rule per element: the matches before
// the lookup, the element's key, the matches after it, and the rule's verdict. At most one of
// them matches a packet, and exactly when the rule does; a jump that returns goes on after them
// all as after the rule (the key's fields are the packet's, which no rule the model evaluates
// rewrites).
//
// A negated lookup (`!= @s`) holds when no element is the packet's key: the rule becomes a jump,
// under the matches before the lookup, to a chain made for it: one rule per element that
// returns, then the matches after the lookup with the rule's verdict. That is the rule for an
// accept, a drop, a jump, no verdict and a verdict the model hands to Linux; not for return and
// goto, which would leave the made chain rather than the rule's: with those the lookup stays an
// Unknown match.
func (t *translator) expandConcat(r ruleResult) ruleResult {
	c := t.concat
	before, after := r.matches[:c.at:c.at], r.matches[c.at:]
	if !c.invert {
		if len(c.keys) == 0 {
			return ruleResult{never: true} // nothing before the lookup has side effects
		}
		out := ruleResult{expand: []ruleResult{}}
		for _, k := range c.keys {
			out.expand = append(out.expand, ruleResult{matches: slices.Concat(before, k, after), verdict: r.verdict})
		}
		return out
	}
	switch {
	case len(c.keys) == 0:
		// No element: every packet's key is not in the set.
		return ruleResult{matches: slices.Concat(before, after), verdict: r.verdict}
	case r.verdict.Kind == model.Return || r.verdict.Kind == model.Goto:
		why := "a negated concatenation in a rule that ends with " + r.verdict.Kind.String()
		r.matches = slices.Concat(before, []model.Match{c.unknown(why)}, after)
		return r
	}
	out := ruleResult{matches: before, verdict: model.Verdict{Kind: model.Jump}, sub: []ruleResult{}, subName: "not in @" + c.set}
	for _, k := range c.keys {
		out.sub = append(out.sub, ruleResult{matches: k, verdict: model.Verdict{Kind: model.Return}})
	}
	out.sub = append(out.sub, ruleResult{matches: slices.Clone(after), verdict: r.verdict})
	return out
}
