package pods

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/plot/plottest"
)

func TestFigure(t *testing.T) {
	r := &Result{}
	r.Config.Workloads, r.Config.Modes = []Workload{WorkloadIntra, WorkloadInter}, DefaultModes
	for _, w := range r.Config.Workloads {
		for _, pairs := range []int{1, 5, 10} {
			row := &Row{Workload: w, Pairs: pairs, Modes: map[harness.Mode]*ModeResult{}}
			for i, m := range DefaultModes {
				if w == WorkloadInter && m == harness.ModeCeiling {
					continue
				}
				row.Modes[m] = &ModeResult{TPS: float64(1000 * pairs * (i + 1)), AvgUs: 50 / float64(i+1)}
			}
			r.Rows = append(r.Rows, row)
		}
	}
	f := r.Figure()
	if len(f.Panels) != 4 {
		t.Fatalf("%d panels, want transactions/s and latency per workload", len(f.Panels))
	}
	s := plottest.Draw(t, f)
	// intra: 3 modes x 3 pair counts, inter: 2 x 3, each twice (tps, latency); legend marks.
	s.Expect(t, map[string]int{"Linux": 4, "linuxfp": 4, "ceiling": 2,
		"intra-node: transactions/s": 1, "inter-node: average latency": 1}, 2*(9+6)+2*(3+2), 0)
}
