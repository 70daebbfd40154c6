package harness

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness/benchtest"
)

// tcResult is a router or bridge result with every mode at 1 core and 64 bytes (and 2 cores),
// Linux at 1 Mpps, and linuxfp-tc's second round at XDP.
func tcResult(topology string) *PipelineResult {
	cfg := PipelineConfig{Run: Run{Modes: Modes, Rounds: 2}, Sizes: []int{64}, Cores: []int{1, 2}, Sessions: 1}
	t := &Topology{Name: "router", Module: "forward"}
	if topology == "bridge" {
		t = &Topology{Name: "bridge", Module: "bridge"}
	}
	r := NewPipelineResult(cfg, t)
	rates := map[Mode]float64{ModeLinux: 1, ModeLinuxfp: 4, ModeLinuxfpTC: 2, ModeCeiling: 8, ModeCeilingTC: 2.5}
	for _, cores := range []int{2, 1} {
		for _, m := range Modes {
			for i := range 2 {
				rd := Round{Offered: 1000, Received: 1000, Mpps: rates[m] * float64(cores)}
				switch m {
				case ModeLinuxfp:
					rd.FastPath = &FastPath{Forwarded: 1000, Hook: "xdp", OutHook: "xdp"}
				case ModeLinuxfpTC:
					rd.FastPath = &FastPath{Forwarded: 1000, Hook: "tc", OutHook: "tc"}
					if i == 1 && cores == 1 {
						rd.FastPath.Hook, rd.FastPath.OutHook = "xdp", "xdp"
					}
				}
				r.AddRound(cores, 64, m, rd)
			}
		}
	}
	r.Latency = summariseLatency(map[Mode][]LatencyRound{
		ModeLinux:     {{TPS: 100, AvgUs: 10, P99Us: 20}},
		ModeLinuxfp:   {{TPS: 125, AvgUs: 8, P99Us: 16, FastPath: &FastPath{Hook: "xdp"}}},
		ModeLinuxfpTC: {{TPS: 110, AvgUs: 9, P99Us: 18, FastPath: &FastPath{Hook: "tc"}}},
	}, []Mode{ModeLinux, ModeLinuxfp, ModeLinuxfpTC}, 1)
	r.CPU = &CPUResult{Modes: []CPUMode{{Mode: ModeBaseline, KernelPerMpkt: 100}, {Mode: ModeLinux, DUTPerMpkt: 1000},
		{Mode: ModeLinuxfp, DUTPerMpkt: 250}, {Mode: ModeLinuxfpTC, DUTPerMpkt: 500}}}
	r.Finish(0)
	return r
}

func TestTableVII(t *testing.T) {
	r := tcResult("router")
	tv := r.TableVII
	if tv == nil || tv.Cores != 1 || tv.FrameSize != 64 || tv.Sessions != 1 || len(tv.Rows) != 5 {
		t.Fatalf("table %+v", tv)
	}
	want := []HookRow{
		{Module: "forward", Mode: ModeLinux, Mpps: 1, OverLinux: 1, TPS: 100, AvgUs: 10, P99Us: 20, AvgOverLinux: 1, DUTNsPerPacket: 1000},
		{Module: "forward", Mode: ModeLinuxfp, Hook: "xdp", Mpps: 4, OverLinux: 4, TPS: 125, AvgUs: 8, P99Us: 16, AvgOverLinux: 0.8, DUTNsPerPacket: 250},
		{Module: "forward", Mode: ModeLinuxfpTC, Hook: "tc,xdp", Mpps: 2, OverLinux: 2, TCOverXDP: 0.5, TPS: 110, AvgUs: 9, P99Us: 18,
			AvgOverLinux: 0.9, DUTNsPerPacket: 500, Flagged: true},
		{Module: "forward", Mode: ModeCeiling, Hook: "xdp", Mpps: 8, OverLinux: 8},
		{Module: "forward", Mode: ModeCeilingTC, Hook: "tc", Mpps: 2.5, OverLinux: 2.5, TCOverXDP: 2.5 / 8},
	}
	for i, w := range want {
		if tv.Rows[i] != w {
			t.Errorf("row %d: %+v\nwant   %+v", i, tv.Rows[i], w)
		}
	}
	benchtest.ReportHas(t, r,
		"Table VII: each module at XDP and at tc (64-byte frames, 1 generator core; latency: TCP request/response, 1 session)",
		"forward linuxfp-tc tc,xdp 2.000 2.00x 0.50 110 9.0 18.0 0.90 500 !",
		"forward ceiling-tc tc 2.500 2.50x 0.31 - - - - - ",
	)

	// Without a tc mode there is no table.
	r = NewPipelineResult(PipelineConfig{Run: Run{Modes: DefaultModes}, Sizes: []int{64}, Cores: []int{1}}, &Topology{Name: "router", Module: "forward"})
	r.AddRound(1, 64, ModeLinux, Round{Mpps: 1})
	r.Finish(0)
	if r.TableVII != nil {
		t.Errorf("a table without a tc mode: %+v", r.TableVII)
	}
}

func TestFlaggedModes(t *testing.T) {
	f := FlaggedModes([]string{
		"! linuxfp-tc, 1 cores, 64 bytes: 1 round(s) ran at in0 xdp, out0 xdp, not tc",
		"! 100 rules, miss: ceiling, 1 cores, 64 bytes: 1 window(s) measured again",
	})
	for m, want := range map[Mode]bool{ModeLinuxfpTC: true, ModeCeiling: true, ModeLinuxfp: false, ModeLinux: false, ModeCeilingTC: false} {
		if f(m) != want {
			t.Errorf("%s flagged %v, want %v", m, f(m), want)
		}
	}
}
