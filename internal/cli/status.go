package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/linuxfp/linuxfp/internal/status"
)

func statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what is installed where, why, and the counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := status.NewClient().Status()
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			printStatus(os.Stdout, st)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&asJSON, "json", "j", false, "JSON output")
	return cmd
}

func printStatus(w io.Writer, st *status.Status) {
	fmt.Fprintf(w, "linuxfp pid %d, up %s, hook %s, netfilter %s\n", st.PID,
		time.Since(st.StartedAt).Round(time.Second), st.HookOption, st.NetfilterBackend)
	fmt.Fprintf(w, "sysctl watch: %s\n", st.SysctlWatch)
	fmt.Fprintf(w, "ipset watch: %s\n", st.IPSetWatch)
	if st.FDBWatch != "" {
		fmt.Fprintf(w, "bridge fdb watch: %s\n", st.FDBWatch)
	}
	switch {
	case !st.FenceWatch:
		fmt.Fprintln(w, "fence: off (changes are followed by notifications: the fast path may act on a replaced configuration for a few ms)")
	case len(st.Fenced) > 0:
		fmt.Fprintf(w, "fence: on; %s packets go to Linux until a change just made is followed\n", strings.Join(st.Fenced, " and "))
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
		fmt.Fprintf(w, "filter fast path: %s %s: %d packets, %d bytes\n", r.Family, r.Rule, r.Counter.Packets, r.Counter.Bytes)
	}
	if len(st.Conntrack) > 0 {
		fmt.Fprintf(w, "conntrack: %s connections tracked by netfilter: established, untranslated ones fast-pathed; %d TCP connections marked liberal (%d failed)\n",
			strings.Join(st.Conntrack, ", "), st.CTLiberal, st.CTLiberalFailed)
	}
	if st.FDBEntries > 0 {
		fmt.Fprintf(w, "bridge fdb: %d entries mirrored, %d refreshed in Linux for the fast path\n",
			st.FDBEntries, st.FDBRefreshes)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INTERFACE\tMASTER\tHOOK\tPROGRAM\tGRAPH\tINSTALLED\tROUTED\tBRIDGED\tDROPPED\tTO LINUX\tEGRESS")
	for _, it := range st.Interfaces {
		hook, prog, graph, inst := "-", "-", "-", "-"
		if p := it.Program; p != nil {
			hook = p.Hook
			prog = fmt.Sprint(p.ID)
			graph = strings.Join(p.Modules, ">")
			if len(p.Families) > 0 {
				graph += "(" + strings.Join(p.Families, ",") + ")"
			}
			inst = p.InstalledAt.Format("15:04:05.000")
		}
		var passed uint64
		for _, c := range it.Passed {
			passed += c.Packets
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", it.Name, master, hook, prog, graph, inst,
			it.Forwarded.Packets+it.Encapsulated.Packets, it.Bridged.Packets, it.Dropped.Packets, passed, strings.Join(egress, ","))
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
