package e2e

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// A stateful firewall without NAT (the shape Docker, CNI and kube-proxy put in FORWARD): the
// conntrack matches alone make netfilter track connections, and the filter module classifies
// by the state conntrack gives each packet. Established connections are fast-pathed both ways;
// connections the rules do not allow stay with Linux, which drops them; packets of a tracked
// but unreplied flow that a rule drops as NEW are dropped by the fast path too.
func TestConntrackStateRules(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			sh(t, tb.DUT, `iptables -P FORWARD DROP
iptables -A FORWARD -m conntrack --ctstate INVALID -j DROP
iptables -A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
iptables -A FORWARD -i in0 -o out0 -m conntrack --ctstate NEW -j ACCEPT`)
			l := startLinuxfp(t, tb)
			waitStatus(t, l, "in0", "ipv4 router with conntrack from the filter's conntrack matches", func(it *status.Interface) bool {
				return it.Program != nil && contains(it.Program.Families, "ipv4") &&
					hasNote(it, "conntrack: netfilter tracks connections (ip filter: xt match conntrack)")
			})

			// gen -> sink: NEW allowed; once established (and liberal) every packet of both
			// directions is the fast path's.
			ec := dialEcho(t, tb, testbed.SinkAddr.String())
			ec.exchange(t, 5)
			waitLiberalMarks(t, l, "the connection marked liberal", 1)
			ec.exchange(t, 5)
			midIn, midOut := readCounters(t, l, "in0"), readCounters(t, l, "out0")
			ec.exchange(t, 300)
			din, dout := readCounters(t, l, "in0").sub(midIn).ownOnly(), readCounters(t, l, "out0").sub(midOut).ownOnly()
			if din.forwarded < 300 || dout.forwarded < 300 || len(din.passed)+len(dout.passed) > 0 {
				t.Fatalf("established connection: forwarded %d out and %d back; to Linux %v and %v; want all forwarded",
					din.forwarded, dout.forwarded, din.passed, dout.passed)
			}
			ec.close()

			// sink -> gen: NEW from out0 is not allowed; Linux sees it (no entry) and drops it.
			before := readCounters(t, l, "out0")
			var ln net.Listener
			if err := tb.Gen.Do(func() (err error) {
				ln, err = net.Listen("tcp", net.JoinHostPort(testbed.GenAddr.String(), "0"))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			err := tb.Sink.Do(func() error {
				c, err := net.DialTimeout("tcp", ln.Addr().String(), 500*time.Millisecond)
				if err == nil {
					c.Close()
				}
				return err
			})
			if err == nil {
				t.Fatal("a connection from the sink got through a firewall that allows NEW only from in0")
			}
			if d := readCounters(t, l, "out0").sub(before); d.passed["ct_state"] == 0 || d.forwarded > 0 {
				t.Fatalf("refused connection: forwarded %d, to Linux %v; want its SYNs as ct_state (a SYN moves the state machine)", d.forwarded, d.passed)
			}

			// A one-way UDP flow sink -> gen, allowed as NEW: after Linux's first packet the
			// entry exists, unreplied, and its packets are NEW: fast-pathed while a rule accepts
			// them, dropped by the fast path once a rule drops them.
			sh(t, tb.DUT, "iptables -I FORWARD 3 -i out0 -o in0 -p udp -m conntrack --ctstate NEW -j ACCEPT")
			rulesIn := func(n int) {
				want := fmt.Sprintf("ipv4 filter module: %d netfilter rules", n)
				waitStatus(t, l, "out0", want, func(it *status.Interface) bool { return hasNote(it, want) })
			}
			rulesIn(4)
			var srv net.PacketConn
			if err := tb.Gen.Do(func() (err error) {
				srv, err = net.ListenPacket("udp", net.JoinHostPort(testbed.GenAddr.String(), "0"))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			var c net.Conn
			if err := tb.Sink.Do(func() (err error) { c, err = net.Dial("udp", srv.LocalAddr().String()); return err }); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			recv := func(n int) int {
				got := 0
				buf := make([]byte, 2000)
				for range n {
					srv.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
					if _, _, err := srv.ReadFrom(buf); err != nil {
						break
					}
					got++
				}
				return got
			}
			send := func(n int) {
				for i := range n {
					if _, err := c.Write([]byte(fmt.Sprintf("one way %d", i))); err != nil {
						t.Fatal(err)
					}
				}
			}
			send(1)
			if got := recv(1); got != 1 {
				t.Fatal("the flow's first datagram did not arrive")
			}
			before = readCounters(t, l, "out0")
			send(50)
			if got := recv(50); got != 50 {
				t.Fatalf("%d of 50 datagrams of an accepted NEW flow arrived", got)
			}
			if d := readCounters(t, l, "out0").sub(before); d.forwarded < 50 || len(d.passed) > 0 {
				t.Fatalf("unreplied flow accepted as NEW: forwarded %d, to Linux %v; want all forwarded", d.forwarded, d.passed)
			}

			sh(t, tb.DUT, "iptables -I FORWARD 1 -i out0 -p udp -m conntrack --ctstate NEW -j DROP")
			rulesIn(5)
			before = readCounters(t, l, "out0")
			d0 := droppedOf(t, l, "out0")
			send(50)
			if got := recv(50); got != 0 {
				t.Fatalf("%d datagrams of a flow the rules drop as NEW arrived", got)
			}
			if d := droppedOf(t, l, "out0") - d0; d < 50 {
				t.Fatalf("the fast path dropped %d of 50 datagrams a rule drops as NEW (to Linux %v)", d, readCounters(t, l, "out0").sub(before).passed)
			}
		})
	}
}

func droppedOf(t *testing.T, l *testbed.Linuxfp, iface string) uint64 {
	t.Helper()
	it, err := l.Interface(iface)
	if err != nil {
		t.Fatal(err)
	}
	return it.Dropped.Packets
}
