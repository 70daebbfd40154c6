package dataplane

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/linuxfp/linuxfp/internal/packet"
)

// An XDP program with a tc program after it hands what it cannot redirect (an egress that takes
// no XDP frames) to that program: XDP_PASS, the frame untouched, the mark in its metadata, counted
// as to_tc. Until the tc program is attached, such a packet goes to Linux unmarked, counted under
// its own reason, and the XDP program asks for the tc program (at most once per 100 ms). What it
// can redirect, it redirects as before; other reasons to pass stay Linux's. The tc program after
// it passes unmarked packets on at once, counting nothing.
func TestTCAfterXDP(t *testing.T) {
	env := newTestEnv(t)
	if env.hook != HookXDP {
		t.Skip("the XDP build")
	}
	prog, err := env.dp.LoadProgram(Spec{Ifindex: env.in, Name: "in0", MAC: MACOf(macIn), Hook: HookXDP, Router4: true, Router6: true, TCAfterXDP: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	good4 := v4("198.18.0.2", "198.19.0.9")
	env.checkRouted(t, prog, good4.Bytes(), Forwarded, nil)

	s := good4
	s.Dst = netip.MustParseAddr("198.19.6.1") // routed out of a device that takes no XDP frames
	pkt := s.Bytes()
	asks := make(chan int, 8)
	if err := env.dp.ReadTCRequests(func(ifindex int) { asks <- ifindex }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		ret, out, reason := env.run(t, prog, pkt)
		if reason != PassEgressNotReady || ret != xdpPass || !bytes.Equal(out, pkt) {
			t.Fatalf("no tc program attached yet: reason %v verdict %d, want egress_not_ready, XDP_PASS, untouched", reason, ret)
		}
	}
	select {
	case got := <-asks:
		if got != env.in {
			t.Fatalf("asked for a tc program on ifindex %d, want %d", got, env.in)
		}
	case <-time.After(time.Second):
		t.Fatal("the XDP program did not ask for its tc program")
	}
	select {
	case got := <-asks:
		t.Fatalf("asked again (ifindex %d) within 100 ms", got)
	case <-time.After(50 * time.Millisecond):
	}
	// Attached (the controller sets this after attaching it): marked from now on.
	if err := env.dp.maps.LfpTcCompanions.Put(uint32(0), linuxfpLfpTcCompanion{Attached: 1}); err != nil {
		t.Fatal(err)
	}
	defer env.dp.maps.LfpTcCompanions.Put(uint32(0), linuxfpLfpTcCompanion{})
	ret, out, reason := env.run(t, prog, pkt)
	if reason != ToTC || ret != xdpPass {
		t.Fatalf("to a device that takes no XDP frames: reason %v verdict %d, want to_tc and XDP_PASS", reason, ret)
	}
	// BPF_PROG_TEST_RUN returns the metadata before the frame.
	if len(out) < 4+len(pkt) || binary.NativeEndian.Uint32(out) != 0x6c667063 || !bytes.Equal(out[4:4+len(pkt)], pkt) {
		t.Fatalf("marked frame: %x", out)
	}

	s = good4
	s.TTL = 1
	env.checkRouted(t, prog, s.Bytes(), PassTTL, nil) // Linux's, not the tc program's

	// The tc program after it: an unmarked packet is passed on, uncounted.
	tcProg, _, _, err := env.dp.loadProgram(Spec{Ifindex: env.in, Name: "in0", MAC: MACOf(macIn), Hook: HookXDP, Router4: true, Router6: true, TCAfterXDP: true}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer tcProg.Close()
	ret, out, reason = env.runSkb(t, tcProg, packet.Spec(good4).Bytes(), skbMD{Ifindex: uint32(env.in)})
	if ret != xdpPass || reason != Reason(1<<30) || !bytes.Equal(out[:len(pkt)], good4.Bytes()) {
		t.Fatalf("unmarked packet at the tc program after XDP: verdict %d, reason %v", ret, reason)
	}
}

// The tc program after XDP through its life: attached when asked (and then marked as attached
// for the XDP program), replaced with the XDP program when its spec changes, detached when the
// spec no longer has one or the interface's program goes; asking for a second one is a no-op.
func TestCompanionLifecycle(t *testing.T) {
	env := newTestEnv(t)
	state := func() linuxfpLfpTcCompanion {
		var c linuxfpLfpTcCompanion
		if err := env.dp.maps.LfpTcCompanions.Lookup(uint32(0), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	tcxIDs := func() []ebpf.ProgramID {
		var ids []ebpf.ProgramID
		err := env.ns.Do(func() error {
			res, err := link.QueryPrograms(link.QueryOptions{Target: env.in, Attach: ebpf.AttachTCXIngress})
			if err != nil {
				return err
			}
			for _, p := range res.Programs {
				ids = append(ids, p.ID)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	do := func(f func() error) {
		t.Helper()
		if err := env.ns.Do(f); err != nil {
			t.Fatal(err)
		}
	}
	s := Spec{Ifindex: env.in, Name: "in0", MAC: MACOf(macIn), Hook: HookXDP, Router4: true, Router6: true, TCAfterXDP: true}
	var inst Installed
	inst = env.install(t, s)
	if inst.TCProgramID != 0 || state().Attached != 0 || len(tcxIDs()) != 0 {
		t.Fatalf("installed: tc program %d, attached %d, tcx %v: want none until asked", inst.TCProgramID, state().Attached, tcxIDs())
	}
	var id ebpf.ProgramID
	do(func() (err error) { id, err = env.dp.AttachCompanion(env.in); return err })
	if id == 0 || state().Attached != 1 || !slices.Equal(tcxIDs(), []ebpf.ProgramID{id}) || !env.dp.Owns(env.in, uint32(id)) {
		t.Fatalf("asked: id %d, attached %d, tcx %v", id, state().Attached, tcxIDs())
	}
	var again ebpf.ProgramID
	do(func() (err error) { again, err = env.dp.AttachCompanion(env.in); return err })
	if again != 0 || !slices.Equal(tcxIDs(), []ebpf.ProgramID{id}) {
		t.Fatalf("asked again: id %d, tcx %v: want nothing new", again, tcxIDs())
	}
	s.Router6 = false
	inst = env.install(t, s)
	if inst.TCProgramID == 0 || inst.TCProgramID == id || state().Attached != 1 ||
		!slices.Equal(tcxIDs(), []ebpf.ProgramID{inst.TCProgramID}) {
		t.Fatalf("spec changed: tc program %d (was %d), attached %d, tcx %v: want a new one in its place",
			inst.TCProgramID, id, state().Attached, tcxIDs())
	}
	s.TCAfterXDP = false
	inst = env.install(t, s)
	if inst.TCProgramID != 0 || state().Attached != 0 || len(tcxIDs()) != 0 {
		t.Fatalf("no tc after XDP: tc program %d, attached %d, tcx %v: want it gone", inst.TCProgramID, state().Attached, tcxIDs())
	}
	s.TCAfterXDP = true
	inst = env.install(t, s)
	do(func() (err error) { id, err = env.dp.AttachCompanion(env.in); return err })
	do(func() error { return env.dp.Remove(env.in) })
	if state().Attached != 0 || len(tcxIDs()) != 0 {
		t.Fatalf("removed: attached %d, tcx %v", state().Attached, tcxIDs())
	}
}
