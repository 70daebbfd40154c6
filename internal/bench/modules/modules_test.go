package modules

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/gateway"
	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/harness/benchtest"
)

// bench modules puts the three modules' rows into one table, and prefixes every flagged line
// with its module.
func TestModulesResult(t *testing.T) {
	gw := &gateway.Result{TableVII: &harness.TableVII{Cores: 1, FrameSize: 64, Rows: []harness.HookRow{
		{Module: "filter", Mode: harness.ModeLinux, Mpps: 1, OverLinux: 1},
		{Module: "filter", Mode: harness.ModeLinuxfpTC, Hook: "tc", Mpps: 2, OverLinux: 2, TCOverXDP: 0.4, Flagged: true},
	}}}
	res := &Result{Router: tcResult("router", "forward"), Bridge: tcResult("bridge", "bridge"), Gateway: gw}
	res.finish(0)
	if n := len(res.TableVII.Rows); n != 12 {
		t.Fatalf("%d rows, want 12", n)
	}
	benchtest.ReportHas(t, res,
		"bridge linuxfp xdp 4.000 4.00x - 125 8.0 16.0 0.80 250",
		"filter linuxfp-tc tc 2.000 2.00x 0.40 - - - - - !",
		"! forward: linuxfp-tc, 1 cores, 64 bytes: 1 round(s) ran at in0 xdp, out0 xdp, not tc",
		"! bridge: linuxfp-tc, 1 cores, 64 bytes: 1 round(s) ran at in0 xdp, out0 xdp, not tc",
	)
}

// tcResult is a router or bridge result with every mode at 1 core and 64 bytes, Linux at 1 Mpps,
// and linuxfp-tc's second round at XDP.
func tcResult(name, module string) *harness.PipelineResult {
	cfg := harness.PipelineConfig{Run: harness.Run{Modes: harness.HookModes, Rounds: 2}, Sizes: []int{64}, Cores: []int{1}, Sessions: 1}
	r := harness.NewPipelineResult(cfg, &harness.Topology{Name: name, Module: module})
	rates := map[harness.Mode]float64{harness.ModeLinux: 1, harness.ModeLinuxfp: 4, harness.ModeLinuxfpTC: 2, harness.ModeCeiling: 8, harness.ModeCeilingTC: 2.5}
	for _, m := range harness.HookModes {
		for i := range 2 {
			rd := harness.Round{Offered: 1000, Received: 1000, Mpps: rates[m]}
			if m.RunsLinuxfp() {
				hook := m.WantHook(false)
				if i == 1 {
					hook = "xdp"
				}
				rd.FastPath = &harness.FastPath{Forwarded: 1000, Hook: hook, OutHook: hook}
			}
			r.AddRound(1, 64, m, rd)
		}
	}
	for _, l := range []harness.LatencyMode{{Mode: harness.ModeLinux, TPS: 100, AvgUs: 10, P99Us: 20},
		{Mode: harness.ModeLinuxfp, TPS: 125, AvgUs: 8, P99Us: 16}, {Mode: harness.ModeLinuxfpTC, TPS: 110, AvgUs: 9, P99Us: 18}} {
		l.Sessions, l.Rounds = 1, []harness.LatencyRound{{TPS: l.TPS, AvgUs: l.AvgUs, P99Us: l.P99Us}}
		r.Latency = append(r.Latency, l)
	}
	r.CPU = &harness.CPUResult{Modes: []harness.CPUMode{{Mode: harness.ModeBaseline, KernelPerMpkt: 100}, {Mode: harness.ModeLinux, DUTPerMpkt: 1000},
		{Mode: harness.ModeLinuxfp, DUTPerMpkt: 250}, {Mode: harness.ModeLinuxfpTC, DUTPerMpkt: 500}}}
	r.Finish(0)
	return r
}
