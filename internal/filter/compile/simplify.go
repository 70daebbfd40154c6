package compile

import (
	"net/netip"
	"slices"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// conj is the conjunction of the given tests, simplified; ok false: no packet satisfies it.
func conj(fam model.Family, parts ...[]Test) (tests []Test, ok bool) {
	var out []Test
	for _, p := range parts {
		for _, t := range p {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return simplify(fam, out)
}

// simplify removes tests implied by others and finds conjunctions no packet satisfies. Every
// step is an equivalence for every packet Classify sees (whole packets of family fam).
func simplify(fam model.Family, ts []Test) ([]Test, bool) {
	for i, a := range ts {
		for _, b := range ts[i+1:] {
			if a.Kind == b.Kind && a.A == b.A && a.B == b.B && a.Prefix == b.Prefix && a.Invert != b.Invert {
				return nil, false // t and not t
			}
		}
	}
	drop := make([]bool, len(ts))
	// Protocol: one positive protocol decides the others and what needs ports or ICMP.
	proto := -1
	posICMP := false
	for _, t := range ts {
		if t.Kind == TestProto && !t.Invert {
			if proto >= 0 && proto != int(t.A) {
				return nil, false
			}
			proto = int(t.A)
		}
		if t.Kind == TestICMP && !t.Invert {
			posICMP = true
		}
	}
	icmp := int(icmpProto(fam))
	if posICMP {
		if proto >= 0 && proto != icmp {
			return nil, false
		}
		for i, t := range ts {
			if t.Kind == TestProto && !t.Invert {
				drop[i] = true // TestICMP tests the protocol
			}
		}
	}
	if proto >= 0 {
		for i, t := range ts {
			switch t.Kind {
			case TestProto:
				if t.Invert {
					drop[i] = true // another protocol (the same one is a contradiction above)
				}
			case TestSport, TestDport:
				if proto > 255 || !model.HasPorts(uint8(proto)) {
					if !t.Invert {
						return nil, false
					}
					drop[i] = true
				} else if t.A == 0 && t.B == 0xffff {
					if t.Invert {
						return nil, false
					}
					drop[i] = true // every port of a protocol with ports
				}
			case TestICMP:
				if proto != icmp {
					if !t.Invert {
						return nil, false
					}
					drop[i] = true
				}
			}
		}
	}
	// Port ranges: positive ones intersect; inverted ones covering it contradict, disjoint ones
	// are implied.
	for _, k := range []TestKind{TestSport, TestDport} {
		lo, hi, pos := uint16(0), uint16(0xffff), -1
		for i, t := range ts {
			if t.Kind == k && !t.Invert && !drop[i] {
				if pos >= 0 {
					drop[i] = true
				} else {
					pos = i
				}
				lo, hi = max(lo, t.A), min(hi, t.B)
			}
		}
		if pos < 0 {
			continue
		}
		if lo > hi {
			return nil, false
		}
		ts[pos].A, ts[pos].B = lo, hi
		for i, t := range ts {
			if t.Kind == k && t.Invert && !drop[i] {
				if t.A <= lo && hi <= t.B {
					return nil, false
				}
				if t.B < lo || t.A > hi {
					drop[i] = true
				}
			}
		}
	}
	// Inverted port ranges of one kind: not in A and not in B is not in A+B when that is a range
	// (each test also needs ports: the same for both).
	for _, k := range []TestKind{TestSport, TestDport} {
		var idx []int
		for i, t := range ts {
			if t.Kind == k && t.Invert && !drop[i] {
				idx = append(idx, i)
			}
		}
		if len(idx) < 2 {
			continue
		}
		rs := make([]model.PortRange, len(idx))
		for j, i := range idx {
			rs[j] = model.PortRange{From: ts[i].A, To: ts[i].B}
		}
		merged := mergeRanges(rs)
		for j, i := range idx {
			if j < len(merged) {
				ts[i].A, ts[i].B = merged[j].From, merged[j].To
			} else {
				drop[i] = true
			}
		}
	}
	// Addresses: positive prefixes must nest (the longest decides); an inverted prefix containing
	// it contradicts, one disjoint from it is implied, one inside another inverted one too.
	for _, k := range []TestKind{TestSrc, TestDst} {
		pos := -1
		for i, t := range ts {
			if t.Kind != k || t.Invert || drop[i] {
				continue
			}
			switch {
			case pos < 0:
				pos = i
			case contains(ts[pos].Prefix, t.Prefix):
				drop[pos], pos = true, i
			case contains(t.Prefix, ts[pos].Prefix):
				drop[i] = true
			default:
				return nil, false
			}
		}
		for i, t := range ts {
			if t.Kind != k || !t.Invert || drop[i] {
				continue
			}
			if pos >= 0 {
				p := ts[pos].Prefix
				if contains(t.Prefix, p) {
					return nil, false
				}
				if !contains(p, t.Prefix) {
					drop[i] = true
					continue
				}
			}
			for j, u := range ts {
				if j != i && u.Kind == k && u.Invert && !drop[j] && contains(u.Prefix, t.Prefix) {
					drop[i] = true
					break
				}
			}
		}
	}
	out := make([]Test, 0, len(ts))
	for i, t := range ts {
		if !drop[i] {
			out = append(out, t)
		}
	}
	return out, true
}

// contains: every address of q is in p.
func contains(p, q netip.Prefix) bool {
	return p.Bits() <= q.Bits() && p.Contains(q.Addr())
}

// sameTests: a and b hold the same tests.
func sameTests(a, b []Test) bool {
	if len(a) != len(b) {
		return false
	}
	for _, t := range a {
		if !slices.Contains(b, t) {
			return false
		}
	}
	return true
}

// truncate keeps MaxTests tests of a rule that becomes Linux's (any subset matches more
// packets): positive address tests first (they select the leaves), then in order.
func truncate(ts []Test) []Test {
	out := make([]Test, 0, MaxTests)
	for pass := 0; pass < 2; pass++ {
		for _, t := range ts {
			addr := (t.Kind == TestSrc || t.Kind == TestDst) && !t.Invert
			if addr == (pass == 0) && len(out) < MaxTests {
				out = append(out, t)
			}
		}
	}
	return out
}
