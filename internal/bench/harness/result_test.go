package harness

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness/benchtest"
)

func TestModes(t *testing.T) {
	for _, s := range []string{"linux", "linuxfp", "linuxfp-tc", "ceiling", "ceiling-tc"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseMode("tc"); err == nil {
		t.Error("ParseMode(tc) accepted a mode that does not exist")
	}
	if slices.Contains(DefaultModes, ModeLinuxfpTC) {
		t.Error("linuxfp-tc is run by default")
	}
	cfg := PipelineConfig{Run: Run{Modes: []Mode{ModeCeiling, ModeLinuxfpTC, ModeLinux, ModeLinuxfpTC}, Binary: "linuxfp"},
		Cores: []int{1}}
	if err := cfg.Defaults(); err != nil {
		t.Fatal(err)
	}
	if want := []Mode{ModeLinux, ModeLinuxfpTC, ModeCeiling}; !slices.Equal(cfg.Modes, want) {
		t.Errorf("modes %v, want %v (report order, once each)", cfg.Modes, want)
	}
	if err := (&PipelineConfig{Run: Run{Modes: []Mode{ModeLinuxfpTC}}, Cores: []int{1}}).Defaults(); err == nil {
		t.Error("linuxfp-tc without a binary to run: no error")
	}
	for _, tc := range []struct {
		m    Mode
		csum bool
		args []string
		hook string
	}{
		{ModeLinux, false, nil, ""},
		{ModeLinuxfp, false, nil, "xdp"},
		{ModeLinuxfp, true, nil, "xdp-generic"},
		{ModeLinuxfpTC, false, []string{"--hook", "tc"}, "tc"},
		{ModeLinuxfpTC, true, []string{"--hook", "tc"}, "tc"},
		{ModeCeiling, false, nil, ""},
		{ModeCeilingTC, false, nil, ""},
	} {
		if got := tc.m.RunArgs(); !slices.Equal(got, tc.args) {
			t.Errorf("%s: run args %v, want %v", tc.m, got, tc.args)
		}
		if got := tc.m.WantHook(tc.csum); got != tc.hook {
			t.Errorf("%s (tx csum offload %v): want hook %q, got %q", tc.m, tc.csum, tc.hook, got)
		}
	}
}

func TestHookProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Mode
		fp   *FastPath
		want string
	}{
		{"xdp as it should", ModeLinuxfp, &FastPath{Hook: "xdp", OutHook: "xdp"}, ""},
		{"tc as it should", ModeLinuxfpTC, &FastPath{Hook: "tc", OutHook: "tc"}, ""},
		{"no program on out0", ModeLinuxfpTC, &FastPath{Hook: "tc"}, ""},
		{"tc mode at xdp", ModeLinuxfpTC, &FastPath{Hook: "xdp", OutHook: "xdp"}, "ran at in0 xdp, out0 xdp, not tc"},
		{"out0 elsewhere", ModeLinuxfp, &FastPath{Hook: "xdp", OutHook: "xdp-generic"}, "ran at in0 xdp, out0 xdp-generic, not xdp"},
		{"no program on in0: flagged on its own", ModeLinuxfpTC, &FastPath{NoProgram: "why"}, ""},
		{"not recorded", ModeLinuxfpTC, &FastPath{}, ""},
		{"not a linuxfp mode", ModeLinux, nil, ""},
	} {
		if got := hookProblem(tc.m, tc.fp, false); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The forwarding report prints every mode run, the ratios between them, and flags rounds where
// linuxfp ran elsewhere than its mode says or handed packets to Linux.
func TestReportLinuxfpTC(t *testing.T) {
	modes := []Mode{ModeLinux, ModeLinuxfp, ModeLinuxfpTC, ModeCeiling, ModeCeilingTC}
	cfg := PipelineConfig{Run: Run{Modes: modes, Rounds: 2}, Sizes: []int{64}, Cores: []int{1}}
	r := NewPipelineResult(cfg, &Topology{Name: "router", Module: "forward"})
	rates := map[Mode][2]float64{ModeLinux: {1, 1}, ModeLinuxfp: {3, 3}, ModeLinuxfpTC: {1.5, 1.5}, ModeCeiling: {6, 6}, ModeCeilingTC: {2, 2}}
	for _, m := range modes {
		for i, x := range rates[m] {
			rd := Round{Offered: 1000, Received: 1000, Mpps: x, OfferedMpps: x}
			switch m {
			case ModeLinuxfp:
				rd.FastPath = &FastPath{Forwarded: 1000, Hook: "xdp", OutHook: "xdp"}
			case ModeLinuxfpTC:
				rd.FastPath = &FastPath{Forwarded: 1000, Hook: "tc", OutHook: "tc"}
				if i == 1 { // linuxfp fell back to XDP, and Linux routed some
					rd.FastPath = &FastPath{Forwarded: 900, Passed: map[string]uint64{"fib_not_forwarded": 100}, Hook: "xdp", OutHook: "xdp"}
				}
			}
			r.AddRound(1, 64, m, rd)
		}
	}
	r.Latency = summariseLatency(map[Mode][]LatencyRound{
		ModeLinux:     {{TPS: 100, AvgUs: 10}},
		ModeLinuxfp:   {{TPS: 120, AvgUs: 8, FastPath: &FastPath{Hook: "xdp", OutHook: "xdp"}}},
		ModeLinuxfpTC: {{TPS: 110, AvgUs: 9, FastPath: &FastPath{Hook: "xdp-generic", OutHook: "tc"}}},
	}, []Mode{ModeLinux, ModeLinuxfp, ModeLinuxfpTC}, 128)
	r.Finish(0)
	row := r.Throughput[0]
	if row.LinuxfpOverLinux != 3 || row.LinuxfpTCOverLinux != 1.5 || row.LinuxfpTCOverLinuxfp != 0.5 || row.LinuxfpOverCeiling != 0.5 ||
		row.LinuxfpTCOverCeilingTC != 0.75 {
		t.Errorf("ratios %+v", row)
	}
	out := benchtest.ReportHas(t, r,
		"Linux Mpps Gbit/s linuxfp Mpps Gbit/s linuxfp-tc Mpps Gbit/s ceiling Mpps Gbit/s ceiling-tc Mpps Gbit/s "+
			"linuxfp/Linux linuxfp-tc/Linux tc/xdp linuxfp/ceiling linuxfp-tc/ceiling-tc",
		"1 64 1.000 0.51 3.000 1.54 1.500 0.77 6.000 3.07 2.000 1.02 3.00x 1.50x 0.50 0.50 0.75",
		"! linuxfp-tc, 1 cores, 64 bytes: 1 round(s) ran at in0 xdp, out0 xdp, not tc",
		"! linuxfp-tc, 1 cores, 64 bytes: in0 fast-pathed only 1900 of 2000 received (handed to Linux map[fib_not_forwarded:100])",
		"linuxfp-tc 110 9.0",
		"! linuxfp-tc, latency: 1 round(s) ran at in0 xdp-generic, out0 tc, not tc",
	)
	if strings.Contains(out, "! linuxfp,") || strings.Contains(out, "! linuxfp, latency") {
		t.Errorf("linuxfp at XDP, fast-pathing everything, is flagged:\n%s", out)
	}
}

func TestCPUFlags(t *testing.T) {
	ok := &CPUResult{Modes: []CPUMode{{Mode: ModeBaseline}, {Mode: ModeLinux, DUTPerMpkt: 500}, {Mode: ModeLinuxfp, DUTPerMpkt: 200},
		{Mode: ModeCeiling, DUTPerMpkt: -40}}} // within a tenth of Linux's cost of the baseline
	if f := CPUFlags(ok); f != nil {
		t.Errorf("consistent numbers flagged: %v", f)
	}
	odd := &CPUResult{Modes: []CPUMode{{Mode: ModeBaseline}, {Mode: ModeLinux, DUTPerMpkt: 500}, {Mode: ModeLinuxfp, DUTPerMpkt: -60},
		{Mode: ModeCeilingTC, DUTPerMpkt: 600}}}
	want := "! CPU: linuxfp below the baseline, ceiling-tc above Linux: the machine's kernel time (all CPUs) included other work; these numbers are noise"
	if f := CPUFlags(odd); len(f) != 1 || f[0] != want {
		t.Errorf("flags %q, want %q", f, want)
	}
}

// The DUT's rate follows from what the sink received and the fraction the rules let through;
// "lost before the sink" compares with what should have arrived.
func TestMixArithmetic(t *testing.T) {
	for _, tc := range []struct {
		rd   Round
		dut  float64
		lost bool
	}{
		{Round{Offered: 1000, Received: 1000, Mpps: 2}, 2, false},
		{Round{Offered: 1000, Received: 990, Mpps: 2}, 2, false},
		{Round{Offered: 1000, Received: 989, Mpps: 2}, 2, true},
		{Round{Offered: 1000, Received: 500, Mpps: 1, Permitted: 0.5}, 2, false},
		{Round{Offered: 1000, Received: 495, Mpps: 1, Permitted: 0.5}, 2, false},
		{Round{Offered: 1000, Received: 494, Mpps: 1, Permitted: 0.5}, 2, true},
	} {
		if d, l := tc.rd.dutMpps(), tc.rd.LostBeforeSink(); d != tc.dut || l != tc.lost {
			t.Errorf("%+v: DUT rate %v, lost %v; want %v, %v", tc.rd, d, l, tc.dut, tc.lost)
		}
	}
	// Ratios compare DUT rates: the ceiling forwards everything (its rounds have no Permitted).
	res := NewPipelineResult(PipelineConfig{}, &Topology{Name: "router"})
	res.AddRound(1, 64, ModeLinux, Round{Mpps: 0.5, Permitted: 0.5})
	res.AddRound(1, 64, ModeLinuxfp, Round{Mpps: 2, Permitted: 0.5})
	res.AddRound(1, 64, ModeCeiling, Round{Mpps: 8})
	row := res.Throughput[0]
	if f := row.Modes[ModeLinuxfp]; f.DUTMpps != 4 || f.Mpps != 2 || row.Modes[ModeCeiling].DUTMpps != 0 {
		t.Errorf("linuxfp %+v, ceiling %+v", f, row.Modes[ModeCeiling])
	}
	if row.LinuxfpOverLinux != 4 || row.LinuxfpOverCeiling != 0.5 {
		t.Errorf("linuxfp/Linux %v, linuxfp/ceiling %v; want 4, 0.5", row.LinuxfpOverLinux, row.LinuxfpOverCeiling)
	}
}

// IPv6 rows sit beside the IPv4 ones of the same cores and size without mixing with them: their
// own ratios, after every IPv4 row, a family column in the table, and IPv4 lookups see only
// IPv4.
func TestFamilyRows(t *testing.T) {
	cfg := PipelineConfig{Run: Run{Modes: []Mode{ModeLinux, ModeLinuxfp, ModeCeiling}, Rounds: 1},
		Sizes: []int{64}, Cores: []int{1}, Families: []Family{IPv4, IPv6}, Sizes6: []int{64, 66, 128}}
	r := NewPipelineResult(cfg, &Topology{Name: "router"})
	if want := []int{66, 128}; !slices.Equal(r.Config.Sizes6, want) {
		t.Errorf("IPv6 sizes %v, want %v (64 measured at 66, once)", r.Config.Sizes6, want)
	}
	rate := map[Family]map[Mode]float64{
		IPv4: {ModeLinux: 1, ModeLinuxfp: 2, ModeCeiling: 4},
		IPv6: {ModeLinux: 0.5, ModeLinuxfp: 2, ModeCeiling: 2.5},
	}
	for _, f := range []Family{IPv6, IPv4} { // IPv6 first: Finish still puts IPv4 first
		for _, m := range cfg.Run.Modes {
			size := 64
			if f == IPv6 {
				size = 66
			}
			r.AddFamilyRound(f, 1, size, m, Round{Seconds: 1, Offered: 10, Received: 10, Mpps: rate[f][m]})
		}
	}
	r.Finish(0)
	if len(r.Throughput) != 2 || r.Throughput[0].Of() != IPv4 || r.Throughput[1].Of() != IPv6 {
		t.Fatalf("rows %+v: want IPv4 then IPv6", r.Throughput)
	}
	if v4, v6 := r.Throughput[0], r.Throughput[1]; v4.LinuxfpOverLinux != 2 || v4.LinuxfpOverCeiling != 0.5 ||
		v6.LinuxfpOverLinux != 4 || v6.LinuxfpOverCeiling != 0.8 {
		t.Errorf("ratios: ipv4 %.2f %.2f, ipv6 %.2f %.2f; want 2 0.5, 4 0.8",
			v4.LinuxfpOverLinux, v4.LinuxfpOverCeiling, v6.LinuxfpOverLinux, v6.LinuxfpOverCeiling)
	}
	if r.Throughput[0].Family != "" {
		t.Errorf("IPv4 row carries family %q: its JSON would change", r.Throughput[0].Family)
	}
	if th := r.ThroughputOf(1, 66, ModeLinux); th != nil {
		t.Error("ThroughputOf found an IPv6 row")
	}
	if th := r.ThroughputOf(1, 64, ModeLinux); th == nil || th.Mpps != 1 {
		t.Errorf("ThroughputOf(1, 64, linux) = %+v, want the IPv4 row", th)
	}
	if got := FamilyRows(r.Throughput, IPv6); len(got) != 1 || got[0].FrameSize != 66 {
		t.Errorf("FamilyRows(ipv6) = %+v", got)
	}
	var b strings.Builder
	r.WriteTable(&b)
	for _, want := range []string{"family", "ipv4      1     64", "ipv6      1     66", "4.00x", "0.80"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// A topology without IPv6 traffic refuses --families ipv6 before building anything, and the
// cells of a run with both families are every IPv4 size, then every IPv6 one.
func TestFamilyCells(t *testing.T) {
	cfg := PipelineConfig{Run: Run{Modes: []Mode{ModeLinux}, Binary: "linuxfp"}, Cores: []int{1},
		Families: []Family{IPv6}}
	if _, err := RunPipeline(t.Context(), cfg, &Topology{Name: "bridge"}); err == nil || !strings.Contains(err.Error(), "no IPv6") {
		t.Errorf("bridge with --families ipv6: %v, want an error saying it has no IPv6 traffic", err)
	}
	cfg = PipelineConfig{Run: Run{Modes: []Mode{ModeLinux}, Binary: "linuxfp"}, Cores: []int{1}, Sizes: []int{64, 128},
		Families: []Family{IPv6, IPv4}}
	if err := cfg.Defaults(); err != nil {
		t.Fatal(err)
	}
	b := &Pipeline{Cfg: cfg}
	var got []string
	for _, c := range b.cells(0.5) {
		got = append(got, fmt.Sprintf("%s/%d/%.1f", cmp.Or(c.Family, IPv4), c.Size, c.Permitted))
	}
	if want := []string{"ipv4/64/0.5", "ipv4/128/0.5", "ipv6/66/0.5"}; !slices.Equal(got, want) {
		t.Errorf("cells %v, want %v", got, want)
	}
	if _, err := ParseFamily("ipv5"); err == nil {
		t.Error("ParseFamily(ipv5) accepted")
	}
}
