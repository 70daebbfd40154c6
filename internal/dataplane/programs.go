package dataplane

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// Programs are specialised by what an interface's graph contains (modules, families, hook:
// frozen .rodata), not by the interface: its MAC, counter slot and bridge are data in lfp_ifs
// (bpf/lib/iface.h). So one verified program serves every interface of a kind, and a new
// interface like an existing one (a container's veth, a bridge port) is attached without the
// kernel verifying anything: the verifier is the slow part of a change (tens of ms here).

// progKind is what a program is specialised for: interfaces of one kind share a program.
type progKind struct {
	tc bool // the tc object (the tc hook, or the tc program after XDP)
	settings
}

// moduleSettings set each module's settings (settings_gen.go) for an interface's program;
// companion: the tc program after its XDP one. Each lives in its module's file.
var moduleSettings = []func(k *settings, s Spec, companion bool){
	routerSettings, bridgeSettings, ctSettings, companionSettings, vxlanSettings,
}

func keyOf(s Spec, companion bool) progKind {
	k := progKind{tc: s.Hook == HookTC || companion}
	for _, set := range moduleSettings {
		set(&k.settings, s, companion)
	}
	return k
}

// maxIdlePrograms: verified programs kept for kinds no interface runs at the moment (an
// interface of that kind may come back: a container restarted, a port re-added).
const maxIdlePrograms = 8

type cachedProg struct {
	prog     *ebpf.Program // the cache's own reference; interfaces hold clones
	gen      uint64        // the maps it was loaded with (Dataplane.mapsGen)
	shared   map[string]*ebpf.Map
	lastUsed time.Time
	// loading: closed when prog (or err) is set; a concurrent request for the key waits.
	loading chan struct{}
	err     error
}

// program returns a program for key (the caller owns it and closes it), verifying one only
// when none of that kind was loaded before, and the generation of the maps it uses: a caller
// that attaches it checks, under d.mu, that the maps were not replaced meanwhile
// (staleLocked). Called without d.mu.
func (d *Dataplane) program(k progKind) (prog *ebpf.Program, verified bool, gen uint64, err error) {
	d.mu.Lock()
	c := d.progs[k]
	if c == nil {
		c = &cachedProg{loading: make(chan struct{}), gen: d.mapsGen, shared: d.shared}
		d.progs[k] = c
		d.mu.Unlock()
		c.prog, c.err = d.verify(k, c.shared)
		d.verified.Add(1)
		d.mu.Lock()
		if c.err == nil && d.staleLocked(c.gen) {
			// The maps were replaced meanwhile (and the cache with them): not for use.
			c.prog.Close()
			c.prog, c.err = nil, errMapsReplaced
		}
		close(c.loading)
		if c.err != nil && d.progs[k] == c {
			// Not cached: the next request tries again (a transient ENOMEM, say).
			delete(d.progs, k)
		}
		verified = true
	}
	d.mu.Unlock()
	<-c.loading
	if c.err != nil {
		return nil, verified, c.gen, c.err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.prog == nil {
		return nil, verified, c.gen, errors.New("program cache closed")
	}
	c.lastUsed = time.Now()
	clone, err := c.prog.Clone()
	if err != nil {
		return nil, verified, c.gen, err
	}
	d.evictIdleLocked()
	return clone, verified, c.gen, nil
}

// errMapsReplaced: a program was loaded with maps replaced while it loaded (the filter's
// capacity changed); it must not run. The caller's next attempt loads one with the new maps.
var errMapsReplaced = errors.New("the data plane's maps were replaced while the program loaded; try again")

// staleLocked: gen is not the generation of the maps in use. Called with d.mu held.
func (d *Dataplane) staleLocked(gen uint64) bool { return gen != d.mapsGen }

// Verified counts the programs the kernel verified since New (each kind once, while cached).
func (d *Dataplane) Verified() uint64 { return d.verified.Load() }

// Kinds is how many verified programs the cache holds (one per kind of interface).
func (d *Dataplane) Kinds() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.progs {
		if c.prog != nil {
			n++
		}
	}
	return n
}

// evictIdleLocked closes the least recently used cached programs of kinds no interface runs,
// beyond maxIdlePrograms.
func (d *Dataplane) evictIdleLocked() {
	inUse := map[progKind]bool{}
	for _, i := range d.ifaces {
		inUse[keyOf(i.Spec, false)] = true
		if i.tcProg != nil {
			inUse[keyOf(i.Spec, true)] = true
		}
	}
	for {
		var (
			oldest   progKind
			found    bool
			idle     int
			oldestAt time.Time
		)
		for k, c := range d.progs {
			if inUse[k] || c.prog == nil {
				continue
			}
			idle++
			if !found || c.lastUsed.Before(oldestAt) {
				oldest, oldestAt, found = k, c.lastUsed, true
			}
		}
		if idle <= maxIdlePrograms {
			return
		}
		d.progs[oldest].prog.Close()
		delete(d.progs, oldest)
	}
}

// closeProgramsLocked releases the cache (Close).
func (d *Dataplane) closeProgramsLocked() {
	for k, c := range d.progs {
		if c.prog != nil {
			c.prog.Close()
			c.prog = nil
		}
		delete(d.progs, k)
	}
}

// verify loads (the kernel verifies) a program for k, using the maps shared.
func (d *Dataplane) verify(k progKind, shared map[string]*ebpf.Map) (*ebpf.Program, error) {
	cs, progName := d.spec.Copy(), linuxfpProgLinuxfpXdp
	if k.tc {
		cs, progName = d.tcSpec.Copy(), linuxfpTcProgLinuxfpTc
	}
	for _, v := range k.variables() {
		vs, ok := cs.Variables[v.name]
		if !ok {
			return nil, fmt.Errorf("set %s: not in the object (go generate ./internal/dataplane)", v.name)
		}
		if err := vs.Set(v.val); err != nil {
			return nil, fmt.Errorf("set %s: %w", v.name, err)
		}
	}
	// One btf.Cache for every load: without it, each load parses the kernel's BTF again (for
	// the CO-RE relocations and the conntrack kfuncs: ~10 ms here, a quarter of a load).
	coll, err := ebpf.NewCollectionWithOptions(cs, ebpf.CollectionOptions{MapReplacements: shared, Cache: d.btfCache})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("%w (verifier log: %+v)", err, ve)
		}
		return nil, err
	}
	defer coll.Close()
	return coll.DetachProgram(progName), nil
}
