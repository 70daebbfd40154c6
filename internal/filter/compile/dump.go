package compile

import (
	"fmt"
	"strings"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

func (a Action) String() string {
	switch a {
	case ActDrop:
		return "drop"
	case ActLinux:
		return "linux"
	case ActSkip:
		return "skip"
	}
	return fmt.Sprintf("action%d", uint8(a))
}

func (c Cut) String() string {
	if c == CutSrc {
		return "src"
	}
	return "dst"
}

// String renders a test as iptables would print it; patterns and sets by index.
func (t Test) String() string {
	not := ""
	if t.Invert {
		not = "! "
	}
	switch t.Kind {
	case TestSrc:
		return not + "-s " + t.Prefix.String()
	case TestDst:
		return not + "-d " + t.Prefix.String()
	case TestProto:
		return not + "-p " + model.ProtoName(uint8(t.A))
	case TestSport, TestDport:
		f := "--sport "
		if t.Kind == TestDport {
			f = "--dport "
		}
		if t.A == t.B {
			return fmt.Sprintf("%s%s%d", not, f, t.A)
		}
		return fmt.Sprintf("%s%s%d:%d", not, f, t.A, t.B)
	case TestICMP:
		typ := fmt.Sprint(t.A)
		if t.A > 255 {
			typ = "any"
		}
		return fmt.Sprintf("%s--icmp-type %s/%d-%d", not, typ, t.B>>8, t.B&0xff)
	case TestIif:
		return fmt.Sprintf("%s-i pattern%d", not, t.A)
	case TestOif:
		return fmt.Sprintf("%s-o pattern%d", not, t.A)
	case TestSet:
		var d []string
		if t.B&SetAddrSrc != 0 {
			d = append(d, "src")
		} else {
			d = append(d, "dst")
		}
		if t.B&SetHasPort != 0 {
			if t.B&SetPortSrc != 0 {
				d = append(d, "src")
			} else {
				d = append(d, "dst")
			}
		}
		return fmt.Sprintf("%s--match-set set%d %s", not, t.A, strings.Join(d, ","))
	case TestFragment:
		return not + "-f"
	}
	return fmt.Sprintf("%stest%d(%d,%d)", not, t.Kind, t.A, t.B)
}

func (r Rule) String() string {
	var parts []string
	for _, t := range r.Tests {
		parts = append(parts, t.String())
	}
	a := r.Action.String()
	if r.Action == ActSkip {
		a = fmt.Sprintf("skip to %d", r.SkipTo)
	}
	parts = append(parts, "=> "+a)
	return strings.Join(parts, " ")
}

// String describes where a flat rule comes from.
func (o Origin) String() string {
	var s string
	switch {
	case o.Rule != nil:
		s = o.Rule.ID.String()
	case o.Chain != nil:
		s = "policy of " + o.Chain.Key.String()
	}
	if o.Note != "" {
		s += ": " + o.Note
	}
	return s
}

// String renders the whole program, for logs and test failures.
func (p *Program) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s program: %d rules, cut %s, %d prefixes, %d leaves", p.Family, len(p.Rules), p.Cut, len(p.Prefixes), len(p.Leaves))
	if p.Empty {
		b.WriteString(", empty")
	}
	if p.HasMark {
		b.WriteString(", mark matches folded")
	}
	if p.FibLocalSrc || p.FibLocalDst {
		b.WriteString(", fib type local folded")
	}
	if p.HasCtState && p.CtNoRule != 0 {
		fmt.Fprintf(&b, ", no rule for ctstate %s", model.CtStateNames(p.CtNoRule))
	}
	b.WriteString("\n")
	for i, pt := range p.Patterns {
		n := pt.Name
		if pt.Wildcard {
			n += "+"
		}
		fmt.Fprintf(&b, "  pattern%d %s\n", i, n)
	}
	for i, s := range p.Sets {
		fmt.Fprintf(&b, "  set%d %s haship=%v netmask=%d port=%v entries %v\n", i, s.Name, s.HashIP, s.Netmask, s.HasPort, s.Entries)
	}
	for i, r := range p.Rules {
		fmt.Fprintf(&b, "  %3d %s    [%s]\n", i, r, r.Origin)
	}
	for _, lp := range p.Prefixes {
		l := p.Leaves[lp.Leaf]
		if l.Overflow {
			fmt.Fprintf(&b, "  %s -> leaf %d overflow\n", lp.Prefix, lp.Leaf)
		} else {
			fmt.Fprintf(&b, "  %s -> leaf %d %v\n", lp.Prefix, lp.Leaf, l.Rules)
		}
	}
	return b.String()
}
