package plot_test

import (
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/plot"
	"github.com/linuxfp/linuxfp/internal/bench/plot/plottest"
)

func pts(xy ...float64) []harness.Point {
	var out []harness.Point
	for i := 0; i+1 < len(xy); i += 2 {
		out = append(out, harness.Point{X: xy[i], Y: xy[i+1]})
	}
	return out
}

// figure has a panel of each kind: lines with marks, bars, staircases on a log axis.
func figure() harness.Figure {
	return harness.Figure{Title: "a figure", Panels: []harness.Panel{
		{Title: "lines", X: harness.Axis{Label: "frame"}, Y: harness.Axis{Label: "Mpps", FromZero: true},
			Series: []harness.Series{{Name: "one", Points: pts(64, 1, 512, 0.9, 1500, 0.8)}, {Name: "two", Points: pts(64, 3, 1500, 2)}}},
		{Title: "bars", Categories: []string{"a", "b"}, Y: harness.Axis{Label: "n"},
			Series: []harness.Series{{Name: "three", Points: pts(0, 1, 0, 2)}, {Name: "four", Points: pts(0, 3, 0, 4)}, {Name: "five", Points: pts(0, 5, 0, 6)}}},
		{Title: "steps", X: harness.Axis{Label: "ms", Log: true}, Y: harness.Axis{Label: "share"},
			Series: []harness.Series{{Name: "six", Step: true, Points: harness.CDF([]float64{3, 1, 2, 30})}}},
	}}
}

func TestDrawShowsEverySeries(t *testing.T) {
	s := plottest.Draw(t, figure())
	// Marks: 5 points and a legend mark for each of the 2 line series; bars: 3 series x 2
	// categories and 3 legend swatches; lines: 2 series and 1 staircase, each also in a legend.
	s.Expect(t, map[string]int{"a figure": 1, "lines": 1, "bars": 1, "steps": 1,
		"one": 1, "two": 1, "three": 1, "four": 1, "five": 1, "six": 1}, 5+2, 3*2+3)
	if s.Lines != 2*3 {
		t.Errorf("%d lines, want 6", s.Lines)
	}
}

func TestDrawLeavesOutEmptyPanels(t *testing.T) {
	f := figure()
	f.AddPanel(harness.Panel{Title: "nothing", Series: []harness.Series{{Name: "no points"}}})
	if len(f.Panels) != 3 {
		t.Fatalf("AddPanel kept a panel without points: %d panels", len(f.Panels))
	}
	if _, err := plottest.Read(nil); err == nil {
		t.Error("an empty document read as an SVG")
	}
	err := plot.WriteFile(filepath.Join(t.TempDir(), "x.svg"), harness.Figure{Title: "empty"})
	if !errors.Is(err, plot.ErrNothing) {
		t.Errorf("empty figure: %v, want ErrNothing", err)
	}
}

func TestLogAxisRefusesZero(t *testing.T) {
	f := harness.Figure{Title: "log", Panels: []harness.Panel{{Title: "p", X: harness.Axis{Log: true},
		Series: []harness.Series{{Name: "s", Points: pts(0, 1, 1, 2)}}}}}
	if err := plot.WriteFile(filepath.Join(t.TempDir(), "x.svg"), f); err == nil {
		t.Error("drew 0 on a log axis")
	}
}

func TestWriteFileByExtension(t *testing.T) {
	dir := t.TempDir()
	svg, pngFile := filepath.Join(dir, "f.svg"), filepath.Join(dir, "f.png")
	for _, file := range []string{svg, pngFile} {
		if err := plot.WriteFile(file, figure()); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plottest.Read(data); err != nil {
		t.Errorf("%s: %v", svg, err)
	}
	f, err := os.Open(pngFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", pngFile, err)
	}
	// Two panels a row: two rows of 4.6 x 3.2 inches and the title's strip, at 96 dpi.
	if b := img.Bounds(); b.Dx() != 883 || b.Dy() < 600 {
		t.Errorf("png is %v", b)
	}
	if err := plot.WriteFile(filepath.Join(dir, "f.pdf"), figure()); err == nil {
		t.Error("wrote a .pdf")
	}
}
