package compile_test

// The randomized differential test: random rulesets (compiletest's generator) are compiled and
// random packets classified; whenever the reference evaluator says Accept or Drop, Classify must
// say the same or Linux, and whenever it says Linux, Classify must say Linux. How often Classify
// gives to Linux a packet the evaluator decides is the gap, logged by reason.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/compile/compiletest"
	"github.com/linuxfp/linuxfp/internal/filter/eval"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

const (
	diffRulesets = 3000
	diffPackets  = 150
)

// input is what the data plane knows of p.
func input(prog *compile.Program, p eval.Packet) compile.Input {
	in := compile.Input{Src: p.Src, Dst: p.Dst, Proto: p.Proto, SrcPort: p.SrcPort, DstPort: p.DstPort, ICMPType: p.ICMPType, ICMPCode: p.ICMPCode, CtState: p.CtState,
		SrcMaybeLocal: p.SrcMaybeLocal, DstMaybeLocal: p.DstMaybeLocal}
	for i, pat := range prog.Patterns {
		if pat.Matches(p.In) {
			in.IifBits |= 1 << i
		}
		if pat.Matches(p.Out) {
			in.OifBits |= 1 << i
		}
	}
	return in
}

// dumpRuleset renders a ruleset and its sets for failure messages.
func dumpRuleset(rs *model.Ruleset, sets map[string]*model.IPSet) string {
	var b strings.Builder
	for _, h := range model.Hooks {
		for _, c := range rs.Base[h] {
			fmt.Fprintf(&b, "%s %s priority %d policy %s\n", h, c.Key, c.Base.Priority, c.Base.Policy)
		}
	}
	keys := make([]model.ChainKey, 0, len(rs.Chains))
	for k := range rs.Chains {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		fmt.Fprintf(&b, "chain %s\n", k)
		for i, r := range rs.Chains[k].Rules {
			fmt.Fprintf(&b, "  %d: %s\n", i, r)
		}
	}
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s := sets[n]
		fmt.Fprintf(&b, "set %s %s %s netmask %d unsupported %q: %v\n", n, s.Type, s.Family, s.Netmask, s.Unsupported, s.Entries)
	}
	return b.String()
}

// checkProgram checks what the data plane relies on.
func checkProgram(t *testing.T, p *compile.Program) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n%s", append(args, p)...)
	}
	if len(p.Rules) > compile.MaxRules || len(p.Patterns) > compile.MaxPatterns {
		fail("%d rules, %d patterns", len(p.Rules), len(p.Patterns))
	}
	for i, r := range p.Rules {
		if len(r.Tests) > compile.MaxTests {
			fail("rule %d has %d tests", i, len(r.Tests))
		}
		if r.Action == compile.ActSkip && (r.SkipTo <= i || r.SkipTo > len(p.Rules)) {
			fail("rule %d skips to %d", i, r.SkipTo)
		}
		if r.Origin.Chain == nil {
			fail("rule %d has no origin", i)
		}
		if r.Action == compile.ActLinux && r.Origin.Note == "" {
			fail("Linux rule %d says not why", i)
		}
		for _, tt := range r.Tests {
			if (tt.Kind == compile.TestIif || tt.Kind == compile.TestOif) && int(tt.A) >= len(p.Patterns) {
				fail("rule %d: pattern %d", i, tt.A)
			}
			if tt.Kind == compile.TestSet && int(tt.A) >= len(p.Sets) {
				fail("rule %d: set %d", i, tt.A)
			}
			if (tt.Kind == compile.TestSrc || tt.Kind == compile.TestDst) && tt.Prefix != tt.Prefix.Masked() {
				fail("rule %d: prefix %s not masked", i, tt.Prefix)
			}
		}
	}
	root := false
	seen := map[string]bool{}
	for _, lp := range p.Prefixes {
		if lp.Prefix.Bits() == 0 {
			root = true
		}
		if seen[lp.Prefix.String()] || lp.Prefix != lp.Prefix.Masked() || lp.Leaf < 0 || lp.Leaf >= len(p.Leaves) {
			fail("prefix %s -> %d", lp.Prefix, lp.Leaf)
		}
		seen[lp.Prefix.String()] = true
	}
	if !root {
		fail("no /0 prefix")
	}
	for i, l := range p.Leaves {
		if len(l.Rules) > compile.MaxLeaf || !slices.IsSorted(l.Rules) || (l.Overflow && len(l.Rules) > 0) {
			fail("leaf %d: %v", i, l)
		}
		for _, ri := range l.Rules {
			if ri < 0 || ri >= len(p.Rules) {
				fail("leaf %d: rule %d", i, ri)
			}
		}
	}
}

// gapReason groups the reasons Classify gave a decided packet to Linux.
func gapReason(p *compile.Program, o compile.Outcome) string {
	if o.Rule < 0 || o.Why != "" {
		return o.Why
	}
	n := p.Rules[o.Rule].Origin.Note
	for _, k := range []string{"tests, more than", "may run", "may apply", "jump to unknown chain", "interface patterns"} {
		if strings.Contains(n, k) {
			return k
		}
	}
	return n
}

type diffStats struct {
	packets, skippedMark   int
	eval                   map[eval.Verdict]int
	gap                    int
	gapWhy                 map[string]int
	rules, leafMax, leafSz int
	leaves                 int
}

func seed(t *testing.T) uint64 {
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("LFP_COMPILE_SEED"); v != "" {
		var err error
		if s, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (rerun with LFP_COMPILE_SEED=%d)", s, s)
	return s
}

// equalPriorities: some hook has base chains of equal priority.
func equalPriorities(rs *model.Ruleset) bool {
	for _, cs := range rs.Base {
		for i := 1; i < len(cs); i++ {
			if cs[i].Base.Priority == cs[i-1].Base.Priority {
				return true
			}
		}
	}
	return false
}

// compare classifies packets with prog and checks them against the evaluator.
func compare(t *testing.T, st *diffStats, rs *model.Ruleset, sets map[string]*model.IPSet, prog *compile.Program, pkts []eval.Packet, context func() string) {
	t.Helper()
	for _, p := range pkts {
		want := eval.Evaluate(rs, sets, p)
		if p.Mark != 0 && prog.HasMark {
			st.skippedMark++ // the data plane gives such packets to Linux
			continue
		}
		st.packets++
		st.eval[want.Verdict]++
		got := prog.Classify(input(prog, p))
		ok := got.Verdict == compile.Linux || (want.Verdict == eval.Accept && got.Verdict == compile.Accept) ||
			(want.Verdict == eval.Drop && got.Verdict == compile.Drop)
		if ok && want.Verdict == eval.Drop && got.Verdict == compile.Drop && !equalPriorities(rs) {
			// The per-rule counters: the flat rule comes from the rule (or policy) that dropped.
			// (Of base chains of equal priority, the kernel's order is unknown: which of them
			// drops first is not either.)
			o := prog.Rules[got.Rule].Origin
			if o.Rule != want.Rule || (want.Rule == nil && o.Chain != want.Chain) {
				t.Fatalf("%s: dropped by flat rule %d from [%s], the evaluator says by %v of %s\n%s", p, got.Rule, o, want.Rule, want.Chain.Key, context())
			}
		}
		if !ok {
			t.Fatalf("%s: evaluator says %s (%s), Classify says %s (rule %d %s)\n%s", p, want.Verdict, want.Reason, got.Verdict, got.Rule, got.Why, context())
		}
		if want.Verdict != eval.Linux && got.Verdict == compile.Linux {
			st.gap++
			st.gapWhy[gapReason(prog, got)]++
			// LFP_COMPILE_GAP=reason (or "rare": every reason but overflow leaves and rules with
			// too many tests) shows the first cases of a reason.
			g := os.Getenv("LFP_COMPILE_GAP")
			why := gapReason(prog, got)
			if (g == why || (g == "rare" && why != "overflow leaf" && why != "tests, more than")) && st.gapWhy[why] <= 2 {
				t.Logf("gap: %s: evaluator says %s (%s), Classify says %s (rule %d %s)\n%s", p, want.Verdict, want.Reason, got.Verdict, got.Rule, got.Why, context())
			}
		}
	}
}

func (st *diffStats) log(t *testing.T, what string) {
	t.Helper()
	decided := st.eval[eval.Accept] + st.eval[eval.Drop]
	t.Logf("%s: %d packets (%d with a mark skipped): evaluator accept %d, drop %d, linux %d; Classify gives Linux %d of the %d decided (%.2f%%)",
		what, st.packets, st.skippedMark, st.eval[eval.Accept], st.eval[eval.Drop], st.eval[eval.Linux], st.gap, decided, 100*float64(st.gap)/float64(max(decided, 1)))
	type kv struct {
		k string
		v int
	}
	var why []kv
	for k, v := range st.gapWhy {
		why = append(why, kv{k, v})
	}
	sort.Slice(why, func(i, j int) bool { return why[i].v > why[j].v })
	for _, w := range why {
		t.Logf("  gap %6d  %s", w.v, w.k)
	}
}

func newStats() *diffStats {
	return &diffStats{eval: map[eval.Verdict]int{}, gapWhy: map[string]int{}}
}

func TestRandomDifferential(t *testing.T) {
	r := rand.New(rand.NewPCG(seed(t), 0x2f))
	n := diffRulesets
	if v := os.Getenv("LFP_COMPILE_RULESETS"); v != "" { // longer runs by hand
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	st := newStats()
	start := time.Now()
	var compileTime time.Duration
	for i := range n {
		fam := model.IPv4
		if r.IntN(2) == 0 {
			fam = model.IPv6
		}
		g := &compiletest.Gen{R: r, Family: fam}
		rs, sets := g.Ruleset()
		t0 := time.Now()
		prog, err := compile.Compile(rs, sets)
		compileTime += time.Since(t0)
		if err != nil {
			t.Fatalf("ruleset %d: %v\n%s", i, err, dumpRuleset(rs, sets))
		}
		checkProgram(t, prog)
		st.rules += len(prog.Rules)
		for _, l := range prog.Leaves {
			st.leafMax = max(st.leafMax, len(l.Rules))
		}
		var pkts []eval.Packet
		for range diffPackets {
			pkts = append(pkts, g.Packet())
		}
		compare(t, st, rs, sets, prog, pkts, func() string {
			return fmt.Sprintf("ruleset %d:\n%s\n%s", i, dumpRuleset(rs, sets), prog)
		})
	}
	st.log(t, fmt.Sprintf("%d random rulesets (%d flat rules in all, longest leaf %d, compile %v in all, test %v)",
		n, st.rules, st.leafMax, compileTime.Round(time.Millisecond), time.Since(start).Round(time.Millisecond)))
	decided := st.eval[eval.Accept] + st.eval[eval.Drop]
	if st.eval[eval.Accept] < st.packets/10 || st.eval[eval.Drop] < st.packets/10 {
		t.Errorf("too few decided packets to compare (accept %d, drop %d of %d): the generator needs tuning", st.eval[eval.Accept], st.eval[eval.Drop], st.packets)
	}
	if st.gap*20 > decided {
		t.Errorf("Classify gives Linux %d of %d packets the evaluator decides (more than 5%%)", st.gap, decided)
	}
}
