package e2e

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The FIB cache (bpf/lib/fibcache.h) answers the router's lookups from what the kernel answered
// before, until a change can alter the answer. These tests make the kernel change its answer
// without any netlink request in the DUT's namespace, with linuxfp's controller frozen
// (SIGSTOP; the answer is asked again after that, so that no apply of the controller's moves
// the cache on), so that only the watchers' tracepoints can tell the data plane: packets sent
// afterwards must go where Linux sends them.

// freeze stops linuxfp's process until the end of the test (or thaw).
func freeze(t *testing.T, l *testbed.Linuxfp) (thaw func()) {
	t.Helper()
	if err := l.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thaw = func() { l.Signal(syscall.SIGCONT) }
	t.Cleanup(thaw)
	return thaw
}

// A neighbour's new MAC learnt from an ARP request (the kernel's data path, no request): the
// next packets carry it, whether the neighbour is the gateway of the destination's route (the
// answer kept for its block) or the destination itself, on a connected route (the answer kept
// for that destination alone).
func TestFibCacheNeighbourLearnt(t *testing.T) {
	for _, h := range hookTestbeds {
		for _, dst := range []struct{ name, addr string }{{"gateway", "198.19.6.1"}, {"connected", "198.18.1.2"}} {
			t.Run(h.hook+"/"+dst.name, func(t *testing.T) { testFibCacheNeighbourLearnt(t, h.opts, dst.addr) })
		}
	}
}

func testFibCacheNeighbourLearnt(t *testing.T, opts testbed.Options, dst string) {
	tb := newTestbed(t, opts)
	// Datagrams to the sink's own address would draw ICMP port unreachable, after which the
	// sender's connected socket fails its next write.
	sh(t, tb.Sink, "iptables -A INPUT -p udp --dport 9 -j DROP")
	l := startLinuxfp(t, tb, "--fib-cache")
	waitFibCache(t, l, "ipv4", true)
	waitFastPath(t, tb, l, dst)
	const newMAC = "02:00:5e:00:53:77"
	sh(t, tb.Sink, "ip link set eth0 address "+newMAC+"\nip neigh flush dev eth0")
	thaw := freeze(t, l)
	// Answered once more now, kept under the generation the frozen controller leaves.
	sendUDP(t, tb, dst, 5)
	// The sink asks for the DUT's MAC: the DUT learns the sink's new one from the request.
	tb.Sink.Run("ping", "-c", "1", "-W", "1", "198.18.1.1")
	eventually(t, 3*time.Second, "the DUT learnt the new MAC", func() error {
		out, _ := tb.DUT.Run("ip", "neigh", "show", "198.18.1.2", "dev", "out0")
		if !strings.Contains(out, newMAC) {
			return errString(out)
		}
		return nil
	})
	got := captureDstMACs(t, tb, 5, func() { sendUDP(t, tb, dst, 5) })
	thaw()
	if len(got) != 5 {
		t.Fatalf("sink got %d of 5 datagrams: %v", len(got), got)
	}
	for _, m := range got {
		if m != newMAC {
			t.Fatalf("frames to %v, want all to %s (Linux uses the MAC it learnt)", got, newMAC)
		}
	}
}

// altPath adds a second egress to the DUT: alt0 (198.18.3.1/24) to a namespace alt (eth0,
// 198.18.3.2/24), with the DUT's neighbour for it resolved. Returns alt and its eth0's ifindex.
func altPath(t *testing.T, tb *testbed.Testbed) (*nsutil.NS, int) {
	t.Helper()
	alt, err := nsutil.New("lfp-fc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alt.Close() })
	sh(t, tb.DUT, "ip link add alt0 type veth peer name eth0 netns "+alt.Name+"\n"+
		"ip addr add 198.18.3.1/24 dev alt0\nip link set alt0 up")
	sh(t, alt, "ip addr add 198.18.3.2/24 dev eth0\nip link set eth0 up\nip link set lo up\n"+
		"ethtool -K eth0 gro on\nip route add default via 198.18.3.1")
	if _, err := tb.DUT.Run("ping", "-c", "1", "-W", "2", "198.18.3.2"); err != nil {
		t.Fatalf("DUT cannot reach alt: %v", err)
	}
	_, idx, err := testbed.LinkOf(alt, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	return alt, idx
}

// The egress device goes away with its peer's namespace (the kernel removes it, and its routes):
// the next packets take the route that is left.
func TestFibCacheDeviceGone(t *testing.T) {
	tb := newTestbed(t, testbed.Options{TxChecksumOff: true})
	l := startLinuxfp(t, tb, "--fib-cache")
	alt, _ := altPath(t, tb)
	sh(t, tb.DUT, "ip route add 198.19.9.0/25 via 198.18.3.2")
	waitStatus(t, l, "alt0", "alt0 is an egress", func(it *status.Interface) bool { return it.Egress })
	waitFibCache(t, l, "ipv4", true)
	waitFastPath(t, tb, l, "198.19.9.1")
	freeze(t, l)
	sendUDP(t, tb, "198.19.9.1", 5) // kept under the generation the frozen controller leaves
	if err := alt.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "alt0 removed with its peer", func() error {
		if _, err := tb.DUT.Run("ip", "link", "show", "alt0"); err == nil {
			return errString("alt0 still there")
		}
		return nil
	})
	if got := captureDstMACs(t, tb, 5, func() { sendUDP(t, tb, "198.19.9.1", 5) }); len(got) != 5 {
		t.Fatalf("sink got %d of 5 datagrams after alt0 went away (Linux routes them there)", len(got))
	}
}

// Policy routing: the answer depends on the source, which the cache's key does not hold, so
// the cache is off for the family, and each source's packets take their own path.
func TestFibCachePolicyRules(t *testing.T) {
	tb := newTestbed(t, testbed.Options{TxChecksumOff: true})
	l := startLinuxfp(t, tb, "--fib-cache")
	alt, _ := altPath(t, tb)
	sh(t, tb.Gen, "ip addr add 198.18.0.3/24 dev eth0")
	waitFibCache(t, l, "ipv4", true)
	sh(t, tb.DUT, "ip route add 198.19.9.0/24 via 198.18.3.2 table 100\nip rule add from 198.18.0.2 lookup 100")
	waitFibCache(t, l, "ipv4", false)
	st, err := l.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range st.FibCache {
		if f.Family == "ipv4" && (len(f.Off) == 0 || !strings.Contains(strings.Join(f.Off, ";"), "policy routing")) {
			t.Fatalf("fib cache ipv4 off because %q, want policy routing named", f.Off)
		}
	}
	for round := 0; round < 2; round++ {
		var atSink []string
		atAlt := udpTo9(captureOn(t, alt, "eth0", func() {
			atSink = captureDstMACs(t, tb, 0, func() {
				sendUDPFromAddr(t, tb, "198.18.0.3", "198.19.9.1", 5)
				sendUDPFromAddr(t, tb, "198.18.0.2", "198.19.9.1", 5)
			})
		}))
		if len(atSink) != 5 || atAlt != 5 {
			t.Fatalf("round %d: sink got %d, alt %d datagrams; want 5 each (198.18.0.2's by table 100)", round, len(atSink), atAlt)
		}
	}
	d := trafficDelta(t, tb, l, "198.19.9.1", 5)
	if d.forwarded == 0 {
		t.Fatalf("nothing fast-pathed with the rule in place: %v", d.passed)
	}
}

// waitFibCache waits until status says the FIB cache is on (or off) for family.
func waitFibCache(t *testing.T, l *testbed.Linuxfp, family string, on bool) {
	t.Helper()
	eventually(t, 3*time.Second, "fib cache "+family+" on="+map[bool]string{true: "yes", false: "no"}[on], func() error {
		st, err := l.Client.Status()
		if err != nil {
			return err
		}
		for _, f := range st.FibCache {
			if f.Family == family && f.On == on {
				return nil
			}
		}
		return errString("not yet")
	})
}

// udpTo9 counts the IPv4 UDP datagrams to port 9 among frames.
func udpTo9(frames [][]byte) int {
	n := 0
	for _, b := range frames {
		if len(b) >= 38 && b[12] == 0x08 && b[13] == 0 && b[23] == 17 && b[36] == 0 && b[37] == 9 {
			n++
		}
	}
	return n
}

// sendUDPFromAddr sends n datagrams from gen's address src to dst port 9.
func sendUDPFromAddr(t *testing.T, tb *testbed.Testbed, src, dst string, n int) {
	t.Helper()
	err := tb.Gen.Do(func() error {
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)}, &net.UDPAddr{IP: net.ParseIP(dst), Port: 9})
		if err != nil {
			return err
		}
		defer c.Close()
		for i := 0; i < n; i++ {
			if _, err := c.Write([]byte("linuxfp")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The cache keeps one answer per block of destinations (an IPv4 /24, an IPv6 /64). A route
// longer than the block splits it: each destination of the block then takes its own route, at
// once. Two ways in: the route exists before any answer is kept (the controller wrote the
// split block), and it is added while the controller is frozen (the watcher counts the request,
// so the family waits behind the fence until the controller has read it).
func TestFibCacheLongerRoute(t *testing.T) {
	cases := []struct {
		family, block, inside, other, route string
	}{
		{"ipv4", "198.19.9.0/24", "198.19.9.7", "198.19.9.1", "ip route add 198.19.9.7/32 via 198.18.3.2"},
		{"ipv6", testbed.Prefix6(9, 0).String() + "/64", testbed.Prefix6(9, 7).String(), testbed.Prefix6(9, 1).String(),
			"ip -6 route add " + testbed.Prefix6(9, 7).String() + "/128 via 2001:2:0:3::2"},
	}
	for _, c := range cases {
		t.Run(c.family, func(t *testing.T) {
			tb := newTestbed(t, testbed.Options{TxChecksumOff: true})
			l := startLinuxfp(t, tb, "--fib-cache")
			alt, _ := altPath(t, tb)
			sh(t, tb.DUT, "ip -6 addr add 2001:2:0:3::1/64 dev alt0 nodad")
			sh(t, alt, "ip -6 addr add 2001:2:0:3::2/64 dev eth0 nodad\nip -6 route add default via 2001:2:0:3::1")
			if _, err := tb.DUT.Run("ping", "-6", "-c", "1", "-W", "2", "2001:2:0:3::2"); err != nil {
				t.Fatalf("DUT cannot reach alt over IPv6: %v", err)
			}
			waitFibCache(t, l, c.family, true)
			// where sends 5 datagrams to inside and 5 to other, and says how many of each
			// arrived at the sink and at alt.
			where := func() (sinkGot, altGot int) {
				var atSink []string
				altGot = udp9(captureOn(t, alt, "eth0", func() {
					atSink = captureDstMACs(t, tb, 0, func() {
						sendUDP(t, tb, c.other, 5)
						sendUDP(t, tb, c.inside, 5)
						sendUDP(t, tb, c.other, 5)
					})
				}))
				return len(atSink), altGot
			}

			// The longer route first.
			sh(t, tb.DUT, c.route)
			waitFastPath(t, tb, l, c.other)
			if s, a := where(); s != 10 || a != 5 {
				t.Fatalf("with %q: sink got %d (want 10: %s), alt %d (want 5: %s)", c.route, s, c.other, a, c.inside)
			}
			if d := trafficDelta(t, tb, l, c.other, 5); d.forwarded == 0 {
				t.Fatalf("the block's other destinations are not fast-pathed: %v", d.passed)
			}

			// Then added while the controller cannot follow, after the block's answer was kept.
			sh(t, tb.DUT, strings.Replace(c.route, " add ", " del ", 1))
			waitFastPath(t, tb, l, c.other)
			freeze(t, l)
			sendUDP(t, tb, c.other, 5) // kept for the block
			sh(t, tb.DUT, c.route)
			if s, a := where(); s != 10 || a != 5 {
				t.Fatalf("after %q: sink got %d (want 10: %s), alt %d (want 5: %s)", c.route, s, c.other, a, c.inside)
			}
		})
	}
}

// udp9 counts the UDP datagrams (IPv4, or IPv6 without extension headers) to port 9 among frames.
func udp9(frames [][]byte) int {
	n := 0
	for _, b := range frames {
		v4 := len(b) >= 38 && b[12] == 0x08 && b[13] == 0 && b[23] == 17 && b[36] == 0 && b[37] == 9
		v6 := len(b) >= 58 && b[12] == 0x86 && b[13] == 0xdd && b[20] == 17 && b[56] == 0 && b[57] == 9
		if v4 || v6 {
			n++
		}
	}
	return n
}

// A device that starts taking routes from router advertisements (accept_ra=2 while forwarding)
// turns the IPv6 cache off: such routes come without a request. The write is a sysctl, seen by
// the sysctl watcher; one of 0 (a CNI plugin's, for every pod) is not even handed over.
func TestFibCacheAcceptRA(t *testing.T) {
	tb := newTestbed(t, testbed.Options{TxChecksumOff: true})
	l := startLinuxfp(t, tb)
	waitFibCache(t, l, "ipv6", true)
	sh(t, tb.DUT, "sysctl -qw net.ipv6.conf.in0.accept_ra=0")
	waitFibCache(t, l, "ipv6", true)
	sh(t, tb.DUT, "sysctl -qw net.ipv6.conf.in0.accept_ra=2")
	waitFibCache(t, l, "ipv6", false)
	st, err := l.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range st.FibCache {
		if f.Family == "ipv6" && !strings.Contains(strings.Join(f.Off, ";"), "in0.accept_ra") {
			t.Fatalf("fib cache ipv6 off because %q, want in0's accept_ra named", f.Off)
		}
		if f.Family == "ipv4" && !f.On {
			t.Fatalf("fib cache ipv4 off because %q: accept_ra is IPv6's", f.Off)
		}
	}
	sh(t, tb.DUT, "sysctl -qw net.ipv6.conf.in0.accept_ra=1")
	waitFibCache(t, l, "ipv6", true)
}
