// Package compile turns a forward-path ruleset (package model) into the tables the BPF filter
// module classifies packets with (bpf/lib/filter.h), and holds a Go implementation of that
// classification (Classify) that mirrors the BPF code step by step, so that the compiler can be
// tested against the reference evaluator (package eval) without the kernel.
//
// The compiled form, per family:
//
//   - Rules: one flat list with first-match semantics. The chains of every hook (prerouting,
//     forward, postrouting, base chains in priority order) are inlined: a jump inlines the target
//     chain, a return or the end of a jumped-to chain continues after it, a goto inlines and then
//     skips to the end of the calling chain, accept skips to the next base chain, a base chain's
//     drop policy is an unconditional drop rule at its end. Each rule is a conjunction of up to
//     MaxTests primitive tests (each possibly inverted) and an action: Drop, Linux, or Skip to a
//     later rule index. A positive disjunction (multiport lists, --ports matching source or
//     destination) becomes consecutive rules with the same action; a negated one becomes several
//     inverted tests in one rule.
//   - An Unknown match makes the rule's action Linux (the packet may or may not match); the
//     rule keeps its known tests, so only packets that could reach it go to Linux.
//   - Candidate selection: rules are found through a longest-prefix match on one address
//     (Cut: source or destination) whose leaf lists, in order, the rules that may match some
//     address of that leaf's region. A region whose list is longer than MaxLeaf is an overflow
//     leaf: its packets go to Linux (counted), never to a truncated list.
//   - Interfaces are matched by pattern bits: each distinct -i/-o pattern in the ruleset gets a
//     bit; the controller gives every interface the bits of the patterns its name matches.
//     Output-interface matches in prerouting (where Linux has none yet: an empty name) and `+`
//     (every name) are folded by the compiler: no test reads an empty name.
//   - Marks: at the XDP hook a packet from a NIC or from another namespace has mark 0; mark
//     matches are folded at compile time under that assumption (HasMark says some were), and the
//     data plane hands Linux the packets of interfaces where it does not hold.
package compile

import (
	"net/netip"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// Limits shared with bpf/lib/filter.h.
const (
	MaxTests = 8  // tests per rule
	MaxLeaf  = 64 // candidate rules per leaf
	// MaxRules bounds the compile's work; the data plane's maps follow the ruleset up to
	// linuxfp run --filter-rules, at most this.
	MaxRules    = 1 << 20
	MaxPatterns = 64 // interface pattern bits
	MaxSkips    = 16 // skips followed per packet before giving up (Linux)
)

// Action is what a rule does when all its tests hold.
type Action uint8

const (
	ActDrop  Action = 1 // the packet is dropped (XDP_DROP)
	ActLinux Action = 2 // Linux decides (XDP_PASS)
	ActSkip  Action = 3 // continue at rule SkipTo (accept of a base chain, return, goto)
)

// TestKind is one primitive predicate.
type TestKind uint8

const (
	TestSrc      TestKind = 1  // source address in Prefix
	TestDst      TestKind = 2  // destination address in Prefix
	TestProto    TestKind = 3  // transport protocol == A
	TestSport    TestKind = 4  // protocol has ports and A <= source port <= B
	TestDport    TestKind = 5  // protocol has ports and A <= destination port <= B
	TestICMP     TestKind = 6  // ICMP/ICMPv6 (by family) with type == A (A > 255: any type) and code in [B>>8, B&0xff]
	TestIif      TestKind = 7  // input interface has pattern bit A
	TestOif      TestKind = 8  // output interface has pattern bit A
	TestSet      TestKind = 9  // ipset A contains the packet's (address, port) per Set*
	TestFragment TestKind = 10 // never true here: fragments go to Linux before classification
	TestCtState  TestKind = 11 // the packet's conntrack state bit (model.Ct*) is in A
)

// Set dimension flags in Test.B for TestSet.
const (
	SetAddrSrc uint16 = 1 << 0 // the address dimension comes from the source (else destination)
	SetPortSrc uint16 = 1 << 1 // the port dimension comes from the source (else destination)
	SetHasPort uint16 = 1 << 2 // the set has a port dimension (hash:ip,port / hash:net,port)
)

// Test is one primitive predicate; Invert negates it.
type Test struct {
	Kind   TestKind
	Invert bool
	A, B   uint16
	Prefix netip.Prefix // TestSrc, TestDst
}

// Rule is one flat rule.
type Rule struct {
	Tests  []Test
	Action Action
	SkipTo int // ActSkip: the index of the next rule to consider
	// Origin is the model rule (or chain policy) this flat rule comes from: per-rule counters
	// are reported for it.
	Origin Origin
	// PreCT: the rule belongs to a chain that runs before conntrack (prerouting, priority below
	// conntrack's: raw). A packet it drops never reaches conntrack, whose entry Linux then does
	// not refresh (see Program.PreCTDrop).
	PreCT bool
}

// Origin names where a flat rule comes from.
type Origin struct {
	Rule  *model.Rule  // nil for a chain policy or a group made Linux's
	Chain *model.Chain // the chain of Rule, or whose policy this is
	Note  string       // why this rule is Linux's, when it is
}

// Cut says which address selects the candidate rules.
type Cut uint8

const (
	CutDst Cut = 0
	CutSrc Cut = 1
)

// Leaf is the ordered list of candidate rules for one region of the cut address.
type Leaf struct {
	Rules    []int
	Overflow bool // more than MaxLeaf candidates: the region's packets go to Linux
}

// LeafPrefix maps a prefix of the cut address to a leaf; the longest matching prefix wins.
// Every program has a zero-length prefix.
type LeafPrefix struct {
	Prefix netip.Prefix
	Leaf   int
}

// Pattern is an interface name pattern (-i/-o): a name, or a prefix when Wildcard.
type Pattern struct {
	Name     string
	Wildcard bool
}

// Matches says whether an interface name matches the pattern, as iptables/nftables compare.
func (p Pattern) Matches(name string) bool {
	if p.Wildcard {
		return len(name) >= len(p.Name) && name[:len(p.Name)] == p.Name
	}
	return name == p.Name
}

// SetRef is an ipset used by the program: TestSet's A is its index in Program.Sets. Its
// entries go into the data plane's set LPM (see Contains for the lookup the BPF code does).
// Tests whose outcome does not depend on the packet (a set of the other family, a rule giving
// fewer directions than the set has dimensions) are folded by the compiler.
type SetRef struct {
	Name string
	// HashIP: hash:ip: the address is looked up masked to Netmask (0: no mask) and an address
	// that masks to zero never matches (hash_ip4_kadt). hash:ip,port has neither (its kadt
	// neither masks nor refuses zero): HashIP is false, its entries are host prefixes.
	HashIP  bool
	Netmask int
	HasPort bool
	// Entries: hash:ip addresses as /Netmask (or host) prefixes, hash:ip,port ones as host
	// prefixes, hash:net(,port) prefixes masked; Proto and Port are 0 for sets without a port
	// dimension, NoMatch only in hash:net(,port).
	Entries []model.SetEntry
}

// Contains is the data plane's lookup: the most specific entry with the same (proto, port) that
// contains addr decides, a nomatch entry meaning no. For sets without a port dimension, proto
// and port are 0.
func (s *SetRef) Contains(addr netip.Addr, proto uint8, port uint16) bool {
	if s.HashIP {
		if s.Netmask > 0 {
			p, _ := addr.Prefix(s.Netmask)
			addr = p.Addr()
		}
		if addr.IsUnspecified() {
			return false
		}
	}
	best, in := -1, false
	for _, e := range s.Entries {
		if e.Proto == proto && e.Port == port && e.Prefix.Contains(addr) && e.Prefix.Bits() > best {
			best, in = e.Prefix.Bits(), !e.NoMatch
		}
	}
	return in
}

// Program is the compiled form of one family's ruleset.
type Program struct {
	Family   model.Family
	Rules    []Rule
	Cut      Cut
	Leaves   []Leaf
	Prefixes []LeafPrefix
	Patterns []Pattern
	Sets     []SetRef
	HasMark  bool
	// HasCtState: some test reads the packet's conntrack state; a packet whose state the data
	// plane does not know (conntrack did not run in the fast path) goes to Linux.
	HasCtState bool
	// FibLocalSrc / FibLocalDst: some `fib saddr|daddr type local` match was folded as false
	// (`!= local` as true): the address is not local. The data plane hands Linux, before any
	// rule, the packets whose source / destination may be local (model.FibLocal: the router
	// module's local-route maps cover it, or it is of a class they leave out). The source of a
	// routed packet never is (the router hands Linux local and martian sources first).
	FibLocalSrc, FibLocalDst bool
	// CtNoRule: the conntrack states (model.Ct* bits) no rule can match, because each rule
	// tests the state and none of its tests lets this one through. A packet in such a state is
	// accepted once the checks before the rules (mark, fib type local) passed, without its leaf.
	CtNoRule uint8
	// PreCTDrop: some rule before conntrack drops: the data plane refreshes a connection's
	// conntrack entry only once the classification says no such rule dropped the packet.
	PreCTDrop bool
	// Empty: no rule and no drop policy anywhere, and no folded fib match: every packet is
	// accepted (the data plane skips classification).
	Empty bool
}
