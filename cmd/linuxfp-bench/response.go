package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/response"
)

func benchResponseCmd() *cobra.Command {
	var o response.Options
	var (
		asJSON bool
		plot   string
	)
	cmd := &cobra.Command{
		Use:   "response",
		Short: "Time from a configuration command to the fast path following it (paper Table VI)",
		Long: `Builds its own namespaces (gen -> dut -> sink), runs linuxfp in the DUT and times, for each
command (ip route add, ip addr add, ip link set down/up, ip link add; brctl addbr, brctl addif,
bridge fdb add, brctl delif), the time from the
command's netlink event to the data plane reflecting it, and from the command's exit to the first
packet that depends on it being fast-pathed. p50/p99/max over --repeats changes each. Then, as a
baseline, the routed commands again with Linux alone: from the command's exit to the first packet
delivered through the DUT (--no-linux skips it). Last, commands that forbid a stream (iptables -A
... -j DROP, ipset add to a set a DROP rule matches, ip route replace blackhole) with linuxfp and
then Linux alone: the stream's packets the sink counted after the command returned (want 0, as
with Linux alone), and how long linuxfp's fence held the family on Linux's path (--no-after
skips them). Then a stream whose path nothing changes, while --churn-rates unrelated changes per
second (ip route replace of other prefixes, ipset add/del in a set no rule uses, iptables -A/-D
FORWARD ... -j ACCEPT for other addresses) are made for --churn-seconds each: the share of its
packets in0 fast-pathed, the share fenced, linuxfp's CPU (--no-churn skips it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkPlotFile(plot); err != nil {
				return err
			}
			bin, err := linuxfpBinary()
			if err != nil {
				return err
			}
			o.Binary = bin
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			res, err := response.Run(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				err = harness.WriteJSON(os.Stdout, res)
			} else {
				res.WriteTable(os.Stdout)
			}
			return errors.Join(err, writePlot(plot, res))
		},
	}
	cmd.Flags().IntVar(&o.Repeats, "repeats", 50, "changes per command")
	cmd.Flags().StringSliceVar(&o.Only, "only", nil, "run only these commands (e.g. \"ip route add\")")
	cmd.Flags().BoolVar(&o.NoLinux, "no-linux", false, "skip the Linux-alone baseline (the routed commands again without linuxfp)")
	cmd.Flags().BoolVar(&o.NoAfter, "no-after", false, "skip the commands that forbid a stream, counted after their return")
	cmd.Flags().IntVar(&o.AfterRepeats, "after-repeats", 10, "samples per command counted after its return")
	cmd.Flags().BoolVar(&o.NoChurn, "no-churn", false, "skip the stream measured while unrelated changes are made")
	cmd.Flags().IntSliceVar(&o.ChurnRates, "churn-rates", []int{10, 100, 1000}, "unrelated changes per second, one window each")
	cmd.Flags().Float64Var(&o.ChurnSeconds, "churn-seconds", 3, "seconds per churn window")
	cmd.Flags().StringVar(&o.LinuxfpLog, "linuxfp-log", "", "write linuxfp's debug log of the run to this file (what each change did and how long its steps took)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	addPlotFlag(cmd, &plot)
	return cmd
}
