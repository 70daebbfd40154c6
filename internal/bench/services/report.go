package services

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Row is one case and workload: every mode and the ratios.
type Row struct {
	Case     Case                         `json:"case"`
	Workload Workload                     `json:"workload"`
	Unit     string                       `json:"unit"`
	Modes    map[harness.Mode]*ModeResult `json:"modes"`
	// OverLinux: each other mode's median value over Linux's (0: not both measured).
	OverLinux map[harness.Mode]float64 `json:"over_linux,omitempty"`
}

// ModeResult is one mode's result: the medians over its rounds that completed.
type ModeResult struct {
	Value float64 `json:"value"`
	AvgUs float64 `json:"avg_us,omitempty"`
	P99Us float64 `json:"p99_us,omitempty"`
	harness.ModeRounds[Round]
}

// Round is one measurement.
type Round struct {
	// Value: connections/s (crr), transactions/s (rr), Gbit/s of payload (upload, downloads),
	// Mpps received by the sinks (udp).
	Value   float64 `json:"value"`
	Count   uint64  `json:"count"` // connections, transactions, bytes, frames
	Seconds float64 `json:"seconds"`
	// crr: from connect() to the response; rr: per transaction.
	AvgUs float64 `json:"avg_us,omitempty"`
	P99Us float64 `json:"p99_us,omitempty"`
	// crr: connections that failed, and the first failure.
	Errors     uint64 `json:"failed_connections,omitempty"`
	FirstError string `json:"first_failure,omitempty"`
	// udp: frames the generator sent in the window, and the flows' conntrack entries in the
	// node after the warm-up (one per service; one in the masquerade case).
	Offered     uint64  `json:"offered,omitempty"`
	OfferedMpps float64 `json:"offered_mpps,omitempty"`
	Flows       int     `json:"flows,omitempty"`
	// Backends: what each endpoint pod (by address) or the outside host received during the
	// measurement: TCP connections accepted, or the frames its sink counted.
	Backends map[string]uint64 `json:"backends"`
	// FastPath: what linuxfp's programs in the node did (linuxfp modes), warm-up included.
	FastPath *harness.NodeFastPath `json:"linuxfp,omitempty"`
	// ControllerCPU: the CPU the `linuxfp run` process used meanwhile, in CPUs (1: one CPU
	// all the time): the controller's own work, such as marking TCP connections liberal.
	ControllerCPU float64 `json:"linuxfp_controller_cpus,omitempty"`
	// Hooks: where linuxfp's programs ran, by interface ("none": no program).
	Hooks map[string]string `json:"hooks,omitempty"`
	Error string            `json:"error,omitempty"`
}

// Failure is why the round failed ("" if it did not).
func (rd Round) Failure() string { return rd.Error }

// Target is issue 6's target, the established-flow packet rate through a NAT'd service
// at least 3x Linux's, for one case.
type Target struct {
	Case  Case                     `json:"case"`
	Want  float64                  `json:"want"`
	Ratio map[harness.Mode]float64 `json:"udp_over_linux"`
	Met   map[harness.Mode]bool    `json:"met"`
}

const servicesTarget = 3.0

func newResult(cfg Config) *Result {
	return &Result{harness.Results[Settings, Row, Target]{Report: harness.NewReport(Settings{
		Setup: harness.Setup[Workload]{Topology: "a Kubernetes node with kube-proxy (" + string(cfg.ProxyMode) + " mode) rules, pods plugged in by the CNI bridge plugin, " +
			"Flannel's masquerading, a client and a host outside the cluster", Modes: cfg.Modes, Workloads: cfg.Workloads},
		Cases: cfg.cases(), Pods: cfg.Pods, PodGRO: cfg.PodGRO, ProxyMode: string(cfg.ProxyMode),
		Endpoints: testbed.EndpointsPerService, CRRWorkers: cfg.CRRWorkers, RRSessions: cfg.RRSessions,
		Streams: cfg.Streams, GenCores: cfg.GenCores, FrameSize: cfg.FrameSize,
		Timing: cfg.Timing(),
	})}}
}

// add adds round rd of workload w in case c and mode m: to the medians over the rounds that
// completed, and the ratios over Linux.
func (r *Result) add(c Case, w Workload, m harness.Mode, rd Round) {
	row := harness.FindOrAdd(&r.Rows, func(row *Row) bool { return row.Case == c && row.Workload == w },
		func() *Row { return &Row{Case: c, Workload: w, Unit: w.unit(), Modes: map[harness.Mode]*ModeResult{}} })
	sm := harness.Entry(row.Modes, m)
	sm.Add(rd)
	sm.Value = sm.Median(func(r Round) float64 { return r.Value })
	sm.AvgUs = sm.Median(func(r Round) float64 { return r.AvgUs })
	sm.P99Us = sm.Median(func(r Round) float64 { return r.P99Us })
	row.OverLinux = nil
	if l := row.Modes[harness.ModeLinux]; l != nil {
		for om, o := range row.Modes {
			if om != harness.ModeLinux && harness.Div(o.Value, l.Value) > 0 {
				if row.OverLinux == nil {
					row.OverLinux = map[harness.Mode]float64{}
				}
				row.OverLinux[om] = harness.Div(o.Value, l.Value)
			}
		}
	}
}

func (r *Result) finish(elapsed time.Duration) {
	r.Took.Took(elapsed)
	cases := r.Config.Cases
	slices.SortStableFunc(r.Rows, func(a, b *Row) int {
		if a.Case != b.Case {
			return slices.Index(cases, a.Case) - slices.Index(cases, b.Case)
		}
		return slices.Index(Workloads, a.Workload) - slices.Index(Workloads, b.Workload)
	})
	r.Targets = nil
	for _, row := range r.Rows {
		if row.Workload != UDP || len(row.OverLinux) == 0 {
			continue
		}
		t := Target{Case: row.Case, Want: servicesTarget, Ratio: row.OverLinux, Met: map[harness.Mode]bool{}}
		for m, v := range row.OverLinux {
			t.Met[m] = v >= servicesTarget
		}
		r.Targets = append(r.Targets, t)
	}
}

// Measured: the result holds at least one measurement (false for a nil result).
func (r *Result) Measured() bool { return r != nil && r.Results.Measured() }

// WriteTable writes the tables a person reads.
func (r *Result) WriteTable(w io.Writer) {
	c := r.Config
	rules := "kube-proxy's iptables rules (1.30)"
	if c.ProxyMode == string(testbed.ProxyNFTables) {
		rules = "kube-proxy's nftables rules (1.33)"
	}
	fmt.Fprintf(w, "Services: one Kubernetes node with %s for N services, %d endpoints each,\n"+
		"spread over %d pods on cni0 (CNI bridge plugin, MTU %d), and Flannel's masquerading. A client outside the cluster\n"+
		"reaches the services' cluster IPs through the node (DNAT to a random endpoint, masqueraded by kube-proxy);\n"+
		"from pods: the pods are the clients of the same services (udp from pod 0), an endpoint on another pod reached\n"+
		"across cni0 (br_netfilter bridges the DNAT'd packets), one on the client pod itself back out of its own port;\n"+
		"masquerade: the pods reach a host outside the cluster through the node (Flannel's MASQUERADE).\n"+
		"crr: connect, %d-byte request, %d-byte response, close (%d workers, random services); rr: 1 byte each way\n"+
		"(%s); upload/download: bulk (%s); udp: %d-byte frames from the XDP generator (%s), one flow\n"+
		"per service to its cluster IP, counted at the endpoints by XDP sinks after the flows' conntrack entries exist\n",
		rules, c.Endpoints, c.Pods, testbed.PodsMTU, crrRequest, crrResponse, c.CRRWorkers, harness.Plural(c.RRSessions, "connection"),
		harness.Plural(c.Streams, "connection"), c.FrameSize, harness.Plural(c.GenCores, "core"))
	if c.PodGRO {
		fmt.Fprintln(w, "--pod-gro: GRO on in the pods' eth0 (the CNI plugin leaves it off), so XDP programs may redirect into them")
	}
	if slices.ContainsFunc(c.Cases, func(k Case) bool { return k.IPv6 }) {
		rules6 := "ip6tables"
		if c.ProxyMode == string(testbed.ProxyNFTables) {
			rules6 = "table ip6 kube-proxy"
		}
		fmt.Fprintf(w, "IPv6: a dual-stack node (kube-proxy's IPv6 rules, %s); the same workloads from the client 2001:2::2\n"+
			"(and from the pods' 2001:2:0:101::k) to the services' IPv6 cluster IPs 2001:2:0:80::N, DNAT'd to the pods'\n"+
			"2001:2:0:101::k; udp in %d-byte frames\n", rules6, max(c.FrameSize, harness.MinFrame(true)))
	}
	fmt.Fprintln(w, r.Machine)
	fmt.Fprint(w, c.MedianLine(r.Elapsed))

	head := []string{"case", "workload", "metric"}
	for _, m := range c.Modes {
		head = append(head, m.Title())
		if m != harness.ModeLinux {
			head = append(head, "vs Linux")
		}
	}
	tw := harness.NewTable(w, head...)
	var last Case
	for i, row := range r.Rows {
		caseCell := row.Case.String()
		if i > 0 && row.Case == last {
			caseCell = ""
		}
		last = row.Case
		type metric struct {
			name  string
			get   func(*ModeResult) float64
			ratio bool
		}
		metrics := []metric{{row.Unit, func(sm *ModeResult) float64 { return sm.Value }, true}}
		if row.Workload == CRR || row.Workload == RR {
			metrics = append(metrics,
				metric{"avg us", func(sm *ModeResult) float64 { return sm.AvgUs }, false},
				metric{"p99 us", func(sm *ModeResult) float64 { return sm.P99Us }, false})
		}
		for j, mt := range metrics {
			cells := []string{caseCell, string(row.Workload), mt.name}
			if j > 0 {
				cells[0], cells[1] = "", ""
			}
			l := row.Modes[harness.ModeLinux]
			for _, m := range c.Modes {
				sm := row.Modes[m]
				switch {
				case sm == nil:
					cells = append(cells, "-")
				case sm.AllFailed():
					cells = append(cells, "failed")
				default:
					cells = append(cells, svcNumber(mt.get(sm), row.Workload, mt.ratio))
				}
				if m == harness.ModeLinux {
					continue
				}
				switch {
				case sm == nil || l == nil || sm.AllFailed() || l.AllFailed():
					cells = append(cells, "")
				case mt.ratio:
					cells = append(cells, harness.Ratio(harness.Div(mt.get(sm), mt.get(l)), "x"))
				default:
					cells = append(cells, harness.PercentChange(harness.Div(mt.get(sm), mt.get(l))))
				}
			}
			tw.Row(cells...)
		}
	}
	tw.Flush()
	if len(r.Targets) > 0 {
		fmt.Fprintf(w, "\nEstablished-flow packet rate through a NAT'd service, target >= %.0fx Linux in the same run (issue 6):\n", servicesTarget)
		for _, t := range r.Targets {
			var parts []string
			for _, m := range c.Modes {
				if v, ok := t.Ratio[m]; ok {
					parts = append(parts, fmt.Sprintf("%s %.2fx (%s)", m.Title(), v, harness.Met(t.Met[m])))
				}
			}
			fmt.Fprintf(w, "  %s: %s\n", t.Case, strings.Join(parts, ", "))
		}
	}
	r.writeFastPath(w)
	for _, f := range r.flags() {
		fmt.Fprintln(w, f)
	}
}

// svcNumber formats a value of workload w: rates as integers, Gbit/s and Mpps with decimals,
// latencies with one.
func svcNumber(v float64, w Workload, value bool) string {
	switch {
	case !value:
		return fmt.Sprintf("%.1f", v)
	case w == UDP:
		return fmt.Sprintf("%.3f", v)
	case w == Upload || w == Download || w == DownloadHalfClosed:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// writeFastPath reports what linuxfp's programs did, per case, workload and linuxfp mode, over
// all rounds.
func (r *Result) writeFastPath(w io.Writer) {
	var lines [][]string
	var liberal []string
	for _, row := range r.Rows {
		for _, m := range r.Config.Modes {
			sm := row.Modes[m]
			if sm == nil || !m.RunsLinuxfp() {
				continue
			}
			total := &harness.NodeFastPath{}
			hooks := map[string][]string{}
			var cpu []float64
			for _, rd := range sm.Rounds {
				if rd.FastPath == nil {
					continue
				}
				cpu = append(cpu, rd.ControllerCPU)
				total.Sum(rd.FastPath)
				for role, h := range rd.Hooks {
					if !slices.Contains(hooks[role], h) {
						hooks[role] = append(hooks[role], h)
					}
				}
			}
			var by []string
			for _, role := range total.Roles(svcRoles) {
				ic := total.Interfaces[role]
				hook := strings.Join(hooks[role], ",")
				if hook != "" {
					hook = " " + hook
				}
				by = append(by, fmt.Sprintf("%s%s %s", role, hook, shareString(*ic)))
			}
			lines = append(lines, []string{row.Case.String(), string(row.Workload), m.Title(), fmt.Sprint(total.Runs()),
				harness.FastString(total.FastPathCounts), harness.PassedString(total.FastPathCounts), fmt.Sprintf("%.2f", harness.Median(cpu)), strings.Join(by, "; ")})
			if total.CTLiberal > 0 {
				liberal = append(liberal, fmt.Sprintf("%s %s %s %d", row.Case, row.Workload, m.Title(), total.CTLiberal))
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "\nWhat linuxfp's programs in the node did (`linuxfp status -j` before and after every measurement, warm-up")
	fmt.Fprintln(w, "included, all rounds; a packet crossing two programs counts twice; controller: CPUs the `linuxfp run` process")
	fmt.Fprintln(w, "used meanwhile, median; by interface: hook, program runs, share fast-pathed):")
	tw := harness.NewLeftTable(w, "case", "workload", "mode", "program runs", "fast-pathed", "handed to Linux, by reason", "controller", "by interface")
	for _, l := range lines {
		tw.Row(l...)
	}
	tw.Flush()
	if len(liberal) > 0 {
		fmt.Fprintf(w, "TCP connections linuxfp marked liberal in conntrack: %s\n", strings.Join(liberal, ", "))
	}
}

var svcRoles = []string{"in0", "pod veths", "out0", "cni0"}

// shareString is "12345 runs, 99.9% fast".
func shareString(c harness.FastPathCounts) string {
	if c.Runs() == 0 {
		return "0 runs"
	}
	return fmt.Sprintf("%d runs %.1f%%", c.Runs(), 100*float64(c.Fast())/float64(c.Runs()))
}

// flags lists what a reader must know about the rounds: failures, connections that failed,
// workloads that reached no endpoint, flows missing from conntrack, frames lost.
func (r *Result) flags() []string {
	var out []string
	for _, row := range r.Rows {
		for _, m := range r.Config.Modes {
			sm := row.Modes[m]
			if sm == nil {
				continue
			}
			where := fmt.Sprintf("%s, %s, %s", m.Title(), row.Case, row.Workload)
			for i, rd := range sm.Rounds {
				at := fmt.Sprintf("%s, round %d", where, i+1)
				if rd.Error != "" {
					out = append(out, fmt.Sprintf("! %s failed: %s", at, rd.Error))
					continue
				}
				if rd.Errors > 0 {
					out = append(out, fmt.Sprintf("! %s: %d connections failed (%s)", at, rd.Errors, rd.FirstError))
				}
				if len(rd.Backends) == 0 {
					out = append(out, fmt.Sprintf("! %s: no endpoint received anything", at))
				}
				if row.Workload == UDP {
					want := 1
					if !row.Case.Masquerade {
						want = row.Case.Services
					}
					if rd.Flows != want {
						out = append(out, fmt.Sprintf("! %s: %d of the %d flows had a conntrack entry after the warm-up", at, rd.Flows, want))
					}
				}
			}
		}
	}
	return out
}
