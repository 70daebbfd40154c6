package e2e

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// A native nft blocklist (`ip daddr @blocklist drop` in a forward chain, an interval set) is
// decided in the fast path: packets to non-members forwarded, to members dropped; an element
// added or deleted is followed, and no datagram sent after `nft add element` returns arrives.
// So is a lookup of a concatenation (`ip daddr . udp dport @services drop`): the datagrams to a
// member's address and port dropped, and an element added followed, fenced until it is.
func TestNFTSetBlocklist(t *testing.T) {
	requireTool(t, "nft")
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbedAs(t, "nfs-e2e", h.opts)
			sh(t, tb.DUT, `nft add table inet lfpnfs
nft add chain inet lfpnfs forwarding { type filter hook forward priority 0 ; }
nft add set inet lfpnfs blocklist { type ipv4_addr ; flags interval ; }
nft add element inet lfpnfs blocklist { 198.19.3.0/30, 198.19.4.7-198.19.4.9 }
nft add rule inet lfpnfs forwarding ip daddr @blocklist drop
nft add set inet lfpnfs services { type ipv4_addr . inet_service ; elements = { 198.19.5.1 . 9, 198.19.5.2 . 53 } ; }
nft add rule inet lfpnfs forwarding ip daddr . udp dport @services drop`)
			l := startLinuxfp(t, tb)
			waitVerdict(t, tb, l, "198.19.3.5", "forwarded", 10)
			waitVerdict(t, tb, l, "198.19.3.1", "dropped", 0)
			waitVerdict(t, tb, l, "198.19.5.1", "dropped", 0)
			waitVerdict(t, tb, l, "198.19.5.2", "forwarded", 10) // port 9: not a member
			if n := probesAfter(t, tb, "nft add element inet lfpnfs services { 198.19.5.2 . 9 }", "198.19.5.2", 20); n != 0 {
				t.Errorf("nft add element (a concatenation): %d of 20 datagrams sent right after it returned arrived (Linux alone: none)", n)
			}
			waitVerdict(t, tb, l, "198.19.5.2", "dropped", 0)
			waitVerdict(t, tb, l, "198.19.4.9", "dropped", 0)
			waitVerdict(t, tb, l, "198.19.4.10", "forwarded", 10)
			if n := probesAfter(t, tb, "nft add element inet lfpnfs blocklist { 198.19.3.5 }", "198.19.3.5", 20); n != 0 {
				t.Errorf("nft add element: %d of 20 datagrams sent right after it returned arrived (Linux alone: none)", n)
			}
			// Followed: dropped by the fast path, not only while the fence holds the family.
			waitVerdict(t, tb, l, "198.19.3.5", "dropped", 0)
			sh(t, tb.DUT, "nft delete element inet lfpnfs blocklist { 198.19.4.7-198.19.4.9 }")
			waitVerdict(t, tb, l, "198.19.4.8", "forwarded", 10)
			waitVerdict(t, tb, l, "198.19.3.2", "dropped", 0)
		})
	}
}

// TestNFTFibLocal: `fib daddr type local` and `!= local` in a forward chain are decided in the
// fast path for destinations that are not local, and a destination made local (a local route
// that a policy rule before the local table's routes past, so that it is still forwarded, and
// IPv4's fib, which reads the local table alone, says local) is Linux's from the moment
// `ip route add` returns: Linux drops it by the rule.
func TestNFTFibLocal(t *testing.T) {
	requireTool(t, "nft")
	tb := newTestbedAs(t, "lfp-nffib", testbed.Options{})
	sh(t, tb.DUT, `nft add table inet lfpfib
nft add chain inet lfpfib forwarding { type filter hook forward priority 0 ; }
nft add rule inet lfpfib forwarding fib daddr type local drop
nft add rule inet lfpfib forwarding ip daddr 198.19.4.0/24 fib daddr type != local drop
ip rule add pref 10 to 198.19.3.0/24 lookup main
ip rule del pref 0
ip rule add pref 100 lookup local`)
	l := startLinuxfp(t, tb)
	waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)
	waitVerdict(t, tb, l, "198.19.4.1", "dropped", 0)
	if n := probesAfter(t, tb, "ip route add local 198.19.3.0/24 dev lo table local", "198.19.3.1", 20); n != 0 {
		t.Errorf("ip route add local: %d of 20 datagrams sent right after it returned arrived (Linux alone: none)", n)
	}
	waitVerdict(t, tb, l, "198.19.3.1", "filter", 0)
	waitVerdict(t, tb, l, "198.19.3.200", "filter", 0)
	waitVerdict(t, tb, l, "198.19.5.1", "forwarded", 10)
}
