package response

import (
	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// Figure draws the response times' distributions (paper Table VI as a figure): per command the
// cumulative share of changes against milliseconds, from the netlink event to the data plane,
// from the command's exit to the fast path, and with Linux alone to the first packet delivered;
// then the unrelated churn's share of the stream fast-pathed against the rate of changes. A
// result written before the samples were kept draws p50, p99 and max as bars instead.
func (results Results) Figure() harness.Figure {
	f := harness.Figure{Title: "response: from a configuration command to the fast path following it"}
	dists := []struct {
		title string
		of    func(Result) *harness.Distribution
	}{
		{"linuxfp: netlink event -> data plane", func(r Result) *harness.Distribution {
			if r.Samples == 0 {
				return nil
			}
			return &r.EventToDP
		}},
		{"linuxfp: command exit -> first fast-pathed packet", func(r Result) *harness.Distribution { return r.ExitToFast }},
		{"Linux alone: command exit -> first packet delivered", func(r Result) *harness.Distribution { return r.LinuxExitToDelivered }},
	}
	for _, d := range dists {
		f.AddPanel(distributionPanel(results, d.title, d.of))
	}
	f.AddPanel(churnPanel(results))
	return f
}

// distributionPanel is each command's distribution of, as a cumulative distribution, or as bars
// of p50, p99 and max when the samples were not kept.
func distributionPanel(results Results, title string, of func(Result) *harness.Distribution) harness.Panel {
	cdf := harness.Panel{Title: title,
		X: harness.Axis{Label: "ms", Log: true},
		Y: harness.Axis{Label: "share of changes", FromZero: true}}
	bars := harness.Panel{Title: title, Categories: []string{"p50", "p99", "max"},
		Y: harness.Axis{Label: "ms", FromZero: true}}
	for _, r := range results {
		d := of(r)
		if d == nil {
			continue
		}
		if len(d.Samples) > 0 {
			cdf.Series = append(cdf.Series, harness.Series{Name: r.Command, Step: true, Points: harness.CDF(positive(d.Samples))})
		} else if d.Max > 0 {
			bars.Series = append(bars.Series, harness.Series{Name: r.Command,
				Points: []harness.Point{{Y: d.P50}, {Y: d.P99}, {Y: d.Max}}})
		}
	}
	if len(bars.Series) > len(cdf.Series) {
		return bars
	}
	return cdf
}

// positive drops samples of 0 ms (below the clock's resolution), which a log axis cannot show.
func positive(v []float64) []float64 {
	var out []float64
	for _, x := range v {
		if x > 0 {
			out = append(out, x)
		}
	}
	return out
}

// churnPanel is the unrelated churn's shares of in0's packets against the changes per second.
func churnPanel(results Results) harness.Panel {
	p := harness.Panel{Title: "unrelated churn: a stream no change touches",
		X: harness.Axis{Label: "changes per second (achieved)", Log: true},
		Y: harness.Axis{Label: "% of in0's packets", FromZero: true}}
	fast, fenced := harness.Series{Name: "fast-pathed"}, harness.Series{Name: "passed as fenced"}
	for _, r := range results {
		for _, c := range r.Churn {
			if c.Achieved <= 0 || c.Forwarded+c.Passed == 0 {
				continue
			}
			fast.Points = append(fast.Points, harness.Point{X: c.Achieved, Y: 100 * c.FastShare()})
			fenced.Points = append(fenced.Points, harness.Point{X: c.Achieved, Y: 100 * c.FencedShare()})
		}
	}
	fast.Points, fenced.Points = harness.SortPoints(fast.Points), harness.SortPoints(fenced.Points)
	p.Series = []harness.Series{fast, fenced}
	return p
}
