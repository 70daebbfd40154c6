package compose

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// Result is what bench compose measured. The JSON form is for scripts.
type Result struct {
	harness.Report[Settings]
	Cells []*Cell `json:"cells"`
	// Per composition: the cost of one more module, fitted over the chain lengths.
	PerModule []Fit `json:"per_module"`
	harness.Took
}

// Settings is the configuration the numbers were taken with.
type Settings struct {
	Modules      []int         `json:"modules"`
	Compositions []Composition `json:"compositions"`
	Lookup       string        `json:"lookup"` // "hash" (the destination's /24) or "lpm"
	FrameSize    int           `json:"frame_size"`
	Prefixes     int           `json:"prefixes"`
	TestRunTime  string        `json:"test_run_time,omitempty"`
	harness.Timing
}

// Cell is one composition of one chain length.
type Cell struct {
	Composition Composition `json:"composition"`
	Modules     int         `json:"modules"`
	// What the kernel made of it (for tail calls, the sum over the chain's programs):
	// instructions after verification and rewriting, and bytes of machine code.
	Insns      int `json:"xlated_insns"`
	JitedBytes int `json:"jited_bytes"`

	TestRun *TestRun `json:"test_run,omitempty"`
	Live    *Live    `json:"forwarding,omitempty"`
}

// TestRun is the BPF_PROG_TEST_RUN measurement: the kernel's average time per run, in
// whole nanoseconds, once per round.
type TestRun struct {
	Repeat int       `json:"repeat"`
	Rounds []float64 `json:"rounds_ns"`
	Spread           // of Rounds
	// OverInline: ns more than the inline chain of the same length in the same round.
	OverInline *Spread `json:"ns_over_inline,omitempty"`
}

// Live is the forwarding measurement: the rate the sink received, once per round.
type Live struct {
	Rounds []Round `json:"rounds"`
	Spread         // of the rounds' Mpps
	// NsPerPacket is 1000 / the median Mpps: the time one generator core spends per packet on
	// generating, forwarding (the chain) and sinking it.
	NsPerPacket float64 `json:"ns_per_packet"`
	// OverInline: the rate over the inline chain's of the same length in the same round.
	OverInline *Spread `json:"over_inline,omitempty"`
}

// Round is one forwarding round and what the chain counted meanwhile.
type Round struct {
	harness.Round
	Counted composeCounters `json:"counted"`
}

// Spread is the median and the range of a measurement's rounds.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadPtr(v []float64) *Spread {
	if len(v) == 0 {
		return nil
	}
	s := spreadOf(v)
	return &s
}

func spreadOf(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	return Spread{Median: harness.Median(v), Min: slices.Min(v), Max: slices.Max(v)}
}

// Fit is a composition's cost per module: the least-squares line through the medians
// over the chain lengths (ns = Intercept + PerModule x N), and its extra cost per module
// boundary over the inline chain (the slopes' difference).
type Fit struct {
	Composition Composition `json:"composition"`
	TestRun     *Line       `json:"test_run,omitempty"`
	Live        *Line       `json:"forwarding,omitempty"`
}

// Line is ns = Intercept + PerModule x N; OverInline is PerModule minus the inline chain's.
type Line struct {
	PerModule  float64 `json:"ns_per_module"`
	Intercept  float64 `json:"ns_intercept"`
	OverInline float64 `json:"ns_per_boundary_over_inline"`
}

func newResult(cfg Config) *Result {
	r := &Result{Report: harness.NewReport(Settings{Modules: cfg.Modules, Compositions: cfg.Compositions, Lookup: "hash",
		FrameSize: cfg.Size, Prefixes: topology.Prefixes, Timing: harness.Timing{Rounds: cfg.Rounds}})}
	if cfg.LPM {
		r.Config.Lookup = "lpm"
	}
	if cfg.TestRun {
		r.Config.TestRunTime = cfg.TestRunTime.String()
	}
	if cfg.Live {
		r.Config.Duration, r.Config.Warmup = cfg.Duration.String(), cfg.Warmup.String()
	}
	for _, n := range cfg.Modules {
		for _, comp := range cfg.Compositions {
			cell := &Cell{Composition: comp, Modules: n}
			if cfg.TestRun {
				cell.TestRun = &TestRun{}
			}
			if cfg.Live {
				cell.Live = &Live{}
			}
			r.Cells = append(r.Cells, cell)
		}
	}
	return r
}

// roundOrder is the order of the cells in round r: chain length by chain length (the
// compositions of one length back to back, so the comparisons between them see the same
// machine), lengths and compositions each starting at round r's turn.
func (r *Result) roundOrder(round int) []*Cell {
	var out []*Cell
	for i, n := range harness.Rotated(r.Config.Modules, round) {
		for _, comp := range harness.Rotated(r.Config.Compositions, round+i) {
			out = append(out, r.cell(comp, n))
		}
	}
	return out
}

func (r *Result) finish(elapsed time.Duration) {
	r.Took.Took(elapsed)
	for _, c := range r.Cells {
		if t := c.TestRun; t != nil {
			t.Spread = spreadOf(t.Rounds)
		}
		if l := c.Live; l != nil {
			var mpps []float64
			for _, rd := range l.Rounds {
				mpps = append(mpps, rd.Mpps)
			}
			l.Spread = spreadOf(mpps)
			if l.Median > 0 {
				l.NsPerPacket = 1000 / l.Median
			}
		}
	}
	// Each composition against the inline chain of the same length in the same round.
	for _, c := range r.Cells {
		in := r.cell(Inline, c.Modules)
		if c.Composition == Inline || in == nil {
			continue
		}
		if t := c.TestRun; t != nil && in.TestRun != nil {
			var d []float64
			for i := range min(len(t.Rounds), len(in.TestRun.Rounds)) {
				d = append(d, t.Rounds[i]-in.TestRun.Rounds[i])
			}
			t.OverInline = spreadPtr(d)
		}
		if l := c.Live; l != nil && in.Live != nil {
			var q []float64
			for i := range min(len(l.Rounds), len(in.Live.Rounds)) {
				if m := in.Live.Rounds[i].Mpps; m > 0 {
					q = append(q, l.Rounds[i].Mpps/m)
				}
			}
			l.OverInline = spreadPtr(q)
		}
	}
	r.PerModule = nil
	var inline *Fit
	for _, comp := range r.Config.Compositions {
		f := Fit{Composition: comp}
		f.TestRun = fitLine(r.series(comp, func(c *Cell) float64 {
			if c.TestRun == nil {
				return 0
			}
			return c.TestRun.Median
		}))
		f.Live = fitLine(r.series(comp, func(c *Cell) float64 {
			if c.Live == nil {
				return 0
			}
			return c.Live.NsPerPacket
		}))
		if comp == Inline {
			inline = &f
		} else if inline != nil {
			if f.TestRun != nil && inline.TestRun != nil {
				f.TestRun.OverInline = f.TestRun.PerModule - inline.TestRun.PerModule
			}
			if f.Live != nil && inline.Live != nil {
				f.Live.OverInline = f.Live.PerModule - inline.Live.PerModule
			}
		}
		r.PerModule = append(r.PerModule, f)
	}
}

// series is (N, value) for comp's cells with a value.
func (r *Result) series(comp Composition, val func(*Cell) float64) (xs, ys []float64) {
	for _, c := range r.Cells {
		if v := val(c); c.Composition == comp && v > 0 {
			xs, ys = append(xs, float64(c.Modules)), append(ys, v)
		}
	}
	return xs, ys
}

// fitLine is the least-squares line through the points (nil with fewer than two lengths).
func fitLine(xs, ys []float64) *Line {
	n := float64(len(xs))
	if len(xs) < 2 {
		return nil
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return nil
	}
	slope := (n*sxy - sx*sy) / d
	return &Line{PerModule: slope, Intercept: (sy - slope*sx) / n}
}

// Measured says whether there is anything to print.
func (r *Result) Measured() bool {
	if r == nil {
		return false
	}
	for _, c := range r.Cells {
		if (c.TestRun != nil && len(c.TestRun.Rounds) > 0) || (c.Live != nil && len(c.Live.Rounds) > 0) {
			return true
		}
	}
	return false
}

// cell is comp's cell for n modules (nil if not run).
func (r *Result) cell(comp Composition, n int) *Cell {
	for _, c := range r.Cells {
		if c.Composition == comp && c.Modules == n {
			return c
		}
	}
	return nil
}

// WriteTable writes the tables a person reads.
func (r *Result) WriteTable(w io.Writer) {
	c := r.Config
	lookup := "a hash lookup of the destination's /24"
	if c.Lookup == "lpm" {
		lookup = "an LPM trie lookup of the destination"
	}
	fmt.Fprintf(w, "Composition: chains of N modules (each: IPv4 parse, %s, a per-CPU counter), then TTL, MACs and redirect\n", lookup)
	fmt.Fprintln(w, "inline: one program, N frozen in .rodata (linuxfp's); tail: a program per module, tail call to a constant slot;")
	fmt.Fprintln(w, "tail-map: the same, the slot read from a map")
	fmt.Fprintln(w, r.Machine)
	fmt.Fprintf(w, "%d-byte frames; median of %d rounds (min-max); took %s\n\n", c.FrameSize, c.Rounds, r.Elapsed)

	if r.has(func(cell *Cell) bool { return cell.TestRun != nil && len(cell.TestRun.Rounds) > 0 }) {
		fmt.Fprintf(w, "BPF_PROG_TEST_RUN, ns per packet (the kernel's average over ~%s of runs, whole ns); then ns over inline\n", c.TestRunTime)
		fmt.Fprintln(w, "(median of the differences within a round)")
		r.writeTable(w, func(cell *Cell) string {
			t := cell.TestRun
			if t == nil || len(t.Rounds) == 0 {
				return "-"
			}
			s := fmt.Sprintf("%.0f (%.0f-%.0f)", t.Median, t.Min, t.Max)
			if o := t.OverInline; o != nil {
				s += fmt.Sprintf(" %+.0f", o.Median)
			}
			return s
		}, func(f Fit) *Line { return f.TestRun })
		fmt.Fprintln(w)
	}
	if r.has(func(cell *Cell) bool { return cell.Live != nil && len(cell.Live.Rounds) > 0 }) {
		fmt.Fprintf(w, "Forwarding gen -> DUT in0 (native XDP, the chain) -> out0 -> sink, %d routed /24s, 1 generator core:\n", c.Prefixes)
		fmt.Fprintln(w, "Mpps received at the sink (min-max), ns per packet = 1/rate (generator + chain + sink on one core),")
		fmt.Fprintln(w, "then the rate over inline's (median of the ratios within a round)")
		r.writeTable(w, func(cell *Cell) string {
			l := cell.Live
			if l == nil || len(l.Rounds) == 0 {
				return "-"
			}
			s := fmt.Sprintf("%.2f (%.2f-%.2f) %.0f ns", l.Median, l.Min, l.Max, l.NsPerPacket)
			if o := l.OverInline; o != nil {
				s += fmt.Sprintf(" %.2fx", o.Median)
			}
			return s
		}, func(f Fit) *Line { return f.Live })
		for _, s := range r.flags() {
			fmt.Fprintln(w, s)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "Program size: instructions after the verifier (for tail calls, all N programs), jited bytes")
	r.writeTable(w, func(cell *Cell) string {
		return fmt.Sprintf("%d insns, %d B", cell.Insns, cell.JitedBytes)
	}, nil)
}

// has: some cell satisfies ok.
func (r *Result) has(ok func(*Cell) bool) bool { return slices.ContainsFunc(r.Cells, ok) }

// writeTable writes one row per chain length, a column per composition, and (line != nil) the
// fitted cost per module under them.
func (r *Result) writeTable(w io.Writer, val func(*Cell) string, line func(Fit) *Line) {
	hdr := []string{"N"}
	for _, comp := range r.Config.Compositions {
		hdr = append(hdr, string(comp))
	}
	tw := harness.NewTable(w, hdr...)
	for _, n := range r.Config.Modules {
		row := []string{fmt.Sprint(n)}
		for _, comp := range r.Config.Compositions {
			s := "-"
			if cell := r.cell(comp, n); cell != nil {
				s = val(cell)
			}
			row = append(row, s)
		}
		tw.Row(row...)
	}
	if line != nil {
		row := []string{"per module"}
		for _, f := range r.PerModule {
			l := line(f)
			switch {
			case l == nil:
				row = append(row, "-")
			case f.Composition == Inline:
				row = append(row, fmt.Sprintf("+%.1f ns", l.PerModule))
			default:
				row = append(row, fmt.Sprintf("+%.1f ns (%+.1f per call)", l.PerModule, l.OverInline))
			}
		}
		tw.Row(row...)
	}
	tw.Flush()
}

// flags are the forwarding rounds to doubt: frames lost before the sink, or a chain that did
// not forward (nearly) everything the sink received.
func (r *Result) flags() []string {
	var out []string
	for _, c := range r.Cells {
		if c.Live == nil {
			continue
		}
		for i, rd := range c.Live.Rounds {
			what := fmt.Sprintf("! %s, %d modules, round %d:", c.Composition, c.Modules, i+1)
			if len(rd.Discarded) > 0 {
				out = append(out, fmt.Sprintf("%s %d window(s) measured again: frames were lost before the DUT", what, len(rd.Discarded)))
			}
			if rd.LostBeforeSink() {
				out = append(out, fmt.Sprintf("%s received %d of %d offered", what, rd.Received, rd.Offered))
			}
			fwd := rd.Counted.Reasons["forwarded"]
			if fwd < rd.Received*99/100 {
				others := maps.Clone(rd.Counted.Reasons)
				delete(others, "forwarded")
				out = append(out, fmt.Sprintf("%s the chain forwarded %d of the %d received (otherwise %v)", what, fwd, rd.Received, others))
			}
			if n := c.Modules; n > 0 && rd.Counted.Modules[n-1] < fwd {
				out = append(out, fmt.Sprintf("%s module %d matched %d packets, fewer than the %d forwarded", what, n-1, rd.Counted.Modules[n-1], fwd))
			}
		}
	}
	return out
}
