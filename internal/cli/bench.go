package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"github.com/spf13/cobra"

	"github.com/linuxfp/linuxfp/internal/bench"
)

func benchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks: Linux vs linuxfp in the same run"}
	cmd.AddCommand(benchRouterCmd(), benchResponseCmd())
	return cmd
}

func benchRouterCmd() *cobra.Command {
	var (
		cfg              bench.RouterConfig
		modes            []string
		noLatency, noCPU bool
		noThroughput     bool
		asJSON           bool
		level            string
	)
	cmd := &cobra.Command{
		Use:   "router",
		Short: "The virtual-router experiment: Linux vs linuxfp vs a hand-written XDP ceiling",
		Long: `Builds its own namespaces gen -> dut -> sink (veth, 50 routed prefixes 198.19.N.0/24 on the
DUT), generates UDP traffic with an XDP program run with BPF_PROG_RUN in live-frame mode in gen,
and counts what arrives at the sink with XDP. The DUT forwards with plain Linux, with
` + "`linuxfp run`" + `, or with a minimal XDP forwarder (MAC rewrite + redirect: the ceiling of this
pipeline), alternating round by round; the report gives medians. Then TCP request/response
latency over parallel sessions, and kernel CPU time per packet at a fixed offered load.
Removes its namespaces on exit, including on Ctrl-C.

Quick run: linuxfp bench router --sizes 64 --cores 1 --duration 1s --rounds 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(level, "text")
			if err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return errors.New("bench needs root (network namespaces, BPF)")
			}
			for _, s := range splitList(modes) {
				m, err := bench.ParseMode(s)
				if err != nil {
					return fmt.Errorf("--modes: %w", err)
				}
				cfg.Modes = append(cfg.Modes, m)
			}
			cfg.Throughput, cfg.Latency, cfg.CPU, cfg.Log = !noThroughput, !noLatency, !noCPU, log
			if cfg.Binary, err = os.Executable(); err != nil {
				return fmt.Errorf("find the linuxfp binary to run in the DUT: %w", err)
			}
			_ = rlimit.RemoveMemlock()
			// Ctrl-C stops the measurement; the deferred cleanup removes the namespaces.
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			res, err := bench.RunRouter(ctx, cfg)
			if res != nil && (len(res.Throughput) > 0 || len(res.Latency) > 0 || res.CPU != nil) {
				if asJSON {
					if jerr := res.WriteJSON(os.Stdout); jerr != nil {
						return errors.Join(err, jerr)
					}
				} else {
					res.WriteTable(os.Stdout)
				}
			}
			if ctx.Err() != nil {
				return errors.New("interrupted: the namespaces are removed; results so far are above")
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&cfg.Sizes, "sizes", []int{64, 128, 256, 512, 1024, 1500}, "frame sizes in bytes including FCS (RFC 2544)")
	f.IntSliceVar(&cfg.Cores, "cores", []int{1, 2}, "generator cores to run with, one topology each")
	f.StringSliceVar(&modes, "modes", nil, "forwarding modes: linux, linuxfp, ceiling (default all)")
	f.DurationVar(&cfg.Duration, "duration", time.Second, "measured time per round, mode and size")
	f.DurationVar(&cfg.Warmup, "warmup", 200*time.Millisecond, "unmeasured traffic before each measurement")
	f.IntVar(&cfg.Rounds, "rounds", 3, "rounds per mode (the report gives medians)")
	f.IntVar(&cfg.Sessions, "sessions", 128, "parallel TCP request/response sessions in the latency test")
	f.BoolVar(&noThroughput, "no-throughput", false, "skip the throughput test")
	f.BoolVar(&noLatency, "no-latency", false, "skip the request/response latency test")
	f.BoolVar(&cfg.KeepTxCsum, "latency-tx-csum-offload", false,
		"turn tx checksum offload on at gen and sink for the latency test, as in containers (linuxfp then uses generic XDP on the DUT's veths)")
	f.BoolVar(&noCPU, "no-cpu", false, "skip the CPU cost test")
	f.DurationVar(&cfg.CPUDuration, "cpu-duration", 0, "measured time per CPU round (default 2x --duration)")
	f.BoolVar(&cfg.ProgStats, "prog-stats", false,
		"report ns per packet of each BPF program (BPF_ENABLE_STATS; slows the XDP modes)")
	f.Float64Var(&cfg.CPURate, "cpu-rate", 0,
		"offered load of the CPU test in frames/s (default: half of Linux's 64-byte rate)")
	f.BoolVarP(&asJSON, "json", "j", false, "JSON output")
	f.StringVar(&level, "log-level", "info", "progress on stderr: debug, info, warn or error")
	return cmd
}

func helperCmd() *cobra.Command {
	return &cobra.Command{Use: "helper", Hidden: true, Short: "internal helpers used by benchmarks"}
}
