// Package cli defines linuxfp's commands.
package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"strings"
	"syscall"

	"github.com/cilium/ebpf/rlimit"
	"github.com/spf13/cobra"

	"github.com/linuxfp/linuxfp/internal/controller"
	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/graph"
)

// Main runs the command line and returns the exit code.
func Main(args []string) int {
	root := &cobra.Command{
		Use:           "linuxfp",
		Short:         "Transparent eBPF fast paths for the Linux networking you already configure",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	cobra.AddTemplateFunc("linuxfpVersion", versionText)
	root.SetVersionTemplate("{{linuxfpVersion}}")
	root.AddCommand(runCmd(), statusCmd(), monitorCmd(), benchCmd(), versionCmd())
	// A mistyped flag says where the right ones are, as iproute2's usage does.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "linuxfp:", err)
		return 1
	}
	return 0
}

func runCmd() *cobra.Command {
	var hook, level, format, metricsAddr string
	var ifaces, exclude []string
	var filterRules int
	var fibCache, ctCache bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Accelerate the current network namespace until stopped (SIGINT/SIGTERM)",
		Long: `Runs in the foreground in the current network namespace. It follows links, addresses,
routes, neighbours, sysctls and netfilter by events, installs a specialised XDP or tc program on every
interface it can accelerate, and hands every packet it cannot handle exactly to Linux.
On exit (or if killed) every program is detached and traffic is plain Linux again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(level, format)
			if err != nil {
				return err
			}
			mode := graph.HookMode(hook)
			switch mode {
			case graph.HookAuto, graph.HookXDP, graph.HookXDPGeneric, graph.HookTC:
			default:
				return fmt.Errorf("--hook %q: want auto, xdp, xdp-generic or tc", hook)
			}
			for _, pat := range append(splitList(ifaces), splitList(exclude)...) {
				if _, err := path.Match(pat, ""); err != nil {
					return fmt.Errorf("interface pattern %q: %w (see 'linuxfp run --help')", pat, err)
				}
			}
			if filterRules < 1 || filterRules > maxFilterRules {
				return fmt.Errorf("--filter-rules %d: want 1 to %d", filterRules, maxFilterRules)
			}
			// Capabilities, not uid 0: a service can run with exactly these (deploy/).
			eff, err := effectiveCaps()
			if err != nil {
				return err
			}
			required, optional := missingCaps(eff)
			if len(required) > 0 {
				return fmt.Errorf("run needs %s, missing from its effective capabilities (run it as root, or grant them as deploy/systemd/linuxfp.service does)", capNames(required))
			}
			for _, c := range optional {
				log.Warn("running without a capability: not used", "capability", c.Name, "used_for", c.Why)
			}
			_ = rlimit.RemoveMemlock() // only matters on kernels without memcg accounting
			// A hangup (the terminal it ran in closed) stops it like SIGTERM: programs detached.
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			return controller.Run(ctx, controller.Config{
				Options:   graph.Options{Hook: mode, Interfaces: splitList(ifaces), Exclude: splitList(exclude), FibCache: fibCache, CtCache: ctCache},
				Dataplane: dataplane.Options{FilterRules: filterRules},
				Log:       log,
				Metrics:   controller.MetricsConfig{Addr: metricsAddr, Version: version, Commit: buildCommit()},
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&hook, "hook", "auto", "where to attach: auto (per interface: native XDP where frames need no skb, tc otherwise), xdp (native only), xdp-generic or tc")
	f.StringSliceVar(&ifaces, "interfaces", nil, "interfaces to accelerate (names or globs, comma-separated; default: all but lo)")
	f.StringSliceVar(&exclude, "exclude", nil, "interfaces never to touch (names or globs)")
	f.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&format, "log-format", "text", "text or json")
	f.IntVar(&filterRules, "filter-rules", dataplane.DefaultFilterRules, "the most netfilter rules (flattened) the filter module takes: its maps start at 16,384 and follow the ruleset up to this (each 1,000 about 1.2 MB); a larger ruleset sends its family's forwarded packets to Linux")
	f.BoolVar(&fibCache, "fib-cache", true, "keep the kernel's routing answer per /24 (IPv4) or /64 (IPv6) block of destinations until Linux's routing state changes, instead of asking per packet (exact; status says where it is off and why; --fib-cache=false asks the kernel for every packet)")
	f.BoolVar(&ctCache, "ct-cache", true, "keep, per CPU, the conntrack entry each tracked connection's packets were last found in, while the kernel's lookup would still return it (exact; it needs a program at every slab free of the host, a few tens of ns each: --ct-cache=false leaves that out and asks the kernel's conntrack lookup for every packet)")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics (/metrics), /healthz and /readyz on this TCP address, e.g. 127.0.0.1:9650 (default: off; unauthenticated and read-only: bind it to localhost or a trusted network)")
	return cmd
}

// maxFilterRules: no ruleset compiles to more.
const maxFilterRules = dataplane.DefaultFilterRules

func splitList(v []string) []string {
	var out []string
	for _, s := range v {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
