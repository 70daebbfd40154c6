package harness

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/packet"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Generator sends UDP frames out of gen's eth0 (to the routed prefixes, or to the sink across a
// bridge): an XDP program run with BPF_PROG_RUN in live-frame mode, so the frames leave through
// the ordinary XDP redirect path at several Mpps per core, with no socket and no skb on the
// sending side.
type Generator struct {
	tb     *testbed.Testbed
	flow   Flow
	objs   generatorObjects
	parked link.Link
	frame  []byte
	size   int // frame size including FCS
}

const (
	FCSLen = 4
	// Frames per BPF_PROG_RUN batch (the kernel's default and its page-pool size per run).
	GenBatch = 64
	// How long one BPF_PROG_RUN call lasts at full speed: short enough to stop promptly, long
	// enough that the per-call setup (page pool, first touch of its pages) is noise.
	genSlice = 20 * time.Millisecond
	// At a fixed rate, frames go out in bursts this far apart.
	PacedBurst = 5 * time.Millisecond
	// A down veth pair in gen that holds the generator program (see newGenerator); the IPv6
	// generator, which may be loaded beside the IPv4 one, has its own.
	ParkDev, parkPeer   = "lfpgen0", "lfpgen1"
	ParkDev6, parkPeer6 = "lfpgen2", "lfpgen3"
)

// Flow is what the generator sends: UDP from srcIP to dstIP, port 1024 to 9, in frames from
// src to dst (MACs), redirected to ifindex. With prefixes > 0 the destination cycles through
// 198.19.0..prefixes-1.1..254 (dstIP must then be 198.19.0.0); with list, through the list
// given to setDsts (dstIP must then be 0.0.0.0); with neither it is always dstIP. IPv6 addresses
// make IPv6 frames: prefixes cycle through 2001:2:0:f100..f1NN::1..254 for prefixes 0..NN (dstIP 2001:2:0:f100::),
// a list needs dstIP ::.
type Flow struct {
	Src, Dst     net.HardwareAddr
	SrcIP, DstIP netip.Addr
	Prefixes     int
	List         bool
	Ifindex      int
}

// GenMaxDsts is GEN_MAX_DSTS: the longest destination list.
const GenMaxDsts = 65536

// IPv6 is the flow's family: its addresses are IPv6 ones.
func (f Flow) IPv6() bool { return f.DstIP.Is6() }

// check says what is wrong with f, if anything.
func (f Flow) check() error {
	if f.SrcIP.Is6() != f.DstIP.Is6() || !f.SrcIP.IsValid() {
		return fmt.Errorf("flow %s -> %s: want two addresses of one family", f.SrcIP, f.DstIP)
	}
	if f.Prefixes < 0 || f.Prefixes > 256 {
		return fmt.Errorf("%d routed prefixes: the generator cycles through at most 256", f.Prefixes)
	}
	var want netip.Addr
	switch {
	case f.List && f.IPv6():
		want = netip.IPv6Unspecified()
	case f.List:
		want = netip.IPv4Unspecified()
	case f.Prefixes > 0 && f.IPv6():
		want = testbed.Prefix6(0, 0)
	case f.Prefixes > 0:
		want = testbed.Prefix4(0, 0)
	default:
		return nil
	}
	if f.DstIP != want {
		return fmt.Errorf("flow to %s: with a list or routed prefixes the template's destination must be %s", f.DstIP, want)
	}
	return nil
}

// MinFrame is the smallest frame (FCS included) of a flow of the family: 64 bytes for IPv4,
// 66 for IPv6, whose Ethernet, IPv6 and UDP headers alone are 62.
func MinFrame(ipv6 bool) int {
	if ipv6 {
		return 14 + 40 + 8 + FCSLen
	}
	return 64
}

// NewGenerator loads the generator for tb and parks it on a down veth pair of its own in gen.
//
// Parking is what makes short runs possible. A test run with repeat > 1 puts its program into
// the kernel's XDP dispatcher for the duration of the run (bpf_prog_change_xdp) and takes it out
// again; each change rewrites the dispatcher and waits for an RCU grace period: ~20 ms of sleep
// per BPF_PROG_RUN call on this machine, which caps a generator at ~40 calls/s. A program that
// is attached in driver mode somewhere stays in the dispatcher, and the test run changes nothing.
func NewGenerator(tb *testbed.Testbed, f Flow) (*Generator, error) {
	g, err := newGeneratorProgram(f)
	if err != nil {
		return nil, err
	}
	g.tb = tb
	park, peer := ParkDev, parkPeer
	if f.IPv6() {
		park, peer = ParkDev6, parkPeer6
	}
	if _, err := tb.Gen.Run("ip", "link", "add", park, "type", "veth", "peer", "name", peer); err != nil {
		g.objs.Close()
		return nil, fmt.Errorf("create the generator's parking veth: %w", err)
	}
	if g.parked, err = AttachXDP(tb.Gen, park, g.objs.BenchGen); err != nil {
		g.objs.Close()
		return nil, fmt.Errorf("park the generator: %w", err)
	}
	return g, nil
}

// newGeneratorProgram loads a generator of f's frames.
func newGeneratorProgram(f Flow) (*Generator, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	spec, err := loadGenerator()
	if err != nil {
		return nil, err
	}
	for name, v := range map[string]any{
		generatorVarCfgPrefixes: uint32(f.Prefixes),
		generatorVarCfgIfindex:  uint32(f.Ifindex),
		generatorVarCfgList:     BoolU32(f.List),
		generatorVarCfgIpv6:     BoolU32(f.IPv6()),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	// The list of the other family, or both when there is none, is unused: no need for 256 KiB
	// (1.5 MiB for IPv6).
	if !f.List || f.IPv6() {
		spec.Maps[generatorMapGenDsts].MaxEntries = 1
	}
	if !f.List || !f.IPv6() {
		spec.Maps[generatorMapGenDsts6].MaxEntries = 1
	}
	g := &Generator{flow: f}
	if err := spec.LoadAndAssign(&g.objs, nil); err != nil {
		return nil, fmt.Errorf("load generator: %w", err)
	}
	return g, nil
}

func (g *Generator) Close() error {
	var err error
	if g.parked != nil {
		err = g.parked.Close()
	}
	g.objs.Close()
	return err
}

// SetSize makes the generator send frames of size bytes (RFC 2544: including the 4-byte FCS,
// which a veth does not carry). Only between runs.
func (g *Generator) SetSize(size int) error {
	if size == g.size {
		return nil
	}
	if lo := MinFrame(g.flow.IPv6()); size < lo || size-FCSLen > 3000 {
		return fmt.Errorf("frame size %d: want %d to 3004 bytes", size, lo)
	}
	frame := packet.Spec{
		SrcMAC: g.flow.Src, DstMAC: g.flow.Dst,
		Src: g.flow.SrcIP, Dst: g.flow.DstIP,
		SrcPort: 1024, DstPort: 9,
		Size: size - FCSLen,
	}.Bytes()
	var csum uint16
	if g.flow.IPv6() {
		// IPv6 needs the UDP checksum, which covers the destination: the program updates it
		// per frame from the template's (bytes 60-61).
		csum = binary.LittleEndian.Uint16(frame[60:62])
	} else {
		// With routed prefixes the destination changes per frame and the UDP checksum covers
		// it; 0 means "none" in IPv4 (used for every flow alike), and neither Linux's
		// forwarding or bridging nor the sink looks at it.
		frame[40], frame[41] = 0, 0
		csum = binary.LittleEndian.Uint16(frame[24:26])
	}
	var tmpl [64]byte
	copy(tmpl[:], frame)
	if err := g.objs.Tmpl.Set(tmpl); err != nil {
		return fmt.Errorf("set generator template: %w", err)
	}
	if err := g.objs.TmplCsumAcc.Set(uint32(^csum)); err != nil {
		return fmt.Errorf("set generator template: %w", err)
	}
	g.frame, g.size = frame, size
	return nil
}

// SetDsts gives a list-mode generator the destinations to cycle through, in order. Only between
// runs.
func (g *Generator) SetDsts(dsts []netip.Addr) error {
	if !g.flow.List {
		return errors.New("the generator was not loaded in list mode")
	}
	if len(dsts) == 0 || len(dsts) > GenMaxDsts {
		return fmt.Errorf("%d destinations: want 1 to %d", len(dsts), GenMaxDsts)
	}
	keys := make([]uint32, len(dsts))
	for i := range keys {
		keys[i] = uint32(i)
	}
	var err error
	if g.flow.IPv6() {
		vals := make([]generatorGenDst6, len(dsts))
		for i, a := range dsts {
			if !a.Is6() || a.Is4In6() {
				return fmt.Errorf("destination %s: not IPv6 (the generator sends IPv6)", a)
			}
			vals[i] = genDst6(a)
		}
		_, err = g.objs.GenDsts6.BatchUpdate(keys, vals, nil)
	} else {
		vals := make([]uint32, len(dsts))
		for i, a := range dsts {
			if !a.Is4() {
				return fmt.Errorf("destination %s: not IPv4 (the generator sends IPv4)", a)
			}
			b := a.As4()
			vals[i] = binary.NativeEndian.Uint32(b[:]) // network order in memory
		}
		_, err = g.objs.GenDsts.BatchUpdate(keys, vals, nil)
	}
	if err != nil {
		return fmt.Errorf("write the generator's destinations: %w", err)
	}
	if err := g.objs.DstCount.Set(uint32(len(dsts))); err != nil {
		return fmt.Errorf("write the generator's destination count: %w", err)
	}
	return nil
}

// genDst6 is a as the IPv6 list holds it (struct gen_dst6): in network order in memory, cut at
// the frame's alignment, with the sum of its 16-bit words as the program's checksum update
// adds them (loaded in memory order).
func genDst6(a netip.Addr) generatorGenDst6 {
	b := a.As16()
	var sum uint32
	for i := 0; i < 16; i += 2 {
		sum += uint32(binary.NativeEndian.Uint16(b[i:]))
	}
	return generatorGenDst6{
		First: binary.NativeEndian.Uint16(b[0:]),
		Mid:   binary.NativeEndian.Uint64(b[2:]),
		Hi:    binary.NativeEndian.Uint32(b[10:]),
		Last:  binary.NativeEndian.Uint16(b[14:]),
		Sum:   sum,
	}
}

// Sent is the number of frames the program has generated so far, on all CPUs.
func (g *Generator) Sent() (uint64, error) {
	var per []generatorGenState
	if err := g.objs.GenStates.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read generator counters: %w", err)
	}
	var n uint64
	for _, s := range per {
		n += s.Packets
	}
	return n, nil
}

// Start runs the generator on each of cpus until the returned stop is called. rate is the total
// offered load in frames/s, 0 for as fast as the pipeline takes them.
func (g *Generator) Start(ctx context.Context, cpus []int, rate float64) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make([]error, len(cpus))
	for i, cpu := range cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = g.run(ctx, cpu, rate/float64(len(cpus))); errs[i] != nil {
				cancel()
			}
		}()
	}
	return func() error {
		cancel()
		wg.Wait()
		return errors.Join(errs...)
	}
}

// run generates on one CPU from a thread inside gen's netns: the test run's redirect resolves the
// ifindex in the netns of the thread that runs it, and the DUT's softirq work then happens on
// that same CPU (veth schedules the peer's NAPI locally), so one generator core drives one
// pipeline.
func (g *Generator) run(ctx context.Context, cpu int, rate float64) error {
	return g.tb.Gen.Do(func() error { return OnCPU(cpu, func() error { return g.runOn(ctx, rate) }) })
}

// runOn generates on the calling thread, pinned.
func (g *Generator) runOn(ctx context.Context, rate float64) error {
	opts := &ebpf.RunOptions{
		Data:      g.frame,
		BatchSize: GenBatch,
		Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
	}
	if rate > 0 {
		return g.paced(ctx, opts, rate)
	}
	chunk := uint32(16384)
	for ctx.Err() == nil {
		opts.Repeat = chunk
		t := time.Now()
		if _, err := g.objs.BenchGen.Run(opts); err != nil {
			return fmt.Errorf("run generator: %w", err)
		}
		// Aim each call at genSlice whatever the rate of the mode under test.
		if el := time.Since(t); el > 0 {
			next := float64(chunk) * float64(genSlice) / float64(el)
			chunk = uint32(min(max(next, 1024), 1<<22))
		}
	}
	return nil
}

// paced offers rate frames/s in bursts of pacedBurst's worth. A burst goes through the pipeline
// batch by batch (each batch's softirq work runs before the next batch is generated), so a rate
// the DUT sustains on average is not lost to queue overflows.
func (g *Generator) paced(ctx context.Context, opts *ebpf.RunOptions, rate float64) error {
	burst := uint64(max(rate*PacedBurst.Seconds(), GenBatch))
	start := time.Now()
	var done uint64
	for ctx.Err() == nil {
		due := uint64(rate * time.Since(start).Seconds())
		if due < done+burst {
			time.Sleep(time.Duration(float64(done+burst-due) / rate * float64(time.Second)))
			continue
		}
		// Behind (a sleep overslept): catch up in a bigger burst, so the average holds.
		n := min(due-done, 10*burst)
		opts.Repeat = uint32(n)
		if _, err := g.objs.BenchGen.Run(opts); err != nil {
			return fmt.Errorf("run generator: %w", err)
		}
		done += n
	}
	return nil
}
