package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The fence: from the moment Linux has applied a configuration change (before the command
// that made it returns), every packet the change may affect goes to Linux until the fast path
// follows it. Datagrams sent right after a command returns, before linuxfp could have read the
// change, must meet the new configuration exactly as with Linux alone.

// probesAfter runs cmd in the DUT and, the moment it returns, sends n datagrams to dst:9 from
// gen; it returns how many arrive at the sink.
func probesAfter(t *testing.T, tb *testbed.Testbed, cmd string, dst string, n int) int {
	t.Helper()
	return probesAfterArgs(t, tb, strings.Fields(cmd), dst, n)
}

// probesAfterArgs is probesAfter for a command given as its arguments.
func probesAfterArgs(t *testing.T, tb *testbed.Testbed, argv []string, dst string, n int) int {
	t.Helper()
	arrived := 0
	for _, k := range probesAt(t, tb, argv, dst, n, []capturePoint{{tb.Sink, tb.SinkIfindex}})[0] {
		arrived += k
	}
	return arrived
}

func TestFenceNothingAfterReturn(t *testing.T) {
	requireTool(t, "iptables")
	requireTool(t, "ipset")
	requireTool(t, "nft")
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			sh(t, tb.DUT, "ipset create lfpfence hash:ip\niptables -A FORWARD -m set --match-set lfpfence dst -j DROP")
			l := startLinuxfp(t, tb)
			st, err := l.Client.Status()
			if err != nil {
				t.Fatal(err)
			}
			if !st.FenceWatch {
				t.Fatalf("the fence is off here (ipset watch: %s)", st.IPSetWatch)
			}
			cases := []struct{ do, dst, undo string }{
				{"iptables -A FORWARD -d 198.19.3.1 -j DROP", "198.19.3.1", "iptables -D FORWARD -d 198.19.3.1 -j DROP"},
				{"ipset add lfpfence 198.19.3.2", "198.19.3.2", "ipset del lfpfence 198.19.3.2"},
				{"nft insert rule ip filter FORWARD ip daddr 198.19.3.3 drop", "198.19.3.3", "nft flush chain ip filter FORWARD"},
				{"ip route replace unreachable 198.19.3.4/32", "198.19.3.4", "ip route del unreachable 198.19.3.4/32"},
				{"ip addr add 198.19.3.5/32 dev lo", "198.19.3.5", "ip addr del 198.19.3.5/32 dev lo"},
			}
			for _, c := range cases {
				waitVerdict(t, tb, l, c.dst, "forwarded", 10)
				before := readCounters(t, l, "in0")
				if n := probesAfter(t, tb, c.do, c.dst, 20); n != 0 {
					t.Errorf("%s: %d of 20 datagrams sent right after it returned arrived (Linux alone: none)", c.do, n)
				}
				t.Logf("%s: to Linux %v", c.do, readCounters(t, l, "in0").sub(before).ownOnly().passed)
				sh(t, tb.DUT, c.undo)
				if c.undo == "nft flush chain ip filter FORWARD" {
					sh(t, tb.DUT, "iptables -A FORWARD -m set --match-set lfpfence dst -j DROP")
				}
			}
			// The fence opens again: the stream is fast once linuxfp follows.
			waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)
			// Status names what the fence saw: each kind of command above, at least once.
			st, err = l.Client.Status()
			if err != nil {
				t.Fatal(err)
			}
			for _, class := range []string{"nftables", "ipset", "route", "address"} {
				if st.NetlinkChanges[class] == 0 {
					t.Errorf("status counts no %s change: %v", class, st.NetlinkChanges)
				}
			}
			time.Sleep(10 * time.Millisecond)
		})
	}
}

// Sysctl writes are seen before they are stored: one that makes the family Linux's (rp_filter,
// which linuxfp does not emulate) fences it from the write on; one that stores the value the
// sysctl holds already (a CNI plugin setting ip_forward=1 for every pod) fences nothing.
func TestFenceSysctl(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			l := startLinuxfp(t, tb)
			st, err := l.Client.Status()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(st.SysctlWatch, "event") || !st.FenceWatch {
				t.Fatalf("sysctl watch %q, fence %v: want events and the fence", st.SysctlWatch, st.FenceWatch)
			}
			waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)
			before := readCounters(t, l, "in0")
			if n := probesAfter(t, tb, "sysctl -qw net.ipv4.conf.in0.rp_filter=1", "198.19.3.1", 20); n != 20 {
				t.Errorf("%d of 20 datagrams arrived after rp_filter=1 (Linux forwards them: their source is routed back through in0)", n)
			}
			if d := readCounters(t, l, "in0").sub(before); d.forwarded != 0 {
				t.Errorf("%d datagrams fast-pathed right after rp_filter was turned on (linuxfp does not emulate it): to Linux %v", d.forwarded, d.passed)
			}
			waitPassed(t, tb, l, "198.19.3.1", "family_off")
			sh(t, tb.DUT, "sysctl -qw net.ipv4.conf.in0.rp_filter=0")
			waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)
			before = readCounters(t, l, "in0")
			if n := probesAfter(t, tb, "sysctl -qw net.ipv4.ip_forward=1", "198.19.3.1", 20); n != 20 {
				t.Errorf("%d of 20 datagrams arrived after ip_forward=1", n)
			}
			if d := readCounters(t, l, "in0").sub(before).ownOnly(); d.passed["fenced"] != 0 {
				t.Errorf("ip_forward=1 when it was 1 fenced %d datagrams", d.passed["fenced"])
			}
		})
	}
}

// waitFenceOpen waits until linuxfp follows every change made so far (no family fenced).
func waitFenceOpen(t *testing.T, l *testbed.Linuxfp) {
	t.Helper()
	eventually(t, 5*time.Second, "the fence open", func() error {
		st, err := l.Client.Status()
		if err != nil {
			return err
		}
		if len(st.Fenced) > 0 {
			return errString("fenced: " + strings.Join(st.Fenced, ", "))
		}
		return nil
	})
}

// In a cgroup namespace of its own (a container's), a cgroup/sysctl program would see only that
// cgroup's writes: linuxfp polls the sysctls instead, and says so.
func TestSysctlWatchInCgroupNamespace(t *testing.T) {
	requireTool(t, "unshare")
	tb := newTestbed(t, testbed.Options{})
	cmd := exec.Command("ip", "netns", "exec", tb.DUT.Name, "unshare", "--cgroup", linuxfpBin, "run")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(unix.SIGTERM)
		cmd.Wait()
	}()
	client := testbed.StatusClientIn(tb.DUT)
	eventually(t, 10*time.Second, "status in a cgroup namespace", func() error {
		st, err := client.Status()
		if err != nil {
			return err
		}
		if !strings.HasPrefix(st.SysctlWatch, "poll") || !strings.Contains(st.SysctlWatch, "cgroup namespace") {
			return errString("sysctl watch: " + st.SysctlWatch)
		}
		return nil
	})
}

// The fence counts only changes that can affect what the data plane holds: a route the kernel's
// FIB answers for alone (the data plane looks routes up live), a set no rule tests. Each of the
// others is counted in its families.
func TestFenceCountsWhatMatters(t *testing.T) {
	requireTool(t, "iptables")
	requireTool(t, "ipset")
	tb := newTestbed(t, testbed.Options{})
	sh(t, tb.DUT, `ipset create lfpused hash:ip
ipset create lfpunused hash:ip
iptables -A FORWARD -m set --match-set lfpused dst -j DROP`)
	l := startLinuxfp(t, tb)
	counts := func() map[string]uint64 {
		t.Helper()
		st, err := l.Client.Status()
		if err != nil {
			t.Fatal(err)
		}
		if !st.FenceWatch {
			t.Skip("no fence here")
		}
		return st.FenceCounts
	}
	for _, c := range []struct {
		cmd              string
		ipv4, ipv6, link uint64
	}{
		{"ip route replace 198.19.200.0/24 via 198.18.1.2", 0, 0, 0},
		{"ip route add 198.19.201.0/24 via 198.18.1.2", 0, 0, 0},
		{"ip route add blackhole 198.19.202.0/24", 0, 0, 0},
		{"ip route del 198.19.201.0/24", 0, 0, 0},
		{"ip -6 route replace 2001:2:0:99::/64 via 2001:2:0:1::2", 0, 0, 0},
		{"ip -6 route add 2001:2:0:98::/64 via 2001:2:0:1::2", 0, 0, 0},
		{"ipset add lfpunused 198.19.9.1", 0, 0, 0},
		{"ipset flush lfpunused", 0, 0, 0},
		// What observe reads of routes: metrics, local routes, multipath.
		{"ip route add 198.19.203.0/24 via 198.18.1.2 mtu 1400", 1, 0, 0},
		{"ip route add local 198.19.204.1 dev out0", 1, 0, 0},
		{"ip route add 198.19.205.0/24 nexthop via 198.18.1.2 nexthop via 198.18.0.2", 1, 0, 0},
		// Longer than a FIB cache block, with a source prefix, or expiring (lib/fibcache.h).
		{"ip route replace 198.19.200.1/32 via 198.18.1.2", 1, 0, 0},
		{"ip -6 route add 2001:2:0:97::1/128 via 2001:2:0:1::2", 0, 1, 0},
		{"ip -6 route add 2001:2:0:96::/64 from 2001:2::/64 via 2001:2:0:1::2", 0, 1, 0},
		{"ip -6 route add 2001:2:0:95::/64 via 2001:2:0:1::2 expires 300", 0, 1, 0},
		// An IPv6 route added without NLM_F_EXCL may join another as a multipath sibling.
		{"ip -6 route append 2001:2:0:98::/64 via 2001:2:0:1::3", 0, 1, 0},
		{"ipset add lfpused 198.19.9.1", 1, 1, 0},
		{"ipset rename lfpunused lfpother", 0, 0, 0},
		{"ipset swap lfpother lfpused", 1, 1, 0},
		{"ip addr add 198.18.7.1/24 dev out0", 1, 0, 0},
		{"iptables -A FORWARD -d 198.19.9.2 -j ACCEPT", 1, 0, 0},
		// Links: a new device holds nothing yet, up and down are the kernel's FIB's; what the
		// data plane holds of a device (MAC, MTU, name, master, bridge port settings) counts in
		// the link unit (per device).
		{"ip link add lfpd0 type veth peer name lfpd0p", 0, 0, 0},
		{"ip link add lfpbr0 type bridge", 0, 0, 0},
		{"ip link set lfpd0 up", 0, 0, 0},
		{"ip link set lfpd0 down", 0, 0, 0},
		{"ip link set lfpd0 mtu 1400", 0, 0, 1},
		{"ip link set lfpd0 address 02:00:00:00:00:99", 0, 0, 1},
		{"ip link set lfpd0 name lfpd1", 0, 0, 1},
		{"ip link set lfpd1 master lfpbr0", 0, 0, 1},
		{"bridge link set dev lfpd1 learning off", 0, 0, 1},
		{"ip link set lfpbr0 type bridge ageing_time 1000", 0, 0, 1},
		{"ip link del lfpd1", 0, 0, 0},
	} {
		before := counts()
		args := append([]string{"netns", "exec", tb.DUT.Name}, strings.Fields(c.cmd)...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", c.cmd, err, out)
		}
		after := counts()
		d4, d6, dl := after["ipv4"]-before["ipv4"], after["ipv6"]-before["ipv6"], after["link"]-before["link"]
		if d4 != c.ipv4 || d6 != c.ipv6 || dl != c.link {
			t.Errorf("%s: counted ipv4 %d, ipv6 %d, link %d; want %d, %d, %d", c.cmd, d4, d6, dl, c.ipv4, c.ipv6, c.link)
		}
	}
}

// A change is let through the fence only once the controller has taken in its event: here an
// ipset command (whose sets are read once ipset commands pause, 20 ms) followed by an address
// change the controller applies within a few ms. That apply must not open the family for the
// set's change it has not read yet.
func TestFenceWaitsForEveryCountedChange(t *testing.T) {
	requireTool(t, "ipset")
	requireTool(t, "iptables")
	tb := newTestbed(t, testbed.Options{})
	sh(t, tb.DUT, "ipset create lfpused hash:ip\niptables -A FORWARD -m set --match-set lfpused dst -j DROP")
	l := startLinuxfp(t, tb)
	waitVerdict(t, tb, l, "198.19.9.1", "forwarded", 10)
	for i, delay := range []string{"0.005", "0.01", "0.015"} {
		addr := fmt.Sprintf("198.19.9.%d", i+1)
		script := fmt.Sprintf("ipset add lfpused %s && ip addr add 198.18.%d.1/24 dev out0 && sleep %s", addr, 7+i, delay)
		if got := probesAfterArgs(t, tb, []string{"bash", "-c", script}, addr, 20); got != 0 {
			t.Errorf("%s returned, then %s later %d of 20 datagrams to %s arrived (Linux drops them)", script, delay, got, addr)
		}
	}
}
