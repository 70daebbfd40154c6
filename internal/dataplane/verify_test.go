package dataplane

import "testing"

// The verifier walks at most 1,000,000 instructions per program; the tc program of a bridge port
// that also routes (bridge, filter, conntrack, router, encapsulation) comes nearest. Every kind of
// bridge port program, and the underlay's that routes decapsulated frames, must load with a
// twentieth of that left, so that a module's growth shows
// here before a program fails to load (and its interfaces fall back to Linux).
func TestProgramsVerifyWithHeadroom(t *testing.T) {
	const limit = 1_000_000
	e := newBridgeEnv(t)
	for _, hook := range hooks {
		e.hook = hook
		for _, r4 := range []bool{false, true} {
			info, err := e.portProg(t, r4).Info()
			if err != nil {
				t.Fatal(err)
			}
			n, ok := info.VerifiedInstructions()
			if !ok {
				t.Skip("the kernel does not report verified instructions")
			}
			t.Logf("%v bridge port, IPv4 router %v: %d instructions verified", hook, r4, n)
			if n > limit*95/100 {
				t.Errorf("%v bridge port, IPv4 router %v: %d instructions verified, over 95%% of the verifier's %d", hook, r4, n, limit)
			}
		}
	}
	// An underlay device's tc program that routes decapsulated frames itself (vxlan_rx_route).
	p, err := e.dp.LoadProgram(Spec{Ifindex: e.in, Name: "in0", MAC: MACOf(macIn), Hook: HookTC, Router4: true, Router6: true,
		Conntrack4: true, Conntrack6: true, VXLANRxRoute: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := info.VerifiedInstructions()
	t.Logf("tc router routing decapsulated frames: %d instructions verified", n)
	if n > limit*95/100 {
		t.Errorf("tc router routing decapsulated frames: %d instructions verified, over 95%% of the verifier's %d", n, limit)
	}
}
