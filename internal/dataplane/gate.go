package dataplane

import (
	"fmt"
	"strings"
)

// Families is a set of address families: the gate's unit (bpf/lib/gate.h, LFP_GATE_*).
type Families uint32

const (
	IPv4 Families = 1 << iota
	IPv6
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
	if err := d.maps.LfpGateMap.Put(uint32(0), linuxfpLfpGate{Failed: uint32(f)}); err != nil {
		for idx := range d.ifaces {
			d.removeLocked(idx)
		}
		d.log.Error("gate not written: every program detached, Linux handles every packet", "err", err)
		return fmt.Errorf("write gate: %w", err)
	}
	d.failed, d.gateWritten = f, true
	return nil
}
