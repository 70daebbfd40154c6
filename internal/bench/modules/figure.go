package modules

import (
	"slices"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// Figure draws the paper's Table VII as bars: per module (forward, bridge, filter) the DUT's
// packet rate and its CPU time per packet, a bar per mode.
func (r *Result) Figure() harness.Figure {
	f := harness.Figure{Title: "modules: each fast-path module at XDP and tc"}
	if r.TableVII == nil {
		return f
	}
	var modules []string
	var modes []harness.Mode
	for _, row := range r.TableVII.Rows {
		if !slices.Contains(modules, row.Module) {
			modules = append(modules, row.Module)
		}
		if !slices.Contains(modes, row.Mode) {
			modes = append(modes, row.Mode)
		}
	}
	modes = harness.InOrder(harness.HookModes, modes)
	rate := harness.Panel{Title: "throughput", Categories: modules,
		Y: harness.Axis{Label: "DUT Mpps (median)", FromZero: true}}
	cpu := harness.Panel{Title: "DUT CPU per packet", Categories: modules,
		Y: harness.Axis{Label: "ns per packet", FromZero: true}}
	for _, m := range modes {
		rs, cs := harness.Series{Name: m.Title()}, harness.Series{Name: m.Title()}
		for _, mod := range modules {
			var mpps, ns float64
			for _, row := range r.TableVII.Rows {
				if row.Module == mod && row.Mode == m {
					mpps, ns = row.Mpps, row.DUTNsPerPacket
				}
			}
			rs.Points = append(rs.Points, harness.Point{Y: mpps})
			cs.Points = append(cs.Points, harness.Point{Y: ns})
		}
		rate.Series = append(rate.Series, rs)
		if slices.ContainsFunc(cs.Points, func(p harness.Point) bool { return p.Y > 0 }) {
			cpu.Series = append(cpu.Series, cs)
		}
	}
	f.AddPanel(rate)
	f.AddPanel(cpu)
	return f
}
