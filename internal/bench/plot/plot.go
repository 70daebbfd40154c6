// Package plot draws a benchmark's figure (harness.Figure) as SVG or PNG with gonum's plot
// library. Only the benchmark command imports it: the daemon links no plotting code.
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// Panel size, and the strip above the panels that holds the figure's title.
const (
	panelW = 4.6 * vg.Inch
	panelH = 3.2 * vg.Inch
	titleH = 0.4 * vg.Inch
)

// ErrNothing: the figure has no series (the benchmark measured nothing it draws).
var ErrNothing = errors.New("nothing to plot")

// Format is the format a file's extension names: "svg" or "png".
func Format(file string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(file)); ext {
	case ".svg", ".png":
		return ext[1:], nil
	default:
		return "", fmt.Errorf("plot %s: want a .svg or .png file", file)
	}
}

// WriteFile draws f into file, in the format its extension names.
func WriteFile(file string, f harness.Figure) error {
	format, err := Format(file)
	if err != nil {
		return err
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := Draw(out, f, format); err != nil {
		out.Close()
		os.Remove(file)
		return fmt.Errorf("plot %s: %w", file, err)
	}
	return out.Close()
}

// Draw writes f to w as format ("svg" or "png"): its panels two to a row under its title.
func Draw(w io.Writer, f harness.Figure, format string) error {
	if f.Empty() {
		return ErrNothing
	}
	var panels []*gplot.Plot
	for _, p := range f.Panels {
		if len(p.Series) == 0 {
			continue
		}
		gp, err := panel(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p.Title, err)
		}
		panels = append(panels, gp)
	}
	cols := min(2, len(panels))
	rows := (len(panels) + cols - 1) / cols
	width, height := vg.Length(cols)*panelW, vg.Length(rows)*panelH+titleH

	var c vg.CanvasWriterTo
	switch format {
	case "svg":
		c = vgsvg.New(width, height)
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96),
			vgimg.UseBackgroundColor(color.White))}
	default:
		return fmt.Errorf("format %q: want svg or png", format)
	}
	dc := draw.New(c)
	title := draw.TextStyle{Color: color.Black, Font: font.From(gplot.DefaultFont, 14),
		XAlign: draw.XCenter, YAlign: draw.YTop, Handler: gplot.DefaultTextHandler}
	dc.FillText(title, vg.Point{X: width / 2, Y: height - vg.Points(6)}, f.Title)

	grid := make([][]*gplot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*gplot.Plot, cols)
	}
	for i, p := range panels {
		grid[i/cols][i%cols] = p
	}
	body := draw.Crop(dc, 0, 0, 0, -titleH)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(8), PadY: vg.Points(8),
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := gplot.Align(grid, tiles, body)
	for i, p := range panels {
		p.Draw(canvases[i/cols][i%cols])
	}
	_, err := c.WriteTo(w)
	return err
}

// panel is one panel as a gonum plot.
func panel(p harness.Panel) (*gplot.Plot, error) {
	gp := gplot.New()
	gp.Title.Text = p.Title
	gp.X.Label.Text, gp.Y.Label.Text = p.X.Label, p.Y.Label
	gp.Legend.Top = true
	gp.Add(plotter.NewGrid())
	if p.Categories != nil {
		if err := bars(gp, p); err != nil {
			return nil, err
		}
	} else if err := lines(gp, p); err != nil {
		return nil, err
	}
	axis(&gp.X, p.X)
	axis(&gp.Y, p.Y)
	// Room above the data for the legend, which sits at the top.
	if !p.Y.Log {
		gp.Y.Max += (gp.Y.Max - gp.Y.Min) * 0.1 * float64(len(p.Series)+1)
	}
	return gp, nil
}

func axis(a *gplot.Axis, ax harness.Axis) {
	if ax.Log {
		a.Scale = gplot.LogScale{}
		a.Tick.Marker = logTicks{}
	}
	if len(ax.Ticks) > 0 {
		var ticks gplot.ConstantTicks
		for _, v := range ax.Ticks {
			ticks = append(ticks, gplot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
		}
		a.Tick.Marker = ticks
	}
	if ax.FromZero && !ax.Log {
		a.Min = math.Min(a.Min, 0)
	}
}

// lines adds each series as a line through marked points (a staircase without marks for Step).
func lines(gp *gplot.Plot, p harness.Panel) error {
	for i, s := range p.Series {
		xys := make(plotter.XYs, len(s.Points))
		for j, pt := range s.Points {
			if (p.X.Log && pt.X <= 0) || (p.Y.Log && pt.Y <= 0) {
				return fmt.Errorf("%s: %v on a log axis", s.Name, pt)
			}
			xys[j] = plotter.XY{X: pt.X, Y: pt.Y}
		}
		if s.Step {
			l, err := plotter.NewLine(xys)
			if err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			l.StepStyle = plotter.PostStep
			l.Color, l.Dashes, l.Width = plotutil.Color(i), plotutil.Dashes(i/7), vg.Points(1.2)
			gp.Add(l)
			gp.Legend.Add(s.Name, l)
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		l.Color, l.Width = plotutil.Color(i), vg.Points(1.2)
		pts.Color, pts.Shape, pts.Radius = plotutil.Color(i), draw.CircleGlyph{}, vg.Points(2.5)
		gp.Add(l, pts)
		gp.Legend.Add(s.Name, l, pts)
	}
	return nil
}

// bars adds each series as a bar per category, the series side by side within a category.
func bars(gp *gplot.Plot, p harness.Panel) error {
	n := len(p.Series)
	width := vg.Points(min(40, 200/float64(max(n*len(p.Categories), 1))))
	for i, s := range p.Series {
		vals := make(plotter.Values, len(p.Categories))
		for j := range vals {
			if j < len(s.Points) {
				vals[j] = s.Points[j].Y
			}
		}
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		b.Color, b.LineStyle.Width = plotutil.Color(i), 0
		b.Offset = vg.Length(float64(i)-float64(n-1)/2) * width
		gp.Add(b)
		gp.Legend.Add(s.Name, b)
	}
	gp.NominalX(p.Categories...)
	return nil
}

// logTicks marks a log axis at 1 to 9 times each power of ten and labels 1, 2 and 5 times it
// (only the powers over more than three decades): gonum's LogTicks labels only the powers,
// which leaves a range within one decade without a label.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []gplot.Tick {
	first, last := int(math.Floor(math.Log10(lo))), int(math.Ceil(math.Log10(hi)))
	var ticks []gplot.Tick
	for e := first; e <= last; e++ {
		for m := 1; m <= 9; m++ {
			v := float64(m) * math.Pow10(e)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := gplot.Tick{Value: v}
			if m == 1 || (last-first <= 3 && (m == 2 || m == 5)) {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
