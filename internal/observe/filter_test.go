package observe

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/filtertest"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// One nf_tables generation is read once, however many events announce it: a commit notifies
// every rule, and the controller may wake more than once for one commit. The same generation
// with the same ipsets is the same *Ruleset (the graph compiles it once by that).
func TestRulesetReadOncePerGeneration(t *testing.T) {
	filtertest.Require(t, "iptables-restore")
	ns := filtertest.NewNS(t, "lfp-obsgen")
	var rules strings.Builder
	rules.WriteString("*filter\n:FORWARD ACCEPT [0:0]\n")
	for i := range 200 {
		fmt.Fprintf(&rules, "-A FORWARD -s 198.18.%d.%d/32 -j DROP\n", i/250, i%250+1)
	}
	rules.WriteString("COMMIT\n")
	if err := filtertest.IPTablesRestore(ns, false, rules.String()); err != nil {
		t.Fatal(err)
	}
	err := ns.Do(func() error {
		o, err := NewObserver()
		if err != nil {
			return err
		}
		defer o.Close()
		refresh := func(d Dirty) (*Ruleset, error) {
			s, err := o.Refresh(d)
			if err != nil {
				return nil, err
			}
			return s.Rules, nil
		}
		rules := func(r *Ruleset) int {
			n := 0
			for _, ch := range r.Rulesets[0].Chains {
				n += len(ch.Rules)
			}
			return n
		}
		c0 := rulesetReads.Load()
		f1, err := refresh(DirtyAll)
		if err != nil {
			return err
		}
		if f1.Rulesets[0] == nil || rules(f1) != 200 {
			return fmt.Errorf("first read: IPv4 ruleset %v, want 200 rules", f1.Rulesets[0] != nil)
		}
		// The same generation again, as after a second wake-up or an overflow's re-read.
		for _, d := range []Dirty{DirtyNetfilter, DirtyNetfilter, DirtyAll} {
			f, err := refresh(d)
			if err != nil {
				return err
			}
			if f != f1 {
				return fmt.Errorf("refresh %s of generation %d made a new ruleset", d, f1.Generation)
			}
		}
		if n := rulesetReads.Load() - c0; n != 1 {
			return fmt.Errorf("generation %d read %d times, want once", f1.Generation, n)
		}
		// A new generation is read.
		if err := filtertest.Stdin(ns, "", "iptables", "-A", "FORWARD", "-s", "198.18.9.9", "-j", "DROP"); err != nil {
			return err
		}
		f2, err := refresh(DirtyNetfilter)
		if err != nil {
			return err
		}
		if f2.Generation == f1.Generation || rules(f2) != 201 {
			return fmt.Errorf("after iptables -A: generation %d (was %d), %d rules, want a new generation of 201", f2.Generation, f1.Generation, rules(f2))
		}
		if n := rulesetReads.Load() - c0; n != 2 {
			return fmt.Errorf("two generations read %d times, want twice", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSetsEqual(t *testing.T) {
	set := func(addrs ...string) map[string]*model.IPSet {
		s := &model.IPSet{Name: "s", Type: "hash:ip"}
		for _, a := range addrs {
			s.Entries = append(s.Entries, model.SetEntry{Prefix: netip.PrefixFrom(netip.MustParseAddr(a), 32)})
		}
		return map[string]*model.IPSet{"s": s}
	}
	if !setsEqual(set("198.18.0.1", "198.18.0.2"), set("198.18.0.1", "198.18.0.2")) {
		t.Fatal("equal sets taken for different")
	}
	if setsEqual(set("198.18.0.1", "198.18.0.2"), set("198.18.0.1", "198.18.0.3")) {
		t.Fatal("an element added and another deleted not seen")
	}
	if setsEqual(set("198.18.0.1"), set("198.18.0.1", "198.18.0.2")) {
		t.Fatal("an element added not seen")
	}
}
