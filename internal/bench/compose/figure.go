package compose

import (
	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// Figure draws the paper's Figure 10: the cost of a chain of N modules against N, a series per
// composition; BPF_PROG_TEST_RUN's ns per run and the forwarding rate, each when measured.
func (r *Result) Figure() harness.Figure {
	f := harness.Figure{Title: "compose: " + r.Config.Lookup + " lookups, inline calls vs tail calls"}
	testRun := harness.Panel{Title: "BPF_PROG_TEST_RUN, one frame",
		X: harness.Axis{Label: "modules in the chain (N)"},
		Y: harness.Axis{Label: "ns per run (median)", FromZero: true}}
	live := harness.Panel{Title: "forwarding, 1 generator core",
		X: harness.Axis{Label: "modules in the chain (N)"},
		Y: harness.Axis{Label: "Mpps (median)", FromZero: true}}
	for _, n := range r.Config.Modules {
		testRun.X.Ticks = append(testRun.X.Ticks, float64(n))
	}
	live.X.Ticks = testRun.X.Ticks
	for _, c := range r.Config.Compositions {
		tr, fw := harness.Series{Name: string(c)}, harness.Series{Name: string(c)}
		for _, cell := range r.Cells {
			if cell.Composition != c {
				continue
			}
			n := float64(cell.Modules)
			if cell.TestRun != nil && cell.TestRun.Median > 0 {
				tr.Points = append(tr.Points, harness.Point{X: n, Y: cell.TestRun.Median})
			}
			if cell.Live != nil && cell.Live.Median > 0 {
				fw.Points = append(fw.Points, harness.Point{X: n, Y: cell.Live.Median})
			}
		}
		tr.Points, fw.Points = harness.SortPoints(tr.Points), harness.SortPoints(fw.Points)
		testRun.Series, live.Series = append(testRun.Series, tr), append(live.Series, fw)
	}
	f.AddPanel(testRun)
	f.AddPanel(live)
	return f
}
