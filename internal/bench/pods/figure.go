package pods

import (
	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// Figure draws pod-to-pod request/response against the number of concurrent pod pairs: per
// workload (intra-node, inter-node) transactions/s and the average latency, a series per mode.
func (r *Result) Figure() harness.Figure {
	f := harness.Figure{Title: "pods: pod-to-pod TCP request/response over Flannel and the CNI bridge"}
	var pairs []float64
	for _, n := range r.Config.Pairs {
		pairs = append(pairs, float64(n))
	}
	for _, w := range r.Config.Workloads {
		tps := harness.Panel{Title: string(w) + "-node: transactions/s",
			X: harness.Axis{Label: "concurrent pod pairs", Ticks: pairs},
			Y: harness.Axis{Label: "transactions/s (median)", FromZero: true}}
		avg := harness.Panel{Title: string(w) + "-node: average latency",
			X: harness.Axis{Label: "concurrent pod pairs", Ticks: pairs},
			Y: harness.Axis{Label: "us (median of rounds' averages)", FromZero: true}}
		for _, m := range r.Config.Modes {
			t, a := harness.Series{Name: m.Title()}, harness.Series{Name: m.Title()}
			for _, row := range r.Rows {
				if mr := row.Modes[m]; row.Workload == w && mr != nil && mr.TPS > 0 {
					t.Points = append(t.Points, harness.Point{X: float64(row.Pairs), Y: mr.TPS})
					a.Points = append(a.Points, harness.Point{X: float64(row.Pairs), Y: mr.AvgUs})
				}
			}
			t.Points, a.Points = harness.SortPoints(t.Points), harness.SortPoints(a.Points)
			tps.Series, avg.Series = append(tps.Series, t), append(avg.Series, a)
		}
		f.AddPanel(tps)
		f.AddPanel(avg)
	}
	return f
}
