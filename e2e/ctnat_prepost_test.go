package e2e

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// kube-proxy's nftables mode always has a filter chain on prerouting, before DNAT, whose one
// rule needs a new connection. It cannot act on an established packet, so translated
// connections stay fast; a prerouting rule that only accepts keeps them fast too, and one that
// could drop an established packet sends them to Linux (ct_nat) as before.
func TestConntrackNATPreroutingChains(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			sh(t, tb.Sink, "ip addr add 198.19.0.1/32 dev eth0")
			sh(t, tb.DUT, `iptables -t nat -A PREROUTING -d 198.19.0.99 -p tcp -j DNAT --to-destination 198.19.0.1
nft add table ip kp
nft add chain ip kp firewall-check
nft add chain ip kp filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }
nft add rule ip kp filter-prerouting-pre-dnat ct state new jump firewall-check`)
			l := startLinuxfp(t, tb)
			translating := "translating them as their entry says"
			waitStatus(t, l, "in0", "conntrack translating", func(it *status.Interface) bool {
				return it.Program != nil && contains(it.Program.Families, "ipv4") && hasNote(it, translating)
			})
			natFastPathed(t, tb, l, "ct state new jump", true)

			sh(t, tb.DUT, "nft add rule ip kp filter-prerouting-pre-dnat ip saddr 198.18.0.0/15 counter accept")
			waitFenceOpen(t, l) // the fence closes as the command returns, until linuxfp follows
			natFastPathed(t, tb, l, "and ip saddr accept", true)

			sh(t, tb.DUT, "nft add rule ip kp filter-prerouting-pre-dnat ip daddr 198.19.0.200 drop")
			waitFenceOpen(t, l)
			waitStatus(t, l, "in0", "conntrack not translating", func(it *status.Interface) bool {
				return hasNote(it, "translated ones: Linux's") && !hasNote(it, translating)
			})
			natFastPathed(t, tb, l, "and ip daddr drop", false)
		})
	}
}

// natFastPathed runs a connection through the DUT's DNAT and checks its established packets,
// both ways, are all fast-pathed (fast), or all handed to Linux as ct_nat.
func natFastPathed(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, name string, fast bool) {
	t.Helper()
	st0, _ := l.Client.Status()
	ec := dialEchoVia(t, tb, "198.19.0.1", "198.19.0.99")
	defer ec.close()
	ec.exchange(t, 5)
	if fast {
		waitLiberalMarks(t, l, name+": connection marked liberal", st0.CTLiberal+1)
	}
	ec.exchange(t, 5) // the other direction's first segments meet the mark too
	midIn, midOut := readCounters(t, l, "in0"), readCounters(t, l, "out0")
	ec.exchange(t, 300)
	din, dout := readCounters(t, l, "in0").sub(midIn).ownOnly(), readCounters(t, l, "out0").sub(midOut).ownOnly()
	t.Logf("%s: forwarded %d out and %d back, to Linux %v and %v", name, din.forwarded, dout.forwarded, din.passed, dout.passed)
	if fast && (din.forwarded < 300 || dout.forwarded < 300 || len(din.passed)+len(dout.passed) > 0) {
		t.Fatalf("%s: established, translated connection: forwarded %d out and %d back, to Linux %v and %v; want all forwarded",
			name, din.forwarded, dout.forwarded, din.passed, dout.passed)
	}
	if !fast && (din.forwarded+dout.forwarded > 0 || din.passed["ct_nat"] < 300 || dout.passed["ct_nat"] < 300) {
		t.Fatalf("%s: established, translated connection: forwarded %d out and %d back, to Linux %v and %v; want all to Linux as ct_nat",
			name, din.forwarded, dout.forwarded, din.passed, dout.passed)
	}
}
