// Package model is the filter module's picture of the netfilter ruleset that forwarded packets
// traverse, one per address family: the base chains on the prerouting, forward and postrouting
// hooks in the order the kernel runs them, the regular chains they jump to, and every rule as a
// list of matches and a verdict.
//
// The model says only what is known exactly. A match it cannot express is an Unknown match (the
// packet may or may not match); a target it cannot reproduce (REJECT, LOG, NFLOG, MARK, NAT, ...)
// is a Linux verdict. Whoever evaluates the model (the reference evaluator in package eval, the
// BPF classifier built on it) hands to Linux every packet for which such a rule could decide the
// outcome, and only those: the fallback is per rule, never per ruleset.
//
// iptables on this system is iptables-nft: its tables are nf_tables tables (ip/ip6 filter, nat,
// mangle, raw, security) and native nft tables sit beside them on the same hooks. The model does
// not tell them apart except in Chain.IPTables; both are read by package nft.
package model

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Family is an address family of forwarded packets.
type Family uint8

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// Hook is a netfilter hook that forwarded packets pass, in this order.
type Hook uint8

const (
	Prerouting Hook = iota
	Forward
	Postrouting
)

// Hooks in the order a forwarded packet meets them.
var Hooks = []Hook{Prerouting, Forward, Postrouting}

func (h Hook) String() string {
	switch h {
	case Prerouting:
		return "prerouting"
	case Forward:
		return "forward"
	case Postrouting:
		return "postrouting"
	}
	return fmt.Sprintf("hook%d", h)
}

// Well-known hook priorities (nftables' names; iptables-nft registers its tables at these).
const (
	PriorityRaw       = -300
	PriorityConntrack = -200 // conntrack itself; not a chain
	PriorityMangle    = -150
	PriorityDstNAT    = -100
	PriorityFilter    = 0
	PrioritySecurity  = 50
	PrioritySrcNAT    = 100
)

// ChainType is the nftables chain type of a base chain.
type ChainType string

const (
	ChainFilter ChainType = "filter"
	ChainNAT    ChainType = "nat"
	ChainRoute  ChainType = "route"
)

// Policy is what a base chain does with a packet that reaches its end.
type Policy uint8

const (
	PolicyAccept Policy = iota
	PolicyDrop
)

func (p Policy) String() string {
	if p == PolicyDrop {
		return "drop"
	}
	return "accept"
}

// Ruleset is everything forwarded packets of one family traverse.
type Ruleset struct {
	Family Family
	// Chains by ChainKey (table family, table, chain): base and regular chains of every table
	// whose family sees this address family (ip or ip6, and inet).
	Chains map[ChainKey]*Chain
	// Base chains per hook, sorted by priority (then by table and name, which is not the
	// kernel's order: see eval for how equal priorities are handled).
	Base map[Hook][]*Chain
	// Conntrack lists what makes netfilter track the family's connections (a nat chain, a rule
	// with a ct expression or a conntrack match or target, on any hook or none: see package
	// nft); empty when nothing does.
	Conntrack []string
}

// ChainKey names a chain: nftables chain names are scoped by table.
type ChainKey struct {
	TableFamily string // "ip", "ip6", "inet"
	Table       string
	Chain       string
}

func (k ChainKey) String() string { return k.TableFamily + " " + k.Table + " " + k.Chain }

// Chain is an nftables chain (an iptables built-in or user-defined chain).
type Chain struct {
	Key ChainKey
	// Base is set for base chains (attached to a hook); nil for regular chains, which only jumps
	// and gotos reach.
	Base *BaseChain
	// IPTables: the chain belongs to one of iptables-nft's tables (ip/ip6 filter, nat, mangle,
	// raw, security); otherwise it is a native nft chain.
	IPTables bool
	Rules    []*Rule
}

// BaseChain is how a base chain is attached.
type BaseChain struct {
	Hook     Hook
	Priority int32
	Type     ChainType
	Policy   Policy
}

// Rule is one rule: all matches must hold, in order, for the verdict to apply.
type Rule struct {
	ID      RuleID
	Matches []Match
	Verdict Verdict
}

// RuleID keeps a rule's identity for per-rule counters and logs.
type RuleID struct {
	Chain ChainKey
	// Handle is the nftables rule handle (stable while the rule exists).
	Handle uint64
	// Position is the rule's index in its chain, from 0 (as in `iptables -L --line-numbers`
	// minus one).
	Position int
}

func (id RuleID) String() string {
	return fmt.Sprintf("%s rule %d (handle %d)", id.Chain, id.Position+1, id.Handle)
}

// VerdictKind is what a rule does when it matches.
type VerdictKind uint8

const (
	// Continue: the rule has no verdict (counters, comments); evaluation goes on.
	Continue VerdictKind = iota
	Accept
	Drop
	Return
	Jump
	Goto
	// Linux: the rule does something the model does not reproduce (REJECT, LOG, NFLOG, MARK,
	// NAT, queue, ...): a packet it applies to goes to Linux.
	Linux
)

func (k VerdictKind) String() string {
	return [...]string{"continue", "accept", "drop", "return", "jump", "goto", "linux"}[k]
}

// Verdict is a rule's verdict.
type Verdict struct {
	Kind VerdictKind
	// Chain is the target of Jump and Goto (in the rule's own table).
	Chain string
	// Reason says, for Linux, what the rule does that the model does not reproduce.
	Reason string
	// NAT: the rule translates addresses or ports (DNAT, SNAT, MASQUERADE, REDIRECT, ...).
	NAT bool
}

func (v Verdict) String() string {
	switch v.Kind {
	case Jump, Goto:
		return v.Kind.String() + " " + v.Chain
	case Linux:
		return "linux (" + v.Reason + ")"
	}
	return v.Kind.String()
}

// Dir says which address or port of the packet a match reads.
type Dir uint8

const (
	Src Dir = iota
	Dst
	// Either: source or destination port (multiport --ports).
	Either
)

func (d Dir) String() string { return [...]string{"src", "dst", "src-or-dst"}[d] }

// Match is one condition of a rule. The concrete types are Addr, Proto, Protos, Ports, Iface,
// ICMP, Set, Mark, CtState, FibLocal and Unknown.
type Match interface {
	isMatch()
	String() string
}

// Addr: the packet's source or destination address is (Invert: is not) in Prefix.
type Addr struct {
	Dir    Dir
	Prefix netip.Prefix
	Invert bool
}

// Proto: the transport protocol (IPv6: after extension headers) is (not) Proto.
type Proto struct {
	Proto  uint8
	Invert bool
}

// Protos: the transport protocol is (not) one of Protos (nft's `meta l4proto { tcp, udp }`, a
// lookup in a set of protocols). Port matches after a Protos match whose protocols all have
// ports are the translator's guarantee of Ports, as after a Proto match.
type Protos struct {
	Protos []uint8
	Invert bool
}

// Ports: the source, destination or either port is (not) in one of Ranges. Rules that carry it
// also carry a Proto match for a protocol with ports (tcp, udp, sctp, dccp, udplite): the
// translator guarantees that, so the match is false for packets without ports.
type Ports struct {
	Dir    Dir
	Ranges []PortRange
	Invert bool
}

// PortRange is an inclusive range of ports.
type PortRange struct{ From, To uint16 }

// Iface: the input or output interface's name is (not) Name, or starts with Name when Wildcard
// (iptables' `eth+`). In prerouting the packet has no output interface yet: the name is empty.
// In postrouting a forwarded packet still has its input interface.
type Iface struct {
	Out      bool // output interface (-o); else input (-i)
	Name     string
	Wildcard bool
	Invert   bool
}

// ICMP: ICMP (IPv4) or ICMPv6 type Type with code in [CodeMin, CodeMax] (iptables' --icmp-type
// and --icmpv6-type). AnyType (IPv4 only: type 255 in xt_icmp) matches every ICMP packet. Rules
// that carry it also carry Proto{icmp or icmpv6}.
type ICMP struct {
	Type             uint8
	CodeMin, CodeMax uint8
	AnyType          bool
	Invert           bool
}

// Set: `-m set --match-set Name dir[,dir...]`. Dirs has one entry per dimension given in the rule
// (src or dst); the set's own type says what each dimension is (an address, a port).
type Set struct {
	Name   string
	Dirs   []Dir
	Invert bool
	// Nft: an nf_tables lookup of the source or destination address (Dirs has one entry) in an
	// address set (IPSet.Nft); Name is the set's name in the sets.
	Nft bool
}

// Mark: the packet's mark (skb->mark) masked with Mask is (not) Value (iptables' -m mark). No rule
// the model evaluates changes the mark (MARK, CONNMARK, `meta mark set` are Linux verdicts), so it
// is the mark the packet entered prerouting with: 0 for a packet from a NIC or from another
// network namespace (veth clears it), unless a tc ingress action set one.
type Mark struct {
	Value, Mask uint32
	Invert      bool
}

// Conntrack states of a packet (nftables' `ct state` bits, which xt_state and xt_conntrack share
// but for UNTRACKED): conntrack gives every packet exactly one.
const (
	CtInvalid     uint8 = 1 << 0
	CtEstablished uint8 = 1 << 1 // a reply, or a packet of a connection that has seen one
	CtRelated     uint8 = 1 << 2 // an expected connection (a helper's), an ICMP error
	CtNew         uint8 = 1 << 3
	CtUntracked   uint8 = 1 << 6 // NOTRACK
	// CtStates is every state bit.
	CtStates = CtInvalid | CtEstablished | CtRelated | CtNew | CtUntracked
)

// CtBefore says how a base chain on hook h at priority prio sees the conntrack state: conntrack
// runs at PriorityConntrack on prerouting, so a chain before it (raw) finds no entry yet, and
// the state is INVALID (nf_ct_get() is NULL, and the packet is not marked untracked: NOTRACK
// targets are Linux verdicts). before: such a chain; unsure: a chain at conntrack's own
// priority, whose order with conntrack is the order of registration.
func CtBefore(h Hook, prio int32) (before, unsure bool) {
	if h != Prerouting {
		return false, false
	}
	return prio < PriorityConntrack, prio == PriorityConntrack
}

// CtState: the packet's conntrack state is (not) one of States (iptables' `-m conntrack
// --ctstate`, `-m state --state`, nft's `ct state`). A rule that carries it makes netfilter
// track the family's connections (see Ruleset.Conntrack).
type CtState struct {
	States uint8
	Invert bool
}

// FibLocal: nft's `fib saddr type local` / `fib daddr type local` (Invert: `type != local`), with
// no other flag (iif, oif, mark). The kernel asks its FIB for the address's route type:
// inet_dev_addr_type() in the local table for IPv4 (nft_fib4_eval_type), a route lookup for
// IPv6 (nft_fib6_eval_type); it is local when a local route covers the address. Such a route is
// always among the host's local, broadcast, anycast and multicast routes of all tables, which the
// router module keeps (lfp_local4/6, lfp_local_pfx4/6): an address none of them covers, outside
// the address classes those maps leave out (IPv4 0/8, 127/8, 224/3; IPv6 multicast, link-local,
// ::/127, v4-mapped), is not local. For an address they do cover the answer also depends on
// which routes the lookup meets first (the local and main tables share one trie until a policy
// rule is first added, and that history is not visible), so the match is "maybe" there.
// iptables' `-m addrtype --src-type|--dst-type LOCAL` is the same match (package nft, xtAddrtype,
// says why).
type FibLocal struct {
	Dir    Dir
	Invert bool
	// XT is the iptables form it was read from, for String; empty for nft's fib.
	XT string
}

// Unknown is a condition the model does not evaluate: the packet may or may not match.
type Unknown struct {
	What string
	// SideEffect: evaluating it changes state (a rate limit's tokens, a `recent` list, an nfacct
	// counter) or its result depends on state Linux keeps, so every packet that reaches it must
	// go to Linux even when the rule's verdict would not matter.
	SideEffect bool
}

func (Addr) isMatch()     {}
func (Proto) isMatch()    {}
func (Protos) isMatch()   {}
func (Ports) isMatch()    {}
func (Iface) isMatch()    {}
func (ICMP) isMatch()     {}
func (Set) isMatch()      {}
func (Mark) isMatch()     {}
func (CtState) isMatch()  {}
func (FibLocal) isMatch() {}
func (Unknown) isMatch()  {}

func not(inv bool) string {
	if inv {
		return "! "
	}
	return ""
}

func (m Addr) String() string {
	flag := "-s"
	if m.Dir == Dst {
		flag = "-d"
	}
	return fmt.Sprintf("%s%s %s", not(m.Invert), flag, m.Prefix)
}

func (m Proto) String() string { return fmt.Sprintf("%s-p %s", not(m.Invert), ProtoName(m.Proto)) }

func (m Protos) String() string {
	var ps []string
	for _, p := range m.Protos {
		ps = append(ps, ProtoName(p))
	}
	return fmt.Sprintf("%s-p {%s}", not(m.Invert), strings.Join(ps, ","))
}

func (m Ports) String() string {
	var rs []string
	for _, r := range m.Ranges {
		if r.From == r.To {
			rs = append(rs, fmt.Sprint(r.From))
		} else {
			rs = append(rs, fmt.Sprintf("%d:%d", r.From, r.To))
		}
	}
	if len(m.Ranges) == 0 {
		rs = []string{"none"} // matches no port
	}
	if len(rs) == 1 && m.Dir != Either {
		flag := "--sport"
		if m.Dir == Dst {
			flag = "--dport"
		}
		return fmt.Sprintf("%s%s %s", not(m.Invert), flag, rs[0])
	}
	flag := map[Dir]string{Src: "--sports", Dst: "--dports", Either: "--ports"}[m.Dir]
	return fmt.Sprintf("-m multiport %s%s %s", not(m.Invert), flag, strings.Join(rs, ","))
}

func (m Iface) String() string {
	flag := "-i"
	if m.Out {
		flag = "-o"
	}
	name := m.Name
	if m.Wildcard {
		name += "+"
	}
	return fmt.Sprintf("%s%s %s", not(m.Invert), flag, name)
}

func (m ICMP) String() string {
	t := fmt.Sprint(m.Type)
	if m.AnyType {
		t = "any"
	} else if m.CodeMin != 0 || m.CodeMax != 0xff {
		if m.CodeMin == m.CodeMax {
			t += fmt.Sprintf("/%d", m.CodeMin)
		} else {
			t += fmt.Sprintf("/%d-%d", m.CodeMin, m.CodeMax)
		}
	}
	return fmt.Sprintf("%s--icmp-type %s", not(m.Invert), t)
}

func (m Set) String() string {
	if m.Nft && len(m.Dirs) == 1 {
		op := "in"
		if m.Invert {
			op = "not in"
		}
		return fmt.Sprintf("%saddr %s %s", map[Dir]string{Src: "s", Dst: "d"}[m.Dirs[0]], op, m.Name)
	}
	var ds []string
	for _, d := range m.Dirs {
		ds = append(ds, d.String())
	}
	return fmt.Sprintf("-m set %s--match-set %s %s", not(m.Invert), m.Name, strings.Join(ds, ","))
}

func (m Mark) String() string {
	if m.Mask == 0xffffffff {
		return fmt.Sprintf("-m mark %s--mark %#x", not(m.Invert), m.Value)
	}
	return fmt.Sprintf("-m mark %s--mark %#x/%#x", not(m.Invert), m.Value, m.Mask)
}

// CtStateNames names the state bits as iptables does, in its order.
func CtStateNames(states uint8) string {
	var ns []string
	for _, b := range []struct {
		bit  uint8
		name string
	}{{CtInvalid, "INVALID"}, {CtNew, "NEW"}, {CtRelated, "RELATED"}, {CtEstablished, "ESTABLISHED"}, {CtUntracked, "UNTRACKED"}} {
		if states&b.bit != 0 {
			ns = append(ns, b.name)
		}
	}
	if len(ns) == 0 {
		return "none"
	}
	return strings.Join(ns, ",")
}

func (m CtState) String() string {
	return fmt.Sprintf("-m conntrack %s--ctstate %s", not(m.Invert), CtStateNames(m.States))
}

func (m FibLocal) String() string {
	if m.XT != "" {
		return m.XT
	}
	op := ""
	if m.Invert {
		op = "!= "
	}
	return fmt.Sprintf("fib %saddr type %slocal", map[Dir]string{Src: "s", Dst: "d"}[m.Dir], op)
}

func (m Unknown) String() string {
	if m.SideEffect {
		return "unknown(" + m.What + ", stateful)"
	}
	return "unknown(" + m.What + ")"
}

// ProtoName names common IP protocols as iptables does.
func ProtoName(p uint8) string {
	switch p {
	case ProtoICMP:
		return "icmp"
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoICMPv6:
		return "ipv6-icmp"
	case ProtoSCTP:
		return "sctp"
	case ProtoUDPLite:
		return "udplite"
	case ProtoDCCP:
		return "dccp"
	}
	return fmt.Sprint(p)
}

// IP protocol numbers the model knows.
const (
	ProtoICMP    = 1
	ProtoTCP     = 6
	ProtoUDP     = 17
	ProtoDCCP    = 33
	ProtoICMPv6  = 58
	ProtoSCTP    = 132
	ProtoUDPLite = 136
)

// HasPorts tells whether protocol p carries 16-bit source and destination ports at the start of
// its header (where iptables' --sport/--dport and multiport read them).
func HasPorts(p uint8) bool {
	switch p {
	case ProtoTCP, ProtoUDP, ProtoSCTP, ProtoDCCP, ProtoUDPLite:
		return true
	}
	return false
}

// String renders the rule's matches as iptables would print them, then its verdict.
func (r *Rule) String() string {
	var parts []string
	for _, m := range r.Matches {
		parts = append(parts, m.String())
	}
	parts = append(parts, "=> "+r.Verdict.String())
	return strings.Join(parts, " ")
}

// Unknowns lists the rule's Unknown matches.
func (r *Rule) Unknowns() []Unknown {
	var u []Unknown
	for _, m := range r.Matches {
		if x, ok := m.(Unknown); ok {
			u = append(u, x)
		}
	}
	return u
}

// NewRuleset returns an empty ruleset.
func NewRuleset(f Family) *Ruleset {
	return &Ruleset{Family: f, Chains: map[ChainKey]*Chain{}, Base: map[Hook][]*Chain{}}
}

// AddChain adds c, and lists it under its hook when it is a base chain.
func (rs *Ruleset) AddChain(c *Chain) {
	rs.Chains[c.Key] = c
	if c.Base != nil {
		rs.Base[c.Base.Hook] = append(rs.Base[c.Base.Hook], c)
	}
}

// AddSetNames adds to names the ipsets the ruleset's rules test (by name, as read); nf_tables
// sets are not ipsets.
func (rs *Ruleset) AddSetNames(names map[string]bool) {
	if rs == nil {
		return
	}
	for _, ch := range rs.Chains {
		for _, r := range ch.Rules {
			for _, m := range r.Matches {
				if s, ok := m.(Set); ok && !s.Nft {
					names[s.Name] = true
				}
			}
		}
	}
}

// Sort orders every hook's base chains by priority (then by key, for a stable order).
func (rs *Ruleset) Sort() {
	for _, cs := range rs.Base {
		slices.SortStableFunc(cs, func(a, b *Chain) int {
			if a.Base.Priority != b.Base.Priority {
				if a.Base.Priority < b.Base.Priority {
					return -1
				}
				return 1
			}
			return strings.Compare(a.Key.String(), b.Key.String())
		})
	}
}

// Lookup finds the chain named name in the table of from (where jumps and gotos go).
func (rs *Ruleset) Lookup(from ChainKey, name string) *Chain {
	return rs.Chains[ChainKey{TableFamily: from.TableFamily, Table: from.Table, Chain: name}]
}

// Stats counts what the model holds, for logs and `linuxfp status`.
type Stats struct {
	Chains, BaseChains, Rules int
	// UnknownRules: rules with an Unknown match or a Linux verdict.
	UnknownRules int
}

// Stats counts chains and rules.
func (rs *Ruleset) Stats() Stats {
	var s Stats
	for _, c := range rs.Chains {
		s.Chains++
		if c.Base != nil {
			s.BaseChains++
		}
		for _, r := range c.Rules {
			s.Rules++
			if r.Verdict.Kind == Linux || len(r.Unknowns()) > 0 {
				s.UnknownRules++
			}
		}
	}
	return s
}

// Established is the ruleset a packet of an already tracked connection traverses: nat-type base
// chains see only a connection's first packet (nf_nat looks the rest up in its conntrack
// entry), so they are left out. The chains themselves are shared with rs.
func (rs *Ruleset) Established() *Ruleset {
	out := &Ruleset{Family: rs.Family, Chains: rs.Chains, Base: map[Hook][]*Chain{}, Conntrack: rs.Conntrack}
	for h, chains := range rs.Base {
		for _, ch := range chains {
			if ch.Base.Type != ChainNAT {
				out.Base[h] = append(out.Base[h], ch)
			}
		}
	}
	return out
}

// ActsOnEstablished says what, on hook h, could act on a packet of an established connection
// (ct state established or related: the packets the conntrack module translates), or "" when
// nothing could. rs is the Established view. A prerouting or postrouting rule sees a translated
// packet before or after its translation, where the fast path sees it only once; it matters only
// if it can match such a packet and then do something other than let it through. So a rule does
// not count when one of its conntrack state matches excludes those states (kube-proxy's `ct state
// new jump firewall-check`), or when its verdict is continue (a counter), accept or return; a
// jump or goto counts when its target chain has a rule that counts. Everything else counts:
// another verdict (drop, a Linux verdict), a match with side effects, a jump to a chain that
// does not exist or too deep, and a drop policy.
func (rs *Ruleset) ActsOnEstablished(h Hook) string {
	memo := map[established]string{}
	for _, ch := range rs.Base[h] {
		states := CtEstablished | CtRelated
		switch before, unsure := CtBefore(h, ch.Base.Priority); {
		case before:
			states = CtInvalid // no conntrack entry yet (see CtBefore)
		case unsure:
			states |= CtInvalid
		}
		if why := rs.actsOnEstablished(ch, states, 0, memo); why != "" {
			return why
		}
		if ch.Base.Policy == PolicyDrop {
			return "policy drop of " + ch.Key.String()
		}
	}
	return ""
}

// established is a chain as seen by packets in one of states (ActsOnEstablished).
type established struct {
	chain  *Chain
	states uint8
}

// maxJumpDepth bounds the jumps ActsOnEstablished follows (nf_tables refuses loops, and a
// jump stack deeper than NFT_JUMP_STACK_SIZE).
const maxJumpDepth = 64

func (rs *Ruleset) actsOnEstablished(ch *Chain, states uint8, depth int, memo map[established]string) string {
	key := established{ch, states}
	if why, ok := memo[key]; ok {
		return why
	}
	why := ""
rules:
	for _, r := range ch.Rules {
		for _, m := range r.Matches {
			switch m := m.(type) {
			case CtState:
				if m.Invert && states&^m.States == 0 || !m.Invert && states&m.States == 0 {
					continue rules // the rule cannot match: nft stops at this match
				}
			case Unknown:
				if m.SideEffect {
					why = r.ID.String() + " (" + m.What + ")"
					break rules
				}
			}
		}
		switch r.Verdict.Kind {
		case Continue, Accept, Return:
			continue
		case Jump, Goto:
			target := rs.Lookup(ch.Key, r.Verdict.Chain)
			if target == nil || depth >= maxJumpDepth {
				why = r.ID.String() + " (" + r.Verdict.String() + ")"
				break rules
			}
			if why = rs.actsOnEstablished(target, states, depth+1, memo); why != "" {
				break rules
			}
			continue
		}
		why = r.ID.String() + " (" + r.Verdict.String() + ")"
		break
	}
	memo[key] = why
	return why
}
