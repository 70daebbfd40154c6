package harness_test

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/plot/plottest"
)

// pipelineResult is a router run of 3 frame sizes x 2 core counts; ceiling was not measured at
// 1500 bytes with 2 cores.
func pipelineResult() *harness.PipelineResult {
	modes := []harness.Mode{harness.ModeLinux, harness.ModeLinuxfp, harness.ModeCeiling}
	r := &harness.PipelineResult{Report: harness.Report[harness.PipelineSettings]{
		Config: harness.PipelineSettings{Topology: "router", Sizes: []int{64, 512, 1500}, Cores: []int{1, 2}, Modes: modes}}}
	for _, c := range []int{1, 2} {
		for i, size := range []int{64, 512, 1500} {
			row := harness.ThroughputRow{Cores: c, FrameSize: size, Modes: map[harness.Mode]*harness.Throughput{}}
			for j, m := range modes {
				if c == 2 && size == 1500 && m == harness.ModeCeiling {
					continue
				}
				row.Modes[m] = &harness.Throughput{Mpps: float64(c*(j+1)) - 0.1*float64(i)}
			}
			r.Throughput = append(r.Throughput, row)
		}
	}
	return r
}

func TestPipelineFigure(t *testing.T) {
	r := pipelineResult()
	f := r.Figure()
	if len(f.Panels) != 2 {
		t.Fatalf("%d panels, want one per core count (no latency, no CPU test)", len(f.Panels))
	}
	s := plottest.Draw(t, f)
	// 3 modes in 2 panels: 17 points (one cell not measured) and 6 legend marks.
	s.Expect(t, map[string]int{"Linux": 2, "linuxfp": 2, "ceiling": 2,
		"throughput, 1 generator core": 1, "throughput, 2 generator cores": 1,
		// The frame sizes measured are the x axis' labels, in each panel.
		"64": 2, "512": 2, "1500": 2}, 17+6, 0)

	r.Latency = []harness.LatencyMode{{Mode: harness.ModeLinux, TPS: 1000}, {Mode: harness.ModeLinuxfp, TPS: 2000}}
	r.CPU = &harness.CPUResult{Modes: []harness.CPUMode{{Mode: harness.ModeBaseline, DUTPerMpkt: 0},
		{Mode: harness.ModeLinux, DUTPerMpkt: 300}, {Mode: harness.ModeLinuxfp, DUTPerMpkt: 100}, {Mode: harness.ModeCeiling, DUTPerMpkt: 80}}}
	s = plottest.Draw(t, r.Figure())
	// Bars: latency 2 modes, CPU 3 modes (not the baseline), each with its legend swatch.
	s.Expect(t, map[string]int{"Linux": 4, "linuxfp": 4, "ceiling": 3, "baseline": 0,
		"TCP request/response": 1, "DUT CPU per packet": 1}, 17+6, 2*2+3*2)
}
