package dataplane

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
)

// An interface's own data (bpf/lib/iface.h): what is not the same for every interface whose
// program has the same modules, so that one verified program serves all of them.

// MAC is an Ethernet address. An array, not a slice, so that a Spec is comparable.
type MAC [6]byte

// MACOf is a's first six bytes (the rest zero), as lfp_ifs keeps it.
func MACOf(a net.HardwareAddr) MAC {
	var m MAC
	copy(m[:], a)
	return m
}

func (m MAC) String() string { return net.HardwareAddr(m[:]).String() }

// putIface writes an interface's data (lfp_ifs) for slot: before a program runs there.
func (d *Dataplane) putIface(s Spec, slot int) error {
	v := linuxfpLfpIf{Mac: s.MAC, Flags: linuxfpLfpIfFlagsLFP_IF_VALID, Slot: uint32(slot), L3Ifindex: uint32(s.L3Ifindex)}
	if s.MarkUnsafe {
		v.Flags |= linuxfpLfpIfFlagsLFP_IF_MARK_UNSAFE
	}
	if err := d.ifsMap(s.Ifindex).Put(uint32(s.Ifindex), v); err != nil {
		return fmt.Errorf("interface data of %s: %w", s.Name, err)
	}
	return nil
}

// clearIface removes an interface's data: after its programs are detached.
func (d *Dataplane) clearIface(ifindex int) {
	m := d.ifsMap(ifindex)
	var err error
	if m == d.maps.LfpIfs {
		err = m.Put(uint32(ifindex), linuxfpLfpIf{})
	} else if err = m.Delete(uint32(ifindex)); errors.Is(err, ebpf.ErrKeyNotExist) {
		err = nil
	}
	if err != nil {
		d.log.Warn("clear interface data", "ifindex", ifindex, "err", err)
	}
}

func (d *Dataplane) ifsMap(ifindex int) *ebpf.Map {
	// lfp_ifs, an array, holds the ifindexes below its size; lfp_ifs_hi, a hash, the others.
	if ifindex < int(d.maps.LfpIfs.MaxEntries()) {
		return d.maps.LfpIfs
	}
	return d.maps.LfpIfsHi
}
