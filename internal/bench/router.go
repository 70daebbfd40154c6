package bench

import (
	"context"
	"fmt"
	"io"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// RunRouter runs the virtual-router benchmark (the paper's Fig. 5 and Table III): the DUT routes
// 50 prefixes from gen to sink; Linux, linuxfp and a hand-written ceiling (MAC rewrite +
// redirect) forward alternately, round by round. It returns what it measured even when ctx is
// cancelled half-way (with ctx's error); every namespace it created is gone when it returns.
func RunRouter(ctx context.Context, cfg harness.PipelineConfig) (*harness.PipelineResult, error) {
	return harness.RunPipeline(ctx, cfg, routerTopology)
}

var routerTopology = &harness.Topology{
	Name:     "router",
	Prefixes: 50,
	Module:   "forward",
	Describe: func(w io.Writer, s *harness.PipelineSettings) {
		fmt.Fprintf(w, "Virtual router: gen -> DUT -> sink over veth, %d routed /24 prefixes, UDP to port 9\n", s.Prefixes)
	},
	Build: func(o testbed.Options) (*testbed.Testbed, error) { return testbed.New("lfp-bench", o) },
	// The DUT must know its neighbours before its fast path can forward.
	Resolve: true,
	// To the DUT's in0, destinations cycling through the routed prefixes.
	Flow: func(tb *testbed.Testbed) harness.Flow {
		return harness.Flow{Src: tb.GenMAC, Dst: tb.InMAC, SrcIP: tb.GenIP, DstIP: testbed.Prefix4(0, 0),
			Prefixes: tb.Prefixes, Ifindex: tb.GenIfindex}
	},
	// Waits until linuxfp has programs on in0 and out0.
	StartLinuxfp: func(tb *testbed.Testbed, bin string, args ...string) (*testbed.Linuxfp, error) {
		return tb.StartLinuxfp(bin, args...)
	},
}
