package harness

import (
	"cmp"
	"slices"
)

// A Figure is what a benchmark's result draws (--plot): panels side by side, each with its axes
// and series, described from the result's own rows. It is data only: internal/bench/plot draws
// it, so that only the benchmark command links the plotting library.
type Figure struct {
	Title  string
	Panels []Panel
}

// Panel is one plot of a figure: lines through points, or with Categories a bar chart.
type Panel struct {
	Title string
	X, Y  Axis
	// Categories, when set, make the panel a bar chart: each series a bar per category, its
	// Points' Y in the categories' order (X unused).
	Categories []string
	Series     []Series
}

// Axis is a panel's axis.
type Axis struct {
	Label string
	Log   bool // logarithmic (every value must be > 0)
	// FromZero: the axis starts at 0 rather than at the smallest value.
	FromZero bool
	// Ticks, when set, are the values marked and labelled (what was measured: the frame sizes);
	// otherwise the library picks round ones.
	Ticks []float64
}

// Series is one line (or set of bars) of a panel, named in its legend.
type Series struct {
	Name   string
	Points []Point
	// Step draws a staircase without point marks: a cumulative distribution.
	Step bool
}

// Point is one value of a series.
type Point struct{ X, Y float64 }

// Plotted is a result that draws a figure.
type Plotted interface {
	Figure() Figure
}

// Empty: the figure has nothing to draw.
func (f Figure) Empty() bool {
	for _, p := range f.Panels {
		if len(p.Series) > 0 {
			return false
		}
	}
	return true
}

// AddPanel appends p if it has a series with a point.
func (f *Figure) AddPanel(p Panel) {
	p.Series = slices.DeleteFunc(p.Series, func(s Series) bool { return len(s.Points) == 0 })
	if len(p.Series) > 0 {
		f.Panels = append(f.Panels, p)
	}
}

// CDF is the empirical cumulative distribution of samples: each sorted value against the share
// of samples at or below it.
func CDF(samples []float64) []Point {
	s := slices.Sorted(slices.Values(samples))
	out := make([]Point, len(s))
	for i, v := range s {
		out[i] = Point{X: v, Y: float64(i+1) / float64(len(s))}
	}
	return out
}

// SortPoints sorts points by X.
func SortPoints(p []Point) []Point {
	slices.SortFunc(p, func(a, b Point) int { return cmp.Compare(a.X, b.X) })
	return p
}

// ThroughputPanels are a forwarding benchmark's Mpps against frame size, one panel per
// generator core count, a series per mode (rate: what a cell plots, Throughput.Rate for the
// DUT's rate).
func ThroughputPanels(rows []ThroughputRow, modes []Mode, title string) []Panel {
	var cores []int
	for _, r := range rows {
		if !slices.Contains(cores, r.Cores) {
			cores = append(cores, r.Cores)
		}
	}
	slices.Sort(cores)
	var sizes []float64
	for _, r := range rows {
		if !slices.Contains(sizes, float64(r.FrameSize)) {
			sizes = append(sizes, float64(r.FrameSize))
		}
	}
	var out []Panel
	for _, c := range cores {
		p := Panel{
			Title: title + ", " + Plural(c, "generator core"),
			X:     Axis{Label: "frame size (bytes, with FCS)", Ticks: sizes},
			Y:     Axis{Label: "Mpps", FromZero: true},
		}
		for _, m := range modes {
			s := Series{Name: m.Title()}
			for _, r := range rows {
				if t := r.Modes[m]; r.Cores == c && t != nil && t.Rate() > 0 {
					s.Points = append(s.Points, Point{X: float64(r.FrameSize), Y: t.Rate()})
				}
			}
			if len(s.Points) > 0 {
				s.Points = SortPoints(s.Points)
				p.Series = append(p.Series, s)
			}
		}
		out = append(out, p)
	}
	return out
}

// LatencyPanel is the request/response test's transactions/s, a bar per mode.
func LatencyPanel(lat []LatencyMode) Panel {
	p := Panel{Title: "TCP request/response", Categories: []string{"transactions/s"},
		Y: Axis{Label: "transactions/s", FromZero: true}}
	for _, l := range lat {
		if l.TPS > 0 {
			p.Series = append(p.Series, Series{Name: l.Mode.Title(), Points: []Point{{Y: l.TPS}}})
		}
	}
	return p
}

// CPUPanel is the CPU test's DUT-only kernel time per million packets, a bar per mode.
func CPUPanel(cp *CPUResult) Panel {
	p := Panel{Title: "DUT CPU per packet", Categories: []string{"DUT-only"},
		Y: Axis{Label: "kernel ms per million packets", FromZero: true}}
	if cp == nil {
		return p
	}
	for _, m := range cp.Modes {
		if m.Mode != ModeBaseline && m.DUTPerMpkt > 0 {
			p.Series = append(p.Series, Series{Name: m.Mode.Title(), Points: []Point{{Y: m.DUTPerMpkt}}})
		}
	}
	return p
}

// Figure draws the throughput against frame size (a panel per generator core count), and the
// latency and CPU tests when they ran.
func (r *PipelineResult) Figure() Figure {
	f := Figure{Title: r.Config.Topology + ": Linux vs linuxfp"}
	for _, p := range ThroughputPanels(FamilyRows(r.Throughput, IPv4), r.Config.Modes, "throughput") {
		f.AddPanel(p)
	}
	f.AddPanel(LatencyPanel(r.Latency))
	f.AddPanel(CPUPanel(r.CPU))
	return f
}
