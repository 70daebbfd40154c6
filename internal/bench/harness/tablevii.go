package harness

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// TableVII is the summary of one or more modules at each hook, from one run: every mode's DUT
// rate for one generator core count and frame size, its request/response latency and its DUT
// CPU per packet.
type TableVII struct {
	Cores     int       `json:"generator_cores"`
	FrameSize int       `json:"frame_size"`
	Sessions  int       `json:"rr_sessions,omitempty"`
	Rows      []HookRow `json:"rows"`
}

// HookRow is one module (or Linux, or a ceiling) in one mode.
type HookRow struct {
	Module string `json:"module"` // forward, bridge, filter
	Mode   Mode   `json:"mode"`
	// Hook: where the program on the DUT's in0 ran: the ceilings' by construction, linuxfp's as
	// its status said in the throughput rounds (distinct values, comma-separated); "" for Linux.
	Hook string  `json:"hook,omitempty"`
	Mpps float64 `json:"mpps"` // the DUT's rate (median)
	// OverLinux: Mpps over Linux's; TCOverXDP: a tc mode's Mpps over the same at XDP
	// (linuxfp-tc over linuxfp, ceiling-tc over ceiling).
	OverLinux float64 `json:"over_linux,omitempty"`
	TCOverXDP float64 `json:"tc_over_xdp,omitempty"`
	// Request/response (not for the ceilings): transactions/s, average and p99 latency, and the
	// average over Linux's.
	TPS          float64 `json:"transactions_per_s,omitempty"`
	AvgUs        float64 `json:"avg_us,omitempty"`
	P99Us        float64 `json:"p99_us,omitempty"`
	AvgOverLinux float64 `json:"avg_over_linux,omitempty"`
	// DUTNsPerPacket: the CPU test's DUT-only kernel time per packet (ns; ms per million).
	DUTNsPerPacket float64 `json:"dut_cpu_ns_per_packet,omitempty"`
	// Flagged: the report flags some of this mode's rounds ("!" lines): look there.
	Flagged bool `json:"flagged,omitempty"`
}

// xdpTwin is the XDP mode a tc mode is compared with.
var xdpTwin = map[Mode]Mode{ModeLinuxfpTC: ModeLinuxfp, ModeCeilingTC: ModeCeiling}

// HasTCMode: modes include a tc mode, so a TableVII means something.
func HasTCMode(modes []Mode) bool {
	return slices.ContainsFunc(modes, func(m Mode) bool { _, ok := xdpTwin[m]; return ok })
}

// TableVIIRow picks the throughput row a TableVII summarises: 1 generator core and 64-byte
// frames if measured (the paper's), else the first.
func TableVIIRow(rows []ThroughputRow) *ThroughputRow {
	for i := range rows {
		if rows[i].Cores == 1 && rows[i].FrameSize == 64 {
			return &rows[i]
		}
	}
	if len(rows) == 0 {
		return nil
	}
	return &rows[0]
}

// HookRows summarises one module: every mode of modes measured in row, with its latency and CPU
// results; flagged says which modes' rounds the report flags.
func HookRows(module string, modes []Mode, row *ThroughputRow, lat []LatencyMode, cpu *CPUResult, flagged func(Mode) bool) []HookRow {
	var out []HookRow
	latOf := func(m Mode) *LatencyMode {
		for i := range lat {
			if lat[i].Mode == m && lat[i].Failed < len(lat[i].Rounds) {
				return &lat[i]
			}
		}
		return nil
	}
	for _, m := range modes {
		h := HookRow{Module: module, Mode: m, Hook: hookOfMode(m, row)}
		if row != nil {
			if t := row.Modes[m]; t != nil {
				h.Mpps = t.Rate()
			}
			h.OverLinux = row.over(m, ModeLinux)
			if x, ok := xdpTwin[m]; ok {
				h.TCOverXDP = row.over(m, x)
			}
		}
		if l := latOf(m); l != nil {
			h.TPS, h.AvgUs, h.P99Us = l.TPS, l.AvgUs, l.P99Us
			if ll := latOf(ModeLinux); ll != nil {
				h.AvgOverLinux = Div(l.AvgUs, ll.AvgUs)
			}
		}
		if cpu != nil {
			if c := cpu.mode(m); c != nil {
				h.DUTNsPerPacket = c.DUTPerMpkt
			}
		}
		if h.Mpps == 0 && h.TPS == 0 && h.DUTNsPerPacket == 0 {
			continue // not measured
		}
		h.Flagged = flagged != nil && flagged(m)
		out = append(out, h)
	}
	return out
}

// hookOfMode is where mode m's program on in0 ran: the ceilings' by construction, linuxfp's as
// its throughput rounds recorded it ("" for Linux, or if nothing was recorded).
func hookOfMode(m Mode, row *ThroughputRow) string {
	switch m {
	case ModeCeiling:
		return "xdp"
	case ModeCeilingTC:
		return "tc"
	}
	var hooks []string
	if row != nil && row.Modes[m] != nil {
		for _, rd := range row.Modes[m].Rounds {
			if fp := rd.FastPath; fp != nil && fp.Hook != "" && !slices.Contains(hooks, fp.Hook) {
				hooks = append(hooks, fp.Hook)
			}
		}
	}
	return strings.Join(hooks, ",")
}

// FlaggedModes says which modes a list of report lines ("! <mode>, ...", "! <variant>: <mode>,
// ...") flags.
func FlaggedModes(lines []string) func(Mode) bool {
	return func(m Mode) bool {
		for _, l := range lines {
			l = strings.TrimPrefix(l, "! ")
			if _, rest, ok := strings.Cut(l, ": "); ok && strings.HasPrefix(rest, m.Title()+",") {
				l = rest // a gateway variant's line
			}
			if strings.HasPrefix(l, m.Title()+",") {
				return true
			}
		}
		return false
	}
}

// Flags are every line the report Flags ("! ...").
func (r *PipelineResult) Flags() []string {
	return slices.Concat(r.ThroughputFlags(), LatencyFlags(r.Latency, r.Config.TxCsumOffload), CPUFlags(r.CPU))
}

// tableVII is the summary of a router or bridge result (nil without a tc mode).
func (r *PipelineResult) tableVII() *TableVII {
	var module string
	if r.topo != nil {
		module = r.topo.Module
	}
	row := TableVIIRow(r.Throughput)
	if module == "" || !HasTCMode(r.Config.Modes) || (row == nil && len(r.Latency) == 0) {
		return nil
	}
	flags := r.Flags()
	t := &TableVII{Sessions: r.Config.Sessions}
	if row != nil {
		t.Cores, t.FrameSize = row.Cores, row.FrameSize
	}
	if len(r.Latency) == 0 {
		t.Sessions = 0
	}
	t.Rows = HookRows(module, r.Config.Modes, row, r.Latency, r.CPU, FlaggedModes(flags))
	return t
}

// WriteTableVII writes the summary.
func WriteTableVII(w io.Writer, t *TableVII) {
	fmt.Fprintf(w, "Table VII: each module at XDP and at tc (%d-byte frames, %d generator core", t.FrameSize, t.Cores)
	if t.Sessions > 0 {
		fmt.Fprintf(w, "; latency: TCP request/response, %s", Plural(t.Sessions, "session"))
	}
	fmt.Fprintln(w, ")")
	flagged := slices.ContainsFunc(t.Rows, func(h HookRow) bool { return h.Flagged })
	tw := NewTable(w, "module", "mode", "hook", "Mpps", "vs Linux", "tc/xdp", "trans/s", "avg us", "p99 us", "avg vs Linux", "DUT CPU ns/pkt")
	for _, h := range t.Rows {
		hook := h.Hook
		if hook == "" {
			hook = "-"
		}
		cells := []string{h.Module, h.Mode.Title(), hook, Num(h.Mpps, "%.3f"), Ratio(h.OverLinux, "x"), Ratio(h.TCOverXDP, ""),
			Num(h.TPS, "%.0f"), Num(h.AvgUs, "%.1f"), Num(h.P99Us, "%.1f"), Ratio(h.AvgOverLinux, ""), Num(h.DUTNsPerPacket, "%.0f")}
		switch {
		case h.Flagged:
			cells = append(cells, "!")
		case flagged:
			cells = append(cells, "")
		}
		tw.Row(cells...)
	}
	tw.Flush()
	if flagged {
		fmt.Fprintln(w, "! marks a mode some of whose rounds are flagged in the report")
	}
}
