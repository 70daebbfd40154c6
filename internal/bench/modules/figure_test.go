package modules

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/plot/plottest"
)

func TestFigure(t *testing.T) {
	tv := &harness.TableVII{}
	for _, mod := range []string{"forward", "bridge", "filter"} {
		for i, m := range harness.HookModes {
			row := harness.HookRow{Module: mod, Mode: m, Mpps: float64(i + 1)}
			// CPU measured only for Linux and linuxfp.
			if m == harness.ModeLinux || m == harness.ModeLinuxfp {
				row.DUTNsPerPacket = 100 / float64(i+1)
			}
			tv.Rows = append(tv.Rows, row)
		}
	}
	f := (&Result{TableVII: tv}).Figure()
	s := plottest.Draw(t, f)
	// Throughput: 5 modes x 3 modules; CPU: 2 modes x 3; each series a legend swatch.
	s.Expect(t, map[string]int{"Linux": 2, "linuxfp": 2, "linuxfp-tc": 1, "ceiling": 1, "ceiling-tc": 1,
		"forward": 2, "bridge": 2, "filter": 2}, 0, 15+5+6+2)
	if (&Result{}).Figure().Empty() != true {
		t.Error("a result without Table VII draws something")
	}
}
