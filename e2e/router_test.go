package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Each change made with iproute2 or sysctl is honoured: the fast path follows it or hands the
// affected packets to Linux.

func TestRouteAddDel(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.19.3.1")

	// A new prefix: no route yet, then one.
	waitPassed(t, tb, l, "198.19.77.1", "fib_not_forwarded")
	sh(t, tb.DUT, "ip route add 198.19.77.0/24 via 198.18.1.2")
	waitFastPath(t, tb, l, "198.19.77.1")
	// Route types Linux answers for.
	sh(t, tb.DUT, "ip route replace blackhole 198.19.77.0/24")
	waitPassed(t, tb, l, "198.19.77.1", "fib_blackhole")
	sh(t, tb.DUT, "ip route replace prohibit 198.19.77.0/24")
	waitPassed(t, tb, l, "198.19.77.1", "fib_prohibit")
	sh(t, tb.DUT, "ip route replace unreachable 198.19.77.0/24")
	waitPassed(t, tb, l, "198.19.77.1", "fib_unreachable")
	sh(t, tb.DUT, "ip route del 198.19.77.0/24")
	waitPassed(t, tb, l, "198.19.77.1", "fib_not_forwarded")

	// A route MTU metric below the packet size: Linux honours it, so must we.
	sh(t, tb.DUT, "ip route replace 198.19.3.0/24 via 198.18.1.2 mtu 40")
	waitPassed(t, tb, l, "198.19.3.1", "route_mtu")
}

func TestAddressAddDel(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.19.4.1")
	// The destination becomes one of the DUT's own addresses: delivered locally.
	sh(t, tb.DUT, "ip addr add 198.19.4.1/32 dev out0")
	waitPassed(t, tb, l, "198.19.4.1", "fib_not_forwarded")
	sh(t, tb.DUT, "ip addr del 198.19.4.1/32 dev out0")
	waitFastPath(t, tb, l, "198.19.4.1")

	// The gen's own address becomes local on the DUT too: its packets are now martian.
	sh(t, tb.DUT, "ip addr add 198.18.0.2/32 dev lo")
	waitPassed(t, tb, l, "198.19.4.1", "local_source")
	sh(t, tb.DUT, "ip addr del 198.18.0.2/32 dev lo")
	waitFastPath(t, tb, l, "198.19.4.1")

	// The egress subnet disappears with its address: the sink is unreachable.
	sh(t, tb.DUT, "ip addr del 198.18.1.1/24 dev out0")
	waitPassed(t, tb, l, "198.18.1.2", "fib_not_forwarded")
	sh(t, tb.DUT, "ip addr add 198.18.1.1/24 dev out0")
	waitFastPath(t, tb, l, "198.18.1.2")
}

func TestLinkDownUp(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.19.5.1")
	sh(t, tb.DUT, "ip link set out0 down")
	waitStatus(t, l, "out0", "out0 down: not an egress, its program waits", func(it *status.Interface) bool {
		return it.Program != nil && !it.Egress && hasNote(it, "down")
	})
	waitPassed(t, tb, l, "198.19.5.1", "fib_not_forwarded") // its routes are gone
	sh(t, tb.DUT, "ip link set out0 up")
	waitStatus(t, l, "out0", "out0 up again", func(it *status.Interface) bool { return it.Program != nil && it.Egress })
	// The routes via the sink come back with the interface? No: Linux removed them with the
	// link; a person re-adds them. Until then Linux answers.
	sh(t, tb.DUT, "ip route add 198.19.5.0/24 via 198.18.1.2")
	waitFastPath(t, tb, l, "198.19.5.1")
}

func TestNewInterface(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	// A second link between gen and DUT, created after linuxfp started.
	sh(t, tb.Gen, "ip link add eth1 type veth peer name in1 netns "+tb.DUT.Name+"\n"+
		"ip addr add 198.18.2.2/24 dev eth1\nip link set eth1 up\nethtool -K eth1 gro on")
	sh(t, tb.DUT, "ip addr add 198.18.2.1/24 dev in1\nip link set in1 up")
	waitStatus(t, l, "in1", "program on the new interface", func(it *status.Interface) bool {
		return it.Program != nil && it.Egress
	})
	sh(t, tb.Gen, "ip link del eth1")
	eventually(t, 3*time.Second, "in1 gone from status", func() error {
		if _, err := l.Interface("in1"); err == nil {
			return errString("in1 still listed")
		}
		return nil
	})
}

// The ingress device's MAC is data, not part of its program (interfaces of one kind share one):
// a new MAC takes effect without a new program, and frames to the old one go to Linux (which
// drops them as PACKET_OTHERHOST) instead of being forwarded.
func TestIngressMACChange(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.19.8.1")
	before, err := l.Interface("in0")
	if err != nil || before.Program == nil {
		t.Fatalf("in0: %+v, %v", before, err)
	}
	const newMAC = "02:00:5e:00:53:42"
	// gen keeps sending to the old MAC (no ARP of its own meanwhile).
	sh(t, tb.Gen, "ip neigh replace 198.18.0.1 dev eth0 lladdr "+nsMAC(t, tb.DUT, "in0").String()+" nud permanent")
	sh(t, tb.DUT, "ip link set in0 address "+newMAC)
	waitPassed(t, tb, l, "198.19.8.1", "not_for_us")
	sh(t, tb.Gen, "ip neigh replace 198.18.0.1 dev eth0 lladdr "+newMAC+" nud permanent")
	waitFastPath(t, tb, l, "198.19.8.1")
	after, err := l.Interface("in0")
	if err != nil || after.Program == nil || after.Program.ID != before.Program.ID {
		t.Fatalf("in0's program after the MAC change: %+v (%v), was %d: want the same program", after.Program, err, before.Program.ID)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestNeighbourChange(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.19.6.1")
	// STALE: Linux must see a packet to re-probe the neighbour.
	sh(t, tb.DUT, "ip neigh change 198.18.1.2 dev out0 nud stale")
	d := trafficDelta(t, tb, l, "198.19.6.1", 1)
	if d.passed["neighbour_stale"] != 1 && d.passed["neighbour_unknown"] != 1 {
		// The event may not have been applied yet: then the next packets show it.
		eventually(t, time.Second, "a STALE neighbour's packet goes to Linux", func() error {
			sh(t, tb.DUT, "ip neigh change 198.18.1.2 dev out0 nud stale")
			time.Sleep(20 * time.Millisecond)
			if d := trafficDelta(t, tb, l, "198.19.6.1", 1); d.passed["neighbour_stale"] == 0 {
				return errString("not handed to Linux")
			}
			return nil
		})
	}
	// Linux moved it to DELAY when it sent that packet: the fast path resumes.
	waitFastPath(t, tb, l, "198.19.6.1")

	// A new MAC for the nexthop: the fast path must use it at once.
	sh(t, tb.DUT, "ip neigh replace 198.18.1.2 dev out0 lladdr 02:00:5e:00:53:99 nud permanent")
	eventually(t, 3*time.Second, "frames carry the new MAC", func() error {
		got := captureDstMACs(t, tb, 3, func() { sendUDP(t, tb, "198.19.6.1", 3) })
		for _, m := range got {
			if m != "02:00:5e:00:53:99" {
				return errString("saw " + strings.Join(got, ","))
			}
		}
		if len(got) == 0 {
			return errString("nothing captured")
		}
		return nil
	})
	// Unresolved: the first packet goes to Linux, which resolves the neighbour (ARP) and sends
	// it; then the fast path takes over again. (Right after the command, the fence may still
	// hand it to Linux for that: fenced.)
	sh(t, tb.DUT, "ip neigh del 198.18.1.2 dev out0")
	if d := trafficDelta(t, tb, l, "198.19.6.1", 1); d.passed["fib_no_neighbour"]+d.passed["fenced"] != 1 {
		t.Fatalf("first packet to a deleted neighbour: fast-pathed %d, to Linux %v", d.forwarded, d.passed)
	}
	waitFastPath(t, tb, l, "198.19.6.1")
}

func TestSysctlForwarding(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.19.7.1")
	sh(t, tb.DUT, "sysctl -qw net.ipv4.ip_forward=0")
	waitStatus(t, l, "in0", "ipv4 off on in0", func(it *status.Interface) bool {
		return hasNote(it, "ip_forward=0") && (it.Program == nil || !contains(it.Program.Families, "ipv4"))
	})
	sh(t, tb.DUT, "sysctl -qw net.ipv4.ip_forward=1")
	waitFastPath(t, tb, l, "198.19.7.1")
	sh(t, tb.DUT, "sysctl -qw net.ipv4.conf.in0.rp_filter=1")
	waitStatus(t, l, "in0", "ipv4 off on in0 with rp_filter", func(it *status.Interface) bool {
		return hasNote(it, "rp_filter=1") && (it.Program == nil || !contains(it.Program.Families, "ipv4"))
	})
	sh(t, tb.DUT, "sysctl -qw net.ipv4.conf.in0.rp_filter=0")
	waitFastPath(t, tb, l, "198.19.7.1")
	// A sysctl without a netlink event: only the cgroup/sysctl hook (or the poll) sees it.
	sh(t, tb.DUT, "ip route add 198.19.90.0/24 nexthop via 198.18.1.2 nexthop via 198.18.1.2 dev out0 weight 2")
	sh(t, tb.DUT, "sysctl -qw net.ipv4.fib_multipath_hash_policy=1")
	waitStatus(t, l, "in0", "ipv4 off with an L4 multipath hash", func(it *status.Interface) bool {
		return hasNote(it, "fib_multipath_hash_policy=1")
	})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestNetfilterRules(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.19.8.1")
	// Listing creates empty tables with ACCEPT policies: nothing changes for forwarded packets.
	sh(t, tb.DUT, "iptables -L -n")
	time.Sleep(50 * time.Millisecond)
	waitFastPath(t, tb, l, "198.19.8.1")

	// A rule forwarded packets traverse: the filter module evaluates it (drops at XDP; the
	// filter tests cover the rest), and IPv6 is not affected.
	sh(t, tb.DUT, "iptables -A FORWARD -d 198.19.8.0/24 -j DROP")
	waitStatus(t, l, "in0", "ipv4 with the filter module", func(it *status.Interface) bool {
		return hasNote(it, "ipv4 filter module") && it.Program != nil && contains(it.Program.Families, "ipv4") &&
			contains(it.Program.Families, "ipv6")
	})
	waitVerdict(t, tb, l, "198.19.8.1", "dropped", 0)
	sh(t, tb.DUT, "iptables -D FORWARD -d 198.19.8.0/24 -j DROP")
	waitFastPath(t, tb, l, "198.19.8.1")

	// Native nftables, an inet table, with a rule linuxfp does not model (log): the packets it
	// may see go to Linux; a counter-only rule changes no verdict.
	sh(t, tb.DUT, "nft add table inet t\nnft add chain inet t fw { type filter hook forward priority 0 ; }\nnft add rule inet t fw counter\nnft add rule inet t fw meta l4proto udp log")
	waitVerdict(t, tb, l, "198.19.8.1", "filter", 10)
	sh(t, tb.DUT, "nft delete table inet t")
	waitFastPath(t, tb, l, "198.19.8.1")

	// Rules in INPUT do not see forwarded packets.
	sh(t, tb.DUT, "iptables -A INPUT -p tcp --dport 22 -j DROP")
	time.Sleep(50 * time.Millisecond)
	waitFastPath(t, tb, l, "198.19.8.1")
}

func TestKillFallsBackToLinux(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			l, err := tb.StartLinuxfp(linuxfpBin)
			if err != nil {
				t.Fatal(err)
			}
			stopAtCleanup(t, l) // if the test fails before the kill
			if it, err := l.Interface("in0"); err != nil || it.Program == nil || it.Program.Hook != h.hook {
				t.Fatalf("in0 runs %+v (%v), want hook %s", it, err, h.hook)
			}
			waitFastPath(t, tb, l, "198.19.9.1")
			l.Kill() // SIGKILL: no chance to clean up
			// The kernel drops the links with the process: no stale fast path remains.
			eventually(t, 3*time.Second, "programs detached after kill -9", func() error {
				if progAttached(t, tb.DUT, "in0") || progAttached(t, tb.DUT, "out0") {
					return errString("program still attached")
				}
				return nil
			})
			if _, err := tb.Gen.Run("ping", "-c", "2", "-i", "0.1", "-W", "2", "198.18.1.2"); err != nil {
				t.Fatalf("Linux does not forward after linuxfp died: %v", err)
			}
			// And a fresh linuxfp can start in the same namespace.
			startLinuxfp(t, tb)
		})
	}
}

func TestStopDetaches(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			l, err := tb.StartLinuxfp(linuxfpBin)
			if err != nil {
				t.Fatal(err)
			}
			stopAtCleanup(t, l) // if the test fails before the stop
			if !progAttached(t, tb.DUT, "in0") {
				t.Fatal("no program on in0 while running")
			}
			if err := l.Stop(); err != nil {
				t.Fatalf("stop: %v\n%s", err, l.Log.String())
			}
			if progAttached(t, tb.DUT, "in0") || progAttached(t, tb.DUT, "out0") {
				t.Fatal("program left attached after SIGTERM")
			}
			if !strings.Contains(l.Log.String(), "all programs detached") {
				t.Fatalf("no shutdown message in the log:\n%s", l.Log.String())
			}
		})
	}
}

func TestSecondInstanceRefused(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	startLinuxfp(t, tb)
	out, err := tb.DUT.Run(linuxfpBin, "run")
	if err == nil || !strings.Contains(out, "already running") {
		t.Fatalf("second linuxfp in the same namespace: err %v, output %q", err, out)
	}
}

// Someone else's XDP program is never replaced.
func TestForeignXDPProgramKept(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	var lk link.Link
	err = tb.DUT.Do(func() error {
		in0, err := netlink.LinkByName("in0")
		if err != nil {
			return err
		}
		lk, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: in0.Attrs().Index})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	info, _ := prog.Info()
	id, _ := info.ID()

	l2 := startLinuxfpWaitingFor(t, tb, "out0")
	waitStatus(t, l2, "in0", "in0 left alone with a note", func(it *status.Interface) bool {
		return it.Program == nil && hasNote(it, "someone else")
	})
	out, _ := tb.DUT.Run("ip", "-d", "link", "show", "in0")
	if !strings.Contains(out, "prog/xdp id "+itoa(int(id))) {
		t.Fatalf("the foreign program was replaced:\n%s", out)
	}
}

// A veth whose peer cannot receive XDP frames (no XDP program, no GRO) is never an XDP redirect
// target. With --hook xdp its packets go to Linux and none is lost; with the default hook they
// are forwarded by the tc program that follows XDP, attached when the first one arrives (a tc
// redirect needs no NAPI at the egress). When the peer gains GRO, the kernel's XDP-feature event makes it a target.
func TestEgressWithoutNAPI(t *testing.T) {
	for _, hook := range []string{"xdp", "auto"} {
		t.Run(hook, func(t *testing.T) {
			tb := newTestbed(t, testbed.Options{NoGRO: true, TxChecksumOff: true})
			l := startLinuxfpWaitingFor(t, tb, "in0", "--hook", hook)
			waitStatus(t, l, "out0", "out0 not an egress", func(it *status.Interface) bool {
				return !it.Egress && strings.Contains(it.EgressNote, "GRO")
			})
			if out, err := tb.Gen.Run("ping", "-c", "20", "-i", "0.01", "-W", "2", "198.18.1.2"); err != nil || !strings.Contains(out, " 0% packet loss") {
				t.Fatalf("packets lost with a non-NAPI egress: %v\n%s", err, out)
			}
			if hook == "auto" {
				// Asked for by the first packet XDP could not redirect (the pings).
				waitStatus(t, l, "in0", "in0 XDP with tc after it", func(it *status.Interface) bool {
					return it.Program != nil && it.Program.Hook == "xdp" && it.Program.TCAfterXDP
				})
			}
			in0, err := l.Interface("in0")
			if err != nil {
				t.Fatal(err)
			}
			toTC := in0.ToTC.Packets
			d := trafficDelta(t, tb, l, "198.19.10.1", 5).ownOnly()
			switch hook {
			case "xdp":
				if d.forwarded != 0 || d.passed["egress_not_ready"] == 0 {
					t.Fatalf("fast-pathed %d, to Linux %v; want all egress_not_ready", d.forwarded, d.passed)
				}
			case "auto":
				in0, err = l.Interface("in0")
				if err != nil {
					t.Fatal(err)
				}
				if d.forwarded != 5 || len(d.passed) != 0 || in0.ToTC.Packets-toTC != 5 {
					t.Fatalf("forwarded %d, to Linux %v, handed to tc %d; want all 5 handed to tc and forwarded there",
						d.forwarded, d.passed, in0.ToTC.Packets-toTC)
				}
			}
			sh(t, tb.Sink, "ethtool -K eth0 gro on")
			waitStatus(t, l, "out0", "out0 an egress once the sink has GRO", func(it *status.Interface) bool { return it.Egress })
			waitFastPath(t, tb, l, "198.19.10.1")
		})
	}
}

// A tc redirect hands the skb to the egress device's transmit path: no NAPI needed there.
func TestTCEgressWithoutNAPI(t *testing.T) {
	tb := newTestbed(t, testbed.Options{NoGRO: true})
	l := startLinuxfp(t, tb)
	waitStatus(t, l, "in0", "tc on in0", func(it *status.Interface) bool { return it.Program != nil && it.Program.Hook == "tc" })
	waitFastPath(t, tb, l, "198.19.10.1")
	tcpEcho(t, tb, 100)
}

func TestIPv6Forwarding(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "2001:2:0:f103::1")
	sh(t, tb.DUT, "sysctl -qw net.ipv6.conf.all.forwarding=0")
	waitStatus(t, l, "in0", "ipv6 off", func(it *status.Interface) bool {
		return it.Program != nil && !contains(it.Program.Families, "ipv6")
	})
	if _, err := tb.Gen.Run("ping", "-6", "-c", "1", "-W", "1", "2001:2:0:1::2"); err == nil {
		t.Fatal("IPv6 forwarded although forwarding is off")
	}
}

// A routing daemon installing 10,000 routes at once does not cause 10,000 reloads.
func TestRouteBurstCoalesced(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	before, err := l.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := 0; i < 10000; i++ {
		b.WriteString("route add 198.18.")
		b.WriteString(itoa(128 + i/250))
		b.WriteString(".")
		b.WriteString(itoa(i % 250))
		b.WriteString("/32 via 198.18.1.2\n")
	}
	start := time.Now()
	if err := tb.DUT.Do(func() error { return ipBatch(b.String()) }); err != nil {
		t.Fatal(err)
	}
	loaded := time.Since(start)
	waitFastPath(t, tb, l, "198.18.150.7")
	after, err := l.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	applies := after.Applies - before.Applies
	t.Logf("10,000 routes loaded in %s, reflected after %d data plane updates for %d events", loaded, applies, after.Events-before.Events)
	if applies > 1000 {
		t.Fatalf("%d updates for 10,000 routes: bursts are not coalesced", applies)
	}
	for _, it := range after.Interfaces {
		for _, b := range before.Interfaces {
			if it.Name == b.Name && it.Program != nil && b.Program != nil && it.Program.ID != b.Program.ID {
				t.Errorf("%s program replaced by route changes (%d -> %d): routes are data, not program", it.Name, b.Program.ID, it.Program.ID)
			}
		}
	}
}

// A veth peer whose stack leaves TCP/UDP checksums to offload (veth's default, containers) sends
// CHECKSUM_PARTIAL skbs; a native XDP redirect would lose that state and the receiver would drop
// the segments. linuxfp attaches at tc then (the skb as it is), native XDP when the peer computes
// checksums itself, and follows the peer's setting as it changes (events from the peer's
// namespace), switching hooks while TCP flows.
func TestChecksumOffloadPeers(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	hookOf := func(want string) func(*status.Interface) bool {
		return func(it *status.Interface) bool { return it.Program != nil && it.Program.Hook == want }
	}
	waitStatus(t, l, "in0", "tc on in0 (peer offloads checksums)", hookOf("tc"))
	if it, _ := l.Interface("in0"); !hasNote(it, "checksums left to offload") {
		t.Fatalf("no reason given for tc: %q", it.Notes)
	}
	before := readCounters(t, l, "in0")
	tcpEcho(t, tb, 200)
	if d := readCounters(t, l, "in0").sub(before); d.forwarded < 100 {
		t.Fatalf("TCP not fast-pathed at tc: forwarded %d, to Linux %v", d.forwarded, d.passed)
	}

	sh(t, tb.Gen, "ethtool -K eth0 tx off")
	sh(t, tb.Sink, "ethtool -K eth0 tx off")
	waitStatus(t, l, "in0", "native XDP on in0 once gen computes checksums", hookOf("xdp"))
	waitStatus(t, l, "out0", "native XDP on out0 once the sink computes checksums", hookOf("xdp"))
	before = readCounters(t, l, "in0")
	tcpEcho(t, tb, 200)
	if d := readCounters(t, l, "in0").sub(before); d.forwarded < 100 {
		t.Fatalf("TCP not fast-pathed with native XDP: forwarded %d, to Linux %v", d.forwarded, d.passed)
	}

	sh(t, tb.Gen, "ethtool -K eth0 tx on")
	waitStatus(t, l, "in0", "tc again when gen offloads again", hookOf("tc"))
	tcpEcho(t, tb, 50)
	if out, _ := tb.Sink.Run("nstat", "-az", "TcpInCsumErrors"); strings.Contains(out, "TcpInCsumErrors") &&
		!strings.Contains(strings.Join(strings.Fields(out), " "), "TcpInCsumErrors 0") {
		t.Fatalf("the sink saw bad TCP checksums:\n%s", out)
	}
}
