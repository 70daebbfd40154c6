package bridge

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/harness/benchtest"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// bridgeLearn must leave the DUT's bridge with gen's MAC learned on in0 and the sink's on out0,
// and fdbProblem must notice when an entry is not where it should be.
func TestBridgeLearn(t *testing.T) {
	benchtest.NeedRoot(t)
	tb, err := testbed.NewBridge("lfp-test", testbed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Error(err)
		}
	})
	want := []fdbWant{{host: "gen", mac: tb.GenMAC, port: "in0", ifindex: tb.InIfindex}}
	// A MAC no host has is reported missing. (Not gen's: its stack sends IPv6 DAD and MLD frames
	// within a second or so of its link coming up, so the bridge may have learned it already.)
	nobody := []fdbWant{{host: "nobody", mac: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}, port: "in0", ifindex: tb.InIfindex}}
	if p, err := fdbProblem(tb, nobody, time.Hour); err != nil || !strings.Contains(p, "not on in0") {
		t.Fatalf("a MAC nobody has: problem %q (%v), want it not on in0", p, err)
	}
	for i := range 2 { // the second time, the entries exist and must be refreshed
		p, err := bridgeLearn(&harness.Pipeline{TB: tb})
		if err != nil || p != "" {
			t.Fatalf("learning %d: problem %q (%v)", i, p, err)
		}
	}
	wrong := []fdbWant{{host: "gen", mac: tb.GenMAC, port: "out0", ifindex: tb.OutIfindex}}
	if p, err := fdbProblem(tb, wrong, time.Hour); err != nil || !strings.Contains(p, "not on out0") {
		t.Errorf("gen's MAC on out0: problem %q (%v), want it reported missing", p, err)
	}
	// An entry learned long before counts as stale learning. (A frame from gen's own stack may
	// refresh it meanwhile, so a few tries.)
	var p string
	for range 5 {
		time.Sleep(200 * time.Millisecond)
		if p, err = fdbProblem(tb, want, 0); err != nil || strings.Contains(p, "before its frame") {
			break
		}
	}
	if err != nil || !strings.Contains(p, "before its frame") {
		t.Errorf("entry 200 ms old for a frame just sent: problem %q (%v), want it reported old", p, err)
	}
}
