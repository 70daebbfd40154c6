package gateway

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// Result is everything the gateway benchmark measured. The JSON form is for scripts.
type Result struct {
	harness.Report[Settings]
	Variants []*Variant `json:"variants"`
	Targets  []Target   `json:"targets,omitempty"`
	// Latency and CPU: the forwarding benchmarks' tests, with the paper's 100 DROP rules in the
	// DUT and (CPU) traffic no rule matches.
	Latency []harness.LatencyMode `json:"latency,omitempty"`
	CPU     *harness.CPUResult    `json:"cpu,omitempty"`
	// TableVII: the filter module at each hook (100 rules; miss traffic if measured), side by
	// side (a tc mode was run).
	TableVII *harness.TableVII `json:"table_vii,omitempty"`
	// Idle: linuxfp with the large set in the DUT, no traffic and no change; then ipset adds.
	Idle *Idle `json:"idle,omitempty"`
	harness.Took
}

// Settings is the configuration the numbers were taken with.
type Settings struct {
	harness.PipelineSettings
	Sweep    []int     `json:"sweep_rules"`
	LargeSet int       `json:"large_set,omitempty"`
	Traffic  []Traffic `json:"traffic"`
}

// Target is issue 4's two targets and issue 19's for one traffic pattern, generator core count
// and frame size: ratios of DUT packet rates measured in the same run (0: not measured).
type Target struct {
	Traffic   Traffic `json:"traffic"`
	Cores     int     `json:"generator_cores"`
	FrameSize int     `json:"frame_size"`
	// Over100IPSet: linuxfp with 100 DROP rules over Linux with the one ipset rule (target: >= 2).
	Over100IPSet float64 `json:"linuxfp_100_rules_over_linux_ipset"`
	// Retained: linuxfp at the sweep's most rules up to retainedRules over linuxfp at its fewest
	// (target: >= 0.8 at 10,000 rules against 1).
	Retained float64 `json:"linuxfp_most_over_fewest_rules"`
	Most     int     `json:"most_rules,omitempty"`
	Fewest   int     `json:"fewest_rules,omitempty"`
	// MostOverNone, IPSetOverNone: linuxfp at the sweep's most rules up to retainedRules, and
	// with the paper's ipset rule, over linuxfp with no rules, the router alone (noRules; miss
	// traffic only). Target: >= 0.9, within 10% of the router's own rate. Each rate is taken as
	// a share of the ceiling's in the same ruleset's rounds (overNone): the rulesets are measured
	// one after the other, and the machine's speed drifts between them (the ceiling's own rate by
	// 15% within a run here), where the ceiling, which evaluates no rules, only moves with it.
	MostOverNone  float64 `json:"linuxfp_most_rules_over_no_rules,omitempty"`
	IPSetOverNone float64 `json:"linuxfp_ipset_over_no_rules,omitempty"`
}

// Measured: the result holds at least one measurement (false for a nil result).
func (r *Result) Measured() bool {
	if r == nil {
		return false
	}
	for _, v := range r.Variants {
		if len(v.Throughput) > 0 {
			return true
		}
	}
	return false
}

// result collects what the run measured (res: run's own result, for the machine and timing).
func (g *gatewayRun) result(res *harness.PipelineResult) *Result {
	if res == nil {
		return nil
	}
	out := &Result{Latency: res.Latency, CPU: res.CPU, Idle: g.idle, Took: res.Took,
		Report: harness.Report[Settings]{Machine: res.Machine,
			Config: Settings{PipelineSettings: res.Config, Sweep: g.cfg.Sweep, LargeSet: g.cfg.LargeSet, Traffic: g.cfg.Traffic}}}
	if len(res.Latency) == 0 {
		out.Config.Sessions = 0
	}
	for _, v := range g.variants {
		v.res.Finish(0)
		v.Throughput = v.res.Throughput
		out.Variants = append(out.Variants, v)
	}
	out.Targets = out.targets()
	out.TableVII = out.tableVII()
	return out
}

// tableVII is the summary of the filter module at each hook: the 100 rules with traffic no rule
// matches (or the first traffic measured), with the latency and CPU tests (nil without a tc mode).
func (r *Result) tableVII() *harness.TableVII {
	if !harness.HasTCMode(r.Config.Modes) {
		return nil
	}
	var v *Variant
	for _, t := range r.Config.Traffic {
		if x := r.variant(rules100, t); x != nil && len(x.Throughput) > 0 && (v == nil || t == TrafficMiss) {
			v = x
		}
	}
	if v == nil && len(r.Latency) == 0 {
		return nil
	}
	t := &harness.TableVII{Sessions: r.Config.Sessions}
	var row *harness.ThroughputRow
	module := "filter"
	if v != nil {
		row = harness.TableVIIRow(v.Throughput)
		t.Cores, t.FrameSize = row.Cores, row.FrameSize
		if v.Traffic != TrafficMiss {
			module += " (" + string(v.Traffic) + ")"
		}
	}
	t.Rows = harness.HookRows(module, r.Config.Modes, row, r.Latency, r.CPU, harness.FlaggedModes(r.Flags()))
	return t
}

// variant finds a measured variant (nil if none).
func (r *Result) variant(rs Ruleset, t Traffic) *Variant {
	for _, v := range r.Variants {
		if v.Ruleset == rs && v.Traffic == t {
			return v
		}
	}
	return nil
}

// sweep lists the measured variants of traffic t in the sweep, fewest rules first.
func (r *Result) sweep(t Traffic) []*Variant {
	var out []*Variant
	for _, n := range r.Config.Sweep {
		if v := r.variant(Ruleset{Name: harness.Plural(n, "rule"), Blacklisted: n}, t); v != nil && len(v.Throughput) > 0 {
			out = append(out, v)
		}
	}
	return out
}

// The paper's two rulesets.
var (
	rules100   = gatewayRulesets(nil, 0)[0]
	ipsetRules = gatewayRulesets(nil, 0)[1]
)

// retainedRules is the size of the second target (linuxfp at 10,000 rules keeps 80% of its
// 1-rule rate); larger sizes of the sweep are in its table, not in the target.
const retainedRules = 10000

// large: the ruleset holds more addresses than traffic can reach (Ruleset.addr).
func (r Ruleset) large() bool { return r.Blacklisted > maxBlacklist }

// largeSets lists the measured variants of ipset rulesets other than the paper's.
func (r *Result) largeSets() []*Variant {
	var out []*Variant
	for _, v := range r.Variants {
		if v.Ruleset.IPSet && v.Ruleset != ipsetRules && len(v.Throughput) > 0 {
			out = append(out, v)
		}
	}
	return out
}

// over is mode a's DUT rate over mode b's in v for (cores, size), 0 if either was not measured.
func (v *Variant) over(cores, size int, a, b harness.Mode) float64 {
	return harness.Div(v.rateOf(cores, size, a), v.rateOf(cores, size, b))
}

// rateOf is mode m's DUT rate in v for (cores, size), 0 if not measured.
func (v *Variant) rateOf(cores, size int, m harness.Mode) float64 {
	if v == nil {
		return 0
	}
	if t := v.res.ThroughputOf(cores, size, m); t != nil {
		return t.Rate()
	}
	return 0
}

func (r *Result) targets() []Target {
	var out []Target
	for _, t := range r.Config.Traffic {
		for _, cores := range r.Config.Cores {
			for _, size := range r.Config.Sizes {
				gt := Target{Traffic: t, Cores: cores, FrameSize: size,
					Over100IPSet: harness.Div(r.variant(rules100, t).rateOf(cores, size, harness.ModeLinuxfp),
						r.variant(ipsetRules, t).rateOf(cores, size, harness.ModeLinux))}
				none := r.variant(noRules, t)
				gt.IPSetOverNone = overNone(r.variant(ipsetRules, t), none, cores, size)
				if sw := r.sweep(t); len(sw) > 0 {
					fewest, most := sw[0], sw[0]
					for _, v := range sw[1:] {
						if v.Ruleset.Blacklisted <= retainedRules {
							most = v
						}
					}
					gt.Most = most.Ruleset.Blacklisted
					gt.MostOverNone = overNone(most, none, cores, size)
					if most != fewest {
						gt.Fewest = fewest.Ruleset.Blacklisted
						gt.Retained = harness.Div(most.rateOf(cores, size, harness.ModeLinuxfp), fewest.rateOf(cores, size, harness.ModeLinuxfp))
					}
				}
				if gt.Over100IPSet > 0 || gt.Retained > 0 || gt.MostOverNone > 0 || gt.IPSetOverNone > 0 {
					out = append(out, gt)
				}
			}
		}
	}
	return out
}

// overNone is linuxfp's rate in v over its rate with no rules (none), each as a share of the
// ceiling's in its own rounds where the ceiling was measured in both (Target.MostOverNone says
// why), else as measured; 0 if either is missing.
func overNone(v, none *Variant, cores, size int) float64 {
	if c, cn := v.rateOf(cores, size, harness.ModeCeiling), none.rateOf(cores, size, harness.ModeCeiling); c > 0 && cn > 0 {
		return harness.Div(v.over(cores, size, harness.ModeLinuxfp, harness.ModeCeiling), none.over(cores, size, harness.ModeLinuxfp, harness.ModeCeiling))
	}
	return harness.Div(v.rateOf(cores, size, harness.ModeLinuxfp), none.rateOf(cores, size, harness.ModeLinuxfp))
}

// WriteTable writes the tables a person reads.
func (r *Result) WriteTable(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "Gateway: gen -> DUT -> sink over veth, %d routed /24 prefixes, UDP to port 9; a blacklist of /32s\n"+
		"in the DUT's FORWARD chain (iptables-nft): DROP rules, or one rule matching an ipset\n", c.Prefixes)
	fmt.Fprintln(w, r.Machine)
	fmt.Fprintf(w, "Median of %d rounds x %s per mode (modes alternate round by round); took %s\n", c.Rounds, c.Duration, r.Elapsed)
	fmt.Fprintf(w, "Traffic miss: to %d hosts no rule matches (Linux walks every rule); hit: every other packet to\n"+
		"a blacklisted address (all of them in turn), half of it dropped. Rates are the DUT's: packets it\n"+
		"handled (forwarded + dropped by its rules) per second. The ceiling is the router's (MAC rewrite\n"+
		"+ redirect): it evaluates no rules and forwards everything.\n", permittedHosts)
	if r.hasLarge() {
		fmt.Fprintf(w, "Blacklists of more than %d addresses hold every k-th from 198.19.0-39.x, the others in 10.0.0.0/8,\n"+
			"where no packet goes: hit traffic goes to the former. Linux is measured as at fewer rules (no rate cap).\n", maxBlacklist)
	}
	if hooks := r.linuxfpHooks(); len(hooks) > 0 {
		fmt.Fprintf(w, "linuxfp's program on in0: %s\n", strings.Join(hooks, "; "))
	}
	fmt.Fprintln(w)

	modes := c.Modes
	// The ratio columns, linuxfp/Linux-ipset after linuxfp/Linux in the paper's gateway table.
	ratios := harness.RatioColumns(modes)
	ratioCells := func(v *Variant, cores, size int, ipset bool) []string {
		var cells []string
		for _, rc := range ratios {
			cells = append(cells, harness.Ratio(v.over(cores, size, rc.Num, rc.Den), rc.Suffix))
			if ipset && rc.Num == harness.ModeLinuxfp && rc.Den == harness.ModeLinux {
				cells = append(cells, harness.Ratio(harness.Div(v.rateOf(cores, size, harness.ModeLinuxfp),
					r.variant(ipsetRules, v.Traffic).rateOf(cores, size, harness.ModeLinux)), "x"))
			}
		}
		return cells
	}
	ratioHeader := func(hdr []string, ipset bool) []string {
		for _, rc := range ratios {
			hdr = append(hdr, rc.Title)
			if ipset && rc.Num == harness.ModeLinuxfp && rc.Den == harness.ModeLinux {
				hdr = append(hdr, "linuxfp/Linux-ipset")
			}
		}
		return hdr
	}
	modeCells := func(v *Variant, cores, size int) []string {
		var cells []string
		for _, m := range modes {
			if x := v.rateOf(cores, size, m); x > 0 {
				cells = append(cells, fmt.Sprintf("%.3f", x))
			} else {
				cells = append(cells, "-")
			}
		}
		return cells
	}
	header := func(first ...string) []string {
		for _, m := range modes {
			first = append(first, m.Title()+" Mpps")
		}
		return first
	}

	fmt.Fprintf(w, "The paper's gateway: %d blacklisted addresses (DUT rate, Mpps)\n", gatewayRules)
	hdr := ratioHeader(header("cores", "frame", "ruleset", "traffic"), true)
	tw := harness.NewTable(w, hdr...)
	for _, cores := range c.Cores {
		for _, size := range c.Sizes {
			for _, rs := range []Ruleset{noRules, rules100, ipsetRules} {
				for _, t := range c.Traffic {
					v := r.variant(rs, t)
					if v == nil || len(v.Throughput) == 0 {
						continue // not measured (interrupted)
					}
					cells := append([]string{fmt.Sprint(cores), fmt.Sprint(size), rs.Name, string(t)}, modeCells(v, cores, size)...)
					cells = append(cells, ratioCells(v, cores, size, true)...)
					tw.Row(cells...)
				}
			}
		}
	}
	tw.Flush()
	fmt.Fprintln(w)

	if len(c.Sweep) > 0 {
		fmt.Fprintln(w, "Throughput vs number of rules (the paper's Figure 8; DUT rate, Mpps)")
		hdr := ratioHeader(header("cores", "frame", "traffic", "rules"), false)
		hdr = append(hdr, "linuxfp vs fewest rules")
		tw := harness.NewTable(w, hdr...)
		for _, cores := range c.Cores {
			for _, size := range c.Sizes {
				for _, t := range c.Traffic {
					sw := r.sweep(t)
					for _, v := range sw {
						cells := append([]string{fmt.Sprint(cores), fmt.Sprint(size), string(t), fmt.Sprint(v.Ruleset.Blacklisted)},
							modeCells(v, cores, size)...)
						cells = append(cells, ratioCells(v, cores, size, false)...)
						cells = append(cells, harness.Ratio(harness.Div(v.rateOf(cores, size, harness.ModeLinuxfp), sw[0].rateOf(cores, size, harness.ModeLinuxfp)), ""))
						tw.Row(cells...)
					}
				}
			}
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	if large := r.largeSets(); len(large) > 0 {
		fmt.Fprintln(w, "A large set: one DROP rule matching an ipset (DUT rate, Mpps)")
		hdr := ratioHeader(header("cores", "frame", "ruleset", "traffic"), false)
		tw := harness.NewTable(w, hdr...)
		for _, cores := range c.Cores {
			for _, size := range c.Sizes {
				for _, v := range large {
					cells := append([]string{fmt.Sprint(cores), fmt.Sprint(size), v.Ruleset.Name, string(v.Traffic)}, modeCells(v, cores, size)...)
					cells = append(cells, ratioCells(v, cores, size, false)...)
					tw.Row(cells...)
				}
			}
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	r.writeReady(w)
	r.writeIdle(w)
	r.writeProgStats(w)
	r.writeFlags(w)
	if len(r.Latency) > 0 {
		fmt.Fprintf(w, "With the paper's %d DROP rules in FORWARD:\n", gatewayRules)
		harness.WriteLatency(w, r.Latency, r.Config.TxCsumOffload)
	}
	if r.CPU != nil {
		if len(r.Latency) == 0 {
			fmt.Fprintf(w, "With the paper's %d DROP rules in FORWARD, traffic no rule matches:\n", gatewayRules)
		}
		harness.WriteCPU(w, r.CPU)
		fmt.Fprintln(w)
	}
	if r.TableVII != nil {
		harness.WriteTableVII(w, r.TableVII)
		fmt.Fprintln(w)
	}

	if len(r.Targets) > 0 {
		fmt.Fprintln(w, "Targets (issues 4 and 19), from the rates above:")
		for _, t := range r.Targets {
			var parts []string
			if t.Over100IPSet > 0 {
				parts = append(parts, fmt.Sprintf("linuxfp with %d rules / Linux with ipset %.2fx (want >= 2x: %s)",
					gatewayRules, t.Over100IPSet, harness.Met(t.Over100IPSet >= 2)))
			}
			if t.Retained > 0 {
				parts = append(parts, fmt.Sprintf("linuxfp at %d rules / at %d %.2f (want >= 0.80: %s)",
					t.Most, t.Fewest, t.Retained, harness.Met(t.Retained >= 0.8)))
			}
			if t.MostOverNone > 0 {
				parts = append(parts, fmt.Sprintf("linuxfp at %d rules / with no rules (each of its ceiling) %.2f (want >= 0.90: %s)",
					t.Most, t.MostOverNone, harness.Met(t.MostOverNone >= 0.9)))
			}
			if t.IPSetOverNone > 0 {
				parts = append(parts, fmt.Sprintf("linuxfp with the ipset rule / with no rules (each of its ceiling) %.2f (want >= 0.90: %s)",
					t.IPSetOverNone, harness.Met(t.IPSetOverNone >= 0.9)))
			}
			fmt.Fprintf(w, "  %s, %d cores, %d bytes: %s\n", t.Traffic, t.Cores, t.FrameSize, strings.Join(parts, "; "))
		}
	}
}

// hasLarge: a measured ruleset holds addresses no packet goes to.
func (r *Result) hasLarge() bool {
	for _, v := range r.Variants {
		if v.Ruleset.large() && len(v.Throughput) > 0 {
			return true
		}
	}
	return false
}

// writeReady prints, for the large rulesets, how long linuxfp took from its start to holding
// the ruleset (the slowest of its starts).
func (r *Result) writeReady(w io.Writer) {
	var parts []string
	seen := map[*LinuxfpFilter]bool{}
	for _, v := range r.Variants {
		f := v.Linuxfp
		if !v.Ruleset.large() || f == nil || len(f.Ready) == 0 || seen[f] {
			continue
		}
		seen[f] = true
		parts = append(parts, fmt.Sprintf("%s %.1f s", v.Ruleset.Name, slices.Max(f.Ready)))
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "linuxfp's start to its status showing the ruleset in in0's filter (slowest start): %s\n\n", strings.Join(parts, ", "))
	}
}

// writeIdle prints linuxfp's idle cost with the large set, and its ipset adds.
func (r *Result) writeIdle(w io.Writer) {
	idle := r.Idle
	if idle == nil {
		return
	}
	fmt.Fprintf(w, "%s with %s in the DUT, no traffic, no change (ipset_watch %s):\n", idle.Mode.Title(), idle.Ruleset, idle.IPSetWatch)
	if idle.Seconds > 0 {
		fmt.Fprintf(w, "  idle: %.4f of a core over %.1f s (utime+stime %.2f s); meanwhile %d ipset reads, %d events, %d applies\n",
			idle.CoreShare, idle.Seconds, idle.CPUSeconds, idle.IPSetReads, idle.Events, idle.Applies)
		if idle.IPSetReads > 0 {
			fmt.Fprintf(w, "! idle: linuxfp read the ipsets %d times with no change\n", idle.IPSetReads)
		}
	}
	if d := idle.AddToDrop; d != nil {
		fmt.Fprintf(w, "  ipset add of a destination gen streams to, to in0's first drop of it: p50 %.3f ms, p99 %.3f ms, max %.3f ms (%d samples)\n",
			d.P50, d.P99, d.Max, idle.AddSamples)
	}
	if idle.AddTimeouts > 0 {
		fmt.Fprintf(w, "! ipset add: %d of %d samples saw no drop within %s\n", idle.AddTimeouts, idle.AddSamples, setAddWait)
	}
	if idle.AddProblem != "" {
		fmt.Fprintf(w, "! ipset add: %s\n", idle.AddProblem)
	}
	fmt.Fprintln(w)
}

// writeProgStats prints, with --prog-stats, the kernel's run time per packet of each program.
func (r *Result) writeProgStats(w io.Writer) {
	if !r.Config.ProgStats {
		return
	}
	fmt.Fprintln(w, "BPF program run time, ns per packet (BPF_ENABLE_STATS; median of rounds)")
	tw := harness.NewTable(w, "cores", "frame", "ruleset", "traffic", "mode", "DUT Mpps", "generator", "DUT in0", "sink")
	for _, v := range r.Variants {
		for _, row := range v.Throughput {
			for _, m := range r.Config.Modes {
				if t := row.Modes[m]; t != nil {
					tw.Rowf("%d\t%d\t%s\t%s\t%s\t%.3f\t%s", row.Cores, row.FrameSize, v.Ruleset.Name, v.Traffic,
						m.Title(), t.Rate(), t.ProgCells())
				}
			}
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// linuxfpHooks lists where linuxfp attached its program on in0: per linuxfp mode from what its
// measurements recorded ("linuxfp: xdp"), or, where they recorded nothing, over all its starts.
func (r *Result) linuxfpHooks() []string {
	var hooks []string
	for _, m := range r.Config.Modes {
		var seen []string
		for _, v := range r.Variants {
			for _, row := range v.Throughput {
				if t := row.Modes[m]; t != nil {
					for _, rd := range t.Rounds {
						if fp := rd.FastPath; fp != nil && fp.Hook != "" && !slices.Contains(seen, fp.Hook) {
							seen = append(seen, fp.Hook)
						}
					}
				}
			}
		}
		if len(seen) > 0 {
			hooks = append(hooks, m.Title()+": "+strings.Join(seen, ", "))
		}
	}
	if len(hooks) > 0 {
		return hooks
	}
	for _, v := range r.Variants {
		if v.Linuxfp == nil {
			continue
		}
		for _, h := range v.Linuxfp.Hooks {
			if !slices.Contains(hooks, h) {
				hooks = append(hooks, h)
			}
		}
	}
	return hooks
}

// writeFlags prints the throughput test's flags (the latency and CPU tests print theirs).
func (r *Result) writeFlags(w io.Writer) {
	lines := r.throughputFlags()
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if len(lines) > 0 {
		fmt.Fprintln(w)
	}
}

// Flags are every line the report flags ("! ..."): the throughput test's, the latency test's and
// the CPU test's.
func (r *Result) Flags() []string {
	return slices.Concat(r.throughputFlags(), harness.LatencyFlags(r.Latency, r.Config.TxCsumOffload), harness.CPUFlags(r.CPU))
}

// throughputFlags notes ("! ..."), per variant, what the router benchmark notes (frames lost,
// windows measured again, linuxfp fast-pathing less than the sink received or not at its mode's
// hook) and what is particular to the gateway: linuxfp not holding the ruleset in its filter
// module, or handing packets to Linux.
func (r *Result) throughputFlags() []string {
	var lines []string
	seen := map[*LinuxfpFilter]bool{}
	for _, v := range r.Variants {
		name := v.Ruleset.Name + ", " + string(v.Traffic)
		if f := v.Linuxfp; f != nil && f.Problem != "" && !seen[f] {
			seen[f] = true
			lines = append(lines, fmt.Sprintf("! linuxfp, %s: the filter module did not hold the whole ruleset: %s", v.Ruleset.Name, f.Problem))
		}
		for _, l := range v.res.ThroughputFlags() {
			lines = append(lines, "! "+name+": "+strings.TrimPrefix(l, "! "))
		}
		for _, row := range v.Throughput {
			for _, m := range r.Config.Modes {
				if t := row.Modes[m]; t != nil && slices.ContainsFunc(t.Rounds, func(rd harness.Round) bool { return rd.Offered == 0 }) {
					lines = append(lines, fmt.Sprintf("! %s: %s, %d cores, %d bytes: the generator sent nothing in a window (its median counts it as 0)",
						name, m.Title(), row.Cores, row.FrameSize))
				}
			}
			for _, m := range []harness.Mode{harness.ModeLinuxfp, harness.ModeLinuxfpTC} {
				lines = append(lines, filterFlags(name, m, row)...)
			}
		}
	}
	return lines
}

// filterFlags are the lines ("! ...") for variant name's row in linuxfp mode m: in0 handed more
// than 1% of what it handled to Linux, or dropped nothing where the traffic hits rules.
func filterFlags(name string, m harness.Mode, row harness.ThroughputRow) []string {
	f := row.Modes[m]
	if f == nil {
		return nil
	}
	var lines []string
	var handled, passed, dropped uint64
	reasons := map[string]uint64{}
	mixed := false
	for _, rd := range f.Rounds {
		mixed = mixed || rd.Permitted > 0 && rd.Permitted < 1
		if fp := rd.FastPath; fp != nil {
			handled += fp.Forwarded + fp.Dropped + fp.PassedTotal()
			passed += fp.PassedTotal()
			dropped += fp.Dropped
			for k, n := range fp.Passed {
				reasons[k] += n
			}
		}
	}
	if passed > handled/100 {
		lines = append(lines, fmt.Sprintf("! %s: %s, %d cores, %d bytes: in0 handed %d of %d packets to Linux %v",
			name, m.Title(), row.Cores, row.FrameSize, passed, handled, reasons))
	}
	if mixed && handled > 0 && dropped == 0 {
		lines = append(lines, fmt.Sprintf("! %s: %s, %d cores, %d bytes: its filter module dropped nothing",
			name, m.Title(), row.Cores, row.FrameSize))
	}
	return lines
}
