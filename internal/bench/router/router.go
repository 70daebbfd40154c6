// Package router is the virtual-router benchmark (the paper's Fig. 5 and Table III): the DUT
// routes 50 prefixes from gen to sink; Linux, linuxfp and a hand-written ceiling (MAC rewrite +
// redirect) forward alternately, round by round, with the throughput, latency and CPU tests of
// the harness's pipeline.
package router

import (
	"context"
	"fmt"
	"io"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// Run runs the virtual-router benchmark. It returns what it measured even when ctx is cancelled
// half-way (with ctx's error); every namespace it created is gone when it returns.
func Run(ctx context.Context, cfg harness.PipelineConfig) (*harness.PipelineResult, error) {
	return harness.RunPipeline(ctx, cfg, topology())
}

func topology() *harness.Topology {
	t := harness.RoutedTopology("router", "lfp-bench")
	t.Module = "forward"
	t.Describe = func(w io.Writer, s *harness.PipelineSettings) {
		fmt.Fprintf(w, "Virtual router: gen -> DUT -> sink over veth, %d routed /24 prefixes, UDP to port 9\n", s.Prefixes)
	}
	return t
}
