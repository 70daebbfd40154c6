package observe

import (
	"fmt"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/filtertest"
)

// One nf_tables generation is read and compiled once, however many events announce it: a
// commit notifies every rule, and the controller may wake more than once for one commit.
func TestFilterCompiledOncePerGeneration(t *testing.T) {
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
		refresh := func(d Dirty) (*FilterState, error) {
			s, err := o.Refresh(d)
			if err != nil {
				return nil, err
			}
			return s.Filter, nil
		}
		c0 := compiles.Load()
		f1, err := refresh(DirtyAll)
		if err != nil {
			return err
		}
		if f1.Prog[0] == nil || f1.Rules[0] != 200 {
			return fmt.Errorf("first read: IPv4 program %v, %d rules (err %q), want 200 rules compiled", f1.Prog[0] != nil, f1.Rules[0], f1.Err[0])
		}
		// The same generation again, as after a second wake-up or an overflow's re-read.
		for _, d := range []Dirty{DirtyNetfilter, DirtyNetfilter, DirtyAll} {
			f, err := refresh(d)
			if err != nil {
				return err
			}
			if f.Prog[0] != f1.Prog[0] {
				return fmt.Errorf("refresh %s of generation %d made a new program", d, f1.Generation)
			}
		}
		if n := compiles.Load() - c0; n != 1 {
			return fmt.Errorf("generation %d compiled %d times, want once", f1.Generation, n)
		}
		// A new generation is compiled.
		if err := filtertest.Stdin(ns, "", "iptables", "-A", "FORWARD", "-s", "198.18.9.9", "-j", "DROP"); err != nil {
			return err
		}
		f2, err := refresh(DirtyNetfilter)
		if err != nil {
			return err
		}
		if f2.Generation == f1.Generation || f2.Rules[0] != 201 {
			return fmt.Errorf("after iptables -A: generation %d (was %d), %d rules, want a new generation of 201", f2.Generation, f1.Generation, f2.Rules[0])
		}
		if n := compiles.Load() - c0; n != 2 {
			return fmt.Errorf("two generations compiled %d times, want twice", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
