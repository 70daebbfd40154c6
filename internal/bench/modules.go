package bench

// The paper's Table VII: each fast-path module (forward, bridge, filter) at the XDP and at the tc
// hook. linuxfp builds every module for both hooks from one source; `linuxfp run --hook tc`
// (mode linuxfp-tc) forces the tc build where --hook auto (mode linuxfp) picks native XDP. The
// forwarding benchmarks measure both side by side with Linux and the ceilings (ceiling at XDP,
// ceiling-tc at tc), and summarise them in a TableVII; RunModules runs the three topologies and
// prints only that.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
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

// hasTCMode: modes include a tc mode, so a TableVII means something.
func hasTCMode(modes []Mode) bool {
	return slices.ContainsFunc(modes, func(m Mode) bool { _, ok := xdpTwin[m]; return ok })
}

// tableVIIRow picks the throughput row a TableVII summarises: 1 generator core and 64-byte
// frames if measured (the paper's), else the first.
func tableVIIRow(rows []ThroughputRow) *ThroughputRow {
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

// hookRows summarises one module: every mode of modes measured in row, with its latency and CPU
// results; flagged says which modes' rounds the report flags.
func hookRows(module string, modes []Mode, row *ThroughputRow, lat []LatencyMode, cpu *CPUResult, flagged func(Mode) bool) []HookRow {
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
				h.Mpps = t.rate()
			}
			h.OverLinux = row.over(m, ModeLinux)
			if x, ok := xdpTwin[m]; ok {
				h.TCOverXDP = row.over(m, x)
			}
		}
		if l := latOf(m); l != nil {
			h.TPS, h.AvgUs, h.P99Us = l.TPS, l.AvgUs, l.P99Us
			if ll := latOf(ModeLinux); ll != nil {
				h.AvgOverLinux = harness.Div(l.AvgUs, ll.AvgUs)
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

// flaggedModes says which modes a list of report lines ("! <mode>, ...", "! <variant>: <mode>,
// ...") flags.
func flaggedModes(lines []string) func(Mode) bool {
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

// flags are every line the report flags ("! ...").
func (r *Result) flags() []string {
	return slices.Concat(r.throughputFlags(), latencyFlags(r.Latency, r.Config.TxCsumOffload), cpuFlags(r.CPU))
}

// moduleOf is the module a forwarding benchmark's topology exercises.
var moduleOf = map[string]string{"router": "forward", "bridge": "bridge", "gateway": "filter"}

// tableVII is the summary of a router or bridge result (nil without a tc mode).
func (r *Result) tableVII() *TableVII {
	module := moduleOf[r.Config.Topology]
	row := tableVIIRow(r.Throughput)
	if module == "" || !hasTCMode(r.Config.Modes) || (row == nil && len(r.Latency) == 0) {
		return nil
	}
	flags := r.flags()
	t := &TableVII{Sessions: r.Config.Sessions}
	if row != nil {
		t.Cores, t.FrameSize = row.Cores, row.FrameSize
	}
	if len(r.Latency) == 0 {
		t.Sessions = 0
	}
	t.Rows = hookRows(module, r.Config.Modes, row, r.Latency, r.CPU, flaggedModes(flags))
	return t
}

// writeTableVII writes the summary.
func writeTableVII(w io.Writer, t *TableVII) {
	fmt.Fprintf(w, "Table VII: each module at XDP and at tc (%d-byte frames, %d generator core", t.FrameSize, t.Cores)
	if t.Sessions > 0 {
		fmt.Fprintf(w, "; latency: TCP request/response, %s", harness.Plural(t.Sessions, "session"))
	}
	fmt.Fprintln(w, ")")
	flagged := slices.ContainsFunc(t.Rows, func(h HookRow) bool { return h.Flagged })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "module\tmode\thook\tMpps\tvs Linux\ttc/xdp\ttrans/s\tavg us\tp99 us\tavg vs Linux\tDUT CPU ns/pkt\t")
	num := func(v float64, format string) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf(format, v)
	}
	for _, h := range t.Rows {
		hook, flag := h.Hook, ""
		if hook == "" {
			hook = "-"
		}
		if h.Flagged {
			flag = "!"
		}
		if flagged {
			flag += "\t"
		}
		cpu := num(h.DUTNsPerPacket, "%.0f")
		if h.DUTNsPerPacket < 0 {
			cpu = fmt.Sprintf("%.0f", h.DUTNsPerPacket)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", h.Module, h.Mode.Title(), hook,
			num(h.Mpps, "%.3f"), harness.Ratio(h.OverLinux, "x"), harness.Ratio(h.TCOverXDP, ""), num(h.TPS, "%.0f"),
			num(h.AvgUs, "%.1f"), num(h.P99Us, "%.1f"), harness.Ratio(h.AvgOverLinux, ""), cpu, flag)
	}
	tw.Flush()
	if flagged {
		fmt.Fprintln(w, "! marks a mode some of whose rounds are flagged in the report")
	}
}

// ModulesResult is what RunModules measured: the summary, and each benchmark's full result.
type ModulesResult struct {
	Machine  Machine        `json:"machine"`
	TableVII *TableVII      `json:"table_vii"`
	Router   *Result        `json:"router,omitempty"`
	Bridge   *Result        `json:"bridge,omitempty"`
	Gateway  *GatewayResult `json:"gateway,omitempty"`
	Elapsed  string         `json:"elapsed"`
}

// RunModules runs the router, bridge and gateway benchmarks (the gateway with its 100 DROP rules
// and traffic no rule matches) with cfg, by default in every mode (both hooks, both ceilings) at
// 64-byte frames and one generator core, and summarises them in one Table VII. It returns what
// it measured even when ctx is cancelled half-way (with ctx's error).
func RunModules(ctx context.Context, cfg Config) (*ModulesResult, error) {
	if len(cfg.Modes) == 0 {
		cfg.Modes = Modes
	}
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = []int{64}
	}
	if len(cfg.Cores) == 0 {
		cfg.Cores = []int{1}
	}
	res := &ModulesResult{Machine: harness.ThisMachine()}
	start := time.Now()
	defer func() { res.finish(time.Since(start)) }()
	var err error
	if res.Router, err = RunRouter(ctx, cfg); err != nil {
		return res, fmt.Errorf("router: %w", err)
	}
	if res.Bridge, err = RunBridge(ctx, cfg); err != nil {
		return res, fmt.Errorf("bridge: %w", err)
	}
	res.Gateway, err = RunGateway(ctx, GatewayConfig{Config: cfg, Traffic: []Traffic{TrafficMiss}, NoIPSet: true})
	if err != nil {
		return res, fmt.Errorf("gateway: %w", err)
	}
	return res, nil
}

func (r *ModulesResult) finish(elapsed time.Duration) {
	r.Elapsed = harness.Elapsed(elapsed)
	r.TableVII = nil
	for _, t := range []*TableVII{r.Router.tableVIIOrNil(), r.Bridge.tableVIIOrNil(), r.Gateway.tableVIIOrNil()} {
		if t == nil {
			continue
		}
		if r.TableVII == nil {
			r.TableVII = &TableVII{Cores: t.Cores, FrameSize: t.FrameSize, Sessions: t.Sessions}
		}
		r.TableVII.Rows = append(r.TableVII.Rows, t.Rows...)
	}
}

func (r *Result) tableVIIOrNil() *TableVII {
	if r == nil {
		return nil
	}
	return r.TableVII
}

func (r *GatewayResult) tableVIIOrNil() *TableVII {
	if r == nil {
		return nil
	}
	return r.TableVII
}

// Measured: the result holds at least one measurement.
func (r *ModulesResult) Measured() bool {
	return r != nil && (r.Router.Measured() || r.Bridge.Measured() || r.Gateway.Measured())
}

// WriteTable writes the summary, and every line the three reports flag.
func (r *ModulesResult) WriteTable(w io.Writer) {
	fmt.Fprintln(w, "Modules at XDP and at tc: bench router (forward module), bench bridge (bridge module), bench gateway")
	fmt.Fprintln(w, "(filter module: the router with 100 DROP rules in FORWARD, traffic no rule matches)")
	fmt.Fprintf(w, "Machine: Linux %s, %d CPUs (%s); %s; took %s\n", r.Machine.Kernel, r.Machine.CPUs, r.Machine.Model,
		r.Machine.Date, r.Elapsed)
	if s := r.settings(); s != nil {
		fmt.Fprintf(w, "Median of %d rounds x %s per mode (modes alternate round by round)\n", s.Rounds, s.Duration)
	}
	fmt.Fprintln(w, "Modes: linuxfp = linuxfp run (--hook auto: native XDP here), linuxfp-tc = linuxfp run --hook tc,")
	fmt.Fprintln(w, "ceiling = redirect (+ MAC rewrite when routing) at XDP, ceiling-tc = the same at tc (tcx).")
	fmt.Fprintln(w, "Rates are the DUT's; DUT CPU is kernel time per packet at a fixed offered load, minus a baseline.")
	fmt.Fprintln(w)
	if r.TableVII != nil {
		writeTableVII(w, r.TableVII)
		fmt.Fprintln(w)
	}
	var lines []string
	for _, x := range []struct {
		name string
		r    *Result
	}{{"forward", r.Router}, {"bridge", r.Bridge}} {
		if x.r == nil {
			continue
		}
		for _, l := range x.r.flags() {
			lines = append(lines, "! "+x.name+": "+strings.TrimPrefix(l, "! "))
		}
	}
	if r.Gateway != nil {
		for _, l := range r.Gateway.flags() {
			lines = append(lines, "! filter: "+strings.TrimPrefix(l, "! "))
		}
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if len(lines) > 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "Every round, the throughput at each size and what linuxfp did: --json (router, bridge, gateway).")
}

// settings is the first benchmark's settings (they all ran with the same).
func (r *ModulesResult) settings() *Settings {
	switch {
	case r.Router != nil:
		return &r.Router.Config
	case r.Bridge != nil:
		return &r.Bridge.Config
	case r.Gateway != nil:
		return &r.Gateway.Config.Settings
	}
	return nil
}
