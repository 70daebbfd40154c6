package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// The tc program after an XDP program (Spec.TCAfterXDP, bpf/lib/stats.h): the XDP program marks
// the packets it cannot redirect because only an skb can go where they are routed or bridged,
// and a tc program of the same modules on the same interface forwards them. It is attached on
// demand: the XDP program asks for it through the lfp_tc_requests ring when such a packet
// arrives and none is attached (that packet, and every one until the tc program is attached,
// goes to Linux unmarked). So an interface whose traffic never needs one costs no second
// program, and a new interface that only takes skbs changes no XDP program elsewhere.

// ReadTCRequests delivers the XDP programs' requests for a tc program (their ingress ifindex)
// to fn until Close. fn runs on the reader's goroutine.
func (d *Dataplane) ReadTCRequests(fn func(ifindex int)) error {
	return d.readRing(d.maps.LfpTcRequests, "tc program request ring", func(b []byte) {
		// struct lfp_tc_request: ifindex u32, slot u32
		if len(b) >= 8 {
			fn(int(binary.NativeEndian.Uint32(b)))
		}
	})
}

// readRing hands each record of the ring buffer m to fn, on a goroutine of its own, until Close.
func (d *Dataplane) readRing(m *ebpf.Map, what string, fn func([]byte)) error {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	d.mu.Lock()
	d.closers = append(d.closers, func() { rd.Close() })
	d.mu.Unlock()
	go func() {
		for {
			rec, err := rd.Read()
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					d.log.Error(what, "err", err)
				}
				return
			}
			fn(rec.RawSample)
		}
	}()
	return nil
}

// AttachCompanion attaches the tc program after ifindex's XDP program, if that program marks
// packets for one and none is attached or being attached. It returns the new program's id, or
// 0 when there was nothing to do.
func (d *Dataplane) AttachCompanion(ifindex int) (ebpf.ProgramID, error) {
	d.mu.Lock()
	cur := d.ifaces[ifindex]
	if cur == nil || !cur.Spec.TCAfterXDP || !cur.Spec.Hook.XDP() || cur.tcLink != nil || cur.attaching {
		d.mu.Unlock()
		return 0, nil
	}
	cur.attaching = true
	s, slot := cur.Spec, cur.Slot
	d.mu.Unlock()

	prog, _, gen, err := d.loadProgram(s, true)
	d.mu.Lock()
	defer d.mu.Unlock()
	cur.attaching = false
	if err == nil && d.staleLocked(gen) {
		prog.Close()
		err = errMapsReplaced
	}
	if err != nil {
		return 0, err
	}
	// Replaced or removed meanwhile: the program was loaded for a spec no longer in force.
	if d.ifaces[ifindex] != cur || cur.Spec != s || cur.tcLink != nil {
		prog.Close()
		return 0, nil
	}
	id, err := programID(prog)
	if err != nil {
		prog.Close()
		return 0, err
	}
	ts := s
	ts.Hook = HookTC
	l, err := attach(ts, prog)
	if err != nil {
		prog.Close()
		return 0, err
	}
	cur.tcLink, cur.tcProg, cur.TCProgramID = l, prog, id
	d.own(ifindex, id)
	// Only now may the XDP program mark packets for it.
	if err := d.maps.LfpTcCompanions.Put(uint32(slot), linuxfpLfpTcCompanion{Attached: 1}); err != nil {
		d.detachCompanion(cur)
		return 0, fmt.Errorf("tc program state: %w", err)
	}
	return id, nil
}

// Owns reports whether id is a program linuxfp attached to ifindex (at XDP, at tc, or at tc
// after XDP), now or before: a snapshot of the interface may still show one just replaced.
func (d *Dataplane) Owns(ifindex int, id uint32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.owned[ifindex], id)
}

// own records id as a program attached to ifindex (programs are shared by kind: each id
// once). Called with d.mu held.
func (d *Dataplane) own(ifindex int, id ebpf.ProgramID) {
	if !slices.Contains(d.owned[ifindex], uint32(id)) {
		d.owned[ifindex] = append(d.owned[ifindex], uint32(id))
	}
}

// replaceCompanion swaps cur's tc program for prog (bpf_link update). Called with d.mu held.
func (d *Dataplane) replaceCompanion(cur *iface, prog *ebpf.Program) {
	id, err := programID(prog)
	if err == nil {
		err = cur.tcLink.Update(prog)
	}
	if err != nil {
		prog.Close()
		d.log.Warn("tc program after XDP not replaced; detached until asked again", "interface", cur.Spec.Name, "err", err)
		d.detachCompanion(cur)
		return
	}
	cur.tcProg.Close()
	cur.tcProg, cur.TCProgramID = prog, id
	d.own(cur.Spec.Ifindex, id)
}

// detachCompanion removes cur's tc program, if any: the XDP program stops marking first (a
// packet marked just before goes to Linux, which is correct too). Called with d.mu held.
func (d *Dataplane) detachCompanion(cur *iface) {
	if cur.tcLink == nil {
		return
	}
	if err := d.maps.LfpTcCompanions.Put(uint32(cur.Slot), linuxfpLfpTcCompanion{}); err != nil {
		d.log.Warn("clear tc program state", "interface", cur.Spec.Name, "err", err)
	}
	cur.tcLink.Close()
	cur.tcProg.Close()
	cur.tcLink, cur.tcProg, cur.TCProgramID = nil, nil, 0
}

// companionSettings: an XDP program with a tc program after it marks packets for it; the tc
// program after XDP runs on marked packets only.
func companionSettings(k *settings, s Spec, companion bool) {
	k.TcAfter = boolU32(s.TCAfterXDP && s.Hook.XDP() && !companion)
	k.TcCompanion = boolU32(companion)
}
