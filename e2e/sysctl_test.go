package e2e

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Per-device sysctls that change a forwarding decision: the fast path follows them or hands the
// packets they govern to Linux, and with or without linuxfp the same packets arrive.

// arrivals sends 10 datagrams from gen to dst and returns how many reached the sink.
func arrivals(t *testing.T, tb *testbed.Testbed, dst string) int {
	t.Helper()
	return len(captureDstMACs(t, tb, 10, func() { sendUDP(t, tb, dst, 10) }))
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
			sh(t, tb.DUT, "ip -6 nexthop add id 70 via 2001:2:0:1::2 dev out0\nip -6 route add 2001:2:0:f170::/64 nhid 70")
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
			if out, err := tb.DUT.Run("ip", "-6", "route", "show", "2001:2:0:f170::/64"); err != nil || out == "" {
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
				"ip -6 addr add 2001:2:0:1::1/64 dev out0 nodad\nip -6 route add 2001:2:0:f103::/64 via 2001:2:0:1::2")
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

// net.ipv4.ip_forward_update_priority: ip_forward() sets the skb priority from the TOS only when
// it is 1. Only tc hands the fast path's packets to the egress device as skbs (an XDP frame has
// no priority, and a qdisc that reads it keeps XDP redirects away), so only tc is tested: a tcx
// program on out0's egress counts the packets leaving by their priority. Linux alone first, then
// linuxfp, with the sysctl at 1 and at 0.
func TestSysctlForwardUpdatePriority(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	prios := countEgressPriorities(t, tb, "out0")
	// IPTOS_LOWDELAY: priority 6 (TC_PRIO_INTERACTIVE) when ip_forward() sets it, else the
	// 0 the skb arrived with from gen's veth.
	const dst, lowDelay = "198.19.3.1", 0x10
	cases := []struct {
		sysctl string
		prio   int // the priority all 10 leave with
	}{{"1", 6}, {"0", 0}}
	check := func(l *testbed.Linuxfp, sysctl string, prio int) error {
		before, fwd := prios(), uint64(0)
		if l != nil {
			fwd = readCounters(t, l, "in0").forwarded
		}
		sendUDPTOS(t, tb, dst, 10, lowDelay)
		after := prios()
		if l != nil {
			if fwd = readCounters(t, l, "in0").forwarded - fwd; fwd < 10 {
				return fmt.Errorf("ip_forward_update_priority=%s: %d of 10 fast-pathed", sysctl, fwd)
			}
		}
		// Only priority 6 is the test's own: the DUT's neighbour discovery may leave with 0.
		six, zero := after[6]-before[6], after[0]-before[0]
		if (prio == 6 && six != 10) || (prio == 0 && (six != 0 || zero < 10)) {
			return fmt.Errorf("ip_forward_update_priority=%s: %d left with priority 6, %d with 0; want all 10 with %d",
				sysctl, six, zero, prio)
		}
		return nil
	}
	for _, c := range cases {
		sh(t, tb.DUT, "sysctl -qw net.ipv4.ip_forward_update_priority="+c.sysctl)
		if err := check(nil, c.sysctl, c.prio); err != nil {
			t.Fatal("Linux alone, " + err.Error())
		}
	}
	l := startLinuxfp(t, tb)
	if it, err := l.Interface("in0"); err != nil || it.Program == nil || it.Program.Hook != "tc" {
		t.Fatalf("in0: %+v (%v), want a tc program", it, err)
	}
	for _, c := range cases {
		sh(t, tb.DUT, "sysctl -qw net.ipv4.ip_forward_update_priority="+c.sysctl)
		eventually(t, 3*time.Second, "linuxfp with ip_forward_update_priority="+c.sysctl, func() error {
			return check(l, c.sysctl, c.prio)
		})
	}
}

// countEgressPriorities attaches to dev's tcx egress in the DUT a program that counts the
// packets leaving by skb->priority (0-15), and returns a reader of the counts.
func countEgressPriorities(t *testing.T, tb *testbed.Testbed, dev string) func() [16]uint64 {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	const skbPriority = 32 // offsetof(struct __sk_buff, priority)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.SchedCLS,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, skbPriority, asm.Word),
			asm.And.Imm(asm.R2, 15),
			asm.StoreMem(asm.RFP, -4, asm.R2, asm.Word),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, -1).WithSymbol("out"), // TCX_NEXT
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	idx := linkIndex(t, tb.DUT, dev)
	var lk link.Link
	if err := tb.DUT.Do(func() error {
		lk, err = link.AttachTCX(link.TCXOptions{Interface: idx, Program: prog, Attach: ebpf.AttachTCXEgress})
		return err
	}); err != nil {
		t.Fatalf("attach to %s's tcx egress: %v", dev, err)
	}
	t.Cleanup(func() { lk.Close() })
	return func() [16]uint64 {
		var c [16]uint64
		for k := range c {
			if err := m.Lookup(uint32(k), &c[k]); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
}

// sendUDPTOS sends n datagrams from gen to dst:9 with the IP TOS byte tos.
func sendUDPTOS(t *testing.T, tb *testbed.Testbed, dst string, n int, tos int) {
	t.Helper()
	err := tb.Gen.Do(func() error {
		c, err := net.Dial("udp", net.JoinHostPort(dst, "9"))
		if err != nil {
			return err
		}
		defer c.Close()
		raw, err := c.(*net.UDPConn).SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos) }); err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		for i := 0; i < n; i++ {
			c.Write([]byte(fmt.Sprintf("linuxfp e2e tos %d", i)))
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send to %s with tos %#x: %v", dst, tos, err)
	}
}
