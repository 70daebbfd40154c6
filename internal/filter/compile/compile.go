package compile

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// Compiler limits (not shared with the BPF code).
const (
	// maxDepth mirrors the reference evaluator: a jump or goto from a chain this deep goes to
	// Linux (nf_tables itself refuses more than 16 levels, so only hand-made models get there).
	maxDepth = 64
	// maxCopies caps the copies a rule's positive disjunctions (multiport lists, --ports) expand
	// to; beyond it the largest disjunctions are left out and the rule becomes Linux's.
	maxCopies = 64
	// maxEmitted caps the flat rules emitted before optimisation (jumps to the same chain from
	// many places multiply its rules); beyond it Compile fails.
	maxEmitted = 4 * MaxRules
	// maxVisits caps the model rules compiled (the same rule once per place its chain is
	// inlined), emitted or not.
	maxVisits = 8 * MaxRules
)

// ErrTooLarge: the flattened ruleset does not fit the data plane's tables. The controller hands
// the whole family to Linux.
var ErrTooLarge = errors.New("ruleset too large to compile")

// Compile turns one family's forward-path ruleset into a Program. sets holds the ipset sets by
// name (the rules' set matches refer to them). Compile mirrors package eval exactly: for every
// packet, Classify says what eval.Evaluate says, or Linux.
//
// How the parts of the model become flat rules:
//   - Base chains run hook by hook, by priority; each is a block ending with its drop policy (an
//     unconditional drop rule). accept skips to the end of the block, return in the base chain
//     to its policy. Base chains of equal priority (eval: Linux if any needs Linux, else a drop by
//     any is a drop) are laid out with those that may need Linux first; a drop that a later one
//     could still overrule with Linux skips to a block at the end of the program that runs those
//     later chains for their Linux rules only, then drops (see group).
//   - A jump inlines the target chain with the jump's tests added to every rule of it; a return
//     skips past the inlined block. A goto inlines the target and then skips to where the
//     calling chain returns. Rules after one that decides for every packet reaching it are left
//     out.
//   - A rule that may apply (an Unknown match, a set that is not modelled) becomes a Linux rule
//     with its known tests, except as eval says: without verdict it is left out, and a jump
//     inlines the target as in a "maybe" context where every rule that would decide becomes
//     Linux's (a return, or the end of the target, continues after the jump). An Unknown match
//     with side effects makes the rule Linux's for every packet its earlier matches let through.
//   - Matches that do not depend on the packet are folded: marks (mark 0, see Program.HasMark),
//     `fib saddr|daddr type local` (not local, see Program.FibLocalSrc),
//     the output interface in prerouting (there is none: the name is empty), set matches that
//     never match (other family, fewer directions than dimensions), prefixes of the other family.
//   - A rule with more than MaxTests tests after simplification, or whose disjunctions expand to
//     more than maxCopies rules, or that needs more than MaxPatterns interface patterns, keeps
//     what fits and becomes Linux's (fewer tests match more packets).
func Compile(rs *model.Ruleset, sets map[string]*model.IPSet) (*Program, error) {
	c := &compiler{
		rs: rs, sets: sets, fam: rs.Family,
		patIdx: map[Pattern]int{}, setIdx: map[string]int{},
		prog: &Program{Family: rs.Family},
	}
	for _, h := range model.Hooks {
		chains := rs.Base[h]
		for i := 0; i < len(chains); {
			j := i + 1
			for j < len(chains) && chains[j].Base.Priority == chains[i].Base.Priority {
				j++
			}
			c.group(h, chains[i:j])
			if c.err != nil {
				return nil, c.err
			}
			i = j
		}
	}
	c.pendingBlocks()
	if c.err != nil {
		return nil, c.err
	}
	p := c.prog
	p.Rules = c.finish()
	if len(p.Rules) > MaxRules {
		return nil, fmt.Errorf("%w: %d flat rules (at most %d)", ErrTooLarge, len(p.Rules), MaxRules)
	}
	p.HasMark = c.hasMark
	p.HasCtState = c.hasCtState
	p.FibLocalSrc, p.FibLocalDst = c.fibLocal[model.Src], c.fibLocal[model.Dst]
	// Folded fib matches still need the check of the address.
	p.Empty = len(p.Rules) == 0 && !p.FibLocalSrc && !p.FibLocalDst
	may := uint8(0)
	for _, r := range p.Rules {
		p.PreCTDrop = p.PreCTDrop || (r.PreCT && r.Action == ActDrop)
		may |= r.ctStates()
	}
	p.CtNoRule = model.CtStates &^ may
	p.Cut, p.Prefixes, p.Leaves = selectCut(p.Rules, p.Family)
	return p, nil
}

type compiler struct {
	rs     *model.Ruleset
	sets   map[string]*model.IPSet
	fam    model.Family
	prog   *Program
	patIdx map[Pattern]int
	setIdx map[string]int

	rules   []Rule // SkipTo holds a label until finish
	labels  []int  // label -> rule index
	pending []pending
	hasMark bool
	// hasCtState: a test reads the conntrack state (Program.HasCtState).
	hasCtState bool
	// fibLocal: a FibLocal match of the source / destination was folded (Program.FibLocalSrc).
	fibLocal [2]bool
	// preCT: rules emitted now belong to a base chain before conntrack (Rule.PreCT).
	preCT  bool
	visits int
	err    error
}

// ctx is where a chain is being inlined.
type ctx struct {
	hook  model.Hook
	tests []Test // the conjunction every packet here satisfies (simplified)
	// maybe: inside a chain jumped to by a rule that may apply (why); a rule that would decide
	// here becomes Linux's.
	maybe string
	// drop: the label a drop skips to (-1: the packet is dropped), see group.
	drop int
	// ctBefore, ctUnsure: the chain runs before conntrack (the state is INVALID), or at its
	// priority (not known): see model.CtBefore.
	ctBefore, ctUnsure bool
	ret                int // label: a return, or the end of a goto's target
	accept             int // label: the end of the base chain's block
	depth              int
}

func (c *compiler) newLabel() int {
	c.labels = append(c.labels, -1)
	return len(c.labels) - 1
}

func (c *compiler) place(l int) { c.labels[l] = len(c.rules) }

// emit appends a flat rule (tests are simplified already).
func (c *compiler) emit(tests []Test, act Action, label int, o Origin) {
	if c.err != nil {
		return
	}
	if len(c.rules) >= maxEmitted {
		c.err = fmt.Errorf("%w: more than %d flat rules (jumps inline their target chain)", ErrTooLarge, maxEmitted)
		return
	}
	if len(tests) > MaxTests {
		why := fmt.Sprintf("%d tests, more than the %d a rule holds", len(tests), MaxTests)
		if act == ActLinux {
			why = o.Note + "; " + why
		}
		tests, act, o.Note = truncate(tests), ActLinux, why
	}
	if act != ActSkip {
		label = 0
	}
	c.rules = append(c.rules, Rule{Tests: tests, Action: act, SkipTo: label, Origin: o, PreCT: c.preCT})
}

// group lays out base chains of equal priority. eval: Linux if any of them needs Linux, else a
// drop by any is a drop. The kernel runs them in an order the model does not know; the layout
// runs first those that may need Linux (compiling each tells), so that a drop is final when no
// later chain of the group may need Linux. A drop in a chain before one that may skips to a
// pending block: the later chains that may need Linux again, where a drop or an accept only
// ends the chain, then a drop.
func (c *compiler) group(h model.Hook, chains []*model.Chain) {
	if len(chains) == 1 {
		c.base(h, chains[0], -1, false)
		return
	}
	linux := make([]bool, len(chains))
	for i, ch := range chains {
		nr, nl := len(c.rules), len(c.labels)
		c.base(h, ch, -1, false)
		for _, r := range c.rules[nr:] {
			if r.Action == ActLinux {
				linux[i] = true
				break
			}
		}
		c.rules, c.labels = c.rules[:nr], c.labels[:nl]
	}
	var order []*model.Chain
	last := -1 // the last chain that may need Linux, in the new order
	for i, ch := range chains {
		if linux[i] {
			order = append(order, ch)
			last = len(order) - 1
		}
	}
	for i, ch := range chains {
		if !linux[i] {
			order = append(order, ch)
		}
	}
	for i, ch := range order {
		drop := -1
		if i < last {
			drop = c.newLabel()
			c.pending = append(c.pending, pending{hook: h, label: drop, from: ch, chains: order[i+1 : last+1]})
		}
		c.base(h, ch, drop, false)
	}
}

// pending is a block for packets a base chain dropped while a later chain of the same priority
// may still need Linux.
type pending struct {
	hook   model.Hook
	label  int
	from   *model.Chain
	chains []*model.Chain
}

// pendingBlocks lays out the pending blocks after the rest, behind a skip to the end.
func (c *compiler) pendingBlocks() {
	if len(c.pending) == 0 {
		return
	}
	end := c.newLabel()
	c.emit(nil, ActSkip, end, Origin{Chain: c.pending[0].from, Note: "every chain passed (what follows is for drops pending in base chains of equal priority)"})
	for _, pd := range c.pending {
		c.place(pd.label)
		for _, ch := range pd.chains {
			c.base(pd.hook, ch, -1, true)
		}
		c.preCT, _ = model.CtBefore(pd.hook, pd.from.Base.Priority)
		c.emit(nil, ActDrop, 0, Origin{Chain: pd.from, Note: "dropped by " + pd.from.Key.String() + " and no base chain of the same priority needs Linux"})
		c.preCT = false
	}
	c.place(end)
}

// base lays out a base chain's block. drop: a label drops skip to (-1: they drop). pendingDrop:
// the packet is dropped already; only whether Linux decides matters: a drop, an accept and the
// policy end the chain.
func (c *compiler) base(h model.Hook, ch *model.Chain, drop int, pendingDrop bool) {
	end, policy := c.newLabel(), c.newLabel()
	x := ctx{hook: h, ret: policy, accept: end, drop: drop}
	x.ctBefore, x.ctUnsure = model.CtBefore(h, ch.Base.Priority)
	c.preCT = x.ctBefore
	defer func() { c.preCT = false }()
	if pendingDrop {
		x.drop = end
	}
	c.chain(x, ch)
	c.place(policy)
	if ch.Base.Policy == model.PolicyDrop && !pendingDrop {
		o := Origin{Chain: ch}
		if drop >= 0 {
			c.emit(nil, ActSkip, drop, o)
		} else {
			c.emit(nil, ActDrop, 0, o)
		}
	}
	c.place(end)
}

// stop says what a rule (or an inlined chain) does with every packet in its context.
type stop uint8

const (
	goOn   stop = iota // some packets go on to the next rule
	leave              // every packet leaves the chain (return, goto)
	decide             // every packet leaves the base chain (accept, drop, Linux)
)

// chain inlines ch's rules. It returns how the rule that stops every packet reaching it stops
// them (the rest of the chain is never reached, and not compiled); goOn: the end of the chain.
func (c *compiler) chain(x ctx, ch *model.Chain) stop {
	for _, r := range ch.Rules {
		if c.err != nil {
			return decide
		}
		if s := c.rule(x, ch, r); s != goOn {
			return s
		}
	}
	return goOn
}

// terms is a rule's matches as tests: a conjunction (all) of tests and of disjunctions (any: at
// least one alternative, each a conjunction, holds).
type terms struct {
	all []Test
	any [][][]Test
	// maybe lists what may or may not hold.
	maybe []string
}

// rule compiles one rule and says whether it stops every packet that reaches it.
func (c *compiler) rule(x ctx, ch *model.Chain, r *model.Rule) stop {
	if c.visits++; c.visits > maxVisits {
		c.err = fmt.Errorf("%w: more than %d rules visited inlining chains (jumps to the same chain from many places)", ErrTooLarge, maxVisits)
		return decide
	}
	o := Origin{Rule: r, Chain: ch}
	var tm terms
	var sideEffect *model.Unknown
	for i, m := range r.Matches {
		cd := c.cond(x, r.Matches[:i], m)
		if cd.never {
			return goOn // the rule never applies here (and eval stops at this match)
		}
		if cd.sideEffect {
			u := m.(model.Unknown)
			sideEffect = &u
			break
		}
		tm.all = append(tm.all, cd.all...)
		tm.any = append(tm.any, cd.any...)
		if cd.maybe != "" {
			tm.maybe = append(tm.maybe, cd.maybe)
		}
	}
	// Disjunctions beyond maxCopies copies are left out: the rule may apply.
	for copies(tm.any) > maxCopies {
		big := 0
		for i, d := range tm.any {
			if len(d) > len(tm.any[big]) {
				big = i
			}
		}
		tm.any = slices.Delete(tm.any, big, big+1)
		tm.maybe = append(tm.maybe, fmt.Sprintf("alternatives beyond %d copies", maxCopies))
	}
	choices := c.expand(x.tests, tm)
	// covers: the rule applies to every packet that reaches it.
	covers := len(tm.any) == 0 && len(choices) == 1 && sameTests(choices[0], x.tests)
	stopIf := func(s stop) stop {
		if covers {
			return s
		}
		return goOn
	}
	linux := func(note string) stop {
		o.Note = note
		if x.maybe != "" {
			o.Note = note + "; " + x.maybe
		}
		for _, t := range choices {
			c.emit(t, ActLinux, 0, o)
		}
		return stopIf(decide)
	}
	if sideEffect != nil {
		return linux("may run " + sideEffect.String())
	}
	v := r.Verdict
	var target *model.Chain
	if v.Kind == model.Jump || v.Kind == model.Goto {
		if target = c.rs.Lookup(ch.Key, v.Chain); target == nil {
			return linux("jump to unknown chain " + v.Chain)
		}
		if x.depth >= maxDepth {
			return linux("jump stack too deep")
		}
	}
	if len(tm.maybe) > 0 {
		why := "may apply (" + strings.Join(tm.maybe, ", ") + ")"
		switch v.Kind {
		case model.Continue:
			return goOn // whether it applies or not, nothing changes
		case model.Jump:
			// eval: if the target decides nothing for the packet and returns, applying the rule
			// or not comes to the same; otherwise Linux.
			note := r.ID.String() + " " + why + " and jumps to " + v.Chain
			if x.maybe != "" {
				note = x.maybe
			}
			return stopIf(c.jump(x, target, choices, note))
		}
		return linux(why + " with verdict " + v.String())
	}
	switch v.Kind {
	case model.Continue:
		return goOn
	case model.Accept:
		if x.maybe != "" {
			return linux("accept")
		}
		for _, t := range choices {
			c.emit(t, ActSkip, x.accept, o)
		}
		return stopIf(decide)
	case model.Drop:
		if x.maybe != "" {
			return linux("drop")
		}
		for _, t := range choices {
			if x.drop >= 0 {
				c.emit(t, ActSkip, x.drop, o)
			} else {
				c.emit(t, ActDrop, 0, o)
			}
		}
		return stopIf(decide)
	case model.Return:
		for _, t := range choices {
			c.emit(t, ActSkip, x.ret, o)
		}
		return stopIf(leave)
	case model.Jump:
		return stopIf(c.jump(x, target, choices, x.maybe))
	case model.Goto:
		// The target replaces this chain: its return is this chain's return.
		s := leave
		for _, t := range choices {
			y := x
			y.tests, y.depth = t, x.depth+1
			start := len(c.rules)
			if c.chain(y, target) != decide {
				c.emit(t, ActSkip, x.ret, o)
			} else if len(choices) == 1 && !c.skipsTo(start, x.ret) {
				s = decide
			}
		}
		return stopIf(s)
	case model.Linux:
		return linux(v.Reason)
	}
	return linux("verdict " + v.String())
}

// jump inlines target once per alternative of the jump's tests; a return skips past them all
// (a packet matching several alternatives runs the target again only when it decided nothing
// the first time, and then decides nothing again). decide: the target decides for every packet
// of the single alternative.
func (c *compiler) jump(x ctx, target *model.Chain, choices [][]Test, maybe string) stop {
	ret := c.newLabel()
	s := goOn
	for _, t := range choices {
		y := x
		y.tests, y.ret, y.depth, y.maybe = t, ret, x.depth+1, maybe
		start := len(c.rules)
		if c.chain(y, target) == decide && len(choices) == 1 && !c.skipsTo(start, ret) {
			s = decide // and no packet returned before
		}
	}
	c.place(ret)
	return s
}

// skipsTo: a rule emitted from start on skips to label.
func (c *compiler) skipsTo(start, label int) bool {
	for _, r := range c.rules[start:] {
		if r.Action == ActSkip && r.SkipTo == label {
			return true
		}
	}
	return false
}

// copies is the number of rules the disjunctions expand to.
func copies(any [][][]Test) int {
	n := 1
	for _, d := range any {
		if len(d) == 0 {
			return 0
		}
		if n > math.MaxInt32/len(d) {
			return math.MaxInt32
		}
		n *= len(d)
	}
	return n
}

// expand returns the conjunctions (with the context's tests) the rule's terms expand to,
// without those that hold for no packet.
func (c *compiler) expand(ctxTests []Test, tm terms) [][]Test {
	base, ok := conj(c.fam, ctxTests, tm.all)
	if !ok {
		return nil
	}
	out := [][]Test{base}
	for _, d := range tm.any {
		var next [][]Test
		for _, t := range out {
			for _, alt := range d {
				if u, ok := conj(c.fam, t, alt); ok {
					next = append(next, u)
				}
			}
		}
		out = next
	}
	if len(tm.any) == 0 {
		return out
	}
	// A conjunction holding every test of another one adds nothing (the copies are consecutive,
	// with the same action).
	var kept [][]Test
	for i, t := range out {
		redundant := false
		for j, u := range out {
			if j != i && subset(u, t) && (!subset(t, u) || j < i) {
				redundant = true
				break
			}
		}
		if !redundant {
			kept = append(kept, t)
		}
	}
	return kept
}

// subset: every test of a is in b.
func subset(a, b []Test) bool {
	if len(a) > len(b) {
		return false
	}
	for _, t := range a {
		if !slices.Contains(b, t) {
			return false
		}
	}
	return true
}

// cond is one match as tests.
type cond struct {
	never      bool // holds for no packet
	maybe      string
	sideEffect bool
	all        []Test
	any        [][][]Test
}

func constCond(b bool) cond { return cond{never: !b} }

// cond translates match m, preceded in its rule by the matches before.
func (c *compiler) cond(x ctx, before []model.Match, m model.Match) cond {
	switch m := m.(type) {
	case model.Addr:
		p := m.Prefix.Masked()
		if !p.IsValid() || p.Addr().Is4() != (c.fam == model.IPv4) {
			return constCond(m.Invert) // Contains is false for the other family
		}
		if p.Bits() == 0 {
			return constCond(!m.Invert)
		}
		k := TestSrc
		if m.Dir == model.Dst {
			k = TestDst
		}
		return cond{all: []Test{{Kind: k, Prefix: p, Invert: m.Invert}}}
	case model.Proto:
		return cond{all: []Test{{Kind: TestProto, A: uint16(m.Proto), Invert: m.Invert}}}
	case model.Protos:
		var ts []Test
		for _, p := range m.Protos {
			ts = append(ts, Test{Kind: TestProto, A: uint16(p), Invert: m.Invert})
		}
		switch {
		case len(ts) == 0:
			return constCond(m.Invert)
		case m.Invert || len(ts) == 1:
			return cond{all: ts} // none of them, or the one
		}
		var alts [][]Test
		for _, t := range ts {
			alts = append(alts, []Test{t})
		}
		return cond{any: [][][]Test{alts}}
	case model.Ports:
		return c.ports(x, before, m)
	case model.Iface:
		if m.Wildcard && m.Name == "" {
			return constCond(!m.Invert) // `+`: every name
		}
		if m.Out && x.hook == model.Prerouting {
			// No output interface yet: the name is empty.
			return constCond((m.Name == "") != m.Invert)
		}
		pat := Pattern{Name: m.Name, Wildcard: m.Wildcard}
		bit, ok := c.patIdx[pat]
		if !ok {
			if len(c.prog.Patterns) >= MaxPatterns {
				return cond{maybe: fmt.Sprintf("%s: more than %d interface patterns", m, MaxPatterns)}
			}
			bit = len(c.prog.Patterns)
			c.patIdx[pat] = bit
			c.prog.Patterns = append(c.prog.Patterns, pat)
		}
		k := TestIif
		if m.Out {
			k = TestOif
		}
		return cond{all: []Test{{Kind: k, A: uint16(bit), Invert: m.Invert}}}
	case model.ICMP:
		icmp := icmpProto(c.fam)
		if m.AnyType {
			if m.Invert {
				return constCond(false)
			}
			return cond{all: []Test{{Kind: TestICMP, A: 256, B: 0x00ff}}}
		}
		if m.CodeMin > m.CodeMax { // no code matches: false for every ICMP packet
			if m.Invert {
				return cond{all: []Test{{Kind: TestProto, A: uint16(icmp)}}}
			}
			return constCond(false)
		}
		t := Test{Kind: TestICMP, A: uint16(m.Type), B: uint16(m.CodeMin)<<8 | uint16(m.CodeMax)}
		if m.Invert {
			// eval: false for packets of another protocol, inverted or not.
			t.Invert = true
			return cond{all: []Test{{Kind: TestProto, A: uint16(icmp)}, t}}
		}
		return cond{all: []Test{t}}
	case model.Set:
		s := c.sets[m.Name]
		switch {
		case s == nil:
			return cond{maybe: "ipset " + m.Name + " missing"}
		case s.Unsupported != "":
			return cond{maybe: "ipset " + m.Name + ": " + s.Unsupported}
		case model.Dimensions(s.Type) == 0:
			return cond{maybe: "ipset " + m.Name + " of type " + s.Type}
		}
		if len(m.Dirs) < model.Dimensions(s.Type) || s.Family != c.fam {
			return constCond(m.Invert) // the kernel's test fails
		}
		var b uint16
		if m.Dirs[0] != model.Dst {
			b |= SetAddrSrc
		}
		if model.Dimensions(s.Type) == 2 {
			b |= SetHasPort
			if m.Dirs[1] == model.Src {
				b |= SetPortSrc
			}
		}
		return cond{all: []Test{{Kind: TestSet, A: uint16(c.setRef(s)), B: b, Invert: m.Invert}}}
	case model.Mark:
		c.hasMark = true
		return constCond((m.Value == 0) != m.Invert) // mark 0 (Program.HasMark)
	case model.CtState:
		switch {
		case m.States == 0:
			return constCond(m.Invert)
		case m.States == model.CtStates:
			return constCond(!m.Invert)
		case x.ctBefore:
			return constCond((m.States&model.CtInvalid != 0) != m.Invert)
		case x.ctUnsure:
			return cond{maybe: m.String() + " at conntrack's priority"}
		}
		c.hasCtState = true
		return cond{all: []Test{{Kind: TestCtState, A: uint16(m.States), Invert: m.Invert}}}
	case model.FibLocal:
		// Not local (Program.FibLocalSrc/Dst: the data plane hands Linux the packets whose
		// address may be).
		c.fibLocal[m.Dir] = true
		return constCond(m.Invert)
	case model.Unknown:
		return cond{maybe: m.What, sideEffect: m.SideEffect}
	}
	return cond{maybe: m.String()}
}

// ports translates a port match. eval: false for a protocol without ports, inverted or not.
func (c *compiler) ports(x ctx, before []model.Match, m model.Ports) cond {
	rs := mergeRanges(m.Ranges)
	kinds := []TestKind{TestSport}
	switch m.Dir {
	case model.Dst:
		kinds = []TestKind{TestDport}
	case model.Either:
		kinds = []TestKind{TestSport, TestDport}
	}
	if !m.Invert {
		// Each test is false without ports: exact.
		var alts [][]Test
		for _, r := range rs {
			for _, k := range kinds {
				alts = append(alts, []Test{{Kind: k, A: r.From, B: r.To}})
			}
		}
		switch len(alts) {
		case 0:
			return constCond(false)
		case 1:
			return cond{all: alts[0]}
		}
		return cond{any: [][][]Test{alts}}
	}
	if hasPortsProto(x.tests, before) {
		// The packet has ports: not in any range, for each port the match reads.
		var all []Test
		for _, r := range rs {
			for _, k := range kinds {
				all = append(all, Test{Kind: k, A: r.From, B: r.To, Invert: true})
			}
		}
		return cond{all: all}
	}
	// Ports and each port the match reads in a gap between the ranges.
	gaps := complement(rs)
	if len(gaps) == 0 {
		return constCond(false)
	}
	var cd cond
	for _, k := range kinds {
		var alts [][]Test
		for _, g := range gaps {
			alts = append(alts, []Test{{Kind: k, A: g.From, B: g.To}})
		}
		if len(alts) == 1 {
			cd.all = append(cd.all, alts[0]...)
		} else {
			cd.any = append(cd.any, alts)
		}
	}
	return cd
}

// hasPortsProto: an earlier match of the rule, or the context, says the protocol has ports.
func hasPortsProto(ctxTests []Test, before []model.Match) bool {
	for _, t := range ctxTests {
		if t.Kind == TestProto && !t.Invert && t.A < 256 && model.HasPorts(uint8(t.A)) {
			return true
		}
	}
	for _, m := range before {
		if p, ok := m.(model.Proto); ok && !p.Invert && model.HasPorts(p.Proto) {
			return true
		}
		if p, ok := m.(model.Protos); ok && !p.Invert && len(p.Protos) > 0 && !slices.ContainsFunc(p.Protos, func(x uint8) bool { return !model.HasPorts(x) }) {
			return true
		}
	}
	return false
}

// mergeRanges sorts ranges and merges those that overlap or touch.
func mergeRanges(in []model.PortRange) []model.PortRange {
	var rs []model.PortRange
	for _, r := range in {
		if r.From <= r.To {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b model.PortRange) int { return int(a.From) - int(b.From) })
	var out []model.PortRange
	for _, r := range rs {
		if n := len(out); n > 0 && uint32(r.From) <= uint32(out[n-1].To)+1 {
			out[n-1].To = max(out[n-1].To, r.To)
			continue
		}
		out = append(out, r)
	}
	return out
}

// complement: the port ranges not covered by merged ranges rs.
func complement(rs []model.PortRange) []model.PortRange {
	var out []model.PortRange
	next := uint32(0)
	for _, r := range rs {
		if uint32(r.From) > next {
			out = append(out, model.PortRange{From: uint16(next), To: r.From - 1})
		}
		next = uint32(r.To) + 1
	}
	if next <= 0xffff {
		out = append(out, model.PortRange{From: uint16(next), To: 0xffff})
	}
	return out
}

func icmpProto(f model.Family) uint8 {
	if f == model.IPv6 {
		return model.ProtoICMPv6
	}
	return model.ProtoICMP
}

// setRef returns the index of set s in the program, adding it.
func (c *compiler) setRef(s *model.IPSet) int {
	if i, ok := c.setIdx[s.Name]; ok {
		return i
	}
	bits := 32
	if s.Family == model.IPv6 {
		bits = 128
	}
	ref := SetRef{Name: s.Name, HasPort: model.Dimensions(s.Type) == 2}
	if s.Type == "hash:ip" {
		ref.HashIP = true
		if s.Netmask > 0 && s.Netmask < bits {
			ref.Netmask = s.Netmask
		}
	}
	for _, e := range s.Entries {
		a := e.Prefix.Addr()
		if !a.IsValid() || a.Is4() != (s.Family == model.IPv4) {
			continue // never matches a packet of the set's family
		}
		switch s.Type {
		case "hash:ip":
			// eval: the masked address equals the entry's.
			p := netip.PrefixFrom(a, bits)
			if ref.Netmask > 0 {
				if p, _ = a.Prefix(ref.Netmask); p.Addr() != a {
					continue // never equals a masked address
				}
			}
			ref.Entries = append(ref.Entries, model.SetEntry{Prefix: p})
		case "hash:ip,port":
			// eval: the address equals the entry's (no mask, no test for zero): a host prefix.
			ref.Entries = append(ref.Entries, model.SetEntry{Prefix: netip.PrefixFrom(a, bits), Proto: e.Proto, Port: e.Port})
		case "hash:net":
			ref.Entries = append(ref.Entries, model.SetEntry{Prefix: e.Prefix.Masked(), NoMatch: e.NoMatch})
		case "hash:net,port":
			ref.Entries = append(ref.Entries, model.SetEntry{Prefix: e.Prefix.Masked(), Proto: e.Proto, Port: e.Port, NoMatch: e.NoMatch})
		}
	}
	c.prog.Sets = append(c.prog.Sets, ref)
	c.setIdx[s.Name] = len(c.prog.Sets) - 1
	return len(c.prog.Sets) - 1
}

// finish resolves labels and drops what no packet needs: rules never reached, skips to the next
// rule, skips to unconditional skips (followed through), Linux rules followed closely by a
// Linux rule that matches every packet they match.
func (c *compiler) finish() []Rule {
	rules := c.rules
	for i := range rules {
		if rules[i].Action == ActSkip {
			rules[i].SkipTo = c.labels[rules[i].SkipTo]
		}
	}
	for {
		n := len(rules)
		// Follow skips to unconditional skips.
		for i := n - 1; i >= 0; i-- {
			r := &rules[i]
			if r.Action == ActSkip && r.SkipTo < n && len(rules[r.SkipTo].Tests) == 0 && rules[r.SkipTo].Action == ActSkip {
				r.SkipTo = rules[r.SkipTo].SkipTo // already followed: i < SkipTo
			}
		}
		// A Linux rule whose packets, without it, would reach only Linux rules and then one
		// matching them all: it makes no difference (looking a few rules ahead).
		keep := make([]bool, n)
		changed := false
		for i := range rules {
			keep[i] = true
			if rules[i].Action != ActLinux {
				continue
			}
			for j := i + 1; j < n && j <= i+absorbWindow && rules[j].Action == ActLinux; j++ {
				if subset(rules[j].Tests, rules[i].Tests) {
					keep[i], changed = false, true
					break
				}
			}
		}
		if changed {
			rules = compact(rules, keep)
			continue
		}
		// Reachability (skips only go forward).
		targeted := make([]bool, n+1)
		for i := range rules {
			keep[i] = i == 0 || targeted[i] || (keep[i-1] && len(rules[i-1].Tests) > 0)
			if keep[i] && rules[i].Action == ActSkip {
				targeted[rules[i].SkipTo] = true
			}
		}
		// Skips to the next rule kept.
		nextKept := make([]int, n+1) // the first kept index >= i
		nextKept[n] = n
		for i := n - 1; i >= 0; i-- {
			nextKept[i] = nextKept[i+1]
			if keep[i] {
				nextKept[i] = i
			}
		}
		for i := range rules {
			if keep[i] && rules[i].Action == ActSkip && nextKept[i+1] >= nextKept[rules[i].SkipTo] {
				keep[i] = false
			}
		}
		if !slices.Contains(keep, false) {
			return rules
		}
		rules = compact(rules, keep)
	}
}

// absorbWindow: how far finish looks for a Linux rule absorbing another.
const absorbWindow = 16

// compact keeps the rules keep says, renumbering skips (to the first rule kept at or after
// their target).
func compact(rules []Rule, keep []bool) []Rule {
	n := len(rules)
	newIdx := make([]int, n+1)
	m := 0
	for i := 0; i <= n; i++ {
		newIdx[i] = m
		if i < n && keep[i] {
			m++
		}
	}
	out := make([]Rule, 0, m)
	for i, r := range rules {
		if !keep[i] {
			continue
		}
		if r.Action == ActSkip {
			r.SkipTo = newIdx[r.SkipTo]
		}
		out = append(out, r)
	}
	return out
}
