package compose

// The composition benchmark's eBPF object, generated with clang (make generate) and committed.
//go:generate go tool bpf2go -tags linux -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I../../../bpf/include" -type compose_key -type compose_lpm_key -type compose_entry -type lfp_counter compose ../../../bpf/bench/compose.c

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/dataplane"
)

// Composition is how bench compose puts its chain of modules together (bpf/bench/compose.c).
type Composition string

const (
	// Inline is linuxfp's composition: the modules inlined one after the other in one
	// program, their number a frozen .rodata constant the verifier prunes by.
	Inline Composition = "inline"
	// Tail is one program per module in a prog array, each tail-calling the next slot:
	// a constant the kernel patches into a direct jump.
	Tail Composition = "tail"
	// TailMap is the same chain with the next slot read from a map (a chain that can be
	// rearranged at run time): an indirect jump per tail call.
	TailMap Composition = "tail-map"
)

// Compositions lists the compositions in report order.
var Compositions = []Composition{Inline, Tail, TailMap}

// ParseComposition checks a composition's name.
func ParseComposition(s string) (Composition, error) {
	return harness.ParseName(Compositions, "composition", s)
}

// MaxModules is COMPOSE_MAX: the longest chain.
const MaxModules = 16

// Actions of a module's table entry (COMPOSE_NEXT, COMPOSE_DROP).
const (
	composeNext uint32 = 0
	composeDrop uint32 = 1
)

// XDP verdicts.
const (
	xdpVerdictDrop     = 1
	xdpVerdictPass     = 2
	xdpVerdictRedirect = 4
)

// composer is every composition of the chain, loaded, sharing one set of tables and counters:
// the inline program once per chain length (its length is frozen in it), and per tail-call
// composition the 16 module programs with a prog array of its own. Each twice: as forwarded
// with, and for BPF_PROG_TEST_RUN (cfg_test_run: the TTL left alone).
type composer struct {
	lpm    bool
	shared map[string]*ebpf.Map // every map but the prog array and .rodata
	inline map[inlineKey]*ebpf.Program
	tails  map[tailKey]*tailChain
}

type inlineKey struct {
	n       int
	testRun bool
}

type tailKey struct {
	comp    Composition
	testRun bool
}

// tailChain is one tail-call composition: module i's program is progs[i]; chain holds the
// programs of modules 1..n-1 (progs[0] is the one run).
type tailChain struct {
	chain *ebpf.Map
	progs []*ebpf.Program
	n     int
}

// newComposer loads comps for the chain lengths in modules; lpm: the modules look up the LPM
// trie instead of the hash.
func newComposer(comps []Composition, modules []int, lpm bool) (c *composer, err error) {
	spec, err := loadCompose()
	if err != nil {
		return nil, err
	}
	c = &composer{lpm: lpm, shared: map[string]*ebpf.Map{}, inline: map[inlineKey]*ebpf.Program{}, tails: map[tailKey]*tailChain{}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for name, ms := range spec.Maps {
		if strings.HasPrefix(name, ".") || name == composeMapComposeChain {
			continue
		}
		m, err := ebpf.NewMap(ms)
		if err != nil {
			return nil, fmt.Errorf("create map %s: %w", name, err)
		}
		c.shared[name] = m
	}
	// compose_next: module i goes on to slot i + 1 (an empty slot ends the chain).
	for i := range uint32(MaxModules) {
		if err := c.shared[composeMapComposeNext].Put(i, i+1); err != nil {
			return nil, fmt.Errorf("fill compose_next: %w", err)
		}
	}
	// BPF_PROG_TEST_RUN without a context runs a program as received on the loopback device.
	if err := c.addIngress(1); err != nil {
		return nil, err
	}
	for _, testRun := range []bool{false, true} {
		for _, comp := range comps {
			if err := c.loadComposition(comp, modules, testRun); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

func (c *composer) loadComposition(comp Composition, modules []int, testRun bool) error {
	vars := map[string]uint32{composeVarCfgLpm: harness.BoolU32(c.lpm), composeVarCfgTestRun: harness.BoolU32(testRun)}
	if comp == Inline {
		for _, n := range modules {
			vars[composeVarCfgModules] = uint32(n)
			coll, err := c.load(vars, nil, composeProgComposeInline)
			if err != nil {
				return fmt.Errorf("load the inline chain of %d modules: %w", n, err)
			}
			c.inline[inlineKey{n, testRun}] = coll.DetachProgram(composeProgComposeInline)
			coll.Close()
		}
		return nil
	}
	spec, err := loadCompose()
	if err != nil {
		return err
	}
	t := &tailChain{}
	if t.chain, err = ebpf.NewMap(spec.Maps[composeMapComposeChain]); err != nil {
		return fmt.Errorf("create the %s prog array: %w", comp, err)
	}
	c.tails[tailKey{comp, testRun}] = t
	names := make([]string, MaxModules)
	for i := range names {
		names[i] = fmt.Sprintf("compose_tail%d", i)
	}
	vars[composeVarCfgNextFromMap] = harness.BoolU32(comp == TailMap)
	coll, err := c.load(vars, t.chain, names...)
	if err != nil {
		return fmt.Errorf("load the %s chain: %w", comp, err)
	}
	for _, name := range names {
		t.progs = append(t.progs, coll.DetachProgram(name))
	}
	coll.Close()
	return nil
}

// load loads the programs named progs with the constants in vars, the shared maps, and chain as
// the prog array (nil: one of its own, for programs that make no tail call).
func (c *composer) load(vars map[string]uint32, chain *ebpf.Map, progs ...string) (*ebpf.Collection, error) {
	spec, err := loadCompose()
	if err != nil {
		return nil, err
	}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	for name := range spec.Programs {
		if !slices.Contains(progs, name) {
			delete(spec.Programs, name)
		}
	}
	repl := maps.Clone(c.shared)
	if chain != nil {
		repl[composeMapComposeChain] = chain
	}
	return ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
}

func (c *composer) Close() error {
	var errs []error
	for _, p := range c.inline {
		errs = append(errs, p.Close())
	}
	for _, t := range c.tails {
		for _, p := range t.progs {
			if p != nil {
				errs = append(errs, p.Close())
			}
		}
		if t.chain != nil {
			errs = append(errs, t.chain.Close())
		}
	}
	for _, m := range c.shared {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// programs are the programs of comp's chain of n modules: for a tail-call chain, the n module
// programs; testRun: the variant for BPF_PROG_TEST_RUN.
func (c *composer) programs(comp Composition, n int, testRun bool) ([]*ebpf.Program, error) {
	if n < 1 || n > MaxModules {
		return nil, fmt.Errorf("%d modules: want 1 to %d", n, MaxModules)
	}
	if comp == Inline {
		p := c.inline[inlineKey{n, testRun}]
		if p == nil {
			return nil, fmt.Errorf("the inline chain of %d modules was not loaded", n)
		}
		return []*ebpf.Program{p}, nil
	}
	t := c.tails[tailKey{comp, testRun}]
	if t == nil {
		return nil, fmt.Errorf("composition %q was not loaded", comp)
	}
	return t.progs[:n], nil
}

// program is the program to run for comp's chain of n modules (testRun: the variant for
// BPF_PROG_TEST_RUN). A tail-call chain is set to n modules first (its prog array refilled), so
// only one length of it can be in use at a time.
func (c *composer) program(comp Composition, n int, testRun bool) (*ebpf.Program, error) {
	progs, err := c.programs(comp, n, testRun)
	if err != nil || comp == Inline {
		return progs[0], err
	}
	t := c.tails[tailKey{comp, testRun}]
	if t.n != n {
		for i := 1; i < MaxModules; i++ {
			var err error
			if i < n {
				err = t.chain.Put(uint32(i), t.progs[i])
			} else if err = t.chain.Delete(uint32(i)); errors.Is(err, ebpf.ErrKeyNotExist) {
				err = nil
			}
			if err != nil {
				return nil, fmt.Errorf("set the %s chain to %d modules: %w", comp, n, err)
			}
		}
		t.n = n
	}
	return t.progs[0], nil
}

// composeRoute is a table entry: what module `module` does with packets to pfx (a /24).
type composeRoute struct {
	module   int
	pfx      netip.Prefix
	drop     bool
	ifindex  int // 0: leave the egress as earlier modules chose it
	dst, src net.HardwareAddr
}

// addRoute puts r in both tables (the hash of the destination's /24 and the LPM trie), so
// either lookup finds the same entries.
func (c *composer) addRoute(r composeRoute) error {
	if !r.pfx.Addr().Is4() || r.pfx.Bits() != 24 || r.pfx.Masked() != r.pfx {
		return fmt.Errorf("route %s: want an IPv4 /24", r.pfx)
	}
	e := composeComposeEntry{Action: composeNext, Ifindex: uint32(r.ifindex)}
	if r.drop {
		e.Action = composeDrop
	}
	copy(e.Dmac[:], r.dst)
	copy(e.Smac[:], r.src)
	a := r.pfx.Addr().As4()
	addr := nativeU32(a)
	if err := c.shared[composeMapComposeHash].Put(composeComposeKey{Module: uint32(r.module), Net: addr}, e); err != nil {
		return fmt.Errorf("add %s to module %d's hash: %w", r.pfx, r.module, err)
	}
	k := composeComposeLpmKey{Prefixlen: 32 + uint32(r.pfx.Bits()), Module: uint32(r.module), Addr: addr}
	if err := c.shared[composeMapComposeLpm].Put(k, e); err != nil {
		return fmt.Errorf("add %s to module %d's trie: %w", r.pfx, r.module, err)
	}
	return nil
}

// addTx makes ifindex an egress the transmit step may redirect to (linuxfp's lfp_tx_devs). A
// devmap resolves the ifindex in the netns of the thread that updates it.
func (c *composer) addTx(ifindex int) error {
	err := c.shared[composeMapLfpTxDevs].Put(uint32(ifindex), composeBpfDevmapVal{Ifindex: uint32(ifindex)})
	if err != nil {
		return fmt.Errorf("add ifindex %d to lfp_tx_devs: %w", ifindex, err)
	}
	return nil
}

// addIngress gives ifindex the interface data linuxfp's counting needs (lfp_ifs, see
// bpf/lib/iface.h): the chain's packets received there count in slot 0.
func (c *composer) addIngress(ifindex int) error {
	if err := c.shared[composeMapLfpIfs].Put(uint32(ifindex), composeLfpIf{Flags: 1 /* LFP_IF_VALID */}); err != nil {
		return fmt.Errorf("add ifindex %d to lfp_ifs: %w", ifindex, err)
	}
	return nil
}

// nativeU32 is the 4 bytes as the BPF program reads them from the packet (network order in
// memory).
func nativeU32(b [4]byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// lfpMaxSlots is LFP_MAX_SLOTS (bpf/include/linuxfp_types.h): the rows of lfp_stats.
const lfpMaxSlots = 256

// composeCounters is what the chain counted: per module the packets it matched, and per
// reason (linuxfp's lfp_stats, interface slot 0) the packets forwarded, dropped or handed to
// Linux.
type composeCounters struct {
	Modules []uint64          `json:"modules"`
	Reasons map[string]uint64 `json:"reasons,omitempty"`
}

func (c *composer) counters() (composeCounters, error) {
	var out composeCounters
	for i := range uint32(MaxModules) {
		var per []composeLfpCounter
		if err := c.shared[composeMapComposeModules].Lookup(i, &per); err != nil {
			return out, fmt.Errorf("read module %d's counter: %w", i, err)
		}
		var n uint64
		for _, p := range per {
			n += p.Packets
		}
		out.Modules = append(out.Modules, n)
	}
	// Slot 0's row: the first LFP_REASON_MAX entries (the map has LFP_MAX_SLOTS rows).
	stats := c.shared[composeMapLfpStats]
	for r := range stats.MaxEntries() / lfpMaxSlots {
		var per []composeLfpCounter
		if err := stats.Lookup(r, &per); err != nil {
			return out, fmt.Errorf("read lfp_stats: %w", err)
		}
		var n uint64
		for _, p := range per {
			n += p.Packets
		}
		if n > 0 {
			if out.Reasons == nil {
				out.Reasons = map[string]uint64{}
			}
			out.Reasons[dataplane.Reason(r).String()] = n
		}
	}
	return out, nil
}

// since is what was counted after c0.
func (c composeCounters) since(c0 composeCounters) composeCounters {
	out := composeCounters{Modules: slices.Clone(c.Modules)}
	for i := range out.Modules {
		if i < len(c0.Modules) {
			out.Modules[i] -= c0.Modules[i]
		}
	}
	for k, v := range c.Reasons {
		if d := v - c0.Reasons[k]; d > 0 {
			if out.Reasons == nil {
				out.Reasons = map[string]uint64{}
			}
			out.Reasons[k] = d
		}
	}
	return out
}
