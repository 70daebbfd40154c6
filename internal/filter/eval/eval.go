// Package eval is the reference evaluator of the filter module: given a forward-path ruleset
// (package model), the ipset sets and a packet, it says what Linux would do with a forwarded
// packet: drop it, let it pass every netfilter chain on the forward path (Accept), or that the
// model cannot tell (Linux), and which rule decided.
//
// It is the specification the BPF classifier is tested against: whenever it says Accept or Drop,
// Linux does the same; the differential test in this package checks that against the kernel.
//
// How iptables/nftables evaluate, as reproduced here:
//   - Hooks in order: prerouting, forward, postrouting. On each hook, base chains run by
//     priority (raw -300, mangle -150, dstnat -100, filter 0, security 50, srcnat 100, and native
//     nft chains at theirs). Accept ends a base chain only: the next one runs. Drop ends
//     everything. The kernel runs chains of equal priority in the order they were registered,
//     which the model does not know: if any of them would need Linux, the packet goes to Linux;
//     otherwise a drop by any of them is a drop whatever the order.
//   - In a chain, rules run in order; a rule applies when all its matches hold (they are
//     evaluated in order). jump pushes a return point, goto does not, return (or the end of a
//     regular chain) pops one; return or the end of a base chain applies its policy.
//   - The output interface is empty in prerouting (there is none yet); in postrouting the input
//     interface is still known (iptables refuses -i there, but nft's iifname matches it).
//   - A NAT chain sees only a connection's first packet; for it, a NAT rule that applies sends
//     the packet to Linux, and NAT chains that leave it alone let it pass. For later packets of
//     a connection the data plane must check the connection has no NAT binding (not modelled
//     here).
//
// An Unknown match is "maybe": a rule whose matches are all true or maybe is a rule that may
// apply; if it has a verdict, the outcome depends on it and the packet goes to Linux. Two
// exceptions, where applying the rule or not comes to the same: a maybe-rule without verdict, and
// a maybe-rule that jumps to a chain that decides nothing for the packet and returns. They are
// passed, unless one of the rule's Unknown matches has side effects (a rate limit, a counter
// object) and may run: then Linux. (The rule's own counters are what such a packet leaves
// uncertain.)
package eval

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// Packet is a forwarded packet, whole (not a fragment).
type Packet struct {
	Family   model.Family
	Src, Dst netip.Addr
	// Proto is the transport protocol (for IPv6, after extension headers).
	Proto uint8
	// SrcPort and DstPort: for TCP, UDP, SCTP, DCCP, UDPlite.
	SrcPort, DstPort uint16
	// ICMPType and ICMPCode: the first two bytes of the transport header of an ICMP (1) or
	// ICMPv6 (58) packet.
	ICMPType, ICMPCode uint8
	// In is the interface the packet arrived on, Out the one Linux's route sends it out of.
	In, Out string
	// Mark is the packet's mark when it enters prerouting (see model.Mark: 0 for packets from a
	// NIC or another namespace).
	Mark uint32
	// CtState is the state conntrack gives the packet (one of the model.Ct* bits); 0 when not
	// known: a CtState match is then a "maybe".
	CtState uint8
	// SrcMaybeLocal / DstMaybeLocal: the address may be local (model.FibLocal): a local,
	// broadcast, anycast or multicast route of some table covers it, or it is in a class those
	// routes are not kept for (MaybeLocal).
	SrcMaybeLocal, DstMaybeLocal bool
}

func (p Packet) String() string {
	var l4 string
	switch {
	case model.HasPorts(p.Proto):
		l4 = fmt.Sprintf(" %s %d -> %d", model.ProtoName(p.Proto), p.SrcPort, p.DstPort)
	case p.Proto == model.ProtoICMP || p.Proto == model.ProtoICMPv6:
		l4 = fmt.Sprintf(" %s type %d code %d", model.ProtoName(p.Proto), p.ICMPType, p.ICMPCode)
	default:
		l4 = " proto " + model.ProtoName(p.Proto)
	}
	return fmt.Sprintf("%s %s -> %s%s in %s out %s", p.Family, p.Src, p.Dst, l4, p.In, p.Out)
}

// Verdict is the outcome for a forwarded packet.
type Verdict uint8

const (
	// Accept: the packet passes every chain of the forward path.
	Accept Verdict = iota
	// Drop: a rule or a policy drops it.
	Drop
	// Linux: the outcome depends on something the model does not reproduce.
	Linux
)

func (v Verdict) String() string { return [...]string{"accept", "drop", "linux"}[v] }

// Result is the verdict and what decided it.
type Result struct {
	Verdict Verdict
	// Rule is the rule that decided (dropped the packet, or may apply and is not modelled); nil
	// when a policy decided or the packet passed everything.
	Rule *model.Rule
	// Chain is the chain whose rule or policy decided.
	Chain *model.Chain
	// Reason says why, for logs and test failures.
	Reason string
}

// Evaluate runs p through rs. sets holds the ipset sets by name.
func Evaluate(rs *model.Ruleset, sets map[string]*model.IPSet, p Packet) Result {
	e := &evaluator{rs: rs, sets: sets, p: p}
	for _, h := range model.Hooks {
		chains := rs.Base[h]
		for i := 0; i < len(chains); {
			j := i + 1
			for j < len(chains) && chains[j].Base.Priority == chains[i].Base.Priority {
				j++
			}
			if r, stop := e.group(h, chains[i:j]); stop {
				return r
			}
			i = j
		}
	}
	return Result{Verdict: Accept, Reason: "passes every chain"}
}

type evaluator struct {
	rs      *model.Ruleset
	sets    map[string]*model.IPSet
	p       Packet
	in, out string // interface names as the current hook sees them
	// ct is the conntrack state the current base chain sees (0: not known, see model.CtBefore).
	ct uint8
}

// group runs base chains of equal priority. stop: the packet goes no further.
func (e *evaluator) group(h model.Hook, chains []*model.Chain) (Result, bool) {
	var drop *Result
	for _, c := range chains {
		r := e.base(h, c)
		switch r.Verdict {
		case Linux:
			return r, true
		case Drop:
			if drop == nil {
				drop = &r
			}
		}
	}
	if drop != nil {
		return *drop, true
	}
	return Result{}, false
}

const maxDepth = 64 // nf_tables refuses deeper jump stacks (NFT_JUMP_STACK_SIZE is 16)

// base runs one base chain to its verdict (Accept means: on to the next chain).
func (e *evaluator) base(h model.Hook, c *model.Chain) Result {
	// In prerouting the kernel has no output device yet (ip_rcv passes NULL); in postrouting a
	// forwarded packet still has its input device (ip_output and ip6_output pass skb->dev).
	e.in, e.out = e.p.In, e.p.Out
	if h == model.Prerouting {
		e.out = ""
	}
	e.ct = e.p.CtState
	switch before, unsure := model.CtBefore(h, c.Base.Priority); {
	case before:
		e.ct = model.CtInvalid
	case unsure:
		e.ct = 0
	}
	if r, returned := e.run(c, 0); !returned {
		return r
	}
	if c.Base.Policy == model.PolicyDrop {
		return Result{Verdict: Drop, Chain: c, Reason: "policy drop of " + c.Key.String()}
	}
	return Result{Verdict: Accept, Chain: c}
}

// run runs chain c. returned: the chain returned to its caller (its end, or a return verdict;
// for a base chain the policy applies); otherwise r is the verdict.
func (e *evaluator) run(c *model.Chain, depth int) (r Result, returned bool) {
	for _, rule := range c.Rules {
		m, sideEffect := e.rule(rule)
		if m == no {
			continue
		}
		linux := func(why string) (Result, bool) {
			return Result{Verdict: Linux, Rule: rule, Chain: c, Reason: rule.ID.String() + ": " + why}, false
		}
		if sideEffect != nil {
			return linux("may run " + sideEffect.String())
		}
		v := rule.Verdict
		var target *model.Chain
		if v.Kind == model.Jump || v.Kind == model.Goto {
			if target = e.rs.Lookup(c.Key, v.Chain); target == nil {
				return linux("jump to unknown chain " + v.Chain)
			}
			if depth >= maxDepth {
				return linux("jump stack too deep")
			}
		}
		if m == maybe {
			switch {
			case v.Kind == model.Continue:
				continue // whether it applies or not, nothing changes
			case v.Kind == model.Jump:
				// If the chain it jumps to decides nothing for this packet and returns, applying
				// the rule or not comes to the same. (Only the rule's counters differ.)
				if _, ret := e.run(target, depth+1); ret {
					continue
				}
			}
			return linux("may apply (" + strings.Join(e.unknowns(rule), ", ") + ") with verdict " + v.String())
		}
		switch v.Kind {
		case model.Continue:
		case model.Accept:
			return Result{Verdict: Accept, Rule: rule, Chain: c}, false
		case model.Drop:
			return Result{Verdict: Drop, Rule: rule, Chain: c, Reason: "dropped by " + rule.ID.String()}, false
		case model.Return:
			return Result{}, true
		case model.Jump:
			if r, ret := e.run(target, depth+1); !ret {
				return r, false
			}
		case model.Goto:
			// The target replaces this chain: its return is this chain's return.
			return e.run(target, depth+1)
		case model.Linux:
			return linux(v.Reason)
		default:
			return linux("verdict " + v.String())
		}
	}
	return Result{}, true
}

// unknowns lists what the model cannot evaluate in r.
func (e *evaluator) unknowns(r *model.Rule) []string {
	var s []string
	for _, m := range r.Matches {
		switch m := m.(type) {
		case model.Unknown:
			s = append(s, m.What)
		case model.FibLocal:
			if e.match(m) == maybe {
				s = append(s, m.String()+" (the address may be local)")
			}
		case model.Set:
			if set := e.sets[m.Name]; set == nil {
				s = append(s, "ipset "+m.Name+" missing")
			} else if set.Unsupported != "" {
				s = append(s, "ipset "+m.Name+": "+set.Unsupported)
			}
		}
	}
	return s
}

type tri uint8

const (
	no tri = iota
	yes
	maybe
)

func toTri(b bool) tri {
	if b {
		return yes
	}
	return no
}

// rule evaluates the matches in order. sideEffect: an Unknown match with side effects that runs
// (or may run) for this packet.
func (e *evaluator) rule(r *model.Rule) (tri, *model.Unknown) {
	res := yes
	for _, m := range r.Matches {
		switch e.match(m) {
		case no:
			return no, nil
		case maybe:
			if u, ok := m.(model.Unknown); ok && u.SideEffect {
				return maybe, &u
			}
			res = maybe
		}
	}
	return res, nil
}

func (e *evaluator) match(m model.Match) tri {
	p := &e.p
	switch m := m.(type) {
	case model.Addr:
		a := p.Src
		if m.Dir == model.Dst {
			a = p.Dst
		}
		return toTri(m.Prefix.Contains(a) != m.Invert)
	case model.Proto:
		return toTri((p.Proto == m.Proto) != m.Invert)
	case model.Protos:
		return toTri(slices.Contains(m.Protos, p.Proto) != m.Invert)
	case model.Ports:
		if !model.HasPorts(p.Proto) {
			return no // the translator puts a -p with ports before every port match
		}
		in := false
		for _, r := range m.Ranges {
			switch m.Dir {
			case model.Src:
				in = in || (p.SrcPort >= r.From && p.SrcPort <= r.To)
			case model.Dst:
				in = in || (p.DstPort >= r.From && p.DstPort <= r.To)
			case model.Either:
				in = in || (p.SrcPort >= r.From && p.SrcPort <= r.To) || (p.DstPort >= r.From && p.DstPort <= r.To)
			}
		}
		return toTri(in != m.Invert)
	case model.Iface:
		name := e.in
		if m.Out {
			name = e.out
		}
		ok := name == m.Name
		if m.Wildcard {
			ok = strings.HasPrefix(name, m.Name)
		}
		return toTri(ok != m.Invert)
	case model.ICMP:
		icmp := uint8(model.ProtoICMP)
		if p.Family == model.IPv6 {
			icmp = model.ProtoICMPv6
		}
		if p.Proto != icmp {
			return no // the translator puts -p icmp/icmpv6 before every ICMP match
		}
		ok := m.AnyType || (p.ICMPType == m.Type && p.ICMPCode >= m.CodeMin && p.ICMPCode <= m.CodeMax)
		return toTri(ok != m.Invert)
	case model.Set:
		in, known := SetTest(e.sets[m.Name], m.Dirs, *p)
		if !known {
			return maybe
		}
		return toTri(in != m.Invert)
	case model.Mark:
		return toTri((p.Mark&m.Mask == m.Value) != m.Invert)
	case model.CtState:
		switch m.States & model.CtStates {
		case 0:
			return toTri(m.Invert) // no state
		case model.CtStates:
			return toTri(!m.Invert) // every state: conntrack gives each packet one
		}
		if e.ct == 0 {
			return maybe
		}
		return toTri((e.ct&m.States != 0) != m.Invert)
	case model.FibLocal:
		if m.Dir == model.Src && p.SrcMaybeLocal || m.Dir == model.Dst && p.DstMaybeLocal {
			return maybe
		}
		return toTri(m.Invert) // not local
	case model.Unknown:
		return maybe
	}
	return maybe
}

// MaybeLocal says whether `fib saddr|daddr type local` may be true for a (see model.FibLocal):
// local lists the prefixes of the host's local, broadcast, anycast and multicast routes of every
// table (the router module's lfp_local maps hold the same, but for addresses of the classes
// checked here).
func MaybeLocal(a netip.Addr, local []netip.Prefix) bool {
	if a.Is4() {
		b := a.As4()
		if b[0] == 0 || b[0] == 127 || b[0] >= 224 {
			return true
		}
	} else if a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsLoopback() || a.Is4In6() {
		return true
	}
	for _, p := range local {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
