package bench

import (
	"context"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// RunRouter runs the virtual-router benchmark (the paper's Fig. 5 and Table III): the DUT routes
// 50 prefixes from gen to sink; Linux, linuxfp and a hand-written ceiling (MAC rewrite +
// redirect) forward alternately, round by round. It returns what it measured even when ctx is
// cancelled half-way (with ctx's error); every namespace it created is gone when it returns.
func RunRouter(ctx context.Context, cfg Config) (*Result, error) {
	return run(ctx, cfg, routerTopology)
}

var routerTopology = &topology{
	name:     "router",
	prefixes: 50,
	build:    func(o testbed.Options) (*testbed.Testbed, error) { return testbed.New("lfp-bench", o) },
	// The DUT must know its neighbours before its fast path can forward.
	resolve: true,
	// To the DUT's in0, destinations cycling through the routed prefixes.
	flow: func(tb *testbed.Testbed) genFlow {
		return genFlow{src: tb.GenMAC, dst: tb.InMAC, srcIP: tb.GenIP, dstIP: testbed.Prefix4(0, 0),
			prefixes: tb.Prefixes, ifindex: tb.GenIfindex}
	},
	// Waits until linuxfp has programs on in0 and out0.
	startLinuxfp: func(tb *testbed.Testbed, bin string, args ...string) (*testbed.Linuxfp, error) {
		return tb.StartLinuxfp(bin, args...)
	},
}
