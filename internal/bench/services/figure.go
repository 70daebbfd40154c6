package services

import (
	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// Figure draws each workload's rate against the number of services, a series per mode, for the
// client outside the cluster; the cases whose clients are the pods (from pods, masquerade) stay
// in the table, having one service count each.
func (r *Result) Figure() harness.Figure {
	f := harness.Figure{Title: "services: kube-proxy services through the node, Linux vs linuxfp"}
	for _, w := range r.Config.Workloads {
		p := harness.Panel{Title: string(w),
			X: harness.Axis{Label: "services", Log: true},
			Y: harness.Axis{Label: w.unit() + " (median)", FromZero: true}}
		for _, m := range r.Config.Modes {
			s := harness.Series{Name: m.Title()}
			for _, row := range r.Rows {
				if mr := row.Modes[m]; row.Workload == w && !row.Case.podClients() && !row.Case.IPv6 && row.Case.Services > 0 && mr != nil && mr.Value > 0 {
					s.Points = append(s.Points, harness.Point{X: float64(row.Case.Services), Y: mr.Value})
				}
			}
			s.Points = harness.SortPoints(s.Points)
			p.Series = append(p.Series, s)
		}
		f.AddPanel(p)
	}
	return f
}
