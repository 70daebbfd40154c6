package gateway

import (
	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// Figure draws the paper's Figure 8: the DUT's packet rate against the number of DROP rules, a
// panel per traffic pattern, a series per mode, and the one-rule ipset rulesets beside them at
// their number of addresses (not for the ceilings, which evaluate no rule).
func (r *Result) Figure() harness.Figure {
	f := harness.Figure{Title: "gateway: throughput vs blacklist size"}
	for _, t := range r.Config.Traffic {
		p := harness.Panel{
			Title: string(t) + " traffic (" + trafficWhat(t) + ")",
			X:     harness.Axis{Label: "blacklisted addresses", Log: true},
			Y:     harness.Axis{Label: "DUT Mpps (forwarded + dropped)", FromZero: true},
		}
		for _, ipset := range []bool{false, true} {
			for _, m := range r.Config.Modes {
				if ipset && m.Ceiling() {
					continue
				}
				s := harness.Series{Name: m.Title()}
				if ipset {
					s.Name += ", ipset"
				}
				for _, v := range r.Variants {
					if v.Traffic != t || v.Ruleset.IPSet != ipset || v.Ruleset.Blacklisted <= 0 {
						continue
					}
					if row := harness.TableVIIRow(v.Throughput); row != nil {
						if tp := row.Modes[m]; tp != nil && tp.Rate() > 0 {
							s.Points = append(s.Points, harness.Point{X: float64(v.Ruleset.Blacklisted), Y: tp.Rate()})
						}
					}
				}
				s.Points = harness.SortPoints(s.Points)
				p.Series = append(p.Series, s)
			}
		}
		f.AddPanel(p)
	}
	f.AddPanel(harness.LatencyPanel(r.Latency))
	f.AddPanel(harness.CPUPanel(r.CPU))
	return f
}

// trafficWhat says what a traffic pattern's packets meet.
func trafficWhat(t Traffic) string {
	if t == TrafficHit {
		return "every other packet dropped"
	}
	return "no rule matches"
}
