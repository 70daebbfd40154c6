package harness

// The pipeline gen -> DUT -> sink that the forwarding benchmarks (router, bridge, gateway,
// modules; compose for its forwarding measurement) share: its namespaces (a Topology says what
// differs), the XDP generator (generator.go) and sink (sink.go), the DUT's modes (dut.go), and the
// throughput, latency (latency.go) and CPU (cpu.go) tests.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// PipelineConfig configures a forwarding benchmark (bench router, bench bridge): Linux, linuxfp and a
// hand-written ceiling forward from gen to sink through the DUT alternately, round by round.
type PipelineConfig struct {
	Run         // Duration: measured time per round, mode and size
	Sizes []int // frame sizes in bytes, FCS included (RFC 2544)
	Cores []int // generator cores
	// Families whose traffic the throughput test measures (default IPv4 only); IPv6 at Sizes6
	// (default 64: measured at MinFrame, 66 bytes). Only topologies with a Flow6 have IPv6.
	Families []Family
	Sizes6   []int

	Throughput bool // the throughput test (received rate per mode, frame size and cores)

	Latency    bool // TCP request/response latency, Linux vs linuxfp
	Sessions   int  // parallel request/response sessions
	KeepTxCsum bool // turn tx checksum offload on at gen and sink for the latency test (see setTxCsum)

	CPU         bool          // CPU cost per packet at a fixed offered load
	CPURate     float64       // offered load in frames/s; 0: half of Linux's 64-byte rate on one core
	CPUDuration time.Duration // measured time per CPU round (default 2x Duration: ticks are coarse)

	ProgStats bool // time the BPF programs (BPF_ENABLE_STATS) and report ns per run
}

func (c *PipelineConfig) Defaults() error {
	if len(c.Sizes) == 0 {
		c.Sizes = []int{64, 128, 256, 512, 1024, 1500}
	}
	if len(c.Cores) == 0 {
		c.Cores = []int{1, 2}
	}
	if len(c.Families) == 0 {
		c.Families = []Family{IPv4}
	}
	if len(c.Sizes6) == 0 {
		c.Sizes6 = []int{64}
	}
	err := c.Run.Defaults(RunDefaults{Name: "forwarding", Modes: Modes, Default: DefaultModes,
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
	cpus, err := UsableCPUs()
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
	for _, s := range c.Sizes6 {
		if s < 64 || s > 1518 {
			return fmt.Errorf("--ipv6-sizes %d: want 64 to 1518 bytes (Ethernet frames with FCS; IPv6 ones are at least 66)", s)
		}
	}
	return nil
}

// cells are the throughput test's cells: every size of every family measured, with permitted
// (see Cell).
func (b *Pipeline) cells(permitted float64) []Cell {
	var out []Cell
	for _, f := range Families {
		if !slices.Contains(b.Cfg.Families, f) {
			continue
		}
		sizes := b.Cfg.Sizes
		if f == IPv6 {
			sizes = familySizes(IPv6, b.Cfg.Sizes6)
		}
		for _, size := range sizes {
			c := Cell{Size: size, Res: b.Res, Permitted: permitted, Family: f}
			if f == IPv6 {
				c.What = []any{"family", f}
			}
			out = append(out, c)
		}
	}
	return out
}

// Cells are the throughput test's cells (see cells) for a topology's own Throughput test.
func (b *Pipeline) Cells(permitted float64) []Cell { return b.cells(permitted) }

// Topology is what differs between the benchmarks built on the gen -> dut -> sink pipeline.
type Topology struct {
	Name     string // "router", "bridge": the result's topology
	Prefixes int    // routed prefixes, for the report
	// Module is the fast-path module the topology exercises, in a Table VII ("": none).
	Module string
	// Describe writes the report's first lines, what the topology is (nil: none).
	Describe func(w io.Writer, s *PipelineSettings)
	// Build builds the namespaces (testbed.New, testbed.NewBridge).
	Build func(testbed.Options) (*testbed.Testbed, error)
	// Flow is what the generator sends; Flow6 its IPv6 traffic (nil: the topology has none).
	Flow  func(*testbed.Testbed) Flow
	Flow6 func(*testbed.Testbed) Flow
	// L2: the ceiling switches (redirects frames as they are) instead of routing (MAC rewrite).
	L2 bool
	// Resolve: make the hosts Resolve their neighbours by pinging once the topology is built.
	Resolve bool
	// StartLinuxfp starts `linuxfp run` with args in the DUT and returns once its data plane is
	// built.
	StartLinuxfp func(tb *testbed.Testbed, bin string, args ...string) (*testbed.Linuxfp, error)
	// Setup runs once per topology built, before any measurement (nil: nothing to do).
	Setup func(*Pipeline) error
	// Prepare runs before every measurement, in the mode measured (nil: nothing to do). A
	// problem it returns is no error: it is logged and flagged in the round (Round.FDBNotLearned).
	Prepare func(*Pipeline) (problem string, err error)
	// Throughput is the Throughput test for a generator of cores CPUs (nil: every mode and
	// frame size, pipeline.Throughput; the gateway measures each of its rulesets).
	Throughput func(b *Pipeline, cores int) error
}

// RunPipeline runs a benchmark on topology t. It returns what it measured even when ctx is cancelled
// half-way (with ctx's error); every namespace it created is gone when it returns.
func RunPipeline(ctx context.Context, cfg PipelineConfig, t *Topology) (*PipelineResult, error) {
	if err := cfg.Defaults(); err != nil {
		return nil, err
	}
	if slices.Contains(cfg.Families, IPv6) && t.Flow6 == nil {
		return nil, fmt.Errorf("--families ipv6: the %s benchmark has no IPv6 traffic (bench router has)", t.Name)
	}
	res := NewPipelineResult(cfg, t)
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
		err := WithTestbed(t, cores, func(tb *testbed.Testbed) error {
			b, err := NewPipeline(ctx, cfg, t, tb, res)
			if err != nil {
				return err
			}
			defer b.Close()
			if t.Setup != nil {
				if err := t.Setup(b); err != nil {
					return err
				}
			}
			if cfg.Throughput {
				measure := (*Pipeline).throughput
				if t.Throughput != nil {
					measure = t.Throughput
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
			res.Finish(time.Since(start))
			return res, err
		}
	}
	res.Finish(time.Since(start))
	return res, nil
}

// WithTestbed builds the topology for a generator of cores CPUs and always removes it.
func WithTestbed(t *Topology, cores int, fn func(*testbed.Testbed) error) (err error) {
	// One veth queue per generator core: veth picks the peer's queue by sending CPU, so each
	// core drives its own NAPI instance.
	// The hosts' stacks compute their checksums (as behind a physical NIC): see setTxCsum.
	tb, err := t.Build(testbed.Options{Queues: cores, TxChecksumOff: true})
	if err != nil {
		return fmt.Errorf("build testbed: %w", err)
	}
	defer func() {
		if cerr := tb.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove testbed: %w", cerr))
		}
	}()
	if t.Resolve {
		if err := tb.ResolveNeighbours(); err != nil {
			return fmt.Errorf("resolve neighbours: %w", err)
		}
	}
	return fn(tb)
}

// Pipeline is one topology with its sink and generator attached.
type Pipeline struct {
	Ctx  context.Context
	Cfg  PipelineConfig
	topo *Topology
	TB   *testbed.Testbed
	Res  *PipelineResult
	Sink *Sink
	Gen  *Generator
	Gen6 *Generator // IPv6 traffic's generator (only with IPv6 among Cfg.Families)
	gen  *Generator // the generator of what is measured now (Gen when nil)
	DUT  *DUT
	Log  *slog.Logger
}

func NewPipeline(ctx context.Context, cfg PipelineConfig, t *Topology, tb *testbed.Testbed, res *PipelineResult) (*Pipeline, error) {
	b := &Pipeline{Ctx: ctx, Cfg: cfg, topo: t, TB: tb, Res: res, Log: cfg.Log, DUT: &DUT{tb: tb, topo: t, bin: cfg.Binary}}
	var err error
	if b.Sink, err = AttachSink(tb.Sink, "eth0"); err != nil {
		return nil, err
	}
	if b.Gen, err = NewGenerator(tb, t.Flow(tb)); err != nil {
		b.Close()
		return nil, err
	}
	if slices.Contains(cfg.Families, IPv6) {
		if b.Gen6, err = NewGenerator(tb, t.Flow6(tb)); err != nil {
			b.Close()
			return nil, fmt.Errorf("the IPv6 generator: %w", err)
		}
	}
	return b, nil
}

// generator is the generator of what is measured now.
func (b *Pipeline) generator() *Generator {
	if b.gen != nil {
		return b.gen
	}
	return b.Gen
}

func (b *Pipeline) Close() {
	if err := b.DUT.leave(); err != nil {
		b.Log.Warn("leave DUT mode", "err", err)
	}
	if b.Gen != nil {
		b.Gen.Close()
	}
	if b.Gen6 != nil {
		b.Gen6.Close()
	}
	if b.Sink != nil {
		b.Sink.Close()
	}
}

// WithMode runs fn with the DUT in mode m, and leaves the mode whatever happens.
func (b *Pipeline) WithMode(m Mode, fn func() error) (err error) {
	if err := b.DUT.enter(m); err != nil {
		return err
	}
	if st, err := b.DUT.lfpStatus(); err == nil && st != nil && HookOf(st, "in0") == "" {
		it := statusOf(st, "in0")
		var notes []string
		if it != nil {
			notes = it.Notes
		}
		b.Log.Info("linuxfp installed no program on in0: Linux forwards in this mode", "notes", notes)
	}
	defer func() {
		if lerr := b.DUT.leave(); lerr != nil {
			err = errors.Join(err, lerr)
		}
	}()
	return fn()
}

// throughput measures every mode, family and size for a generator of cores CPUs.
func (b *Pipeline) throughput(cores int) error {
	return b.MeasureCells(cores, b.cells(0))
}

// Cell is one measurement per round and mode: a frame size, and what else the benchmark varies
// (the gateway's traffic).
type Cell struct {
	Size int
	Res  *PipelineResult // where its rounds go
	// Before runs right Before the cell is measured (nil: nothing to do): the gateway gives the
	// generator the cell's destinations.
	Before func() error
	// Permitted is the fraction of the offered frames that the DUT's rules let through to the
	// sink in modes linux and linuxfp (0: all of them; the ceiling evaluates no rules).
	Permitted float64
	What      []any  // for the log: what the cell is, besides its size
	Family    Family // the traffic's family ("": IPv4), sent by Pipeline.Gen6 for IPv6
}

// permittedIn is the fraction of the offered frames mode m should deliver to the sink (0: all).
func (c Cell) permittedIn(m Mode) float64 {
	if m.Ceiling() {
		return 0
	}
	return c.Permitted
}

// MeasureCells measures every mode and cell for a generator of cores CPUs: round after round,
// modes in rotated order, each mode entered once per round for all cells.
func (b *Pipeline) MeasureCells(cores int, cells []Cell) error {
	cpus, err := UsableCPUs()
	if err != nil {
		return err
	}
	cpus = cpus[:cores]
	err = EachRound(b.Cfg.Rounds, b.Cfg.Modes, func(r int, m Mode) error {
		return b.WithMode(m, func() error {
			for _, c := range cells {
				if c.Before != nil {
					if err := c.Before(); err != nil {
						return err
					}
				}
				b.gen = nil
				if c.Family == IPv6 {
					b.gen = b.Gen6
				}
				rd, err := b.MeasureFull(c.Size, cpus, c.permittedIn(m))
				b.gen = nil
				if err != nil {
					return fmt.Errorf("%s, %d cores, %d bytes%s: %w", m, cores, c.Size, familyNote(c.Family), err)
				}
				c.Res.AddFamilyRound(cmp.Or(c.Family, IPv4), cores, c.Size, m, rd)
				b.Log.Info("measured", append(slices.Clone(c.What), "round", r+1, "mode", m, "cores", cores, "size", c.Size,
					"mpps", fmt.Sprintf("%.3f", rd.Mpps), "offered_mpps", fmt.Sprintf("%.3f", rd.OfferedMpps))...)
				if fp := rd.FastPath; fp != nil && fp.NoProgram == "" && rd.Received > 0 && fp.FastPathed() < rd.Received*99/100 {
					b.Log.Warn("linuxfp fast-pathed less than 99% of what the sink received",
						"forwarded", fp.Forwarded, "bridged", fp.Bridged, "received", rd.Received, "passed", fp.Passed)
				}
			}
			return nil
		})
	})
	return err
}

// familyNote is ", ipv6" for IPv6 cells in errors, "" for IPv4 ones.
func familyNote(f Family) string {
	if f == IPv6 {
		return ", ipv6"
	}
	return ""
}

// Round is one measurement.
type Round struct {
	Seconds     float64   `json:"seconds"`
	Offered     uint64    `json:"offered"`  // frames the generator sent
	Received    uint64    `json:"received"` // frames the sink counted
	OfferedMpps float64   `json:"offered_mpps"`
	Mpps        float64   `json:"mpps"`
	FastPath    *FastPath `json:"linuxfp_in0,omitempty"` // linuxfp mode: what its program on in0 did
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

// LostBeforeSink: more than 1% of the frames that should have reached the sink did not.
func (rd *Round) LostBeforeSink() bool {
	return float64(rd.Received) < float64(rd.Offered)*rd.permittedFraction()*0.99
}

// escapeAttempts bounds how often measureFull repeats a window whose DUT work left the
// generator's CPUs.
const escapeAttempts = 3

// MeasureFull measures at full speed. At full speed the generator can only outrun the DUT when
// the DUT's NAPI work runs on another CPU than the generator: a veth NAPI instance stays on the
// CPU that scheduled it as long as it has work, and anything else that schedules it first (a
// frame sent by gen's own stack from another CPU) can pull the whole pipeline there. The
// generator then runs unthrottled and in0's ring overflows: frames are lost before the DUT, and
// the window measured a different machine (DUT and generator on separate CPUs). Such windows are
// kept in the result but measured again.
//
// permitted is the fraction of the offered frames the DUT's rules let through (0: all).
func (b *Pipeline) MeasureFull(size int, cpus []int, permitted float64) (Round, error) {
	var discarded []Round
	for {
		rd, err := b.measure(size, cpus, 0)
		rd.Permitted = permitted
		if err != nil || !rd.LostBeforeSink() || len(discarded)+1 >= escapeAttempts {
			rd.Discarded = discarded
			return rd, err
		}
		b.Log.Warn("frames lost before the DUT: its work left the generator's CPU; measuring again",
			"size", size, "offered", rd.Offered, "received", rd.Received, "fast_path", rd.FastPath)
		discarded = append(discarded, rd)
	}
}

// measure runs the generator with frames of size bytes on cpus, at rate frames/s (0: full
// speed), and counts what arrives at the sink over one window after cfg.Warmup.
func (b *Pipeline) measure(size int, cpus []int, rate float64) (Round, error) {
	if err := b.Ctx.Err(); err != nil {
		return Round{}, err
	}
	g := b.generator()
	if err := g.SetSize(size); err != nil {
		return Round{}, err
	}
	problem, err := b.prepare()
	if err != nil {
		return Round{}, err
	}
	stop := g.Start(b.Ctx, cpus, rate)
	d := b.Cfg.Duration
	if rate > 0 {
		d = b.Cfg.CPUDuration
	}
	rd, err := b.window(g, d)
	rd.FDBNotLearned = problem
	if serr := stop(); serr != nil {
		err = errors.Join(err, serr)
	}
	if err == nil {
		err = b.Ctx.Err()
	}
	return rd, err
}

// prepare runs the topology's preparation for a measurement (the bridge's learning).
func (b *Pipeline) prepare() (problem string, err error) {
	if b.topo.Prepare == nil {
		return "", nil
	}
	if problem, err = b.topo.Prepare(b); err != nil {
		return "", err
	}
	if problem != "" {
		b.Log.Warn("measuring anyway", "mode", b.DUT.mode, "problem", problem)
	}
	return problem, nil
}

func (b *Pipeline) window(g *Generator, d time.Duration) (Round, error) {
	if err := SleepCtx(b.Ctx, b.Cfg.Warmup); err != nil {
		return Round{}, err
	}
	counted := b.Sink
	if b.DUT.baseline != nil {
		counted = b.DUT.baseline
	}
	type snap struct {
		t    time.Time
		sent uint64
		recv Count
		cpu  cpuTimes
		prog progSample
	}
	take := func() (s snap, err error) {
		if b.Cfg.ProgStats {
			if s.prog, err = b.progStats(); err != nil {
				return s, err
			}
		}
		if s.cpu, err = readCPUTimes(); err != nil {
			return s, err
		}
		if s.recv, err = counted.Read(); err != nil {
			return s, err
		}
		if s.sent, err = g.Sent(); err != nil {
			return s, err
		}
		s.t = time.Now()
		return s, nil
	}
	lfp0, err := b.DUT.lfpStatus()
	if err != nil {
		return Round{}, fmt.Errorf("linuxfp counters: %w", err)
	}
	s0, err := take()
	if err != nil {
		return Round{}, err
	}
	if err := SleepCtx(b.Ctx, d); err != nil {
		return Round{}, err
	}
	s1, err := take()
	if err != nil {
		return Round{}, err
	}
	lfp1, err := b.DUT.lfpStatus()
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
	if b.Cfg.ProgStats {
		rd.Programs = s1.prog.since(s0.prog)
	}
	rd.OfferedMpps = float64(rd.Offered) / sec / 1e6
	rd.Mpps = float64(rd.Received) / sec / 1e6
	return rd, nil
}

// RoutedTopology is the virtual router's pipeline (testbed.New: the DUT routes 50 prefixes
// 198.19.N.0/24 from gen to the sink), its namespaces' names starting with prefix: the generator
// sends to the DUT's in0, destinations cycling through the routed prefixes, and linuxfp has
// started once it has programs on in0 and out0. The router, gateway and compose benchmarks run
// on it.
func RoutedTopology(name, prefix string) *Topology {
	return &Topology{
		Name:     name,
		Prefixes: 50,
		Build:    func(o testbed.Options) (*testbed.Testbed, error) { return testbed.New(prefix, o) },
		// The DUT must know its neighbours before its fast path can forward.
		Resolve: true,
		Flow: func(tb *testbed.Testbed) Flow {
			return Flow{Src: tb.GenMAC, Dst: tb.InMAC, SrcIP: tb.GenIP, DstIP: testbed.Prefix4(0, 0),
				Prefixes: tb.Prefixes, Ifindex: tb.GenIfindex}
		},
		// The same destinations in the routed IPv6 prefixes, 2001:2:0:f1NN::1..254.
		Flow6: func(tb *testbed.Testbed) Flow {
			return Flow{Src: tb.GenMAC, Dst: tb.InMAC, SrcIP: testbed.GenAddr6, DstIP: testbed.Prefix6(0, 0),
				Prefixes: tb.Prefixes, Ifindex: tb.GenIfindex}
		},
		StartLinuxfp: func(tb *testbed.Testbed, bin string, args ...string) (*testbed.Linuxfp, error) {
			return tb.StartLinuxfp(bin, args...)
		},
	}
}
