package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// GatewayResult is everything the gateway benchmark measured. The JSON form is for scripts.
type GatewayResult struct {
	Machine  Machine           `json:"machine"`
	Config   GatewaySettings   `json:"config"`
	Variants []*GatewayVariant `json:"variants"`
	Targets  []GatewayTarget   `json:"targets,omitempty"`
	Elapsed  string            `json:"elapsed"`
}

// GatewaySettings is the configuration the numbers were taken with.
type GatewaySettings struct {
	Settings
	Sweep   []int     `json:"sweep_rules"`
	Traffic []Traffic `json:"traffic"`
}

// GatewayTarget is issue 4's two targets for one traffic pattern, generator core count and
// frame size: ratios of DUT packet rates measured in the same run (0: not measured).
type GatewayTarget struct {
	Traffic   Traffic `json:"traffic"`
	Cores     int     `json:"generator_cores"`
	FrameSize int     `json:"frame_size"`
	// Over100IPSet: linuxfp with 100 DROP rules over Linux with the one ipset rule (target: >= 2).
	Over100IPSet float64 `json:"linuxfp_100_rules_over_linux_ipset"`
	// Retained: linuxfp at the sweep's most rules over linuxfp at its fewest (target: >= 0.8 at
	// 10,000 rules against 1).
	Retained float64 `json:"linuxfp_most_over_fewest_rules"`
	Most     int     `json:"most_rules,omitempty"`
	Fewest   int     `json:"fewest_rules,omitempty"`
}

// Measured: the result holds at least one measurement (false for a nil result).
func (r *GatewayResult) Measured() bool {
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
func (g *gatewayRun) result(res *Result) *GatewayResult {
	if res == nil {
		return nil
	}
	out := &GatewayResult{Machine: res.Machine, Elapsed: res.Elapsed,
		Config: GatewaySettings{Settings: res.Config, Sweep: g.cfg.Sweep, Traffic: g.cfg.Traffic}}
	out.Config.Sessions = 0 // no latency test
	for _, v := range g.variants {
		v.res.finish(0)
		v.Throughput = v.res.Throughput
		out.Variants = append(out.Variants, v)
	}
	out.Targets = out.targets()
	return out
}

// variant finds a measured variant (nil if none).
func (r *GatewayResult) variant(rs Ruleset, t Traffic) *GatewayVariant {
	for _, v := range r.Variants {
		if v.Ruleset == rs && v.Traffic == t {
			return v
		}
	}
	return nil
}

// sweep lists the measured variants of traffic t in the sweep, fewest rules first.
func (r *GatewayResult) sweep(t Traffic) []*GatewayVariant {
	var out []*GatewayVariant
	for _, n := range r.Config.Sweep {
		if v := r.variant(Ruleset{Name: plural(n, "rule"), Blacklisted: n}, t); v != nil && len(v.Throughput) > 0 {
			out = append(out, v)
		}
	}
	return out
}

// The paper's two rulesets.
var (
	rules100   = gatewayRulesets(nil)[0]
	ipsetRules = gatewayRulesets(nil)[1]
)

// rateOf is mode m's DUT rate in v for (cores, size), 0 if not measured.
func (v *GatewayVariant) rateOf(cores, size int, m Mode) float64 {
	if v == nil {
		return 0
	}
	if t := v.res.throughputOf(cores, size, m); t != nil {
		return t.rate()
	}
	return 0
}

func div(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}

func (r *GatewayResult) targets() []GatewayTarget {
	var out []GatewayTarget
	for _, t := range r.Config.Traffic {
		for _, cores := range r.Config.Cores {
			for _, size := range r.Config.Sizes {
				gt := GatewayTarget{Traffic: t, Cores: cores, FrameSize: size,
					Over100IPSet: div(r.variant(rules100, t).rateOf(cores, size, ModeLinuxfp),
						r.variant(ipsetRules, t).rateOf(cores, size, ModeLinux))}
				if sw := r.sweep(t); len(sw) > 1 {
					fewest, most := sw[0], sw[len(sw)-1]
					gt.Fewest, gt.Most = fewest.Ruleset.Blacklisted, most.Ruleset.Blacklisted
					gt.Retained = div(most.rateOf(cores, size, ModeLinuxfp), fewest.rateOf(cores, size, ModeLinuxfp))
				}
				if gt.Over100IPSet > 0 || gt.Retained > 0 {
					out = append(out, gt)
				}
			}
		}
	}
	return out
}

// WriteJSON writes the result for scripts.
func (r *GatewayResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the tables a person reads.
func (r *GatewayResult) WriteTable(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "Gateway: gen -> DUT -> sink over veth, %d routed /24 prefixes, UDP to port 9; a blacklist of /32s\n"+
		"in the DUT's FORWARD chain (iptables-nft): DROP rules, or one rule matching an ipset\n", c.Prefixes)
	fmt.Fprintf(w, "Machine: Linux %s, %d CPUs (%s); %s\n", r.Machine.Kernel, r.Machine.CPUs, r.Machine.Model, r.Machine.Date)
	fmt.Fprintf(w, "Median of %d rounds x %s per mode (modes alternate round by round); took %s\n", c.Rounds, c.Duration, r.Elapsed)
	fmt.Fprintf(w, "Traffic miss: to %d hosts no rule matches (Linux walks every rule); hit: every other packet to\n"+
		"a blacklisted address (all of them in turn), half of it dropped. Rates are the DUT's: packets it\n"+
		"handled (forwarded + dropped by its rules) per second. The ceiling is the router's (MAC rewrite\n"+
		"+ redirect): it evaluates no rules and forwards everything.\n", permittedHosts)
	if hooks := r.linuxfpHooks(); len(hooks) > 0 {
		fmt.Fprintf(w, "linuxfp's program on in0: %s\n", strings.Join(hooks, ", "))
	}
	fmt.Fprintln(w)

	modes := c.Modes
	both := slices.Contains(modes, ModeLinux) && slices.Contains(modes, ModeLinuxfp)
	withCeiling := slices.Contains(modes, ModeLinuxfp) && slices.Contains(modes, ModeCeiling)
	modeCells := func(v *GatewayVariant, cores, size int) []string {
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
			first = append(first, modeTitle[m]+" Mpps")
		}
		return first
	}

	fmt.Fprintf(w, "The paper's gateway: %d blacklisted addresses (DUT rate, Mpps)\n", gatewayRules)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := header("cores", "frame", "ruleset", "traffic")
	if both {
		hdr = append(hdr, "linuxfp/Linux", "linuxfp/Linux-ipset")
	}
	if withCeiling {
		hdr = append(hdr, "linuxfp/ceiling")
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
	for _, cores := range c.Cores {
		for _, size := range c.Sizes {
			for _, rs := range []Ruleset{rules100, ipsetRules} {
				for _, t := range c.Traffic {
					v := r.variant(rs, t)
					if v == nil || len(v.Throughput) == 0 {
						continue // not measured (interrupted)
					}
					cells := append([]string{fmt.Sprint(cores), fmt.Sprint(size), rs.Name, string(t)}, modeCells(v, cores, size)...)
					f := v.rateOf(cores, size, ModeLinuxfp)
					if both {
						cells = append(cells, ratio(div(f, v.rateOf(cores, size, ModeLinux)), "x"),
							ratio(div(f, r.variant(ipsetRules, t).rateOf(cores, size, ModeLinux)), "x"))
					}
					if withCeiling {
						cells = append(cells, ratio(div(f, v.rateOf(cores, size, ModeCeiling)), ""))
					}
					fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
				}
			}
		}
	}
	tw.Flush()
	fmt.Fprintln(w)

	if len(c.Sweep) > 0 {
		fmt.Fprintln(w, "Throughput vs number of rules (the paper's Figure 8; DUT rate, Mpps)")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		hdr := header("cores", "frame", "traffic", "rules")
		if both {
			hdr = append(hdr, "linuxfp/Linux")
		}
		if withCeiling {
			hdr = append(hdr, "linuxfp/ceiling")
		}
		hdr = append(hdr, "linuxfp vs fewest rules")
		fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
		for _, cores := range c.Cores {
			for _, size := range c.Sizes {
				for _, t := range c.Traffic {
					sw := r.sweep(t)
					for _, v := range sw {
						cells := append([]string{fmt.Sprint(cores), fmt.Sprint(size), string(t), fmt.Sprint(v.Ruleset.Blacklisted)},
							modeCells(v, cores, size)...)
						f := v.rateOf(cores, size, ModeLinuxfp)
						if both {
							cells = append(cells, ratio(div(f, v.rateOf(cores, size, ModeLinux)), "x"))
						}
						if withCeiling {
							cells = append(cells, ratio(div(f, v.rateOf(cores, size, ModeCeiling)), ""))
						}
						cells = append(cells, ratio(div(f, sw[0].rateOf(cores, size, ModeLinuxfp)), ""))
						fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
					}
				}
			}
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	r.writeProgStats(w)
	r.writeFlags(w)

	if len(r.Targets) > 0 {
		fmt.Fprintln(w, "Targets (issue 4), from the rates above:")
		for _, t := range r.Targets {
			var parts []string
			if t.Over100IPSet > 0 {
				parts = append(parts, fmt.Sprintf("linuxfp with %d rules / Linux with ipset %.2fx (want >= 2x: %s)",
					gatewayRules, t.Over100IPSet, metOrNot(t.Over100IPSet >= 2)))
			}
			if t.Retained > 0 {
				parts = append(parts, fmt.Sprintf("linuxfp at %d rules / at %d %.2f (want >= 0.80: %s)",
					t.Most, t.Fewest, t.Retained, metOrNot(t.Retained >= 0.8)))
			}
			fmt.Fprintf(w, "  %s, %d cores, %d bytes: %s\n", t.Traffic, t.Cores, t.FrameSize, strings.Join(parts, "; "))
		}
	}
}

// writeProgStats prints, with --prog-stats, the kernel's run time per packet of each program.
func (r *GatewayResult) writeProgStats(w io.Writer) {
	if !r.Config.ProgStats {
		return
	}
	fmt.Fprintln(w, "BPF program run time, ns per packet (BPF_ENABLE_STATS; median of rounds)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cores\tframe\truleset\ttraffic\tmode\tDUT Mpps\tgenerator\tDUT in0\tsink\t")
	for _, v := range r.Variants {
		for _, row := range v.Throughput {
			for _, m := range r.Config.Modes {
				if t := row.Modes[m]; t != nil {
					fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%.3f\t%s\t\n", row.Cores, row.FrameSize, v.Ruleset.Name, v.Traffic,
						modeTitle[m], t.rate(), t.progCells())
				}
			}
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// linuxfpHooks lists where linuxfp attached its program on in0, over all its starts.
func (r *GatewayResult) linuxfpHooks() []string {
	var hooks []string
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

func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// writeFlags notes, per variant, what the router benchmark notes (frames lost, windows measured
// again, linuxfp fast-pathing less than the sink received) and what is particular to the
// gateway: linuxfp not holding the ruleset in its filter module, or handing packets to Linux.
func (r *GatewayResult) writeFlags(w io.Writer) {
	var lines []string
	seen := map[*LinuxfpFilter]bool{}
	for _, v := range r.Variants {
		name := v.Ruleset.Name + ", " + string(v.Traffic)
		if f := v.Linuxfp; f != nil && f.Problem != "" && !seen[f] {
			seen[f] = true
			lines = append(lines, fmt.Sprintf("! linuxfp, %s: the filter module did not hold the whole ruleset: %s", v.Ruleset.Name, f.Problem))
		}
		var buf bytes.Buffer
		v.res.writeLoss(&buf)
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if rest, ok := strings.CutPrefix(l, "! "); ok {
				lines = append(lines, "! "+name+": "+rest)
			}
		}
		for _, row := range v.Throughput {
			f := row.Modes[ModeLinuxfp]
			if f == nil {
				continue
			}
			var handled, passed, dropped uint64
			reasons := map[string]uint64{}
			for _, rd := range f.Rounds {
				if fp := rd.FastPath; fp != nil {
					handled += fp.Forwarded + fp.Dropped + fp.passed()
					passed += fp.passed()
					dropped += fp.Dropped
					for k, n := range fp.Passed {
						reasons[k] += n
					}
				}
			}
			if passed > handled/100 {
				lines = append(lines, fmt.Sprintf("! %s: linuxfp, %d cores, %d bytes: in0 handed %d of %d packets to Linux %v",
					name, row.Cores, row.FrameSize, passed, handled, reasons))
			}
			if v.Permitted < 1 && handled > 0 && dropped == 0 {
				lines = append(lines, fmt.Sprintf("! %s: linuxfp, %d cores, %d bytes: its filter module dropped nothing",
					name, row.Cores, row.FrameSize))
			}
		}
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if len(lines) > 0 {
		fmt.Fprintln(w)
	}
}
