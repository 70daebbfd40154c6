package compile

import (
	"net/netip"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// Input is what the data plane knows of a packet when it classifies it: after the routing
// decision (so the output interface is known), for a whole packet (fragments go to Linux first).
type Input struct {
	Src, Dst           netip.Addr
	Proto              uint8
	SrcPort, DstPort   uint16 // when model.HasPorts(Proto)
	ICMPType, ICMPCode uint8  // ICMP (IPv4) or ICMPv6 (IPv6)
	// IifBits / OifBits: the pattern bits of the input / output interface.
	IifBits, OifBits uint64
	// CtState is the packet's conntrack state (one model.Ct* bit), 0 when the data plane does
	// not know it.
	CtState uint8
	// SrcMaybeLocal / DstMaybeLocal: the address may be local (eval.MaybeLocal).
	SrcMaybeLocal, DstMaybeLocal bool
}

// Verdict is the classification's outcome.
type Verdict uint8

const (
	Accept Verdict = iota // passes every chain: forward
	Drop                  // dropped by a rule or a policy: XDP_DROP
	Linux                 // Linux decides: XDP_PASS
)

func (v Verdict) String() string { return [...]string{"accept", "drop", "linux"}[v] }

// Outcome is a verdict and the flat rule that gave it (-1: none, every chain passed; or an
// overflow leaf or too many skips).
type Outcome struct {
	Verdict Verdict
	Rule    int
	Why     string
}

// Classify is what bpf/lib/filter.h does, step for step.
func (p *Program) Classify(in Input) Outcome {
	if p.Empty {
		return Outcome{Verdict: Accept, Rule: -1}
	}
	if p.HasCtState && in.CtState == 0 {
		return Outcome{Verdict: Linux, Rule: -1, Why: "conntrack state unknown"}
	}
	if p.FibLocalSrc && in.SrcMaybeLocal || p.FibLocalDst && in.DstMaybeLocal {
		return Outcome{Verdict: Linux, Rule: -1, Why: "fib type local: the address may be local"}
	}
	if in.CtState&p.CtNoRule != 0 {
		return Outcome{Verdict: Accept, Rule: -1}
	}
	cut := in.Dst
	if p.Cut == CutSrc {
		cut = in.Src
	}
	leaf := p.leafFor(cut)
	if leaf == nil {
		return Outcome{Verdict: Linux, Rule: -1, Why: "no leaf"}
	}
	if leaf.Overflow {
		return Outcome{Verdict: Linux, Rule: -1, Why: "overflow leaf"}
	}
	next, skips := 0, 0
	for _, ri := range leaf.Rules {
		if ri < next {
			continue
		}
		r := &p.Rules[ri]
		if !p.match(r, in) {
			continue
		}
		switch r.Action {
		case ActDrop:
			return Outcome{Verdict: Drop, Rule: ri}
		case ActLinux:
			return Outcome{Verdict: Linux, Rule: ri}
		case ActSkip:
			if skips++; skips > MaxSkips {
				return Outcome{Verdict: Linux, Rule: ri, Why: "too many skips"}
			}
			next = r.SkipTo
		}
	}
	return Outcome{Verdict: Accept, Rule: -1}
}

// leafFor is the longest-prefix match of the cut address.
func (p *Program) leafFor(a netip.Addr) *Leaf {
	best := -1
	var leaf *Leaf
	for _, lp := range p.Prefixes {
		if lp.Prefix.Contains(a) && lp.Prefix.Bits() > best {
			best, leaf = lp.Prefix.Bits(), &p.Leaves[lp.Leaf]
		}
	}
	return leaf
}

// ctStates are the conntrack states a packet may be in for r to match: every state where r
// tests none.
func (r *Rule) ctStates() uint8 {
	may := model.CtStates
	for _, t := range r.Tests {
		if t.Kind != TestCtState {
			continue
		}
		if t.Invert {
			may &^= uint8(t.A)
		} else {
			may &= uint8(t.A)
		}
	}
	return may
}

func (p *Program) match(r *Rule, in Input) bool {
	for _, t := range r.Tests {
		if p.test(t, in) == t.Invert {
			return false
		}
	}
	return true
}

func (p *Program) test(t Test, in Input) bool {
	ports := model.HasPorts(in.Proto)
	switch t.Kind {
	case TestSrc:
		return t.Prefix.Contains(in.Src)
	case TestDst:
		return t.Prefix.Contains(in.Dst)
	case TestProto:
		return uint16(in.Proto) == t.A
	case TestSport:
		return ports && t.A <= in.SrcPort && in.SrcPort <= t.B
	case TestDport:
		return ports && t.A <= in.DstPort && in.DstPort <= t.B
	case TestICMP:
		icmp := uint8(model.ProtoICMP)
		if p.Family == model.IPv6 {
			icmp = model.ProtoICMPv6
		}
		return in.Proto == icmp && (t.A > 255 || uint16(in.ICMPType) == t.A) &&
			uint16(in.ICMPCode) >= t.B>>8 && uint16(in.ICMPCode) <= t.B&0xff
	case TestCtState:
		return uint16(in.CtState)&t.A != 0
	case TestIif:
		return in.IifBits&(1<<t.A) != 0
	case TestOif:
		return in.OifBits&(1<<t.A) != 0
	case TestSet:
		s := &p.Sets[t.A]
		addr := in.Dst
		if t.B&SetAddrSrc != 0 {
			addr = in.Src
		}
		var proto uint8
		var port uint16
		if s.HasPort {
			if p.Family == model.IPv4 && in.Proto == 0 {
				return false // ip_set_get_ip4_port: protocol 0 does not match
			}
			proto = in.Proto
			// ip_set_get_port() reads ports of TCP, SCTP, UDP and UDPlite only: DCCP (which
			// has ports for --sport/--dport) gets port 0, as every other protocol.
			setPorts := ports && in.Proto != model.ProtoDCCP
			switch {
			case setPorts && t.B&SetPortSrc != 0:
				port = in.SrcPort
			case setPorts:
				port = in.DstPort
			case in.Proto == model.ProtoICMP || in.Proto == model.ProtoICMPv6:
				port = uint16(in.ICMPType)<<8 | uint16(in.ICMPCode)
			}
		}
		return s.Contains(addr, proto, port)
	}
	return false
}
