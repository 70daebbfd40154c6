// Package modules is the paper's Table VII: each fast-path module (forward, bridge, filter) at
// the XDP and at the tc hook. linuxfp builds every module for both hooks from one source; `linuxfp run --hook tc`
// (mode linuxfp-tc) forces the tc build where --hook auto (mode linuxfp) picks native XDP. The
// forwarding benchmarks measure both side by side with Linux and the ceilings (ceiling at XDP,
// ceiling-tc at tc), and summarise them in a TableVII; Run runs the three topologies and
// prints only that.
package modules

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/bridge"
	"github.com/linuxfp/linuxfp/internal/bench/gateway"
	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/router"
)

// Result is what Run measured: the summary, and each benchmark's full result.
type Result struct {
	Machine  harness.Machine         `json:"machine"`
	TableVII *harness.TableVII       `json:"table_vii"`
	Router   *harness.PipelineResult `json:"router,omitempty"`
	Bridge   *harness.PipelineResult `json:"bridge,omitempty"`
	Gateway  *gateway.Result         `json:"gateway,omitempty"`
	harness.Took
}

// Run runs the router, bridge and gateway benchmarks (the gateway with its 100 DROP rules
// and traffic no rule matches) with cfg, by default in every mode (both hooks, both ceilings) at
// 64-byte frames and one generator core, and summarises them in one Table VII. It returns what
// it measured even when ctx is cancelled half-way (with ctx's error).
func Run(ctx context.Context, cfg harness.PipelineConfig) (*Result, error) {
	if len(cfg.Modes) == 0 {
		cfg.Modes = harness.HookModes
	}
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = []int{64}
	}
	if len(cfg.Cores) == 0 {
		cfg.Cores = []int{1}
	}
	res := &Result{Machine: harness.ThisMachine()}
	start := time.Now()
	defer func() { res.finish(time.Since(start)) }()
	var err error
	if res.Router, err = router.Run(ctx, cfg); err != nil {
		return res, fmt.Errorf("router: %w", err)
	}
	if res.Bridge, err = bridge.Run(ctx, cfg); err != nil {
		return res, fmt.Errorf("bridge: %w", err)
	}
	res.Gateway, err = gateway.Run(ctx, gateway.Config{PipelineConfig: cfg, Traffic: []gateway.Traffic{gateway.TrafficMiss}, NoIPSet: true, NoRouter: true})
	if err != nil {
		return res, fmt.Errorf("gateway: %w", err)
	}
	return res, nil
}

func (r *Result) finish(elapsed time.Duration) {
	r.Took.Took(elapsed)
	r.TableVII = nil
	for _, t := range r.tables() {
		if t == nil {
			continue
		}
		if r.TableVII == nil {
			r.TableVII = &harness.TableVII{Cores: t.Cores, FrameSize: t.FrameSize, Sessions: t.Sessions}
		}
		r.TableVII.Rows = append(r.TableVII.Rows, t.Rows...)
	}
}

// tables are the Table VIIs of the three results run (nil for one without a tc mode).
func (r *Result) tables() []*harness.TableVII {
	var out []*harness.TableVII
	for _, p := range []*harness.PipelineResult{r.Router, r.Bridge} {
		if p != nil {
			out = append(out, p.TableVII)
		}
	}
	if r.Gateway != nil {
		out = append(out, r.Gateway.TableVII)
	}
	return out
}

// Measured: the result holds at least one measurement.
func (r *Result) Measured() bool {
	return r != nil && (r.Router.Measured() || r.Bridge.Measured() || r.Gateway.Measured())
}

// WriteTable writes the summary, and every line the three reports flag.
func (r *Result) WriteTable(w io.Writer) {
	fmt.Fprintln(w, "Modules at XDP and at tc: bench router (forward module), bench bridge (bridge module), bench gateway")
	fmt.Fprintln(w, "(filter module: the router with 100 DROP rules in FORWARD, traffic no rule matches)")
	fmt.Fprintf(w, "Machine: Linux %s, %d CPUs (%s); %s; took %s\n", r.Machine.Kernel, r.Machine.CPUs, r.Machine.Model,
		r.Machine.Date, r.Elapsed)
	if s := r.settings(); s != nil {
		fmt.Fprintf(w, "Median of %d rounds x %s per mode (modes alternate round by round)\n", s.Rounds, s.Duration)
	}
	fmt.Fprintln(w, "Modes: linuxfp = linuxfp run (--hook auto: native XDP here), linuxfp-tc = linuxfp run --hook tc,")
	fmt.Fprintln(w, "ceiling = redirect (+ MAC rewrite when routing) at XDP, ceiling-tc = the same at tc (tcx).")
	fmt.Fprintln(w, "Rates are the DUT's; DUT CPU is kernel time per packet at a fixed offered load, minus a baseline.")
	fmt.Fprintln(w)
	if r.TableVII != nil {
		harness.WriteTableVII(w, r.TableVII)
		fmt.Fprintln(w)
	}
	var lines []string
	for _, x := range []struct {
		name string
		r    *harness.PipelineResult
	}{{"forward", r.Router}, {"bridge", r.Bridge}} {
		if x.r == nil {
			continue
		}
		for _, l := range x.r.Flags() {
			lines = append(lines, "! "+x.name+": "+strings.TrimPrefix(l, "! "))
		}
	}
	if r.Gateway != nil {
		for _, l := range r.Gateway.Flags() {
			lines = append(lines, "! filter: "+strings.TrimPrefix(l, "! "))
		}
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if len(lines) > 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "Every round, the throughput at each size and what linuxfp did: --json (router, bridge, gateway).")
}

// settings is the first benchmark's settings (they all ran with the same).
func (r *Result) settings() *harness.PipelineSettings {
	switch {
	case r.Router != nil:
		return &r.Router.Config
	case r.Bridge != nil:
		return &r.Bridge.Config
	case r.Gateway != nil:
		return &r.Gateway.Config.PipelineSettings
	}
	return nil
}
