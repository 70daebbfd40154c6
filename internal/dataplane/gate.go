package dataplane

import (
	"fmt"

	"github.com/cilium/ebpf"
	"strings"
)

// Families is a set of address families: the gate's unit (bpf/lib/gate.h, LFP_GATE_*).
type Families uint32

const (
	IPv4 Families = 1 << iota
	IPv6
	// Devices: in Fenced, the packets of some devices (the link unit), not a family.
	Devices
	BothFamilies = IPv4 | IPv6
)

// Names lists the families, "ipv4" first.
func (f Families) Names() []string {
	var n []string
	if f&IPv4 != 0 {
		n = append(n, "ipv4")
	}
	if f&IPv6 != 0 {
		n = append(n, "ipv6")
	}
	if f&Devices != 0 {
		n = append(n, "devices")
	}
	return n
}

func (f Families) String() string { return strings.Join(f.Names(), ",") }

// Failed is the families whose packets go to Linux (apply_failed) because the last Sync could
// not bring the data plane to the configuration it was given. Cleared by the next Sync that
// succeeds.
func (d *Dataplane) Failed() Families {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

// setGateLocked makes f the families the fast path hands to Linux. If the gate itself cannot
// be written, no program may keep running on data that may be stale: every one is detached.
func (d *Dataplane) setGateLocked(f Families) error {
	if f == d.failed && d.gateWritten {
		return nil
	}
	return d.writeGateLocked(f, d.done)
}

// Each write moves the FIB cache's generation on (bpf/lib/fibcache.h): a write may let through
// packets of changes the watchers saw before they took effect (sysctl writes), whose effect on
// the kernel's routing answers no entry filled before may hide.
func (d *Dataplane) writeGateLocked(f Families, done FenceSeq) error {
	epoch := d.fibEpoch + 1
	if err := d.maps.LfpGateMap.Put(uint32(0), linuxfpLfpGate{Failed: uint32(f), Done: done, FibEpoch: epoch}); err != nil {
		for idx := range d.ifaces {
			d.removeLocked(idx)
		}
		d.log.Error("gate not written: every program detached, Linux handles every packet", "err", err)
		return fmt.Errorf("write gate: %w", err)
	}
	d.failed, d.done, d.gateWritten, d.fibEpoch = f, done, true, epoch
	return nil
}

// FenceSeq is, per fence unit (IPv4, IPv6, sysctl: enum lfp_fence_unit), how many
// configuration changes Linux has applied (bpf/include/fence.h).
type FenceSeq [len(linuxfpLfpFence{}.Seq)]uint64

// FenceSysctl is the sysctl unit's index (LFP_FENCE_SYSCTL): it fences both families.
// FenceLink is the link unit's (LFP_FENCE_LINK): it fences the packets of the devices changed.
const (
	FenceSysctl = 2
	FenceLink   = 3
)

// FenceUnitName names fence unit u (an index of FenceSeq) as status shows it.
func FenceUnitName(u int) string {
	switch u {
	case 0:
		return "ipv4"
	case 1:
		return "ipv6"
	case FenceSysctl:
		return "sysctl"
	case FenceLink:
		return "link"
	}
	return fmt.Sprintf("unit%d", u)
}

// WatcherMaps are the maps the watchers write (they are loaded with them): the fence, the bridge
// FDB's moves, which the bridge FDB watcher counts the moment the bridge makes one, the FIB
// cache's generation, the STALE-neighbour mirror the neighbour tracepoints keep, and the counts
// of conntrack entries freed the conntrack cache checks.
func (d *Dataplane) WatcherMaps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{"lfp_fence_map": d.maps.LfpFenceMap, "lfp_if_fence": d.maps.LfpIfFence, "lfp_fdb_moves": d.maps.LfpFdbMoves,
		"lfp_fib_gen": d.maps.LfpFibGen, "lfp_stale": d.maps.LfpStale, "lfp_stale_count": d.maps.LfpStaleCount,
		"lfp_stale_filter": d.maps.LfpStaleFilter, "lfp_ct_frees": d.maps.LfpCtFrees}
}

// Fence reads how many changes the watchers have counted. The controller reads it before it
// reads Linux's state, and opens the fence with it once the data plane follows that state.
func (d *Dataplane) Fence() (FenceSeq, error) {
	var f linuxfpLfpFence
	if err := d.maps.LfpFenceMap.Lookup(uint32(0), &f); err != nil {
		return FenceSeq{}, fmt.Errorf("read fence: %w", err)
	}
	return f.Seq, nil
}

// OpenFence lets through the packets of the changes counted up to seq: the data plane follows
// the state Linux had when seq was read. Changes counted since keep their units fenced. A unit
// is never closed again by an older count (two callers may open it concurrently).
func (d *Dataplane) OpenFence(seq FenceSeq) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for u := range seq {
		seq[u] = max(seq[u], d.done[u])
	}
	if seq == d.done && d.gateWritten {
		return nil
	}
	return d.writeGateLocked(d.failed, seq)
}

// Done is the fence count the data plane follows (the last OpenFence).
func (d *Dataplane) Done() FenceSeq {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done
}

// Fenced lists the units whose packets go to Linux because a change is not followed yet.
func (d *Dataplane) Fenced() (Families, error) {
	seq, err := d.Fence()
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var f Families
	for u := range seq {
		switch {
		case seq[u] == d.done[u]:
		case u == FenceSysctl:
			f |= BothFamilies
		case u == FenceLink:
			f |= Devices
		default:
			f |= 1 << u
		}
	}
	return f, nil
}
