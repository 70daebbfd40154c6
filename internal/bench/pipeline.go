// Package bench holds linuxfp's benchmarks. They build their own namespaces (internal/testbed),
// generate traffic with the project's own XDP generator, and always compare linuxfp against Linux
// in the same run.
//
// The forwarding benchmarks (router.go, bridge.go) share one pipeline (pipeline.go): gen -> DUT
// -> sink namespaces, the XDP generator (generator.go) and sink (sink.go), the DUT's modes
// (modes.go), and the throughput, latency and CPU tests; a topology says what differs.
package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Config configures a forwarding benchmark (bench router, bench bridge): Linux, linuxfp and a
// hand-written ceiling forward from gen to sink through the DUT alternately, round by round.
type Config struct {
	harness.Run       // Duration: measured time per round, mode and size
	Sizes       []int // frame sizes in bytes, FCS included (RFC 2544)
	Cores       []int // generator cores

	Throughput bool // the throughput test (received rate per mode, frame size and cores)

	Latency    bool // TCP request/response latency, Linux vs linuxfp
	Sessions   int  // parallel request/response sessions
	KeepTxCsum bool // turn tx checksum offload on at gen and sink for the latency test (see setTxCsum)

	CPU         bool          // CPU cost per packet at a fixed offered load
	CPURate     float64       // offered load in frames/s; 0: half of Linux's 64-byte rate on one core
	CPUDuration time.Duration // measured time per CPU round (default 2x Duration: ticks are coarse)

	ProgStats bool // time the BPF programs (BPF_ENABLE_STATS) and report ns per run
}

func (c *Config) defaults() error {
	if len(c.Sizes) == 0 {
		c.Sizes = []int{64, 128, 256, 512, 1024, 1500}
	}
	if len(c.Cores) == 0 {
		c.Cores = []int{1, 2}
	}
	err := c.Run.Defaults(harness.RunDefaults{Name: "forwarding", Modes: Modes, Default: DefaultModes,
		Duration: time.Second, Warmup: 200 * time.Millisecond, Where: "the DUT"})
	if err != nil {
		return err
	}
	if c.CPUDuration <= 0 {
		c.CPUDuration = 2 * c.Duration
	}
	if c.Sessions <= 0 {
		c.Sessions = 128
	}
	cpus, err := harness.UsableCPUs()
	if err != nil {
		return err
	}
	for _, n := range c.Cores {
		if n < 1 || n > len(cpus) {
			return fmt.Errorf("--cores %d: this process may use %d CPUs", n, len(cpus))
		}
	}
	for _, s := range c.Sizes {
		if s < 64 || s > 1518 {
			return fmt.Errorf("--sizes %d: want 64 to 1518 bytes (Ethernet frames with FCS)", s)
		}
	}
	return nil
}

// topology is what differs between the benchmarks built on the gen -> dut -> sink pipeline.
type topology struct {
	name     string // "router", "bridge": the result's topology
	prefixes int    // routed prefixes, for the report
	// build builds the namespaces (testbed.New, testbed.NewBridge).
	build func(testbed.Options) (*testbed.Testbed, error)
	// flow is what the generator sends.
	flow func(*testbed.Testbed) genFlow
	// l2: the ceiling switches (redirects frames as they are) instead of routing (MAC rewrite).
	l2 bool
	// resolve: make the hosts resolve their neighbours by pinging once the topology is built.
	resolve bool
	// startLinuxfp starts `linuxfp run` with args in the DUT and returns once its data plane is
	// built.
	startLinuxfp func(tb *testbed.Testbed, bin string, args ...string) (*testbed.Linuxfp, error)
	// setup runs once per topology built, before any measurement (nil: nothing to do).
	setup func(*pipeline) error
	// prepare runs before every measurement, in the mode measured (nil: nothing to do). A
	// problem it returns is no error: it is logged and flagged in the round (Round.FDBNotLearned).
	prepare func(*pipeline) (problem string, err error)
	// throughput is the throughput test for a generator of cores CPUs (nil: every mode and
	// frame size, pipeline.throughput; the gateway measures each of its rulesets).
	throughput func(b *pipeline, cores int) error
}

// run runs a benchmark on topology t. It returns what it measured even when ctx is cancelled
// half-way (with ctx's error); every namespace it created is gone when it returns.
func run(ctx context.Context, cfg Config, t *topology) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := newResult(cfg, t)
	if cfg.ProgStats {
		st, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			return nil, fmt.Errorf("enable BPF run-time statistics: %w", err)
		}
		defer st.Close()
	}
	start := time.Now()
	for i, cores := range cfg.Cores {
		if i > 0 && !cfg.Throughput {
			break
		}
		err := withTestbed(t, cores, func(tb *testbed.Testbed) error {
			b, err := newPipeline(ctx, cfg, t, tb, res)
			if err != nil {
				return err
			}
			defer b.close()
			if t.setup != nil {
				if err := t.setup(b); err != nil {
					return err
				}
			}
			if cfg.Throughput {
				measure := (*pipeline).throughput
				if t.throughput != nil {
					measure = t.throughput
				}
				if err := measure(b, cores); err != nil {
					return err
				}
			}
			// Latency and CPU once, in the first topology: neither depends on its queue count
			// (the CPU test always generates from one core).
			if i > 0 {
				return nil
			}
			if cfg.Latency {
				if err := b.latency(); err != nil {
					return err
				}
			}
			if cfg.CPU {
				if err := b.cpu(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			res.finish(time.Since(start))
			return res, err
		}
	}
	res.finish(time.Since(start))
	return res, nil
}

// withTestbed builds the topology for a generator of cores CPUs and always removes it.
func withTestbed(t *topology, cores int, fn func(*testbed.Testbed) error) (err error) {
	// One veth queue per generator core: veth picks the peer's queue by sending CPU, so each
	// core drives its own NAPI instance.
	// The hosts' stacks compute their checksums (as behind a physical NIC): see setTxCsum.
	tb, err := t.build(testbed.Options{Queues: cores, TxChecksumOff: true})
	if err != nil {
		return fmt.Errorf("build testbed: %w", err)
	}
	defer func() {
		if cerr := tb.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove testbed: %w", cerr))
		}
	}()
	if t.resolve {
		if err := tb.ResolveNeighbours(); err != nil {
			return fmt.Errorf("resolve neighbours: %w", err)
		}
	}
	return fn(tb)
}

// pipeline is one topology with its sink and generator attached.
type pipeline struct {
	ctx  context.Context
	cfg  Config
	topo *topology
	tb   *testbed.Testbed
	res  *Result
	sink *sink
	gen  *generator
	dut  *dut
	log  *slog.Logger
}

func newPipeline(ctx context.Context, cfg Config, t *topology, tb *testbed.Testbed, res *Result) (*pipeline, error) {
	b := &pipeline{ctx: ctx, cfg: cfg, topo: t, tb: tb, res: res, log: cfg.Log, dut: &dut{tb: tb, topo: t, bin: cfg.Binary}}
	var err error
	if b.sink, err = attachSink(tb.Sink, "eth0"); err != nil {
		return nil, err
	}
	if b.gen, err = newGenerator(tb, t.flow(tb)); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *pipeline) close() {
	if err := b.dut.leave(); err != nil {
		b.log.Warn("leave DUT mode", "err", err)
	}
	if b.gen != nil {
		b.gen.Close()
	}
	if b.sink != nil {
		b.sink.Close()
	}
}

// withMode runs fn with the DUT in mode m, and leaves the mode whatever happens.
func (b *pipeline) withMode(m Mode, fn func() error) (err error) {
	if err := b.dut.enter(m); err != nil {
		return err
	}
	if st, err := b.dut.lfpStatus(); err == nil && st != nil && hookOf(st, "in0") == "" {
		it := statusOf(st, "in0")
		var notes []string
		if it != nil {
			notes = it.Notes
		}
		b.log.Info("linuxfp installed no program on in0: Linux forwards in this mode", "notes", notes)
	}
	defer func() {
		if lerr := b.dut.leave(); lerr != nil {
			err = errors.Join(err, lerr)
		}
	}()
	return fn()
}

// throughput measures every mode and size for a generator of cores CPUs.
func (b *pipeline) throughput(cores int) error {
	var cells []cell
	for _, size := range b.cfg.Sizes {
		cells = append(cells, cell{size: size, res: b.res})
	}
	return b.measureCells(cores, cells)
}

// cell is one measurement per round and mode: a frame size, and what else the benchmark varies
// (the gateway's traffic).
type cell struct {
	size int
	res  *Result // where its rounds go
	// before runs right before the cell is measured (nil: nothing to do): the gateway gives the
	// generator the cell's destinations.
	before func() error
	// permitted is the fraction of the offered frames that the DUT's rules let through to the
	// sink in modes linux and linuxfp (0: all of them; the ceiling evaluates no rules).
	permitted float64
	what      []any // for the log: what the cell is, besides its size
}

// permittedIn is the fraction of the offered frames mode m should deliver to the sink (0: all).
func (c cell) permittedIn(m Mode) float64 {
	if m.Ceiling() {
		return 0
	}
	return c.permitted
}

// measureCells measures every mode and cell for a generator of cores CPUs: round after round,
// modes in rotated order, each mode entered once per round for all cells.
func (b *pipeline) measureCells(cores int, cells []cell) error {
	cpus, err := harness.UsableCPUs()
	if err != nil {
		return err
	}
	cpus = cpus[:cores]
	for r := 0; r < b.cfg.Rounds; r++ {
		for _, m := range harness.Rotated(b.cfg.Modes, r) {
			err := b.withMode(m, func() error {
				for _, c := range cells {
					if c.before != nil {
						if err := c.before(); err != nil {
							return err
						}
					}
					rd, err := b.measureFull(c.size, cpus, c.permittedIn(m))
					if err != nil {
						return fmt.Errorf("%s, %d cores, %d bytes: %w", m, cores, c.size, err)
					}
					c.res.addRound(cores, c.size, m, rd)
					b.log.Info("measured", append(slices.Clone(c.what), "round", r+1, "mode", m, "cores", cores, "size", c.size,
						"mpps", fmt.Sprintf("%.3f", rd.Mpps), "offered_mpps", fmt.Sprintf("%.3f", rd.OfferedMpps))...)
					if fp := rd.FastPath; fp != nil && fp.NoProgram == "" && rd.Received > 0 && fp.fastPathed() < rd.Received*99/100 {
						b.log.Warn("linuxfp fast-pathed less than 99% of what the sink received",
							"forwarded", fp.Forwarded, "bridged", fp.Bridged, "received", rd.Received, "passed", fp.Passed)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Round is one measurement.
type Round struct {
	Seconds     float64   `json:"seconds"`
	Offered     uint64    `json:"offered"`  // frames the generator sent
	Received    uint64    `json:"received"` // frames the sink counted
	OfferedMpps float64   `json:"offered_mpps"`
	Mpps        float64   `json:"mpps"`
	FastPath    *fastPath `json:"linuxfp_in0,omitempty"` // linuxfp mode: what its program on in0 did
	CPU         *cpuUse   `json:"cpu,omitempty"`
	// --prog-stats: run time of the generator, the sink and the DUT's in0 program ("dut_in0").
	Programs map[string]ProgStat `json:"programs,omitempty"`
	// Permitted is the fraction of the offered frames the DUT's rules let through to the sink
	// (the gateway's mixed traffic; omitted: all). The DUT handled Received / Permitted frames.
	Permitted float64 `json:"permitted,omitempty"`
	// Windows measured before this one and not counted (see measureFull).
	Discarded []Round `json:"discarded,omitempty"`
	// Bridge: what the bridge's FDB lacked right before the measurement, though gen and the
	// sink had each just sent it a frame (see bridgeLearn).
	FDBNotLearned string `json:"fdb_not_learned,omitempty"`
}

// permittedFraction is the fraction of the offered frames that should reach the sink.
func (rd *Round) permittedFraction() float64 {
	if rd.Permitted > 0 {
		return rd.Permitted
	}
	return 1
}

// dutMpps is the rate of frames the DUT handled (forwarded or dropped by its rules), in Mpps.
func (rd *Round) dutMpps() float64 { return rd.Mpps / rd.permittedFraction() }

// lostBeforeSink: more than 1% of the frames that should have reached the sink did not.
func (rd *Round) lostBeforeSink() bool {
	return float64(rd.Received) < float64(rd.Offered)*rd.permittedFraction()*0.99
}

// escapeAttempts bounds how often measureFull repeats a window whose DUT work left the
// generator's CPUs.
const escapeAttempts = 3

// measureFull measures at full speed. At full speed the generator can only outrun the DUT when
// the DUT's NAPI work runs on another CPU than the generator: a veth NAPI instance stays on the
// CPU that scheduled it as long as it has work, and anything else that schedules it first (a
// frame sent by gen's own stack from another CPU) can pull the whole pipeline there. The
// generator then runs unthrottled and in0's ring overflows: frames are lost before the DUT, and
// the window measured a different machine (DUT and generator on separate CPUs). Such windows are
// kept in the result but measured again.
//
// permitted is the fraction of the offered frames the DUT's rules let through (0: all).
func (b *pipeline) measureFull(size int, cpus []int, permitted float64) (Round, error) {
	var discarded []Round
	for {
		rd, err := b.measure(size, cpus, 0)
		rd.Permitted = permitted
		if err != nil || !rd.lostBeforeSink() || len(discarded)+1 >= escapeAttempts {
			rd.Discarded = discarded
			return rd, err
		}
		b.log.Warn("frames lost before the DUT: its work left the generator's CPU; measuring again",
			"size", size, "offered", rd.Offered, "received", rd.Received, "fast_path", rd.FastPath)
		discarded = append(discarded, rd)
	}
}

// measure runs the generator with frames of size bytes on cpus, at rate frames/s (0: full
// speed), and counts what arrives at the sink over one window after cfg.Warmup.
func (b *pipeline) measure(size int, cpus []int, rate float64) (Round, error) {
	if err := b.ctx.Err(); err != nil {
		return Round{}, err
	}
	g := b.gen
	if err := g.setSize(size); err != nil {
		return Round{}, err
	}
	problem, err := b.prepare()
	if err != nil {
		return Round{}, err
	}
	stop := g.start(b.ctx, cpus, rate)
	d := b.cfg.Duration
	if rate > 0 {
		d = b.cfg.CPUDuration
	}
	rd, err := b.window(g, d)
	rd.FDBNotLearned = problem
	if serr := stop(); serr != nil {
		err = errors.Join(err, serr)
	}
	if err == nil {
		err = b.ctx.Err()
	}
	return rd, err
}

// prepare runs the topology's preparation for a measurement (the bridge's learning).
func (b *pipeline) prepare() (problem string, err error) {
	if b.topo.prepare == nil {
		return "", nil
	}
	if problem, err = b.topo.prepare(b); err != nil {
		return "", err
	}
	if problem != "" {
		b.log.Warn("measuring anyway", "mode", b.dut.mode, "problem", problem)
	}
	return problem, nil
}

func (b *pipeline) window(g *generator, d time.Duration) (Round, error) {
	if err := harness.SleepCtx(b.ctx, b.cfg.Warmup); err != nil {
		return Round{}, err
	}
	counted := b.sink
	if b.dut.baseline != nil {
		counted = b.dut.baseline
	}
	type snap struct {
		t    time.Time
		sent uint64
		recv count
		cpu  cpuTimes
		prog progSample
	}
	take := func() (s snap, err error) {
		if b.cfg.ProgStats {
			if s.prog, err = b.progStats(); err != nil {
				return s, err
			}
		}
		if s.cpu, err = readCPUTimes(); err != nil {
			return s, err
		}
		if s.recv, err = counted.read(); err != nil {
			return s, err
		}
		if s.sent, err = g.sent(); err != nil {
			return s, err
		}
		s.t = time.Now()
		return s, nil
	}
	lfp0, err := b.dut.lfpStatus()
	if err != nil {
		return Round{}, fmt.Errorf("linuxfp counters: %w", err)
	}
	s0, err := take()
	if err != nil {
		return Round{}, err
	}
	if err := harness.SleepCtx(b.ctx, d); err != nil {
		return Round{}, err
	}
	s1, err := take()
	if err != nil {
		return Round{}, err
	}
	lfp1, err := b.dut.lfpStatus()
	if err != nil {
		return Round{}, fmt.Errorf("linuxfp counters: %w", err)
	}
	sec := s1.t.Sub(s0.t).Seconds()
	rd := Round{
		Seconds:  sec,
		Offered:  s1.sent - s0.sent,
		Received: s1.recv.Packets - s0.recv.Packets,
		FastPath: fastPathDelta(lfp0, lfp1),
		CPU:      s1.cpu.since(s0.cpu),
	}
	if b.cfg.ProgStats {
		rd.Programs = s1.prog.since(s0.prog)
	}
	rd.OfferedMpps = float64(rd.Offered) / sec / 1e6
	rd.Mpps = float64(rd.Received) / sec / 1e6
	return rd, nil
}
