package e2e

import (
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// vxlanOverlay makes the DUT and the sink two Flannel-style VXLAN nodes over out0 <-> eth0: the
// DUT's flannel.1 (198.19.1.0/32) routes 198.19.2.0/24 to the sink's flannel.1 (198.19.2.0/32),
// which holds the "pod" address 198.19.2.5 and routes gen's subnet back over the overlay.
func vxlanOverlay(t *testing.T, tb *testbed.Testbed, dutOpts string) {
	t.Helper()
	mac := func(ns *nsutil.NS) string {
		out, err := ns.Run("cat", "/sys/class/net/flannel.1/address")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	sh(t, tb.DUT, `ip link add flannel.1 type vxlan id 1 local 198.18.1.1 dev out0 dstport 8472 nolearning `+dutOpts+`
ip link set flannel.1 mtu 1450
ip addr add 198.19.1.0/32 dev flannel.1
ip link set flannel.1 up`)
	sh(t, tb.Sink, `ip link add flannel.1 type vxlan id 1 local 198.18.1.2 dev eth0 dstport 8472 nolearning `+dutOpts+`
ip link set flannel.1 mtu 1450
ip addr add 198.19.2.0/32 dev flannel.1
ip addr add 198.19.2.5/32 dev lo
ip link set flannel.1 up`)
	dutMAC, sinkMAC := mac(tb.DUT), mac(tb.Sink)
	sh(t, tb.DUT, `ip route del 198.19.2.0/24
ip route add 198.19.2.0/24 via 198.19.2.0 dev flannel.1 onlink
ip neigh add 198.19.2.0 lladdr `+sinkMAC+` dev flannel.1 nud permanent
bridge fdb append `+sinkMAC+` dev flannel.1 dst 198.18.1.2`)
	sh(t, tb.Sink, `ip route add 198.18.0.0/24 via 198.19.1.0 dev flannel.1 onlink
ip neigh add 198.19.1.0 lladdr `+dutMAC+` dev flannel.1 nud permanent
bridge fdb append `+dutMAC+` dev flannel.1 dst 198.18.1.1`)
}

// Through a VXLAN overlay as Flannel makes it (its devices have no UDP checksum): packets routed
// into flannel.1 are encapsulated by the fast path; with an option it does not reproduce (here
// udpcsum) they are redirected to flannel.1 and its driver encapsulates them. The frames
// flannel.1 decapsulates are routed by a tc program on it; the sink's VXLAN packets (no UDP
// checksum in the Flannel case) are decapsulated by the fast path on out0 first.
func TestVXLANOverlay(t *testing.T) {
	for _, c := range []struct {
		name, opts string
		encap      bool
	}{{"flannel", "noudpcsum", true}, {"udpcsum", "udpcsum", false}} {
		t.Run(c.name, func(t *testing.T) {
			tb := newTestbed(t, testbed.Options{})
			vxlanOverlay(t, tb, c.opts)
			l := startLinuxfp(t, tb)
			waitStatus(t, l, "flannel.1", "a tc program on flannel.1", func(it *status.Interface) bool {
				return it.Program != nil && it.Program.Hook == "tc" && it.TCEgress
			})
			if it, _ := l.Interface("flannel.1"); hasNote(it, "encapsulated in the fast path") != c.encap {
				t.Fatalf("flannel.1 notes %q", it.Notes)
			}
			before, beforeVx := readInterface(t, l, "in0"), readCounters(t, l, "flannel.1")
			tcpEchoTo(t, tb, "198.19.2.5", 300)
			in0, dv := readInterface(t, l, "in0"), readCounters(t, l, "flannel.1").sub(beforeVx)
			fwd := in0.Forwarded.Packets - before.Forwarded.Packets
			enc := in0.Encapsulated.Packets - before.Encapsulated.Packets
			if c.encap && (enc < 250 || fwd != 0) || !c.encap && (fwd < 250 || enc != 0) {
				t.Fatalf("gen -> pod: encapsulated %d, forwarded into flannel.1 %d (want encapsulation %v); to Linux %v",
					enc, fwd, c.encap, in0.Passed)
			}
			if dv.forwarded < 250 {
				t.Fatalf("pod -> gen: forwarded %d from flannel.1, to Linux %v", dv.forwarded, dv.passed)
			}
			out0 := readInterface(t, l, "out0")
			if dec := out0.Decapsulated.Packets; c.encap && dec < 250 || !c.encap && (dec != 0 || out0.Passed["vxlan_rx"].Packets < 250) {
				t.Fatalf("sink -> DUT: decapsulated %d on out0 (want %v), to Linux %v", dec, c.encap, out0.Passed)
			}
		})
	}
}

// readInterface is one interface's status.
func readInterface(t *testing.T, l *testbed.Linuxfp, iface string) *status.Interface {
	t.Helper()
	it, err := l.Interface(iface)
	if err != nil {
		t.Fatal(err)
	}
	return it
}
