package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/status"
)

func statusCmd() *cobra.Command {
	var (
		asJSON  bool
		stats   bool
		netns   string
		watch   time.Duration
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what is installed where, why, and the counters",
		Long: `Show what is installed where, why, and the counters.

-n NETNS asks the linuxfp of another network namespace (a name under /run/netns, as ip netns
makes them, or a path such as /proc/PID/ns/net). -s reads the status twice, an interval apart,
and shows packets per second beside each counter (with -j: "rates" per interface, and
"rates_interval_seconds"). --watch[=INTERVAL] (default 1s) redraws until interrupted; with -s
the rates are over the interval. -v also lists every netfilter rule that hands packets to Linux
and why, counted or not (the fast path's counters say for each rule what happened to the
packets it decided: dropped, matched, or handed to Linux).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := status.NewClient()
			if netns != "" {
				var err error
				if client, err = status.NewClientInNetns(netns); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			r := &statusRun{
				fetch: func() (*status.Status, error) {
					get := client.Status
					if verbose {
						get = client.StatusVerbose
					}
					st, err := get()
					if errors.Is(err, status.ErrNotRunning) && netns != "" {
						err = notRunningIn(netns)
					}
					return st, err
				},
				out:      os.Stdout,
				json:     asJSON,
				stats:    stats,
				watch:    watch,
				terminal: isTerminal(os.Stdout),
			}
			return r.run(ctx)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&asJSON, "json", "j", false, "JSON output")
	f.StringVarP(&netns, "netns", "n", "", "the linuxfp of this network namespace (a name under /run/netns, as ip -n takes)")
	f.BoolVarP(&stats, "stats", "s", false, "packets per second beside the counters (two readings an interval apart: 1s, or the --watch interval)")
	f.BoolVarP(&verbose, "verbose", "v", false, "also every netfilter rule that hands packets to Linux, and why")
	f.DurationVar(&watch, "watch", 0, "redraw every INTERVAL until interrupted (--watch alone: 1s; give it as --watch=2s)")
	f.Lookup("watch").NoOptDefVal = "1s"
	return cmd
}

// notRunningIn is status.ErrNotRunning said of the namespace -n named.
type notRunningIn string

func (n notRunningIn) Error() string {
	return "linuxfp is not running in network namespace " + string(n)
}
func (n notRunningIn) Unwrap() error { return status.ErrNotRunning }

// statusRun is one `linuxfp status`: a report, or with --watch one per interval.
type statusRun struct {
	fetch    func() (*status.Status, error)
	out      io.Writer
	json     bool
	stats    bool
	watch    time.Duration
	terminal bool
	now      func() time.Time // time.Now; tests set it
}

// statusJSON is the -j output: the status as the controller serves it, each interface with its
// rates when -s asks for them.
type statusJSON struct {
	*status.Status
	RatesInterval float64         `json:"rates_interval_seconds,omitempty"`
	Interfaces    []interfaceJSON `json:"interfaces"`
}

type interfaceJSON struct {
	status.Interface
	Rates *rates `json:"rates,omitempty"`
}

func (r *statusRun) run(ctx context.Context) error {
	interval := r.watch
	if interval <= 0 {
		interval = time.Second
	}
	now := r.now
	if now == nil {
		now = time.Now
	}
	var prev *status.Status
	var prevAt time.Time
	wait := func() bool {
		t := time.NewTimer(interval)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	shown := 0
	for {
		st, err := r.fetch()
		at := now()
		switch {
		case err != nil && r.watch <= 0:
			return err
		case err != nil:
			// As watch(1) shows a failing command's error and goes on: linuxfp may be
			// restarting.
			r.show(shown, func(w io.Writer) error { _, err := fmt.Fprintf(w, "linuxfp status: %v\n", err); return err })
			shown++
			prev = nil
		case r.stats && prev == nil:
			// The first reading only starts the interval of the first rates.
			prev, prevAt = st, at
		default:
			var rs map[int]rates
			var dt time.Duration
			if r.stats {
				dt = at.Sub(prevAt)
				rs = computeRates(prev, st, dt)
			}
			if err := r.show(shown, func(w io.Writer) error { return r.render(w, st, rs, dt) }); err != nil {
				return err
			}
			shown++
			prev, prevAt = st, at
			if r.watch <= 0 {
				return nil
			}
		}
		if !wait() {
			return nil
		}
	}
}

// show writes the report numbered n (from 0): over the previous one on a terminal, after a blank line
// otherwise (a log, a pipe).
func (r *statusRun) show(n int, render func(io.Writer) error) error {
	var b bytes.Buffer
	if err := render(&b); err != nil {
		return err
	}
	switch {
	case r.watch > 0 && r.terminal:
		// Cursor home, clear the screen: the report is drawn whole, so it does not flicker
		// line by line.
		io.WriteString(r.out, "\x1b[H\x1b[2J")
	case n > 0:
		io.WriteString(r.out, "\n")
	}
	_, err := r.out.Write(b.Bytes())
	return err
}

func (r *statusRun) render(w io.Writer, st *status.Status, rs map[int]rates, dt time.Duration) error {
	if r.json {
		out := statusJSON{Status: st, Interfaces: []interfaceJSON{}}
		if r.stats {
			out.RatesInterval = dt.Seconds()
		}
		for _, it := range st.Interfaces {
			ij := interfaceJSON{Interface: it}
			if v, ok := rs[it.Ifindex]; ok {
				ij.Rates = &v
			}
			out.Interfaces = append(out.Interfaces, ij)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printStatus(w, st, rs, r.stats, dt)
	return nil
}

// isTerminal: f is a terminal (TCGETS answers).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// printStatus writes the report; withRates (-s) puts each interface's packets per second over dt
// beside its counters (rs, by ifindex; an interface with a program but no rate shows "?").
// ruleOutcome says what the fast path did with the packets a rule decided.
func ruleOutcome(r status.FilterRule) string {
	switch r.Outcome {
	case "linux":
		if r.Why != "" {
			return "handed to Linux: " + r.Why
		}
		return "handed to Linux"
	case "":
		return "matched"
	}
	return r.Outcome
}

func printStatus(w io.Writer, st *status.Status, rs map[int]rates, withRates bool, dt time.Duration) {
	if st.Version != "" {
		fmt.Fprintf(w, "linuxfp %s (%s)\n", st.Version, st.Commit)
	}
	fmt.Fprintf(w, "linuxfp pid %d, up %s, hook %s, netfilter %s\n", st.PID,
		time.Since(st.StartedAt).Round(time.Second), st.HookOption, st.NetfilterBackend)
	fmt.Fprintf(w, "sysctl watch: %s\n", st.SysctlWatch)
	fmt.Fprintf(w, "ipset watch: %s\n", st.IPSetWatch)
	if len(st.NetlinkChanges) > 0 {
		var seen []string
		for _, class := range slices.Sorted(maps.Keys(st.NetlinkChanges)) {
			seen = append(seen, fmt.Sprintf("%s %d", class, st.NetlinkChanges[class]))
		}
		fmt.Fprintf(w, "changes seen as made: %s\n", strings.Join(seen, ", "))
	}
	if st.FDBWatch != "" {
		fmt.Fprintf(w, "bridge fdb watch: %s\n", st.FDBWatch)
	}
	if st.CtFreeWatch != "" {
		fmt.Fprintf(w, "conntrack free watch: %s\n", st.CtFreeWatch)
	}
	if st.NeighWatch != "" {
		fmt.Fprintf(w, "neighbour watch: %s\n", st.NeighWatch)
	}
	switch {
	case !st.FenceWatch:
		fmt.Fprintln(w, "fence: off (changes are followed by notifications: the fast path may act on a replaced configuration for a few ms)")
	case len(st.Fenced) > 0:
		var who []string
		for _, f := range st.Fenced {
			if f == "devices" {
				f = "the changed devices'" // the link unit: per device, not a family
			}
			who = append(who, f)
		}
		fmt.Fprintf(w, "fence: on; %s packets go to Linux until a change just made is followed\n", strings.Join(who, " and "))
	default:
		fmt.Fprintln(w, "fence: on (a change's packets go to Linux from the moment Linux applies it until the fast path follows it)")
	}
	if st.LastApply != nil {
		fmt.Fprintf(w, "events %d, data plane updates %d, last %s ago (%s after its first event)\n",
			st.Events, st.Applies, time.Since(st.LastApply.Applied).Round(time.Millisecond),
			st.LastApply.Applied.Sub(st.LastApply.FirstEvent).Round(10*time.Microsecond))
	}
	if st.ApplyError != "" {
		fmt.Fprintf(w, "APPLY FAILED %s ago, retrying: %s\n", time.Since(*st.ApplyErrorSince).Round(time.Second), st.ApplyError)
	}
	if len(st.FamiliesToLinux) > 0 {
		fmt.Fprintf(w, "to Linux until an apply succeeds: every %s packet (apply_failed)\n", strings.Join(st.FamiliesToLinux, " and "))
	}
	if st.ProgramKinds > 0 {
		fmt.Fprintf(w, "programs: %d held, one per kind of interface (shared by the interfaces of that kind); %d verified since the start\n",
			st.ProgramKinds, st.ProgramsVerified)
	}
	for _, r := range st.FilterRules {
		fmt.Fprintf(w, "filter fast path: %s %s: %d packets, %d bytes %s\n", r.Family, r.Rule, r.Counter.Packets, r.Counter.Bytes,
			ruleOutcome(r))
	}
	if len(st.Conntrack) > 0 {
		fmt.Fprintf(w, "conntrack: %s connections tracked by netfilter: established ones fast-pathed (translated ones too, unless an interface's notes say why not); %d TCP connections marked liberal (%d failed)\n",
			strings.Join(st.Conntrack, ", "), st.CTLiberal, st.CTLiberalFailed)
	}
	for _, f := range st.FibCache {
		if len(f.Off) > 0 && strings.HasPrefix(f.Off[0], "not asked for") {
			continue // not asked for: nothing to say
		}
		if f.On {
			fmt.Fprintf(w, "fib cache %s: on (a destination's route is looked up once per change of Linux's routing state)\n", f.Family)
		} else {
			fmt.Fprintf(w, "fib cache %s: off: %s\n", f.Family, strings.Join(f.Off, "; "))
		}
	}
	if st.FDBEntries > 0 {
		fmt.Fprintf(w, "bridge fdb: %d entries mirrored (a learned address's frame per second goes to Linux, which keeps its entry fresh: bridge_refresh)\n",
			st.FDBEntries)
	}
	if withRates {
		fmt.Fprintf(w, "rates: packets per second over the last %s\n", dt.Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INTERFACE\tMASTER\tHOOK\tPROGRAM\tGRAPH\tINSTALLED\tROUTED\tBRIDGED\tDROPPED\tTO LINUX\tEGRESS")
	for _, it := range st.Interfaces {
		hook, prog, graph, inst := "-", "-", "-", "-"
		if p := it.Program; p != nil {
			hook = p.Hook
			prog = fmt.Sprint(p.ID)
			graph = strings.Join(graphModules(st, &it), ">")
			if len(p.Families) > 0 {
				graph += "(" + strings.Join(p.Families, ",") + ")"
			}
			inst = p.InstalledAt.Format("15:04:05.000")
		}
		t := interfaceTotals(&it)
		rate, ok := rs[it.Ifindex]
		cell := func(total uint64, r float64) string {
			switch {
			case withRates && !ok && it.Program == nil:
				// Nothing counts for it: no rate to give.
				return fmt.Sprint(total)
			case withRates && !ok:
				// Its program was replaced between the readings, say (see computeRates).
				return fmt.Sprintf("%d (?)", total)
			}
			return counterCell(total, r, withRates)
		}
		var egress []string
		if it.Egress {
			egress = append(egress, "xdp")
		}
		switch {
		case it.TCPeer:
			egress = append(egress, "tc>peer")
		case it.TCEgress:
			egress = append(egress, "tc")
		}
		if len(egress) == 0 {
			egress = []string{"no"}
		}
		master := it.Master
		if master == "" {
			master = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", it.Name, master, hook, prog, graph, inst,
			cell(t.routed, rate.Routed), cell(t.bridged, rate.Bridged), cell(t.dropped, rate.Dropped), cell(t.toLinux, rate.ToLinux),
			strings.Join(egress, ","))
	}
	tw.Flush()
	for _, it := range st.Interfaces {
		var lines []string
		lines = append(lines, it.Notes...)
		if !it.Egress && it.EgressNote != "" {
			lines = append(lines, "xdp egress: "+it.EgressNote)
		}
		if it.Decapsulated.Packets > 0 {
			lines = append(lines, fmt.Sprintf("VXLAN decapsulated in the fast path: %d", it.Decapsulated.Packets))
		}
		if it.Encapsulated.Packets > 0 {
			lines = append(lines, fmt.Sprintf("routed into vxlan and encapsulated in the fast path: %d", it.Encapsulated.Packets))
		}
		if len(it.Passed) > 0 {
			var rs []string
			for r, c := range it.Passed {
				rs = append(rs, fmt.Sprintf("%s %d", r, c.Packets))
			}
			sort.Strings(rs)
			lines = append(lines, "to Linux by reason: "+strings.Join(rs, ", "))
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", it.Name)
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}
