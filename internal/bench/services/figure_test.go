package services

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/plot/plottest"
)

func TestFigure(t *testing.T) {
	r := &Result{}
	r.Config.Workloads, r.Config.Modes = []Workload{CRR, UDP}, Modes
	cases := []Case{{Services: 1}, {Services: 100}, {Services: 1000}, {Services: 1000, FromPods: true}, {Services: 1000, Masquerade: true}}
	for _, c := range cases {
		for _, w := range r.Config.Workloads {
			row := &Row{Case: c, Workload: w, Unit: w.unit(), Modes: map[harness.Mode]*ModeResult{}}
			for i, m := range Modes {
				row.Modes[m] = &ModeResult{Value: float64(i+1) * float64(c.Services)}
			}
			r.Rows = append(r.Rows, row)
		}
	}
	f := r.Figure()
	if len(f.Panels) != 2 {
		t.Fatalf("%d panels, want one per workload", len(f.Panels))
	}
	s := plottest.Draw(t, f)
	// 2 workloads x 3 modes x 3 service counts (not the pods' cases); legend marks.
	s.Expect(t, map[string]int{"Linux": 2, "linuxfp": 2, "linuxfp-tc": 2, "crr": 1, "udp": 1}, 18+6, 0)
}
