package pods

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Row is one workload and pair count: every mode and the ratios.
type Row struct {
	Workload Workload                     `json:"workload"`
	Pairs    int                          `json:"pairs"`
	Modes    map[harness.Mode]*ModeResult `json:"modes"`
	// Ratios of the medians, linuxfp over Linux and ceiling over Linux (0: not both measured).
	TPSRatio        float64 `json:"tps_linuxfp_over_linux"`
	AvgRatio        float64 `json:"avg_latency_linuxfp_over_linux"`
	CeilingTPSRatio float64 `json:"tps_ceiling_over_linux,omitempty"`
	CeilingAvgRatio float64 `json:"avg_latency_ceiling_over_linux,omitempty"`
	// GainShare: how much of the ceiling's gain in transactions/s over Linux linuxfp got
	// ((linuxfp - Linux) / (ceiling - Linux); 0: not all three measured).
	GainShare float64 `json:"linuxfp_share_of_ceiling_gain,omitempty"`
	// The same against the tc ceiling (ceiling-tc, intra-node only).
	CeilingTCTPSRatio float64 `json:"tps_ceiling_tc_over_linux,omitempty"`
	CeilingTCAvgRatio float64 `json:"avg_latency_ceiling_tc_over_linux,omitempty"`
	GainShareTC       float64 `json:"linuxfp_share_of_ceiling_tc_gain,omitempty"`
}

// ModeResult is one mode's result: the medians over its rounds that completed.
type ModeResult struct {
	TPS      float64 `json:"transactions_per_s"`
	AvgUs    float64 `json:"avg_us"`
	P99Us    float64 `json:"p99_us"`
	StddevUs float64 `json:"stddev_us"`
	harness.ModeRounds[Round]
}

// Round is one measurement: the transactions, and in linuxfp mode what its programs did in
// each node meanwhile.
type Round struct {
	harness.LatencyRound
	Nodes []*harness.NodeFastPath `json:"linuxfp,omitempty"`
}

// Target is the paper's result for one workload against what this run measured, over its
// pair counts.
type Target struct {
	Workload Workload `json:"workload"`
	// The paper's: +120% / +116% transactions (ratio 2.20 / 2.16), average latency 9.68 -> 7.92
	// us (18% lower) / 29.23 -> 25.18 us (14% lower).
	PaperTPSRatio float64 `json:"paper_tps_ratio"`
	PaperAvgCut   float64 `json:"paper_avg_latency_reduction"`
	// The least and most this run measured over its pair counts.
	MinTPSRatio float64 `json:"min_tps_ratio"`
	MaxTPSRatio float64 `json:"max_tps_ratio"`
	MinAvgCut   float64 `json:"min_avg_latency_reduction"`
	MaxAvgCut   float64 `json:"max_avg_latency_reduction"`
	// Met: at every pair count.
	TPSMet bool `json:"tps_met"`
	AvgMet bool `json:"avg_latency_met"`
	// The ceiling's transactions/s over Linux's (the most any data path could give here), and
	// linuxfp's share of that gain, least and most over the pair counts (0: no ceiling).
	MinCeilingTPSRatio float64 `json:"min_ceiling_tps_ratio,omitempty"`
	MaxCeilingTPSRatio float64 `json:"max_ceiling_tps_ratio,omitempty"`
	MinGainShare       float64 `json:"min_linuxfp_share_of_ceiling_gain,omitempty"`
	MaxGainShare       float64 `json:"max_linuxfp_share_of_ceiling_gain,omitempty"`
	// The same against the tc ceiling (ceiling-tc: the least a tc data path in the topology
	// adds; intra-node only).
	MinCeilingTCTPSRatio float64 `json:"min_ceiling_tc_tps_ratio,omitempty"`
	MaxCeilingTCTPSRatio float64 `json:"max_ceiling_tc_tps_ratio,omitempty"`
	MinGainShareTC       float64 `json:"min_linuxfp_share_of_ceiling_tc_gain,omitempty"`
	MaxGainShareTC       float64 `json:"max_linuxfp_share_of_ceiling_tc_gain,omitempty"`
}

// podsPaper is the paper's result (and issue 5's target) per workload: transactions/s ratio and
// average latency reduction.
var podsPaper = map[Workload][2]float64{
	WorkloadIntra: {2.20, 0.18},
	WorkloadInter: {2.16, 0.14},
}

func newResult(cfg Config) *Result {
	return &Result{harness.Results[Settings, Row, Target]{Report: harness.NewReport(Settings{
		Setup: harness.Setup[Workload]{Topology: "two Flannel nodes (vxlan backend) with pods plugged in by the CNI bridge plugin",
			Modes: cfg.Modes, Workloads: cfg.Workloads},
		Pairs: cfg.Pairs, Timing: cfg.Timing(),
	})}}
}

// add adds round rd of workload w with n pairs in mode m: to the medians over the rounds that
// completed, and the ratios.
func (r *Result) add(w Workload, n int, m harness.Mode, rd Round) {
	row := harness.FindOrAdd(&r.Rows, func(row *Row) bool { return row.Workload == w && row.Pairs == n },
		func() *Row { return &Row{Workload: w, Pairs: n, Modes: map[harness.Mode]*ModeResult{}} })
	pm := harness.Entry(row.Modes, m)
	pm.Add(rd)
	pm.TPS = pm.Median(func(r Round) float64 { return r.TPS })
	pm.AvgUs = pm.Median(func(r Round) float64 { return r.AvgUs })
	pm.P99Us = pm.Median(func(r Round) float64 { return r.P99Us })
	pm.StddevUs = pm.Median(func(r Round) float64 { return r.StddevUs })
	row.ratios()
}

func (row *Row) ratios() {
	l, f := row.Modes[harness.ModeLinux], row.Modes[harness.ModeLinuxfp]
	row.TPSRatio, row.AvgRatio = 0, 0
	if l != nil && f != nil {
		row.TPSRatio, row.AvgRatio = harness.Div(f.TPS, l.TPS), harness.Div(f.AvgUs, l.AvgUs)
	}
	row.CeilingTPSRatio, row.CeilingAvgRatio, row.GainShare = ceilingRatios(l, f, row.Modes[harness.ModeCeiling])
	row.CeilingTCTPSRatio, row.CeilingTCAvgRatio, row.GainShareTC = ceilingRatios(l, f, row.Modes[harness.ModeCeilingTC])
}

// ceilingRatios: ceiling c's transactions/s and average latency over Linux's (l), and linuxfp's
// (f) share of c's gain in transactions/s over Linux; 0 where a mode is missing.
func ceilingRatios(l, f, c *ModeResult) (tps, avg, share float64) {
	if l == nil || c == nil {
		return 0, 0, 0
	}
	tps, avg = harness.Div(c.TPS, l.TPS), harness.Div(c.AvgUs, l.AvgUs)
	if f != nil && l.TPS > 0 && f.TPS > 0 && c.TPS > l.TPS {
		share = (f.TPS - l.TPS) / (c.TPS - l.TPS)
	}
	return tps, avg, share
}

func (r *Result) finish(elapsed time.Duration) {
	r.Took.Took(elapsed)
	slices.SortStableFunc(r.Rows, func(a, b *Row) int {
		if a.Workload != b.Workload {
			return slices.Index(Workloads, a.Workload) - slices.Index(Workloads, b.Workload)
		}
		return a.Pairs - b.Pairs
	})
	r.Targets = r.targets()
}

// targets compares every workload measured in both modes with the paper.
func (r *Result) targets() []Target {
	var out []Target
	for _, w := range Workloads {
		t := Target{Workload: w, PaperTPSRatio: podsPaper[w][0], PaperAvgCut: podsPaper[w][1], TPSMet: true, AvgMet: true}
		n := 0
		for _, row := range r.Rows {
			if row.Workload != w || row.TPSRatio == 0 || row.AvgRatio == 0 {
				continue
			}
			cut := 1 - row.AvgRatio
			if n == 0 {
				t.MinTPSRatio, t.MaxTPSRatio, t.MinAvgCut, t.MaxAvgCut = row.TPSRatio, row.TPSRatio, cut, cut
			}
			t.MinTPSRatio, t.MaxTPSRatio = min(t.MinTPSRatio, row.TPSRatio), max(t.MaxTPSRatio, row.TPSRatio)
			t.MinAvgCut, t.MaxAvgCut = min(t.MinAvgCut, cut), max(t.MaxAvgCut, cut)
			t.TPSMet = t.TPSMet && row.TPSRatio >= t.PaperTPSRatio
			t.AvgMet = t.AvgMet && cut >= t.PaperAvgCut
			if row.CeilingTPSRatio > 0 {
				first := t.MaxCeilingTPSRatio == 0
				widen(&t.MinCeilingTPSRatio, &t.MaxCeilingTPSRatio, row.CeilingTPSRatio, first)
				widen(&t.MinGainShare, &t.MaxGainShare, row.GainShare, first)
			}
			if row.CeilingTCTPSRatio > 0 {
				first := t.MaxCeilingTCTPSRatio == 0
				widen(&t.MinCeilingTCTPSRatio, &t.MaxCeilingTCTPSRatio, row.CeilingTCTPSRatio, first)
				widen(&t.MinGainShareTC, &t.MaxGainShareTC, row.GainShareTC, first)
			}
			n++
		}
		if n > 0 {
			out = append(out, t)
		}
	}
	return out
}

// widen makes [*lo, *hi] hold v, or only v where first.
func widen(lo, hi *float64, v float64, first bool) {
	if first {
		*lo, *hi = v, v
	}
	*lo, *hi = min(*lo, v), max(*hi, v)
}

// Measured: the result holds at least one measurement (false for a nil result).
func (r *Result) Measured() bool { return r != nil && r.Results.Measured() }

// WriteTable writes the tables a person reads.
func (r *Result) WriteTable(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "Pods: two Flannel nodes (vxlan, VNI %d, UDP %d; node1 %d pods, node2 %d) with cni0 and Flannel's\n"+
		"iptables rules, as Flannel and the CNI bridge plugin configure them. TCP request/response, 1 byte\n"+
		"each way, one connection per pod pair, all pairs at once; intra: node1 -> node1, inter: node1 -> node2;\n"+
		"ceiling: client and server pods joined by one veth pair, nothing forwarded (the same in both)\n",
		testbed.FlannelVNI, testbed.FlannelPort, c.Pods[0], c.Pods[1])
	fmt.Fprintln(w, r.Machine)
	fmt.Fprint(w, c.MedianLine(r.Elapsed))

	tw := harness.NewTable(w, "workload", "pairs", "mode", "trans/s", "avg us", "p99 us", "stddev us", "trans/s vs Linux", "avg latency vs Linux")
	for _, row := range r.Rows {
		for _, m := range c.Modes {
			pm := row.Modes[m]
			if pm == nil {
				continue
			}
			cells := []string{string(row.Workload), fmt.Sprint(row.Pairs), m.Title()}
			if pm.AllFailed() {
				cells = append(cells, "failed", "-", "-", "-")
			} else {
				cells = append(cells, fmt.Sprintf("%.0f", pm.TPS), fmt.Sprintf("%.1f", pm.AvgUs),
					fmt.Sprintf("%.1f", pm.P99Us), fmt.Sprintf("%.1f", pm.StddevUs))
			}
			switch m {
			case harness.ModeLinuxfp:
				cells = append(cells, harness.Ratio(row.TPSRatio, "x"), harness.PercentChange(row.AvgRatio))
			case harness.ModeCeiling:
				cells = append(cells, harness.Ratio(row.CeilingTPSRatio, "x"), harness.PercentChange(row.CeilingAvgRatio))
			case harness.ModeCeilingTC:
				cells = append(cells, harness.Ratio(row.CeilingTCTPSRatio, "x"), harness.PercentChange(row.CeilingTCAvgRatio))
			default:
				cells = append(cells, "", "")
			}
			tw.Row(cells...)
		}
	}
	tw.Flush()
	for _, row := range r.Rows {
		for _, m := range c.Modes {
			if pm := row.Modes[m]; pm != nil {
				for _, rd := range pm.Rounds {
					if rd.Error != "" {
						fmt.Fprintf(w, "! %s, %s, %s: a round failed: %s\n", m.Title(), row.Workload, harness.Plural(row.Pairs, "pair"), rd.Error)
					}
				}
			}
		}
	}
	if len(r.Targets) > 0 {
		fmt.Fprintln(w, "\nAgainst the paper (+120% / +116% transactions, average latency 18% / 14% lower; issue 5's targets):")
		for _, t := range r.Targets {
			fmt.Fprintf(w, "  %s: trans/s %s Linux (paper %.2fx): %s; average latency %s lower (paper %.0f%%): %s\n",
				t.Workload, harness.Span(t.MinTPSRatio, t.MaxTPSRatio, "%.2fx"), t.PaperTPSRatio, harness.Met(t.TPSMet),
				harness.Span(100*t.MinAvgCut, 100*t.MaxAvgCut, "%.0f%%"), 100*t.PaperAvgCut, harness.Met(t.AvgMet))
			if t.MaxCeilingTPSRatio > 0 {
				fmt.Fprintf(w, "    ceiling (the pods joined by one veth: nothing forwarded, filtered or encapsulated): trans/s %s\n"+
					"    Linux, which no data path between the pods can beat; linuxfp got %s of that gain\n",
					harness.Span(t.MinCeilingTPSRatio, t.MaxCeilingTPSRatio, "%.2fx"), harness.Span(100*t.MinGainShare, 100*t.MaxGainShare, "%.0f%%"))
			}
			if t.MaxCeilingTCTPSRatio > 0 {
				fmt.Fprintf(w, "    tc ceiling (a program on the host veths that only hands each IPv4 frame to the other pod): trans/s %s\n"+
					"    Linux, the least a tc data path adds here; linuxfp got %s of that gain\n",
					harness.Span(t.MinCeilingTCTPSRatio, t.MaxCeilingTCTPSRatio, "%.2fx"), harness.Span(100*t.MinGainShareTC, 100*t.MaxGainShareTC, "%.0f%%"))
			}
		}
	}
	r.writeFastPath(w)
}

// writeFastPath reports what linuxfp's programs did in linuxfp mode, and flags what was not
// accelerated.
func (r *Result) writeFastPath(w io.Writer) {
	type key struct {
		w    Workload
		node string
	}
	total := map[key]*harness.NodeFastPath{}
	var keys []key
	var flags, vxlanNotes []string
	for _, row := range r.Rows {
		pm := row.Modes[harness.ModeLinuxfp]
		if pm == nil {
			continue
		}
		perNode := map[string]*harness.NodeFastPath{}
		var nodes []string
		for _, rd := range pm.Rounds {
			for _, fp := range rd.Nodes {
				k := key{row.Workload, fp.Node}
				if total[k] == nil {
					total[k] = &harness.NodeFastPath{Node: fp.Node}
					keys = append(keys, k)
				}
				if perNode[fp.Node] == nil {
					perNode[fp.Node] = &harness.NodeFastPath{Node: fp.Node}
					nodes = append(nodes, fp.Node)
				}
				for _, t := range []*harness.NodeFastPath{total[k], perNode[fp.Node]} {
					t.Sum(fp)
					for name, why := range fp.NoProgram {
						if t.NoProgram == nil {
							t.NoProgram = map[string]string{}
						}
						t.NoProgram[name] = why
					}
				}
				for _, n := range fp.VXLANNotes {
					if n := fp.Node + "'s " + n; !slices.Contains(vxlanNotes, n) {
						vxlanNotes = append(vxlanNotes, n)
					}
				}
			}
		}
		slices.Sort(nodes)
		// A node is flagged when what it handed to Linux is more than 1% of every program run
		// of the cell (not of its own: a node the workload does not cross sees a few ARP or
		// multicast frames, all Linux's).
		var runs uint64
		for _, fp := range perNode {
			runs += fp.Runs()
		}
		for _, node := range nodes {
			fp := perNode[node]
			if fp.Runs() > 0 && fp.PassedTotal()*100 > runs {
				flags = append(flags, fmt.Sprintf("! linuxfp, %s, %s, %s: %.1f%% of its program runs handed the packet to Linux (%s)",
					row.Workload, harness.Plural(row.Pairs, "pair"), node, 100*float64(fp.PassedTotal())/float64(fp.Runs()), harness.CountsString(fp.Passed)))
			}
			for _, name := range slices.Sorted(maps.Keys(fp.NoProgram)) {
				flags = append(flags, fmt.Sprintf("! linuxfp, %s, %s, %s: no program on %s: %s",
					row.Workload, harness.Plural(row.Pairs, "pair"), node, name, fp.NoProgram[name]))
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	vxlanNote, encapNote := false, false
	fmt.Fprintln(w, "\nWhat linuxfp's programs did in linuxfp mode (`linuxfp status -j` in each node before and after")
	fmt.Fprintln(w, "every measurement; all pair counts and rounds; a packet crossing two programs counts twice):")
	tw := harness.NewLeftTable(w, "workload", "node", "interfaces", "program runs", "fast-pathed", "handed to Linux, by reason")
	var liberal []string
	for _, k := range keys {
		fp := total[k]
		if fp.Runs() == 0 {
			tw.Rowf("%s\t%s\t%s\t%d\t%s\t%s", k.w, k.node, "all", 0, "-", "-")
			continue
		}
		tw.Rowf("%s\t%s\t%s\t%d\t%s\t%s", k.w, k.node, "all", fp.Runs(), harness.FastString(fp.FastPathCounts), harness.PassedString(fp.FastPathCounts))
		for _, role := range fp.Roles(podsRoles) {
			c := fp.Interfaces[role]
			tw.Rowf("\t\t%s\t%d\t%s\t%s", role, c.Runs(), harness.FastString(*c), harness.PassedString(*c))
			if k.w == WorkloadInter && role == "eth0" && c.PassedTotal()*100 > c.Runs() {
				vxlanNote = true
			}
			if k.w == WorkloadInter && role == "pod veths" && c.FastPathed["forwarded"] > 0 && c.FastPathed["encapsulated"] == 0 {
				encapNote = true
			}
		}
		if fp.CTLiberal > 0 {
			liberal = append(liberal, fmt.Sprintf("%s %s %d", k.w, k.node, fp.CTLiberal))
		}
	}
	tw.Flush()
	if len(liberal) > 0 {
		fmt.Fprintf(w, "TCP connections linuxfp marked liberal in conntrack (for the fast path): %s\n", strings.Join(liberal, ", "))
	}
	if vxlanNote {
		fmt.Fprintln(w, "eth0's packets handed to Linux (inter) are the VXLAN packets for the node: Linux's udp_rcv() and\n"+
			"vxlan_rcv() decapsulate them, then flannel.1's program routes the inner packet.")
	}
	for _, n := range vxlanNotes {
		fmt.Fprintln(w, "linuxfp on "+n)
	}
	if encapNote {
		fmt.Fprintln(w, "The pod veths' forwarded (inter): routed into flannel.1, whose driver encapsulates them, as for Linux.")
	}
	for _, f := range flags {
		fmt.Fprintln(w, f)
	}
}
