package dataplane

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

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
	prog, err := env.dp.LoadProgram(Spec{Ifindex: env.in, Name: "in0", MAC: macIn, Hook: HookXDP, Router4: true, Router6: true, TCAfterXDP: true}, 0)
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
	tcProg, err := env.dp.loadProgram(Spec{Ifindex: env.in, Name: "in0", MAC: macIn, Hook: HookXDP, Router4: true, Router6: true, TCAfterXDP: true}, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer tcProg.Close()
	ret, out, reason = env.runSkb(t, tcProg, packet.Spec(good4).Bytes(), skbMD{Ifindex: uint32(env.in)})
	if ret != xdpPass || reason != Reason(1<<30) || !bytes.Equal(out[:len(pkt)], good4.Bytes()) {
		t.Fatalf("unmarked packet at the tc program after XDP: verdict %d, reason %v", ret, reason)
	}
}
