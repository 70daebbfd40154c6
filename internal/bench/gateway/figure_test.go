package gateway

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/plot/plottest"
)

func TestFigure(t *testing.T) {
	modes := []harness.Mode{harness.ModeLinux, harness.ModeLinuxfp, harness.ModeCeiling}
	r := &Result{Report: harness.Report[Settings]{Config: Settings{
		PipelineSettings: harness.PipelineSettings{Modes: modes},
		Sweep:            []int{1, 100, 10000}, Traffic: []Traffic{TrafficMiss, TrafficHit}}}}
	variant := func(rs Ruleset, tr Traffic, rate float64) {
		row := harness.ThroughputRow{Cores: 1, FrameSize: 64, Modes: map[harness.Mode]*harness.Throughput{}}
		for i, m := range modes {
			row.Modes[m] = &harness.Throughput{Mpps: rate * float64(i+1), DUTMpps: 2 * rate * float64(i+1)}
		}
		r.Variants = append(r.Variants, &Variant{Ruleset: rs, Traffic: tr, Throughput: []harness.ThroughputRow{row}})
	}
	// The miss traffic: the sweep and the paper's ipset; the hit traffic only 100 rules.
	for i, n := range []int{1, 100, 10000} {
		variant(Ruleset{Name: harness.Plural(n, "rule"), Blacklisted: n}, TrafficMiss, 1/float64(i+1))
	}
	variant(ipsetRuleset(100), TrafficMiss, 1)
	variant(rules100, TrafficHit, 1)

	f := r.Figure()
	if len(f.Panels) != 2 {
		t.Fatalf("%d panels, want one per traffic", len(f.Panels))
	}
	if p := f.Panels[0].Series[1].Points; len(p) != 3 || p[0] != (harness.Point{X: 1, Y: 4}) {
		t.Errorf("linuxfp's points %v, want the DUT's rate (forwarded + dropped) at 1, 100, 10000 rules", p)
	}
	s := plottest.Draw(t, f)
	// Miss: 3 modes x 3 rule counts, Linux and linuxfp with the ipset (not the ceiling: no rule
	// evaluated); hit: 3 modes at 100 rules. Each series a legend mark.
	s.Expect(t, map[string]int{"Linux": 2, "linuxfp": 2, "ceiling": 2, "Linux, ipset": 1, "linuxfp, ipset": 1, "ceiling, ipset": 0,
		"miss traffic (no rule matches)": 1, "hit traffic (every other packet dropped)": 1}, 9+2+3+(5+3), 0)
}
