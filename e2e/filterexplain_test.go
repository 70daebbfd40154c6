package e2e

import (
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// status -v names every rule that hands packets to Linux and why, counted or not; the counters
// say for each rule what happened to the packets it decided.
func TestFilterRulesExplained(t *testing.T) {
	requireTool(t, "iptables")
	tb := newTestbed(t, testbed.Options{})
	sh(t, tb.DUT, `iptables -A FORWARD -d 198.19.3.0/24 -j DROP
iptables -A FORWARD -d 198.19.5.0/24 -j REJECT
iptables -A FORWARD -d 198.19.6.0/24 -j LOG`)
	l := startLinuxfp(t, tb)
	waitVerdict(t, tb, l, "198.19.3.1", "dropped", 0)
	find := func(st *status.Status, chain string, pos int) *status.FilterRule {
		for i, r := range st.FilterRules {
			if r.Family == "ipv4" && strings.Contains(r.Rule, chain+" rule "+string(rune('0'+pos))+" ") {
				return &st.FilterRules[i]
			}
		}
		return nil
	}
	st, err := l.Client.StatusVerbose()
	if err != nil {
		t.Fatal(err)
	}
	for _, pos := range []int{2, 3} {
		r := find(st, "ip filter FORWARD", pos)
		if r == nil || r.Outcome != "linux" || r.Why == "" {
			t.Fatalf("status -v: rule %d: %+v, want it handed to Linux with a reason; all: %+v", pos, r, st.FilterRules)
		}
	}
	if r := find(st, "ip filter FORWARD", 1); r == nil || r.Outcome != "dropped" || r.Counter.Packets < 10 {
		t.Fatalf("status -v: rule 1: %+v, want >= 10 packets dropped", r)
	}
	// Without -v only counted rules; packets to the REJECT rule's prefix are Linux's, counted
	// as such.
	waitVerdict(t, tb, l, "198.19.5.1", "filter", 0)
	st, err = l.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	if r := find(st, "ip filter FORWARD", 3); r != nil {
		t.Fatalf("status without -v lists a rule nothing reached: %+v", r)
	}
	if r := find(st, "ip filter FORWARD", 2); r == nil || r.Outcome != "linux" || r.Counter.Packets < 10 {
		t.Fatalf("rule 2 (REJECT): %+v, want >= 10 packets handed to Linux", r)
	}
	out, err := tb.DUT.Run(linuxfpBin, "status", "-v")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "handed to Linux: ") || !strings.Contains(out, "dropped") {
		t.Fatalf("linuxfp status -v says neither what was dropped nor what was handed to Linux:\n%s", out)
	}
}
