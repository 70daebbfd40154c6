package harness

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// PipelineResult is everything a forwarding benchmark (router, bridge) measured. The JSON form is for
// scripts.
type PipelineResult struct {
	Report[PipelineSettings]
	Throughput []ThroughputRow `json:"throughput"`
	Latency    []LatencyMode   `json:"latency,omitempty"`
	CPU        *CPUResult      `json:"cpu,omitempty"`
	// TableVII: the module at each hook, side by side (a tc mode was run).
	TableVII *TableVII `json:"table_vii,omitempty"`
	Took
	rows map[rowKey]int // index in Throughput
	topo *Topology
}

// rowKey is a throughput row's cell.
type rowKey struct {
	family      Family // as rows carry it (rowFamily)
	cores, size int
}

// PipelineSettings is the configuration the numbers were taken with.
type PipelineSettings struct {
	Topology string `json:"topology"` // "router" or "bridge"
	Sizes    []int  `json:"frame_sizes"`
	// Families: the address families whose traffic was measured (omitted: IPv4 only); IPv6
	// at Sizes6.
	Families []Family `json:"families,omitempty"`
	Sizes6   []int    `json:"ipv6_frame_sizes,omitempty"`
	Cores    []int    `json:"generator_cores"`
	Modes    []Mode   `json:"modes"`
	Timing
	Sessions int `json:"rr_sessions,omitempty"`
	// TxCsumOffload: the latency test left tx checksum offload on at gen and sink.
	TxCsumOffload bool `json:"rr_tx_csum_offload"`
	ProgStats     bool `json:"prog_stats"`
	Prefixes      int  `json:"prefixes,omitempty"`
	// Bridge: the DUT's bridge as Linux had it configured (the bridge benchmark's settings).
	Bridge any `json:"bridge,omitempty"`
}

// ThroughputRow is one (generator cores, frame size) cell: every mode and the ratios.
type ThroughputRow struct {
	// Family: "ipv6" for IPv6 traffic; omitted for IPv4 (see Of).
	Family    Family               `json:"family,omitempty"`
	Cores     int                  `json:"generator_cores"`
	FrameSize int                  `json:"frame_size"` // with FCS; the veth frame is 4 bytes shorter
	Modes     map[Mode]*Throughput `json:"modes"`
	// Ratios of the medians (0 when a mode was not run).
	LinuxfpOverLinux   float64 `json:"linuxfp_over_linux"`
	LinuxfpOverCeiling float64 `json:"linuxfp_over_ceiling"`
	// linuxfp at tc over Linux, and over linuxfp at XDP (linuxfp-tc measured).
	LinuxfpTCOverLinux   float64 `json:"linuxfp_tc_over_linux,omitempty"`
	LinuxfpTCOverLinuxfp float64 `json:"linuxfp_tc_over_linuxfp,omitempty"`
	// linuxfp at tc over the ceiling at tc (both measured).
	LinuxfpTCOverCeilingTC float64 `json:"linuxfp_tc_over_ceiling_tc,omitempty"`
}

// over is mode a's rate over mode b's in the row (0 when either was not measured).
func (row *ThroughputRow) over(a, b Mode) float64 {
	x, y := row.Modes[a], row.Modes[b]
	if x == nil || y == nil {
		return 0
	}
	return Div(x.Rate(), y.Rate())
}

// RatioColumn is a ratio of two modes' rates that the reports print when both were run.
type RatioColumn struct {
	Title    string
	Num, Den Mode
	Suffix   string // "x" for a speed-up
}

var ratioColumns = []RatioColumn{
	{"linuxfp/Linux", ModeLinuxfp, ModeLinux, "x"},
	{"linuxfp-tc/Linux", ModeLinuxfpTC, ModeLinux, "x"},
	{"tc/xdp", ModeLinuxfpTC, ModeLinuxfp, ""},
	{"linuxfp/ceiling", ModeLinuxfp, ModeCeiling, ""},
	{"linuxfp-tc/ceiling-tc", ModeLinuxfpTC, ModeCeilingTC, ""},
	{"monitor/linuxfp", ModeLinuxfpMonitor, ModeLinuxfp, ""},
	{"metrics/linuxfp", ModeLinuxfpMetrics, ModeLinuxfp, ""},
}

// RatioColumns are the ratio columns for a run of modes.
func RatioColumns(modes []Mode) []RatioColumn {
	var out []RatioColumn
	for _, c := range ratioColumns {
		if slices.Contains(modes, c.Num) && slices.Contains(modes, c.Den) {
			out = append(out, c)
		}
	}
	return out
}

// Throughput is one mode's received rate: the median over rounds.
type Throughput struct {
	Mpps float64 `json:"mpps"`
	Gbps float64 `json:"gbps"` // frame size with FCS x 8 x rate
	// DUTMpps is the median rate of frames the DUT handled, forwarded or dropped by its rules,
	// when its rules drop a known fraction (the gateway's mixed traffic; see Round.Permitted).
	DUTMpps     float64 `json:"dut_mpps,omitempty"`
	OfferedMpps float64 `json:"offered_mpps"`
	Rounds      []Round `json:"rounds"`
}

// Rate is the DUT's packet Rate: what the ratios compare.
func (t *Throughput) Rate() float64 {
	if t.DUTMpps > 0 {
		return t.DUTMpps
	}
	return t.Mpps
}

func NewPipelineResult(cfg PipelineConfig, t *Topology) *PipelineResult {
	s := PipelineSettings{
		Topology: t.Name,
		Sizes:    cfg.Sizes, Cores: cfg.Cores, Modes: cfg.Modes, Timing: cfg.Timing(),
		Sessions: cfg.Sessions, Prefixes: t.Prefixes,
		TxCsumOffload: cfg.KeepTxCsum, ProgStats: cfg.ProgStats,
	}
	if slices.Contains(cfg.Families, IPv6) {
		s.Families, s.Sizes6 = cfg.Families, familySizes(IPv6, cfg.Sizes6)
	}
	return &PipelineResult{Report: NewReport(s), rows: map[rowKey]int{}, topo: t}
}

// AddRound adds an IPv4 round.
func (r *PipelineResult) AddRound(cores, size int, m Mode, rd Round) {
	r.AddFamilyRound(IPv4, cores, size, m, rd)
}

// AddFamilyRound adds a round of family f's traffic.
func (r *PipelineResult) AddFamilyRound(f Family, cores, size int, m Mode, rd Round) {
	k := rowKey{rowFamily(f), cores, size}
	i, ok := r.rows[k]
	if !ok {
		i = len(r.Throughput)
		r.rows[k] = i
		r.Throughput = append(r.Throughput, ThroughputRow{Family: k.family, Cores: cores, FrameSize: size, Modes: map[Mode]*Throughput{}})
	}
	row := &r.Throughput[i]
	t := row.Modes[m]
	if t == nil {
		t = &Throughput{}
		row.Modes[m] = t
	}
	t.Rounds = append(t.Rounds, rd)
	var mpps, off, dut []float64
	mixed := false
	for _, x := range t.Rounds {
		mpps = append(mpps, x.Mpps)
		off = append(off, x.OfferedMpps)
		dut = append(dut, x.dutMpps())
		mixed = mixed || x.Permitted > 0
	}
	t.Mpps, t.OfferedMpps = Median(mpps), Median(off)
	t.Gbps = t.Mpps * float64(size) * 8 / 1e3
	t.DUTMpps = 0
	if mixed {
		t.DUTMpps = Median(dut)
	}
	row.LinuxfpOverLinux, row.LinuxfpOverCeiling = row.over(ModeLinuxfp, ModeLinux), row.over(ModeLinuxfp, ModeCeiling)
	row.LinuxfpTCOverLinux, row.LinuxfpTCOverLinuxfp = row.over(ModeLinuxfpTC, ModeLinux), row.over(ModeLinuxfpTC, ModeLinuxfp)
	row.LinuxfpTCOverCeilingTC = row.over(ModeLinuxfpTC, ModeCeilingTC)
}

// ThroughputOf is mode m's IPv4 throughput at (cores, size), nil if not measured.
func (r *PipelineResult) ThroughputOf(cores, size int, m Mode) *Throughput {
	i, ok := r.rows[rowKey{"", cores, size}]
	if !ok {
		return nil
	}
	return r.Throughput[i].Modes[m]
}

func (r *PipelineResult) Finish(elapsed time.Duration) {
	r.Took.Took(elapsed)
	slices.SortStableFunc(r.Throughput, func(a, b ThroughputRow) int {
		if a.Family != b.Family {
			return strings.Compare(string(a.Family), string(b.Family)) // IPv4 ("") first
		}
		if a.Cores != b.Cores {
			return a.Cores - b.Cores
		}
		return a.FrameSize - b.FrameSize
	})
	for i, row := range r.Throughput {
		r.rows[rowKey{row.Family, row.Cores, row.FrameSize}] = i
	}
	r.TableVII = r.tableVII()
}

// Measured: the result holds at least one measurement (false for a nil result).
func (r *PipelineResult) Measured() bool {
	return r != nil && (len(r.Throughput) > 0 || len(r.Latency) > 0 || r.CPU != nil)
}

// WriteTable writes the tables a person reads.
func (r *PipelineResult) WriteTable(w io.Writer) {
	c := r.Config
	if r.topo != nil && r.topo.Describe != nil {
		r.topo.Describe(w, &c)
	}
	fmt.Fprintln(w, r.Machine)
	fmt.Fprintf(w, "Median of %d rounds x %s per mode (modes alternate round by round); took %s\n\n",
		c.Rounds, c.Duration, r.Elapsed)

	if len(r.Throughput) > 0 {
		fmt.Fprintln(w, "Throughput received at the sink (frame size and Gbit/s include the 4-byte FCS, RFC 2544)")
		families := len(c.Families) > 1 || slices.Contains(c.Families, IPv6)
		if families {
			fmt.Fprintln(w, "IPv6: UDP to the routed 2001:2:0:f1NN::/64 prefixes; its smallest frame is 66 bytes (Ethernet, IPv6 and UDP headers: 62)")
		}
		hdr := []string{"cores", "frame"}
		if families {
			hdr = append([]string{"family"}, hdr...)
		}
		for _, m := range c.Modes {
			hdr = append(hdr, m.Title()+" Mpps", "Gbit/s")
		}
		ratios := RatioColumns(c.Modes)
		for _, rc := range ratios {
			hdr = append(hdr, rc.Title)
		}
		tw := NewTable(w, hdr...)
		for _, row := range r.Throughput {
			cells := []string{fmt.Sprint(row.Cores), fmt.Sprint(row.FrameSize)}
			if families {
				cells = append([]string{string(row.Of())}, cells...)
			}
			for _, m := range c.Modes {
				if t := row.Modes[m]; t != nil {
					cells = append(cells, fmt.Sprintf("%.3f", t.Mpps), fmt.Sprintf("%.2f", t.Gbps))
				} else {
					cells = append(cells, "-", "-")
				}
			}
			for _, rc := range ratios {
				cells = append(cells, Ratio(row.over(rc.Num, rc.Den), rc.Suffix))
			}
			tw.Row(cells...)
		}
		tw.Flush()
		r.writeLoss(w)
		fmt.Fprintln(w)
		r.writeProgStats(w)
	}

	WriteLatency(w, r.Latency, r.Config.TxCsumOffload)
	WriteCPU(w, r.CPU)
	if t := r.TableVII; t != nil {
		if r.CPU != nil { // the other sections end with a blank line
			fmt.Fprintln(w)
		}
		WriteTableVII(w, t)
	}
}

// WriteCPU writes the CPU test's table.
func WriteCPU(w io.Writer, cp *CPUResult) {
	if cp == nil || len(cp.Modes) == 0 {
		return
	}
	fmt.Fprintf(w, "CPU at %.3f Mpps offered (%d-byte frames, %d generator core): kernel time (system+softirq+irq,\n"+
		"all CPUs) per million packets. The generator itself runs in the kernel too: the baseline is the\n"+
		"generator into an XDP drop on the DUT's in0, and DUT-only = total - baseline (it includes the sink's\n"+
		"XDP drop, the same in every mode).\n", cp.OfferedMpps, cp.FrameSize, cp.Cores)
	tw := NewTable(w, "mode", "received Mpps", "loss", "total ms/Mpkt", "DUT-only ms/Mpkt")
	for _, m := range cp.Modes {
		dut := fmt.Sprintf("%.0f", m.DUTPerMpkt)
		if m.Mode == ModeBaseline {
			dut = "-"
		}
		tw.Rowf("%s\t%.3f\t%.1f%%\t%.0f\t%s", m.Mode.Title(), m.Mpps, 100*m.Loss, m.KernelPerMpkt, dut)
	}
	tw.Flush()
	for _, m := range []Mode{ModeLinuxfp, ModeLinuxfpTC} {
		if l, f := cp.mode(ModeLinux), cp.mode(m); l != nil && f != nil && f.DUTPerMpkt > 0 {
			fmt.Fprintf(w, "%s needs %.2fx less DUT CPU per packet than Linux\n", m.Title(), l.DUTPerMpkt/f.DUTPerMpkt)
		}
	}
	for _, l := range CPUFlags(cp) {
		fmt.Fprintln(w, l)
	}
}

// CPUFlags says ("! ...") when the CPU test's numbers contradict themselves: a mode below the
// baseline (which does strictly less work: it drops every frame at in0) by more than a tenth of
// Linux's DUT-only cost (less is the tick sampling's noise: /proc/stat counts 4 ms ticks), or a
// ceiling above Linux. The test counts the kernel time of the whole machine: anything else
// running on it at the time lands in some mode's rounds.
func CPUFlags(cp *CPUResult) []string {
	if cp == nil {
		return nil
	}
	var odd []string
	l := cp.mode(ModeLinux)
	var tolerance float64
	if l != nil {
		tolerance = max(l.DUTPerMpkt, 0) / 10
	}
	for _, m := range cp.Modes {
		if m.Mode != ModeBaseline && m.DUTPerMpkt < -tolerance {
			odd = append(odd, fmt.Sprintf("%s below the baseline", m.Mode.Title()))
		}
		if m.Mode.Ceiling() && l != nil && m.DUTPerMpkt > l.DUTPerMpkt {
			odd = append(odd, fmt.Sprintf("%s above Linux", m.Mode.Title()))
		}
	}
	if len(odd) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("! CPU: %s: the machine's kernel time (all CPUs) included other work; these numbers are noise",
		strings.Join(odd, ", "))}
}

// WriteLatency writes the request/response table, and a line for every round that failed or
// where linuxfp's programs did not run at the hook its mode says.
func WriteLatency(w io.Writer, lat []LatencyMode, txCsumOffload bool) {
	if len(lat) == 0 {
		return
	}
	fmt.Fprintf(w, "Latency: TCP request/response (1 byte each way), %d parallel sessions gen -> sink", lat[0].Sessions)
	if txCsumOffload {
		fmt.Fprintln(w, ", tx checksum offload on at gen and sink (linuxfp: generic XDP)")
	} else {
		fmt.Fprintln(w, ", tx checksum offload off at gen and sink (linuxfp: native XDP)")
	}
	tw := NewTable(w, "mode", "trans/s", "avg us", "p99 us", "stddev us")
	for _, l := range lat {
		if l.Failed == len(l.Rounds) {
			tw.Rowf("%s\tfailed\t-\t-\t-", l.Mode.Title())
		} else {
			tw.Rowf("%s\t%.0f\t%.1f\t%.1f\t%.1f", l.Mode.Title(), l.TPS, l.AvgUs, l.P99Us, l.StddevUs)
		}
	}
	tw.Flush()
	for _, f := range LatencyFlags(lat, txCsumOffload) {
		fmt.Fprintln(w, f)
	}
	fmt.Fprintln(w)
}

// LatencyFlags are the request/response rounds that failed, or whose linuxfp did not run at the
// hook its mode says, one "! " line each.
func LatencyFlags(lat []LatencyMode, txCsumOffload bool) []string {
	var out []string
	for _, l := range lat {
		var wrongHook int
		var problem string
		for _, rd := range l.Rounds {
			if rd.Error != "" {
				out = append(out, fmt.Sprintf("! %s, latency: %s (in0 fast-pathed %v)", l.Mode.Title(), rd.Error, rd.FastPath))
			}
			if p := hookProblem(l.Mode, rd.FastPath, txCsumOffload); p != "" {
				wrongHook++
				problem = p
			}
		}
		if wrongHook > 0 {
			out = append(out, fmt.Sprintf("! %s, latency: %d round(s) %s", l.Mode.Title(), wrongHook, problem))
		}
	}
	return out
}

// hookProblem says how linuxfp's programs in fp did not run where mode m says ("" if they did,
// or m runs no linuxfp, or in0 had no program: that is flagged on its own, or the hook was not
// recorded).
func hookProblem(m Mode, fp *FastPath, txCsumOffload bool) string {
	want := m.WantHook(txCsumOffload)
	if want == "" || fp == nil || fp.NoProgram != "" || fp.Hook == "" {
		return ""
	}
	if fp.Hook == want && (fp.OutHook == want || fp.OutHook == "") {
		return ""
	}
	show := func(h string) string {
		if h == "" {
			return "no program"
		}
		return h
	}
	return fmt.Sprintf("ran at in0 %s, out0 %s, not %s", show(fp.Hook), show(fp.OutHook), want)
}

// writeProgStats prints, with --prog-stats, the kernel's run time per packet of each program.
func (r *PipelineResult) writeProgStats(w io.Writer) {
	if len(r.Throughput) == 0 || !r.Config.ProgStats {
		return
	}
	fmt.Fprintln(w, "BPF program run time, ns per packet (BPF_ENABLE_STATS; median of rounds)")
	tw := NewTable(w, "cores", "frame", "mode", "Mpps", "generator", "DUT in0", "sink")
	for _, row := range r.Throughput {
		for _, m := range r.Config.Modes {
			t := row.Modes[m]
			if t == nil {
				continue
			}
			frame := fmt.Sprint(row.FrameSize)
			if row.Family != "" {
				frame += " " + string(row.Family)
			}
			tw.Rowf("%d\t%s\t%s\t%.3f\t%s", row.Cores, frame, m.Title(), t.Mpps, t.ProgCells())
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// ProgCells is the median run time per packet of the generator, the DUT's in0 program and the
// sink, in ns, as table cells ("-" where a program did not run).
func (t *Throughput) ProgCells() string {
	var cells []string
	for _, name := range []string{"generator", "dut_in0", "sink"} {
		var v []float64
		for _, rd := range t.Rounds {
			if st, ok := rd.Programs[name]; ok && st.Runs > 0 {
				v = append(v, st.NsPerRun)
			}
		}
		if len(v) == 0 {
			cells = append(cells, "-")
		} else {
			cells = append(cells, fmt.Sprintf("%.0f", Median(v)))
		}
	}
	return strings.Join(cells, "\t")
}

// writeLoss notes cells where the generator offered much more than arrived, and what linuxfp
// handed to Linux: the first things to look at when a number is surprising.
func (r *PipelineResult) writeLoss(w io.Writer) {
	for _, l := range r.ThroughputFlags() {
		fmt.Fprintln(w, l)
	}
}

// ThroughputFlags are writeLoss's lines ("! ..."): per cell and mode, rounds that started with
// the FDB not learned, windows measured again and rounds that still lost frames; per cell and
// linuxfp mode, rounds where its programs did not run at the mode's hook, and what it did not
// fast-path; then the reasons linuxfp gave for installing no program on in0.
func (r *PipelineResult) ThroughputFlags() []string {
	var out, noPrograms []string
	for _, row := range r.Throughput {
		for _, m := range r.Config.Modes {
			t := row.Modes[m]
			if t == nil {
				continue
			}
			var again, lossy, unlearned, wrongHook int
			var problem, hook string
			for _, rd := range t.Rounds {
				again += len(rd.Discarded)
				if rd.LostBeforeSink() {
					lossy++
				}
				if rd.FDBNotLearned != "" {
					unlearned++
					problem = rd.FDBNotLearned
				}
				if p := hookProblem(m, rd.FastPath, false); p != "" {
					wrongHook++
					hook = p
				}
			}
			cell := fmt.Sprintf("%s, %d cores, %d bytes", m.Title(), row.Cores, row.FrameSize)
			if row.Family != "" {
				cell += ", " + string(row.Family)
			}
			if unlearned > 0 {
				out = append(out, fmt.Sprintf("! %s: %d round(s) started with the FDB not learned: %s", cell, unlearned, problem))
			}
			if again > 0 {
				out = append(out, fmt.Sprintf("! %s: %d window(s) measured again: frames were lost before the DUT", cell, again))
			}
			if lossy > 0 {
				out = append(out, fmt.Sprintf("! %s: %d round(s) still lost more than 1%% before the sink", cell, lossy))
			}
			if wrongHook > 0 {
				out = append(out, fmt.Sprintf("! %s: %d round(s) %s", cell, wrongHook, hook))
			}
			if !m.RunsLinuxfp() {
				continue
			}
			var fwd, recv uint64
			passed := map[string]uint64{}
			var noProgram string
			for _, rd := range t.Rounds {
				recv += rd.Received
				if rd.FastPath != nil {
					fwd += rd.FastPath.FastPathed()
					for k, v := range rd.FastPath.Passed {
						passed[k] += v
					}
					if rd.FastPath.NoProgram != "" {
						noProgram = rd.FastPath.NoProgram
					}
				}
			}
			if noProgram != "" {
				if !slices.Contains(noPrograms, noProgram) {
					noPrograms = append(noPrograms, noProgram)
				}
				if recv == 0 {
					out = append(out, fmt.Sprintf("! %s: nothing arrived at the sink", cell))
				}
			} else if recv == 0 {
				out = append(out, fmt.Sprintf("! %s: nothing arrived at the sink (in0 fast-pathed %d, handed to Linux %v)", cell, fwd, passed))
			} else if fwd < recv*99/100 {
				out = append(out, fmt.Sprintf("! %s: in0 fast-pathed only %d of %d received (handed to Linux %v)", cell, fwd, recv, passed))
			}
		}
	}
	for _, n := range noPrograms {
		out = append(out, fmt.Sprintf("! linuxfp installed no program on in0 (%s): Linux forwarded in a linuxfp mode", n))
	}
	return out
}

func (c *CPUResult) mode(m Mode) *CPUMode {
	for i := range c.Modes {
		if c.Modes[i].Mode == m {
			return &c.Modes[i]
		}
	}
	return nil
}
