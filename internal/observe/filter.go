package observe

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/nftables"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/ipset"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/filter/nft"
)

// FilterState is the forward-path netfilter ruleset as the filter module sees it: read from
// nf_tables (iptables-nft and native nft) with the ipsets it uses, and compiled per family.
type FilterState struct {
	Generation uint32 // the nf_tables generation read
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
	// CompileTime is how long reading and compiling took; SetsReadTime how long reading the
	// ipsets last took (the controller polls them no more often than a few times that).
	CompileTime  time.Duration
	SetsReadTime time.Duration
	sets         map[string]*model.IPSet
	written      nft.WrittenSets // sets packets change (made Unsupported at every read of the sets)
	rulesets     [2]*model.Ruleset
	chains       []*nftables.Chain // every chain, as read with the rules
	ruleCounts   map[nft.ChainRef]int
	usesSets     bool
}

// ruleCount is how many rules a chain held when the ruleset was read.
func (f *FilterState) ruleCount(fam uint8, table, chain string) int {
	return f.ruleCounts[nft.ChainRef{Family: fam, Table: table, Chain: chain}]
}

// UsesSets: the compiled rules test ipset membership (sets send no events: they are polled).
func (f *FilterState) UsesSets() bool { return f != nil && f.usesSets }

// addSetNames adds to names the ipsets f's rules test.
func (f *FilterState) addSetNames(names map[string]bool) {
	if f == nil {
		return
	}
	for _, rs := range f.rulesets {
		rs.AddSetNames(names)
	}
}

// compiles counts compile() calls (the tests check that one generation compiles once).
var compiles atomic.Uint64

// readFilter reads and compiles the ruleset, unless its nf_tables generation is prev's: then only
// the ipsets are re-read (they have no generation), and the ruleset is compiled again only if
// one of them changed; with keepSets (their commands are seen as made, and none was since the
// last read) not even those. A ruleset change is announced by one notification per rule (a
// 50,000-rule iptables-restore sends 50,000), which may wake the controller more than once
// for one generation; reading and compiling such a ruleset takes seconds.
func readFilter(prev *FilterState, keepSets bool) (*FilterState, error) {
	t0 := time.Now()
	if prev != nil {
		gen, err := nft.Generation(nft.Options{})
		if err != nil {
			return nil, fmt.Errorf("read netfilter ruleset: %w", err)
		}
		if gen == prev.Generation {
			if keepSets {
				return prev, nil
			}
			return prev.refreshSets()
		}
	}
	snap, err := nft.Read(nft.Options{})
	if err != nil {
		return nil, fmt.Errorf("read netfilter ruleset: %w", err)
	}
	f := &FilterState{Generation: snap.Generation, sets: snap.Sets, written: snap.Written, chains: snap.Chains, ruleCounts: snap.RuleCounts}
	for i, rs := range []*model.Ruleset{snap.IPv4, snap.IPv6} {
		f.rulesets[i] = rs
	}
	f.compile()
	f.CompileTime = time.Since(t0)
	return f, nil
}

func (f *FilterState) compile() {
	compiles.Add(1)
	f.usesSets = false
	for i, rs := range f.rulesets {
		f.Prog[i], f.Err[i], f.Tracked[i], f.TrackedWhy[i], f.Rules[i], f.PrePost[i], f.PrePostWhy[i] = nil, "", false, nil, 0, false, ""
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
		p, err := compile.Compile(rs, f.sets)
		if err != nil {
			f.Err[i] = err.Error()
			continue
		}
		f.Prog[i] = p
		f.usesSets = f.usesSets || len(p.Sets) > 0
	}
}

// refreshSets re-reads the ipsets and recompiles if any changed. ipset sends no netlink
// notification for membership changes, so the controller polls this while rules use sets.
func (f *FilterState) refreshSets() (*FilterState, error) {
	t0 := time.Now()
	sets, err := ipset.List(ipset.Options{})
	f.SetsReadTime = time.Since(t0)
	if errors.Is(err, ipset.ErrNoIPSet) {
		sets, err = map[string]*model.IPSet{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ipsets: %w", err)
	}
	f.written.Mark(sets)
	if setsEqual(sets, f.sets) {
		return f, nil
	}
	t0 = time.Now()
	// The same ruleset: its chains and rule counts too (readNetfilter reads them from here).
	n := &FilterState{Generation: f.Generation, sets: sets, written: f.written, rulesets: f.rulesets, SetsReadTime: f.SetsReadTime,
		chains: f.chains, ruleCounts: f.ruleCounts}
	n.compile()
	n.CompileTime = time.Since(t0)
	return n, nil
}

func setsEqual(a, b map[string]*model.IPSet) bool {
	if len(a) != len(b) {
		return false
	}
	for name, s := range a {
		o := b[name]
		if o == nil || o.Type != s.Type || o.Family != s.Family || o.Netmask != s.Netmask ||
			o.Unsupported != s.Unsupported || len(o.Entries) != len(s.Entries) {
			return false
		}
		seen := make(map[model.SetEntry]int, len(s.Entries))
		for _, e := range s.Entries {
			seen[e]++
		}
		for _, e := range o.Entries {
			if seen[e]--; seen[e] < 0 {
				return false
			}
		}
	}
	return true
}
