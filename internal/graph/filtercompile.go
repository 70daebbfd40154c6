package graph

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// Filter is the netfilter ruleset as the filter module sees it: compiled per family.
type Filter struct {
	Generation uint32 // the nf_tables generation compiled
	// Prog is the compiled ruleset of IPv4 [0] and IPv6 [1]; nil when Err says why not.
	Prog [2]*compile.Program
	Err  [2]string
	// Tracked: netfilter tracks the family's connections, because something needs conntrack
	// (TrackedWhy: a nat chain, even empty, NAT rules, a conntrack match or target, on any
	// hook). Prog is then the ruleset an established connection's packets traverse (no nat
	// chains): the conntrack module hands every other packet to Linux.
	Tracked    [2]bool
	TrackedWhy [2][]string
	// PrePost: in the ruleset of established packets, a rule (or drop policy) on the
	// prerouting or postrouting hook could act on an established connection's packet
	// (model.Ruleset.ActsOnEstablished; PrePostWhy names it). Those hooks see a translated
	// (NAT) connection's packet before or after its translation, where forward sees it half
	// translated: the fast path translates only where no such rule exists.
	PrePost    [2]bool
	PrePostWhy [2]string
	// Rules counts the family's rules (iptables and nft), for notes.
	Rules [2]int
	// CompileTime is how long reading (observe.Ruleset.ReadTime) and compiling took.
	CompileTime time.Duration
	usesSets    bool
}

// UsesSets: the compiled rules test ipset membership (nf_tables sets not counted).
func (f *Filter) UsesSets() bool { return f != nil && f.usesSets }

// compiled is the last compilation and the read it was made from. Every change the controller
// follows builds a plan, most of them with the ruleset unchanged (the observer then returns the
// same *observe.Ruleset), and compiling a 50,000-rule ruleset takes seconds.
var compiled struct {
	mu    sync.Mutex
	rules *observe.Ruleset
	f     *Filter
}

// compiles counts compilations (the tests check that an unchanged ruleset compiles once).
var compiles atomic.Uint64

// filterOf is the compiled form of s.Rules (nil before the ruleset was read), compiled once per
// read: a new nf_tables generation or new ipsets.
func filterOf(s *observe.Snapshot) *Filter {
	if s.Rules == nil {
		return nil
	}
	compiled.mu.Lock()
	defer compiled.mu.Unlock()
	if compiled.rules != s.Rules {
		compiled.rules, compiled.f = s.Rules, compileFilter(s.Rules)
	}
	return compiled.f
}

func compileFilter(r *observe.Ruleset) *Filter {
	compiles.Add(1)
	t0 := time.Now()
	f := &Filter{Generation: r.Generation}
	for i, rs := range r.Rulesets {
		if rs == nil {
			f.Err[i] = "no ruleset read"
			continue
		}
		for _, ch := range rs.Chains {
			f.Rules[i] += len(ch.Rules)
		}
		// The reader lists every conntrack user of the family's tables (package nft).
		f.TrackedWhy[i] = rs.Conntrack
		f.Tracked[i] = len(rs.Conntrack) > 0
		if f.Tracked[i] {
			rs = rs.Established()
		}
		for _, h := range []model.Hook{model.Prerouting, model.Postrouting} {
			if why := rs.ActsOnEstablished(h); why != "" && f.PrePostWhy[i] == "" {
				f.PrePost[i], f.PrePostWhy[i] = true, why
			}
		}
		p, err := compile.Compile(rs, r.Sets)
		if err != nil {
			f.Err[i] = err.Error()
			continue
		}
		f.Prog[i] = p
		for _, ref := range p.Sets {
			// nf_tables sets are read with the rules, not polled.
			if s := r.Sets[ref.Name]; s != nil && !s.Nft {
				f.usesSets = true
			}
		}
	}
	f.CompileTime = r.ReadTime + time.Since(t0)
	return f
}
