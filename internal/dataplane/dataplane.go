// Package dataplane loads, specialises, attaches and feeds linuxfp's eBPF programs.
//
// Every accelerated interface gets its own program, built from bpf/linuxfp.c with frozen .rodata
// constants (its MAC, which families it forwards, its counter slot), so the verifier removes what
// the interface does not use. All programs share one set of maps (STALE neighbours, egress devices, local
// addresses, counters): data changes update those maps in place; a change of an interface's
// specialisation loads a new program and swaps it in with a bpf_link update, which is atomic.
//
// Links are held by this process and never pinned: if the process dies the kernel detaches the
// programs and every packet goes to Linux again.
package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Hook is where an interface's program is attached.
type Hook string

const (
	HookXDP        Hook = "xdp"         // native (driver) XDP
	HookXDPGeneric Hook = "xdp-generic" // generic (skb) XDP, for drivers without native support
	HookTC         Hook = "tc"          // tcx ingress (the same modules built for skbs)
)

// XDP: the hook is one of the two XDP modes.
func (h Hook) XDP() bool { return h == HookXDP || h == HookXDPGeneric }

// ErrForeignProgram: another XDP program is attached to the interface, or to a device on top of
// it (a macvlan: the kernel then refuses XDP below it); linuxfp never replaces it.
var ErrForeignProgram = errors.New("another XDP program is attached to it or to a device on top of it")

// AttachError: the kernel refused to attach a verified program at Hook (native XDP below a
// macvlan that runs an XDP program, say). Another hook may take the same modules (see
// graph.Refused).
type AttachError struct {
	Hook Hook
	Name string
	Err  error
}

func (e *AttachError) Error() string {
	return fmt.Sprintf("attach %s to %s: %v", e.Hook, e.Name, e.Err)
}
func (e *AttachError) Unwrap() error { return e.Err }

// Spec is what one interface's program is specialised for. A different Spec means a new program
// or new interface data; two Specs compare with ==.
type Spec struct {
	Ifindex int
	Name    string
	MAC     MAC
	Hook    Hook
	Router4 bool
	Router6 bool
	// SkbSender: the ingress may receive skbs from a local stack (a veth).
	SkbSender bool
	// Bridge: the interface is a port of bridge L3Ifindex and runs the bridge module; MAC is
	// then the bridge's, and Router4/Router6 route frames sent to it (bridge -> router).
	Bridge    bool
	L3Ifindex int
	// TCAfterXDP (native or generic XDP): a tc program of the same modules runs after the XDP
	// one, for the packets XDP marks because only an skb can go where they go (a veth whose
	// peer takes no XDP frames, a vxlan device); XDP counts them as to_tc.
	TCAfterXDP bool
	// Conntrack4, Conntrack6: the conntrack module is built in for the family (netfilter
	// tracks its connections). Built out, the verifier has half the work; a program built
	// without it whose configuration says it must run hands the packet to Linux (reloading).
	Conntrack4 bool
	Conntrack6 bool
	// MarkUnsafe: packets may arrive with a mark set (a veth whose peer is in this namespace
	// carries skbs of this namespace's stack, marks included); the filter's rules were compiled
	// for mark 0 (compile.Program.HasMark). Data, not the program's kind.
	MarkUnsafe bool
	// VXLANRxRoute: a frame the program decapsulates (tc) is routed by it as its vxlan
	// device's own program would route it, not handed to the device's receive path first
	// (bpf/lib/vxlan.h, cfg_vxlan_rx_route; the graph decides where that is exact).
	VXLANRxRoute bool
}

// Modules lists the fast-path modules the program runs, in order.
func (s Spec) Modules() []string {
	var m []string
	if s.Bridge {
		m = append(m, "bridge")
	}
	if s.Conntrack4 || s.Conntrack6 {
		m = append(m, "conntrack")
	}
	if s.Router4 || s.Router6 {
		m = append(m, "router")
	}
	return m
}

// Installed describes a program attached to an interface.
type Installed struct {
	Spec      Spec
	Slot      int
	ProgramID ebpf.ProgramID
	// TCProgramID: the tc program after XDP, 0 for none (Spec.TCAfterXDP: attached on demand,
	// see companion.go).
	TCProgramID ebpf.ProgramID
	InstalledAt time.Time
}

type iface struct {
	Installed
	prog *ebpf.Program
	link link.Link
	// tcProg, tcLink: the tc program after XDP, if any; attaching: one is being loaded.
	tcProg    *ebpf.Program
	tcLink    link.Link
	attaching bool
}

// Dataplane owns the shared maps and the per-interface programs.
type Dataplane struct {
	mu     sync.Mutex
	spec   *ebpf.CollectionSpec // the XDP object
	tcSpec *ebpf.CollectionSpec // the same source built for tc
	maps   linuxfpMaps
	shared map[string]*ebpf.Map
	ifaces map[int]*iface
	// progs: verified programs by kind, shared by the interfaces of that kind (programs.go).
	progs    map[progKind]*cachedProg
	verified atomic.Uint64 // programs verified (programs.go)
	// btfCache: the kernel's BTF, parsed once for all program loads.
	btfCache *btf.Cache
	slots    []bool
	log      *slog.Logger
	// owned: every program id attached, per ifindex, until the interface is gone (Owns).
	owned map[int][]uint32

	closers []func()

	// The in-memory copies of what each module's maps hold (router.go, neigh.go, ...).
	routerMaps
	fibCacheMaps
	neighMaps
	bridgeMaps
	// fdbMoves: lfp_fdb_moves, mapped (mapFDBMoves) until Close.
	fdbMoves      []uint64
	unmapFDBMoves func()
	txMaps
	vxlanMaps
	fw filterState

	// failed: the families the gate holds (gate.go); gateWritten: the gate map has been written.
	failed      Families
	done        FenceSeq // the fence counts the data plane follows (gate.go)
	gateWritten bool
	fibEpoch    uint64 // the last lfp_gate.fib_epoch written
	fwCap       int    // filter rules (and leaves) per bank the maps hold now (filter_capacity.go)
	fwMax       int    // the most it may grow to: Options.FilterRules
	// mapsGen counts the times the maps were replaced (a program loaded with older ones must
	// not be attached).
	mapsGen uint64
}

// Options size the data plane.
type Options struct {
	// FilterRules is the most flat rules (and leaves) of the filter module the maps may grow
	// to (a ruleset beyond it sends its families' packets to Linux); 0: DefaultFilterRules.
	FilterRules int
}

// setCPURanges gives each named array a range for every possible CPU: the object declares one
// CPU's, and each CPU uses its own (the FIB cache, bpf/lib/fibcache.h; the conntrack cache,
// bpf/lib/ct.h).
func setCPURanges(specs []*ebpf.CollectionSpec, names ...string) error {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("size the per-CPU ranges: %w", err)
	}
	for _, cs := range specs {
		for _, n := range names {
			cs.Maps[n].MaxEntries *= uint32(cpus)
		}
	}
	return nil
}

// New creates the shared maps. Nothing is attached yet.
func New(log *slog.Logger, o Options) (*Dataplane, error) {
	spec, err := loadLinuxfp()
	if err != nil {
		return nil, err
	}
	tcSpec, err := loadLinuxfpTc()
	if err != nil {
		return nil, err
	}
	if o.FilterRules <= 0 {
		o.FilterRules = DefaultFilterRules
	}
	fwCap := min(initialFilterRules, o.FilterRules)
	setFilterCapacity([]*ebpf.CollectionSpec{spec, tcSpec}, fwCap)
	if err := setCPURanges([]*ebpf.CollectionSpec{spec, tcSpec}, linuxfpMapLfpFibCache, linuxfpMapLfpCtCache); err != nil {
		return nil, err
	}
	d := &Dataplane{
		spec:     spec,
		tcSpec:   tcSpec,
		ifaces:   map[int]*iface{},
		progs:    map[progKind]*cachedProg{},
		btfCache: btf.NewCache(),
		owned:    map[int][]uint32{},
		// A slot is a row of lfp_stats and an entry of lfp_tc_companions: LFP_MAX_SLOTS.
		slots:        make([]bool, spec.Maps[linuxfpMapLfpTcCompanions].MaxEntries),
		log:          log,
		routerMaps:   newRouterMaps(),
		fibCacheMaps: fibCacheMaps{split: map[linuxfpLfpFibKey]uint8{}},
		neighMaps:    newNeighMaps(),
		bridgeMaps:   newBridgeMaps(),
		txMaps:       newTxMaps(),
		vxlanMaps:    newVXLANMaps(),
		fwCap:        fwCap,
		fwMax:        o.FilterRules,
	}
	// Only the maps: programs are loaded per interface in Install.
	if err := spec.LoadAndAssign(&d.maps, nil); err != nil {
		return nil, fmt.Errorf("create maps: %w", err)
	}
	moves, unmap, err := mapFDBMoves(d.maps.LfpFdbMoves)
	if err != nil {
		d.maps.Close()
		return nil, err
	}
	d.fdbMoves, d.unmapFDBMoves = moves, unmap
	if err := d.bridgeMaps.mapSlots(d.maps.LfpFdbSlots); err != nil {
		d.unmapFDBMoves()
		d.maps.Close()
		return nil, err
	}
	// Every map of the object is shared by all programs (not .rodata: that is each program's
	// own). Listed from the generated struct, so a map added to the C code cannot be missed
	// (a program with a private copy of, say, a ring buffer would write where nobody reads).
	d.shared = map[string]*ebpf.Map{}
	mv := reflect.ValueOf(d.maps)
	for i := 0; i < mv.NumField(); i++ {
		if name := mv.Type().Field(i).Tag.Get("ebpf"); name != "" {
			d.shared[name] = mv.Field(i).Interface().(*ebpf.Map)
		}
	}
	return d, nil
}

// Close detaches every program and releases the maps.
func (d *Dataplane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, c := range d.closers {
		c()
	}
	for idx := range d.ifaces {
		errs = append(errs, d.removeLocked(idx))
	}
	d.closeProgramsLocked()
	errs = append(errs, d.maps.Close())
	d.unmapFDBMoves()
	d.fdbMoves = nil
	d.bridgeMaps.unmapSlots()
	return errors.Join(errs...)
}

// LoadProgram returns (without attaching) the program for spec, with spec.Ifindex's data
// (lfp_ifs) written for slot. Tests use it with BPF_PROG_TEST_RUN.
func (d *Dataplane) LoadProgram(s Spec, slot int) (*ebpf.Program, error) {
	if err := d.putIface(s, slot); err != nil {
		return nil, err
	}
	prog, _, _, err := d.loadProgram(s, false)
	return prog, err
}

// loadProgram returns s's program (the caller closes it); companion: the tc program that runs
// after s's XDP program. verified: the kernel verified it now (no interface of its kind had one).
func (d *Dataplane) loadProgram(s Spec, companion bool) (prog *ebpf.Program, verified bool, gen uint64, err error) {
	prog, verified, gen, err = d.program(keyOf(s, companion))
	if err != nil {
		return nil, verified, gen, fmt.Errorf("load program for %s: %w", s.Name, err)
	}
	return prog, verified, gen, nil
}

// programID is prog's kernel id.
func programID(prog *ebpf.Program) (ebpf.ProgramID, error) {
	info, err := prog.Info()
	if err != nil {
		return 0, err
	}
	id, _ := info.ID()
	return id, nil
}

// Install attaches (or atomically replaces) the program of spec.Ifindex. It does nothing when
// the interface already runs a program for an equal spec. Installs for different interfaces may
// run concurrently: the program is loaded (and verified, the slow part) outside the lock.
func (d *Dataplane) Install(s Spec) (Installed, error) {
	d.mu.Lock()
	cur := d.ifaces[s.Ifindex]
	if cur != nil && cur.Spec == s {
		d.mu.Unlock()
		return cur.Installed, nil
	}
	slot := -1
	if cur != nil {
		slot = cur.Slot
	} else {
		var err error
		if slot, err = d.allocSlot(); err != nil {
			d.mu.Unlock()
			return Installed{}, err
		}
	}
	// Same kind of program, only the interface's data changed (MAC, bridge): a map update.
	if cur != nil && cur.Spec.Hook == s.Hook && keyOf(cur.Spec, false) == keyOf(s, false) {
		defer d.mu.Unlock()
		if err := d.putIface(s, slot); err != nil {
			return Installed{}, err
		}
		cur.Spec = s
		return cur.Installed, nil
	}
	// An attached tc program after XDP is replaced with the XDP program: loaded meanwhile.
	var (
		tcNext *ebpf.Program
		tcErr  error
		tcGen  uint64
		tcDone chan struct{}
	)
	if cur != nil && cur.tcLink != nil && s.TCAfterXDP && s.Hook.XDP() {
		tcDone = make(chan struct{})
		go func() {
			defer close(tcDone)
			tcNext, _, tcGen, tcErr = d.loadProgram(s, true)
		}()
	}
	d.mu.Unlock()

	t0 := time.Now()
	prog, verified, gen, err := d.loadProgram(s, false)
	if tcDone != nil {
		<-tcDone
	}
	d.log.Debug("program ready", "interface", s.Name, "hook", s.Hook, "verified", verified, "with_tc_after", tcDone != nil,
		"took", time.Since(t0).Round(100*time.Microsecond))
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil && (d.staleLocked(gen) || (tcNext != nil && d.staleLocked(tcGen))) {
		prog.Close()
		err = fmt.Errorf("load program for %s: %w", s.Name, errMapsReplaced)
	}
	if err != nil {
		if tcNext != nil {
			tcNext.Close()
		}
		if cur == nil {
			d.slots[slot] = false
		}
		return Installed{}, err
	}
	id, err := programID(prog)
	if err != nil {
		prog.Close()
		return Installed{}, err
	}

	// The interface's data: a new interface's is written before its program is attached. An
	// interface changing kind has none while its program is swapped (its packets go to Linux
	// for that moment): neither program ever runs with the other one's data.
	if cur == nil {
		if err := d.putIface(s, slot); err != nil {
			prog.Close()
			d.slots[slot] = false
			return Installed{}, err
		}
	} else {
		d.clearIface(s.Ifindex)
		defer func() {
			// The interface's spec after the swap: the old one where it failed and the old
			// program still runs.
			if in, still := d.ifaces[s.Ifindex]; still {
				if err := d.putIface(in.Spec, slot); err != nil {
					d.log.Warn("interface data not written: its packets go to Linux", "interface", s.Name, "err", err)
				}
			}
		}()
	}

	switch {
	case cur != nil && cur.Spec.Hook == s.Hook:
		// bpf_link update: the kernel swaps the program atomically, no packet sees no program.
		if err := cur.link.Update(prog); err != nil {
			prog.Close()
			return Installed{}, fmt.Errorf("replace program on %s: %w", s.Name, err)
		}
		cur.prog.Close()
		cur.prog = prog
	case cur != nil && cur.Spec.Hook.XDP() && s.Hook.XDP():
		// Native and generic XDP are one attach point in two modes: the kernel refuses a second
		// program, so this change cannot be atomic. The old program goes first.
		d.log.Warn("changing XDP mode detaches the old program first", "interface", s.Name,
			"from", cur.Spec.Hook, "to", s.Hook)
		cur.link.Close()
		cur.prog.Close()
		delete(d.ifaces, s.Ifindex)
		fallthrough
	default:
		// A new attachment. Between XDP and tc the new program is attached before the old one
		// is detached: for a moment both run (XDP first), and each alone is correct.
		l, err := attach(s, prog)
		if err != nil {
			prog.Close()
			if cur != nil {
				if _, still := d.ifaces[s.Ifindex]; still {
					// The old program keeps running: the interface stays as it was.
					return Installed{}, err
				}
			}
			d.slots[slot] = false
			d.clearIface(s.Ifindex)
			return Installed{}, err
		}
		next := &iface{link: l, prog: prog}
		if cur != nil {
			if _, still := d.ifaces[s.Ifindex]; still {
				cur.link.Close()
				cur.prog.Close()
			}
			// A tc program after the old XDP one: kept, replaced or removed below.
			next.tcLink, next.tcProg, next.TCProgramID = cur.tcLink, cur.tcProg, cur.TCProgramID
		}
		cur = next
		d.ifaces[s.Ifindex] = cur
	}
	d.own(s.Ifindex, id)
	tcID := cur.TCProgramID
	cur.Installed = Installed{Spec: s, Slot: slot, ProgramID: id, InstalledAt: time.Now(), TCProgramID: tcID}
	switch {
	case !s.TCAfterXDP || !s.Hook.XDP():
		d.detachCompanion(cur)
	case tcNext != nil && cur.tcLink != nil:
		d.replaceCompanion(cur, tcNext)
	case tcNext != nil:
		tcNext.Close()
	case tcErr != nil:
		// The old tc program would run modules the new XDP program no longer matches: gone;
		// the next marked packet asks again.
		d.log.Warn("tc program after XDP not reloaded; detached until asked again", "interface", s.Name, "err", tcErr)
		d.detachCompanion(cur)
	}
	return cur.Installed, nil
}

// attach attaches prog at s's hook. A tc program goes last among the tcx ingress programs: it
// hands packets on with TCX_NEXT, so whatever runs before it has decided already.
func attach(s Spec, prog *ebpf.Program) (link.Link, error) {
	var (
		l   link.Link
		err error
	)
	switch s.Hook {
	case HookTC:
		l, err = link.AttachTCX(link.TCXOptions{Interface: s.Ifindex, Program: prog,
			Attach: ebpf.AttachTCXIngress, Anchor: link.Tail()})
	default:
		flags := link.XDPDriverMode
		if s.Hook == HookXDPGeneric {
			flags = link.XDPGenericMode
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: s.Ifindex, Flags: flags})
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%w (linuxfp does not replace it; detach it first)", ErrForeignProgram)
		}
	}
	if err != nil {
		return nil, &AttachError{Hook: s.Hook, Name: s.Name, Err: err}
	}
	return l, nil
}

// Remove detaches the program of ifindex, if any.
func (d *Dataplane) Remove(ifindex int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.removeLocked(ifindex)
}

func (d *Dataplane) removeLocked(ifindex int) error {
	cur := d.ifaces[ifindex]
	if cur == nil {
		return nil
	}
	delete(d.ifaces, ifindex)
	d.slots[cur.Slot] = false
	d.detachCompanion(cur)
	err := cur.link.Close()
	cur.prog.Close()
	d.clearIface(ifindex)
	return err
}

// Forget drops an interface that the kernel already removed (its link went with it).
func (d *Dataplane) Forget(ifindex int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.owned, ifindex)
	// The link's detach fails harmlessly: the kernel detached it with the interface.
	d.removeLocked(ifindex)
}

// Installed lists the attached programs.
func (d *Dataplane) Installed() map[int]Installed {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[int]Installed, len(d.ifaces))
	for idx, i := range d.ifaces {
		out[idx] = i.Installed
	}
	return out
}

func (d *Dataplane) allocSlot() (int, error) {
	for i, used := range d.slots {
		if !used {
			d.slots[i] = true
			if err := d.resetSlot(i); err != nil {
				return 0, err
			}
			return i, nil
		}
	}
	return 0, fmt.Errorf("more than %d accelerated interfaces", len(d.slots))
}

// resetSlot zeroes a reused slot's counters so a new interface starts from 0, and its tc
// program state (none attached, never asked).
func (d *Dataplane) resetSlot(slot int) error {
	if err := d.maps.LfpTcCompanions.Put(uint32(slot), linuxfpLfpTcCompanion{}); err != nil {
		return fmt.Errorf("reset tc program state: %w", err)
	}
	if err := zeroPerCPU(d.maps.LfpStats, uint32(slot*NumReasons), NumReasons); err != nil {
		return fmt.Errorf("reset counters: %w", err)
	}
	return nil
}

// Counter is a packet and byte count.
type Counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Counters returns the counters of a slot, indexed by Reason, summed over CPUs.
func (d *Dataplane) Counters(slot int) ([]Counter, error) {
	out := make([]Counter, NumReasons)
	var per []linuxfpLfpCounter
	for r := 0; r < NumReasons; r++ {
		if err := d.maps.LfpStats.Lookup(uint32(slot*NumReasons+r), &per); err != nil {
			return nil, fmt.Errorf("read counters: %w", err)
		}
		for _, c := range per {
			out[r].Packets += c.Packets
			out[r].Bytes += c.Bytes
		}
	}
	return out, nil
}
