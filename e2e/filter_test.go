package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The filter module: iptables rules on the forward path are classified in the fast path (DROP
// at XDP), per rule: a rule it cannot evaluate sends only the packets that could reach it to
// Linux; the rest of the family stays fast.

// filterDelta sends n datagrams to dst and returns in0's forwarded and filter-dropped counts,
// its counts by reason, and how many arrived at the sink.
func filterDelta(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, dst string, n int) (fwd, dropped uint64, passed map[string]uint64, arrived int) {
	t.Helper()
	before, err := l.Interface("in0")
	if err != nil {
		t.Fatal(err)
	}
	arrived = len(captureDstMACs(t, tb, n, func() { sendUDP(t, tb, dst, n) }))
	after, err := l.Interface("in0")
	if err != nil {
		t.Fatal(err)
	}
	passed = map[string]uint64{}
	for r, c := range after.Passed {
		if d := c.Packets - before.Passed[r].Packets; d > 0 {
			passed[r] = d
		}
	}
	return after.Forwarded.Packets - before.Forwarded.Packets, after.Dropped.Packets - before.Dropped.Packets, passed, arrived
}

// waitVerdict waits until datagrams to dst meet want: "forwarded" (fast path, all arrive),
// "dropped" (fast path drop, none arrive), or a reason they go to Linux for (then arrived must
// equal arriving: Linux's verdict).
func waitVerdict(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, dst, want string, arriving int) {
	t.Helper()
	eventually(t, 5*time.Second, dst+": "+want, func() error {
		fwd, dropped, passed, arrived := filterDelta(t, tb, l, dst, 10)
		ok := false
		switch want {
		case "forwarded":
			ok = fwd >= 10 && arrived == 10
		case "dropped":
			ok = dropped >= 10 && arrived == 0 && fwd == 0
		default:
			ok = passed[want] >= 10 && fwd == 0 && dropped == 0 && arrived == arriving
		}
		if !ok {
			return fmt.Errorf("forwarded %d, dropped %d, arrived %d, to Linux %v", fwd, dropped, arrived, passed)
		}
		return nil
	})
}

// TestIPTablesAddrtype: iptables' `-m addrtype --dst-type LOCAL` (kube-proxy's and Docker's form),
// `! --dst-type LOCAL` and `! --src-type LOCAL --limit-iface-in` in FORWARD, IPv4 and IPv6, are
// decided in the fast path for addresses no local route covers, with the verdicts Linux alone
// gives (counted before linuxfp starts). A destination made local (a local route that a policy
// rule routes past, so that it is still forwarded, while IPv4's addrtype reads the local table
// and says local) is Linux's from the moment `ip route add` returns: Linux drops it by the rule.
func TestIPTablesAddrtype(t *testing.T) {
	requireTool(t, "iptables")
	requireTool(t, "ip6tables")
	tb := newTestbedAs(t, "lfp-addrtype", testbed.Options{})
	sh(t, tb.DUT, `iptables -A FORWARD -m addrtype --dst-type LOCAL -j DROP
iptables -A FORWARD -d 198.19.4.0/24 -m addrtype ! --dst-type LOCAL -j DROP
iptables -A FORWARD -d 198.19.6.0/24 -m addrtype ! --src-type LOCAL --limit-iface-in -j DROP
ip6tables -A FORWARD -m addrtype --dst-type LOCAL -j DROP
ip6tables -A FORWARD -d 2001:2:0:f104::/64 -m addrtype ! --dst-type LOCAL -j DROP
ip rule add pref 10 to 198.19.3.0/24 lookup main
ip rule del pref 0
ip rule add pref 100 lookup local`)
	cases := []struct {
		dst     string
		arrives bool
	}{
		{"198.19.3.1", true}, {"198.19.4.1", false}, {"198.19.5.1", true}, {"198.19.6.1", false},
		{"2001:2:0:f103::1", true}, {"2001:2:0:f104::1", false},
	}
	for _, c := range cases {
		arrived := len(captureDstMACs(t, tb, 10, func() { sendUDP(t, tb, c.dst, 10) }))
		if c.arrives && arrived != 10 || !c.arrives && arrived != 0 {
			t.Fatalf("Linux alone: %d of 10 datagrams to %s arrived (want all: %v)", arrived, c.dst, c.arrives)
		}
	}
	l := startLinuxfp(t, tb)
	for _, c := range cases {
		if c.arrives {
			waitVerdict(t, tb, l, c.dst, "forwarded", 10)
		} else {
			waitVerdict(t, tb, l, c.dst, "dropped", 0)
		}
	}
	if n := probesAfter(t, tb, "ip route add local 198.19.3.0/24 dev lo table local", "198.19.3.1", 20); n != 0 {
		t.Errorf("ip route add local: %d of 20 datagrams sent right after it returned arrived (Linux alone: none)", n)
	}
	waitVerdict(t, tb, l, "198.19.3.1", "filter", 0)
	waitVerdict(t, tb, l, "198.19.5.1", "forwarded", 10)
}

func TestFilterIptables(t *testing.T) {
	requireTool(t, "iptables")
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)

	// A blacklist rule: dropped at XDP; other destinations stay on the fast path.
	sh(t, tb.DUT, "iptables -A FORWARD -d 198.19.3.0/24 -j DROP")
	waitVerdict(t, tb, l, "198.19.3.1", "dropped", 0)
	waitVerdict(t, tb, l, "198.19.4.1", "forwarded", 10)
	// Per-rule counters of the fast path (iptables -v does not see these packets).
	st, err := l.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	counted := false
	for _, r := range st.FilterRules {
		counted = counted || (r.Family == "ipv4" && strings.Contains(r.Rule, "ip filter FORWARD rule 1") && r.Counter.Packets >= 10)
	}
	if !counted {
		t.Fatalf("no fast-path counter for the DROP rule: %+v", st.FilterRules)
	}

	// A rule with a target linuxfp does not model (LOG): only the packets that reach it go to
	// Linux, which logs and lets them through.
	sh(t, tb.DUT, "iptables -I FORWARD -d 198.19.4.0/24 -j LOG --log-prefix lfp-e2e")
	waitVerdict(t, tb, l, "198.19.4.1", "filter", 10)
	waitVerdict(t, tb, l, "198.19.5.1", "forwarded", 10)
	waitVerdict(t, tb, l, "198.19.3.1", "dropped", 0)

	// Ports, protocols, interfaces, negation, a user chain with RETURN.
	sh(t, tb.DUT, `iptables -F FORWARD
iptables -N LFP
iptables -A LFP -p udp --dport 9 -d 198.19.7.0/24 -j RETURN
iptables -A LFP -i in0 -o out0 -j DROP
iptables -A FORWARD ! -s 198.18.0.0/24 -j ACCEPT
iptables -A FORWARD -j LFP`)
	waitVerdict(t, tb, l, "198.19.7.1", "forwarded", 10)
	waitVerdict(t, tb, l, "198.19.8.1", "dropped", 0)

	// An ipset blacklist: membership changes (which send no event) are followed.
	requireTool(t, "ipset")
	sh(t, tb.DUT, `iptables -F FORWARD
ipset create lfpblk hash:ip
iptables -A FORWARD -m set --match-set lfpblk dst -j DROP`)
	waitVerdict(t, tb, l, "198.19.9.1", "forwarded", 10)
	sh(t, tb.DUT, "ipset add lfpblk 198.19.9.1")
	waitVerdict(t, tb, l, "198.19.9.1", "dropped", 0)
	waitVerdict(t, tb, l, "198.19.9.2", "forwarded", 10)
	sh(t, tb.DUT, "ipset del lfpblk 198.19.9.1")
	waitVerdict(t, tb, l, "198.19.9.1", "forwarded", 10)

	// NAT: netfilter now tracks connections (the conntrack module, see conntrack_test.go): a
	// new one is Linux's to decide (and masquerade); the rest of its datagrams the fast path
	// translates as the entry says.
	sh(t, tb.DUT, "iptables -t nat -A POSTROUTING -o out0 -j MASQUERADE")
	eventually(t, 5*time.Second, "masqueraded datagrams", func() error {
		fwd, dropped, passed, arrived := filterDelta(t, tb, l, "198.19.10.1", 10)
		if fwd != 9 || dropped != 0 || arrived != 10 || passed["ct_new"] != 1 {
			return fmt.Errorf("forwarded %d, dropped %d, arrived %d, to Linux %v; want the first ct_new, the rest translated",
				fwd, dropped, arrived, passed)
		}
		return nil
	})
	// Without the nat table nothing tracks connections any more.
	sh(t, tb.DUT, `nft delete table ip nat
iptables -F FORWARD
iptables -F LFP
iptables -X LFP`)
	waitVerdict(t, tb, l, "198.19.10.1", "forwarded", 10)
}
