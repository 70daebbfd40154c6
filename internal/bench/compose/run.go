package compose

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/packet"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Config configures bench compose: chains of Modules modules in each of Compositions,
// measured with BPF_PROG_TEST_RUN and forwarding the generator's frames on the DUT's in0,
// round by round.
type Config struct {
	Modules      []int         // chain lengths (default 1..10)
	Compositions []Composition // default: all
	LPM          bool          // the modules look up an LPM trie instead of a hash
	Size         int           // frame size in bytes, FCS included (default 64)

	TestRun     bool          // the BPF_PROG_TEST_RUN measurement
	TestRunTime time.Duration // time per test run (default 200 ms)

	Live bool // the forwarding measurement
	// Run: Duration is the measured forwarding time per round, composition and length; the
	// report gives the median and the spread of the rounds. Its Binary and Modes are not used:
	// the chain is all the benchmark runs.
	harness.Run
}

func (c *Config) defaults() error {
	if err := harness.Counts(&c.Modules, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 1, MaxModules, "modules"); err != nil {
		return err
	}
	c.Compositions = harness.Choose(Compositions, c.Compositions)
	if c.Size == 0 {
		c.Size = 64
	}
	if c.Size < 64 || c.Size > 1518 {
		return fmt.Errorf("--size %d: want 64 to 1518 bytes (an Ethernet frame with FCS)", c.Size)
	}
	if !c.TestRun && !c.Live {
		return errors.New("nothing to measure: both the test-run and the forwarding measurements are off")
	}
	if c.TestRunTime <= 0 {
		c.TestRunTime = 200 * time.Millisecond
	}
	return c.Run.Defaults(harness.RunDefaults{Duration: time.Second, Warmup: 200 * time.Millisecond})
}

// topology is the router benchmark's gen -> DUT -> sink under names of its own: the
// composed chain on in0 forwards to out0 what the generator sends to the 50 routed prefixes.
var topology = func() *harness.Topology {
	t := harness.RoutedTopology("compose", "lfp-compose")
	t.StartLinuxfp = nil
	return t
}()

// Run runs bench compose. It returns what it measured even when ctx is cancelled
// half-way (with ctx's error); every namespace it created is gone when it returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	res := newResult(cfg)
	c, err := newComposer(cfg.Compositions, cfg.Modules, cfg.LPM)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for _, cell := range res.Cells {
		if err := cell.programSize(c); err != nil {
			return nil, err
		}
	}
	err = harness.WithTestbed(topology, 1, func(tb *testbed.Testbed) error {
		// Every module (all 16, whatever the length run) routes the generator's prefixes to
		// the sink through out0.
		for m := range MaxModules {
			for p := range tb.Prefixes {
				r := composeRoute{module: m, pfx: netip.PrefixFrom(testbed.Prefix4(p, 0), 24),
					ifindex: tb.OutIfindex, dst: tb.SinkMAC, src: tb.OutMAC}
				if err := c.addRoute(r); err != nil {
					return err
				}
			}
		}
		if err := tb.DUT.Do(func() error { return errors.Join(c.addTx(tb.OutIfindex), c.addIngress(tb.InIfindex)) }); err != nil {
			return err
		}
		pcfg := harness.PipelineConfig{Run: cfg.Run}
		b, err := harness.NewPipeline(ctx, pcfg, topology, tb, nil)
		if err != nil {
			return err
		}
		defer b.Close()
		cpus, err := harness.UsableCPUs()
		if err != nil {
			return err
		}
		cpus = cpus[:1]
		frame := packet.Spec{SrcMAC: tb.GenMAC, DstMAC: tb.InMAC, Src: tb.GenIP, Dst: testbed.Prefix4(0, 1),
			SrcPort: 1024, DstPort: 9, Size: cfg.Size - harness.FCSLen}.Bytes()
		for r := range cfg.Rounds {
			if cfg.TestRun {
				// Timed on the CPU the generator and the DUT's softirq work use when forwarding.
				err := harness.OnCPU(cpus[0], func() error {
					for _, cell := range res.roundOrder(r) {
						if err := ctx.Err(); err != nil {
							return err
						}
						if err := cell.testRun(c, frame, cfg.TestRunTime); err != nil {
							return err
						}
						cfg.Log.Info("test run", "round", r+1, "composition", cell.Composition, "modules", cell.Modules,
							"ns", cell.TestRun.Rounds[len(cell.TestRun.Rounds)-1])
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			if cfg.Live {
				for _, cell := range res.roundOrder(r) {
					if err := cell.forward(b, c, cpus, cfg.Size); err != nil {
						return err
					}
					rd := cell.Live.Rounds[len(cell.Live.Rounds)-1]
					cfg.Log.Info("forwarded", "round", r+1, "composition", cell.Composition, "modules", cell.Modules,
						"mpps", fmt.Sprintf("%.3f", rd.Mpps), "offered_mpps", fmt.Sprintf("%.3f", rd.OfferedMpps))
				}
			}
		}
		return nil
	})
	res.finish(time.Since(start))
	return res, err
}

// testRun runs the cell's program on frame with BPF_PROG_TEST_RUN for about d and records the
// kernel's time per run. The first call also picks the repeat count.
func (cell *Cell) testRun(c *composer, frame []byte, d time.Duration) error {
	prog, err := c.program(cell.Composition, cell.Modules, true)
	if err != nil {
		return err
	}
	tr := cell.TestRun
	run := func(repeat int) (time.Duration, error) {
		c0, err := c.counters()
		if err != nil {
			return 0, err
		}
		ret, per, err := prog.Benchmark(frame, repeat, nil)
		if err != nil {
			return 0, fmt.Errorf("%s, %d modules: %w", cell.Composition, cell.Modules, err)
		}
		c1, err := c.counters()
		if err != nil {
			return 0, err
		}
		// Every run must have gone all the way through the chain (a run interrupted by a
		// signal starts again, so there may be more runs than asked for).
		got := c1.since(c0).Reasons
		if ret != xdpVerdictRedirect || len(got) != 1 || got["forwarded"] < uint64(repeat) {
			return 0, fmt.Errorf("%s, %d modules: %d runs on the benchmark's frame counted %v, last verdict %d: want every run forwarded",
				cell.Composition, cell.Modules, repeat, got, ret)
		}
		return per, nil
	}
	if tr.Repeat == 0 {
		const probe = 20000
		per, err := run(probe)
		if err != nil {
			return err
		}
		tr.Repeat = int(min(max(float64(d)/float64(max(per, 1)), probe), 1<<28))
	}
	per, err := run(tr.Repeat)
	if err != nil {
		return err
	}
	tr.Rounds = append(tr.Rounds, float64(per.Nanoseconds()))
	return nil
}

// forward attaches the cell's program to the DUT's in0 and measures what reaches the sink.
func (cell *Cell) forward(b *harness.Pipeline, c *composer, cpus []int, size int) error {
	prog, err := c.program(cell.Composition, cell.Modules, false)
	if err != nil {
		return err
	}
	if on, err := harness.Attached(b.TB.DUT, "in0"); err != nil {
		return err
	} else if on != "" {
		return fmt.Errorf("%s is still attached to the DUT's in0", on)
	}
	l, err := harness.AttachXDP(b.TB.DUT, "in0", prog)
	if err != nil {
		return err
	}
	defer l.Close()
	c0, err := c.counters()
	if err != nil {
		return err
	}
	rd, err := b.MeasureFull(size, cpus, 0)
	if err != nil {
		return fmt.Errorf("%s, %d modules: %w", cell.Composition, cell.Modules, err)
	}
	c1, err := c.counters()
	if err != nil {
		return err
	}
	cell.Live.Rounds = append(cell.Live.Rounds, Round{Round: rd, Counted: c1.since(c0)})
	return nil
}

// programSize records what the kernel made of the cell's programs as forwarded with: for a
// tail-call chain, the sum over its n programs (what a packet runs through).
func (cell *Cell) programSize(c *composer) error {
	progs, err := c.programs(cell.Composition, cell.Modules, false)
	if err != nil {
		return err
	}
	for _, p := range progs {
		info, err := p.Info()
		if err != nil {
			return fmt.Errorf("program info: %w", err)
		}
		n, err := info.TranslatedSize()
		if err != nil {
			return fmt.Errorf("program info: %w", err)
		}
		cell.Insns += n / asm.InstructionSize // TranslatedSize is in bytes
		if j, err := info.JitedSize(); err == nil {
			cell.JitedBytes += int(j)
		}
	}
	return nil
}
