package dataplane

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/linuxfp/linuxfp/internal/packet"
)

// An XDP program with a tc program after it hands what it cannot redirect (an egress that takes
// no XDP frames) to that program: XDP_PASS, the frame untouched, the mark in its metadata, counted
// as to_tc. What it can redirect, it redirects as before; other reasons to pass stay Linux's. The
// tc program after it passes unmarked packets on at once, counting nothing.
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
