package e2e

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Per-device sysctls that change a forwarding decision: the fast path follows them or hands the
// packets they govern to Linux, and with or without linuxfp the same packets arrive.

// arrivals sends 10 datagrams from gen to dst and returns how many reached the sink.
func arrivals(t *testing.T, tb *testbed.Testbed, dst string) int {
	t.Helper()
	return len(captureDstMACs(t, tb, func() { sendUDP(t, tb, dst, 10) }))
}

// disable_ipv6 on the ingress: ip6_rcv_core() drops all IPv6 arriving there. On the egress:
// ip6_output() drops what would leave there; a route through a nexthop object outlives the
// switch, but the device's neighbours do not (the fast path's lookup then hands the packet to
// Linux as an unresolved neighbour). Linux alone first, then linuxfp, at both hooks.
func TestSysctlDisableIPv6(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			in := testbed.Prefix6(3, 1).String()
			viaNH := testbed.Prefix6(0x70, 1).String()
			// gen keeps sending to the DUT when in0 stops answering neighbour solicitations.
			sh(t, tb.Gen, "ip -6 neigh replace 2001:2::1 lladdr "+tb.InMAC.String()+" dev eth0 nud permanent")
			sh(t, tb.DUT, "ip -6 nexthop add id 70 via 2001:2:0:1::2 dev out0\nip -6 route add 2001:2:1:70::/64 nhid 70")
			for _, dst := range []string{in, viaNH} {
				if n := arrivals(t, tb, dst); n != 10 {
					t.Fatalf("Linux alone, IPv6 on: %d of 10 datagrams to %s arrived", n, dst)
				}
			}

			sh(t, tb.DUT, "sysctl -qw net.ipv6.conf.in0.disable_ipv6=1")
			if n := arrivals(t, tb, in); n != 0 {
				t.Fatalf("Linux alone, disable_ipv6 on in0: %d datagrams arrived, want 0", n)
			}
			sh(t, tb.DUT, "sysctl -qw net.ipv6.conf.in0.disable_ipv6=0\nsysctl -qw net.ipv6.conf.out0.disable_ipv6=1")
			if out, err := tb.DUT.Run("ip", "-6", "route", "show", "2001:2:1:70::/64"); err != nil || out == "" {
				t.Fatalf("the route through the nexthop object did not outlive disable_ipv6 (%v): the test needs it", err)
			}
			if n := arrivals(t, tb, viaNH); n != 0 {
				t.Fatalf("Linux alone, disable_ipv6 on out0: %d datagrams arrived, want 0", n)
			}

			l := startLinuxfp(t, tb)
			waitVerdict(t, tb, l, viaNH, "fib_no_neighbour", 0)
			waitStatus(t, l, "in0", "in0 routes IPv6 while out0 has disable_ipv6", func(it *status.Interface) bool {
				return it.Program != nil && contains(it.Program.Families, "ipv6")
			})

			// out0 back (its addresses and routes do not come back by themselves): fast again.
			sh(t, tb.DUT, "sysctl -qw net.ipv6.conf.out0.disable_ipv6=0\n"+
				"ip -6 addr add 2001:2:0:1::1/64 dev out0 nodad\nip -6 route add 2001:2:1:3::/64 via 2001:2:0:1::2")
			waitVerdict(t, tb, l, in, "forwarded", 10)

			// The tester's case: IPv6 turned off on the ingress while linuxfp runs.
			sh(t, tb.DUT, "sysctl -qw net.ipv6.conf.in0.disable_ipv6=1")
			waitVerdict(t, tb, l, in, "family_off", 0)
			waitStatus(t, l, "in0", "ipv6 off on in0", func(it *status.Interface) bool {
				return hasNote(it, "ipv6 router off: net.ipv6.conf.in0.disable_ipv6=1") &&
					it.Program != nil && !contains(it.Program.Families, "ipv6") && contains(it.Program.Families, "ipv4")
			})
			waitVerdict(t, tb, l, testbed.Prefix4(3, 1).String(), "forwarded", 10)
			sh(t, tb.DUT, "sysctl -qw net.ipv6.conf.in0.disable_ipv6=0")
			waitVerdict(t, tb, l, in, "forwarded", 10)
		})
	}
}
