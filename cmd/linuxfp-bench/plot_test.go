package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/plot/plottest"
)

// TestPlotSavedResult draws a router result saved as --json would, without running anything.
func TestPlotSavedResult(t *testing.T) {
	dir := t.TempDir()
	res := &harness.PipelineResult{Report: harness.Report[harness.PipelineSettings]{Config: harness.PipelineSettings{
		Topology: "router", Modes: []harness.Mode{harness.ModeLinux, harness.ModeLinuxfp}}}}
	for _, size := range []int{64, 512, 1500} {
		res.Throughput = append(res.Throughput, harness.ThroughputRow{Cores: 1, FrameSize: size, Modes: map[harness.Mode]*harness.Throughput{
			harness.ModeLinux: {Mpps: 1}, harness.ModeLinuxfp: {Mpps: 2}}})
	}
	saved := filepath.Join(dir, "router.json")
	f, err := os.Create(saved)
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.WriteJSON(f, res); err != nil {
		t.Fatal(err)
	}
	f.Close()

	svg := filepath.Join(dir, "router.svg")
	if rc := run([]string{"plot", "router", saved, "-o", svg}); rc != 0 {
		t.Fatalf("plot router: exit %d", rc)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := plottest.Read(data)
	if err != nil {
		t.Fatal(err)
	}
	// 2 modes x 3 frame sizes and a legend mark each.
	s.Expect(t, map[string]int{"Linux": 1, "linuxfp": 1, "router: Linux vs linuxfp": 1}, 6+2, 0)

	for _, args := range [][]string{
		{"plot", "nosuch", saved, "-o", svg},                          // no such benchmark
		{"plot", "router", saved, "-o", filepath.Join(dir, "x.pdf")},  // no such format
		{"plot", "router", saved},                                     // no -o
		{"plot", "compose", saved, "-o", filepath.Join(dir, "c.svg")}, // nothing of compose's in it
	} {
		if rc := run(args); rc == 0 {
			t.Errorf("%q: exit 0", args)
		}
	}
}
