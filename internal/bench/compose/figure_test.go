package compose

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/plot/plottest"
)

func TestFigure(t *testing.T) {
	r := &Result{}
	r.Config.Lookup, r.Config.Compositions = "hash", []Composition{Inline, Tail, TailMap}
	for _, c := range r.Config.Compositions {
		for n := 1; n <= 4; n++ {
			cell := &Cell{Composition: c, Modules: n, TestRun: &TestRun{Spread: Spread{Median: 10 * float64(n)}}}
			// Forwarding measured for inline and tail only, and not at N=4.
			if c != TailMap && n < 4 {
				cell.Live = &Live{Spread: Spread{Median: 5 / float64(n)}}
			}
			r.Cells = append(r.Cells, cell)
		}
	}
	f := r.Figure()
	if len(f.Panels) != 2 || len(f.Panels[1].Series) != 2 {
		t.Fatalf("panels %+v: want test run and forwarding, forwarding without tail-map", f.Panels)
	}
	s := plottest.Draw(t, f)
	// Test run: 3 compositions x 4 lengths; forwarding: 2 x 3; a legend mark per series.
	s.Expect(t, map[string]int{"inline": 2, "tail": 2, "tail-map": 1,
		"BPF_PROG_TEST_RUN, one frame": 1, "forwarding, 1 generator core": 1}, 12+6+5, 0)
}
