// Package router is the virtual-router benchmark (the paper's Fig. 5 and Table III): the DUT
// routes 50 prefixes from gen to sink; Linux, linuxfp and a hand-written ceiling (MAC rewrite +
// redirect) forward alternately, round by round, with the throughput, latency and CPU tests of
// the harness's pipeline. With IPv6 among the families, the throughput test also sends to the
// 50 routed IPv6 prefixes, in the same rounds.
package router

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Options vary the router's configuration.
type Options struct {
	// ToLinux: this many of the routed prefixes are blackhole routes in the DUT, in every mode
	// (but the ceilings, which route nothing): their share of the traffic goes to Linux
	// (fib_blackhole), which drops it. For the cost of what watches the packets handed to
	// Linux (linuxfp-monitor).
	ToLinux int
}

// Run runs the virtual-router benchmark. It returns what it measured even when ctx is cancelled
// half-way (with ctx's error); every namespace it created is gone when it returns.
func Run(ctx context.Context, cfg harness.PipelineConfig) (*harness.PipelineResult, error) {
	return RunWith(ctx, cfg, Options{})
}

// RunWith is Run with o.
func RunWith(ctx context.Context, cfg harness.PipelineConfig, o Options) (*harness.PipelineResult, error) {
	t := topology()
	if o.ToLinux < 0 || o.ToLinux >= t.Prefixes {
		return nil, fmt.Errorf("--to-linux %d: want 0 to %d (of %d routed prefixes)", o.ToLinux, t.Prefixes-1, t.Prefixes)
	}
	if o.ToLinux > 0 {
		toLinux(t, o.ToLinux)
	}
	return harness.RunPipeline(ctx, cfg, t)
}

func topology() *harness.Topology {
	t := harness.RoutedTopology("router", "lfp-bench")
	t.Module = "forward"
	t.Describe = func(w io.Writer, s *harness.PipelineSettings) {
		fmt.Fprintf(w, "Virtual router: gen -> DUT -> sink over veth, %d routed /24 prefixes, UDP to port 9\n", s.Prefixes)
		if slices.Contains(s.Families, harness.IPv6) {
			fmt.Fprintf(w, "IPv6: the same over %d routed /64 prefixes, at %v bytes, in the same rounds\n", s.Prefixes, s.Sizes6)
		}
	}
	return t
}

// toLinux makes the first n routed prefixes blackhole routes: the generator's destinations
// cycle through the prefixes, so n in Prefixes of the frames go to Linux.
func toLinux(t *harness.Topology, n int) {
	describe := t.Describe
	t.Describe = func(w io.Writer, s *harness.PipelineSettings) {
		describe(w, s)
		fmt.Fprintf(w, "%d of them blackhole routes: %.0f%% of the frames go to Linux, which drops them (the ceiling forwards them)\n",
			n, 100*float64(n)/float64(s.Prefixes))
	}
	t.Setup = func(b *harness.Pipeline) error {
		var script string
		for i := range n {
			script += fmt.Sprintf("ip route replace blackhole %s/24\n", testbed.Prefix4(i, 0))
			script += fmt.Sprintf("ip -6 route replace blackhole %s/64\n", testbed.Prefix6(i, 0))
		}
		return b.TB.DUT.Script(script)
	}
	permitted := float64(t.Prefixes-n) / float64(t.Prefixes)
	t.Throughput = func(b *harness.Pipeline, cores int) error {
		return b.MeasureCells(cores, b.Cells(permitted))
	}
}
