package e2e

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

func TestSmokeForwarding(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	if _, err := tb.Gen.Run("ping", "-c", "3", "-i", "0.01", "198.18.1.2"); err != nil {
		t.Fatal(err)
	}
	it, err := l.Interface("in0")
	if err != nil {
		t.Fatal(err)
	}
	if it.Forwarded.Packets < 3 {
		t.Fatalf("in0 fast-pathed %d packets, want >= 3; status: %+v", it.Forwarded.Packets, it)
	}
}
