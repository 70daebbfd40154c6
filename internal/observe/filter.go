package observe

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/nftables"

	"github.com/linuxfp/linuxfp/internal/filter/ipset"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/filter/nft"
)

// Ruleset is the netfilter ruleset as read from nf_tables (iptables-nft and native nft), with the
// ipsets its rules may use. The graph compiles it for the filter module (graph.Filter).
//
// A read that finds the same nf_tables generation and the same ipsets returns the previous
// Ruleset itself, so a consumer can tell an unchanged ruleset by its pointer: the graph keeps
// its compilation by it, and the controller skips an ipset poll that found nothing new.
type Ruleset struct {
	Generation uint32 // the nf_tables generation read
	// Rulesets are the forward-path models of IPv4 [0] and IPv6 [1] (nil: not read).
	Rulesets [2]*model.Ruleset
	// Sets are every ipset, by name, and the nf_tables address sets the rules look up
	// (model.IPSet.Nft), read with the rules.
	Sets map[string]*model.IPSet
	// ReadTime is how long reading the ruleset took (0 when only the ipsets were read again);
	// SetsReadTime how long reading the ipsets last took (the watcher polls them no more often
	// than a few times that).
	ReadTime     time.Duration
	SetsReadTime time.Duration
	chains       []*nftables.Chain // every chain, as read with the rules
	ruleCounts   map[nft.ChainRef]int
	written      nft.WrittenSets // sets packets change (made Unsupported at every read of the sets)
}

// addSetNames adds to names the ipsets r's rules test.
func (r *Ruleset) addSetNames(names map[string]bool) {
	if r == nil {
		return
	}
	for _, rs := range r.Rulesets {
		rs.AddSetNames(names)
	}
}

// ruleCount is how many rules a chain held when the ruleset was read.
func (r *Ruleset) ruleCount(fam uint8, table, chain string) int {
	return r.ruleCounts[nft.ChainRef{Family: fam, Table: table, Chain: chain}]
}

// rulesetReads counts nft.Read calls (the tests check that one generation is read once).
var rulesetReads atomic.Uint64

// readRuleset reads the ruleset, unless its nf_tables generation is prev's: then only the
// ipsets are re-read (they have no generation), or, with keepSets (their commands are seen as
// made, and none was since the last read), nothing. A ruleset change is announced by one
// notification per rule (a 50,000-rule iptables-restore sends 50,000), which may wake the
// controller more than once for one generation; reading such a ruleset takes a second.
// setsRead says whether the ipsets were read.
func readRuleset(prev *Ruleset, keepSets bool) (r *Ruleset, setsRead bool, err error) {
	t0 := time.Now()
	if prev != nil {
		gen, err := nft.Generation(nft.Options{})
		if err != nil {
			return nil, false, fmt.Errorf("read netfilter ruleset: %w", err)
		}
		if gen == prev.Generation {
			if keepSets {
				return prev, false, nil
			}
			r, err := prev.refreshSets()
			return r, true, err
		}
	}
	rulesetReads.Add(1)
	// The sets as last read, when no ipset command came since: a rule change then costs no
	// read of every set (a 1,000,000-entry one takes seconds). A set the new rules start to
	// test is read again (Observer.watchSets), so an unwatched set's copy may be old here.
	var o nft.Options
	if keepSets && prev != nil {
		o.Sets = prev.Sets
	}
	snap, err := nft.Read(o)
	setsRead = o.Sets == nil
	if err == nil && snap.MissingSet && o.Sets != nil {
		// A set made since the last read (its commands wake nobody while no rule tests it).
		snap, err = nft.Read(nft.Options{})
		setsRead = true
	}
	if err != nil {
		return nil, setsRead, fmt.Errorf("read netfilter ruleset: %w", err)
	}
	return &Ruleset{Generation: snap.Generation, Rulesets: [2]*model.Ruleset{snap.IPv4, snap.IPv6}, Sets: snap.Sets,
		chains: snap.Chains, ruleCounts: snap.RuleCounts, written: snap.Written, ReadTime: time.Since(t0)}, setsRead, nil
}

// refreshSets re-reads the ipsets. It returns r itself when none changed, and otherwise the
// same ruleset with the new sets (see ipsetPollMin for how set changes are seen).
func (r *Ruleset) refreshSets() (*Ruleset, error) {
	t0 := time.Now()
	sets, err := ipset.List(ipset.Options{})
	r.SetsReadTime = time.Since(t0)
	if errors.Is(err, ipset.ErrNoIPSet) {
		sets, err = map[string]*model.IPSet{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ipsets: %w", err)
	}
	r.written.Mark(sets)
	// The nf_tables sets belong to the ruleset's generation: they stay.
	for n, s := range r.Sets {
		if s.Nft {
			sets[n] = s
		}
	}
	if setsEqual(sets, r.Sets) {
		return r, nil
	}
	// The same ruleset: its chains and rule counts too (readNetfilter reads them from here).
	return &Ruleset{Generation: r.Generation, Rulesets: r.Rulesets, Sets: sets, SetsReadTime: r.SetsReadTime,
		chains: r.chains, ruleCounts: r.ruleCounts, written: r.written}, nil
}

// setsEqual: the same sets with the same entries. Entries come sorted (ipset.List; an
// nf_tables set is carried over as it is), so equal sets have equal slices; comparing them in
// place costs a scan, where counting them in a map cost a third of following a change to a
// set of 1,000,000 entries.
func setsEqual(a, b map[string]*model.IPSet) bool {
	if len(a) != len(b) {
		return false
	}
	for name, s := range a {
		o := b[name]
		if o == nil || o.Type != s.Type || o.Family != s.Family || o.Netmask != s.Netmask ||
			o.Unsupported != s.Unsupported || !slices.Equal(o.Entries, s.Entries) {
			return false
		}
	}
	return true
}
