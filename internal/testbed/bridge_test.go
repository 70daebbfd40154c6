package testbed

import (
	"os"
	"strings"
	"testing"
)

// The bridged topology switches between gen and sink in both families, through br0.
func TestNewBridge(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	tb, err := NewBridge("lfp-test", Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Error(err)
		}
	})
	if tb.Bridge != BridgeName || tb.SinkIP != BridgeSinkAddr || tb.GenIP != GenAddr {
		t.Errorf("bridge %q, gen %s, sink %s", tb.Bridge, tb.GenIP, tb.SinkIP)
	}
	if err := tb.ResolveNeighbours(); err != nil {
		t.Fatal(err)
	}
	out, err := tb.DUT.Run("bridge", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{"in0", "out0"} {
		ok := false
		for _, line := range strings.Split(out, "\n") {
			ok = ok || strings.Contains(line, " "+port+":") && strings.Contains(line, "master br0 state forwarding")
		}
		if !ok {
			t.Errorf("%s is not a forwarding port of br0:\n%s", port, out)
		}
	}
	if out, err := tb.Gen.Run("sysctl", "-n", "net.ipv6.conf.eth0.router_solicitations"); err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("gen sends router solicitations: %q (%v)", out, err)
	}
}
