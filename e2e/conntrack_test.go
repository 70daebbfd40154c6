package e2e

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Flannel's shape of NAT: traffic between its networks returns from POSTROUTING untouched,
// everything else leaving through out0 is masqueraded.
const flannelishNAT = `iptables -t nat -N LFP-POSTRTG
iptables -t nat -A POSTROUTING -j LFP-POSTRTG
iptables -t nat -A LFP-POSTRTG -s 198.18.0.0/24 -d 198.19.0.0/16 -j RETURN
iptables -t nat -A LFP-POSTRTG -o out0 -j MASQUERADE`

// With NAT rules netfilter tracks every connection. Linux decides each new one; the later
// packets of established, untranslated TCP connections are fast-pathed once conntrack has been
// told to be liberal about them; translated connections stay with Linux; Linux still sees the
// FIN and closes the entry as it would alone.
func TestConntrackEstablished(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			sh(t, tb.Sink, "ip addr add 198.19.0.1/32 dev eth0")
			sh(t, tb.DUT, flannelishNAT)
			l := startLinuxfp(t, tb)
			waitStatus(t, l, "in0", "ipv4 router on with conntrack", func(it *status.Interface) bool {
				return it.Program != nil && contains(it.Program.Families, "ipv4") && hasNote(it, "conntrack: netfilter tracks connections (ip nat: nat chain")
			})
			if st, err := l.Client.Status(); err != nil || !contains(st.Conntrack, "ipv4") {
				t.Fatalf("status conntrack %v (%v), want ipv4", st.Conntrack, err)
			}

			// Untranslated (RETURN): fast-pathed once the handshake is done and the controller
			// has marked the connection liberal.
			before := readCounters(t, l, "in0")
			ec := dialEcho(t, tb, "198.19.0.1")
			ec.exchange(t, 5)
			eventually(t, 3*time.Second, "the connection marked liberal", func() error {
				if st, err := l.Client.Status(); err != nil || st.CTLiberal == 0 {
					return fmt.Errorf("liberal marks %d (%v)", st.CTLiberal, err)
				}
				return nil
			})
			mid := readCounters(t, l, "in0")
			ec.exchange(t, 300)
			d := readCounters(t, l, "in0").sub(mid).ownOnly()
			if d.forwarded < 300 || len(d.passed) > 0 {
				t.Fatalf("established, liberal connection: forwarded %d, to Linux %v; want all forwarded", d.forwarded, d.passed)
			}
			port := ec.close()
			time.Sleep(50 * time.Millisecond)
			d = readCounters(t, l, "in0").sub(before)
			if d.passed["ct_state"] < 2 || d.passed["ct_not_liberal"] == 0 {
				t.Fatalf("whole connection: forwarded %d, to Linux %v; want the SYN and FIN as ct_state, "+
					"the first segments after the handshake as ct_not_liberal", d.forwarded, d.passed)
			}
			// Linux saw the FINs: the entry left ESTABLISHED (TIME_WAIT or CLOSE).
			eventually(t, 3*time.Second, "the connection's entry closed", func() error {
				f, err := ctEntry(tb.DUT, unix.IPPROTO_TCP, "198.19.0.1", port)
				if err != nil {
					return err
				}
				if f.ProtoInfo.TCP == nil || f.ProtoInfo.TCP.State < 7 {
					return errString(fmt.Sprintf("entry still open: %+v", f.ProtoInfo.TCP))
				}
				return nil
			})

			// UDP: the entry is ASSURED once replies keep coming after 2 s; before, Linux.
			before = readCounters(t, l, "in0")
			udpEcho(t, tb, "198.19.0.1", 30, 100*time.Millisecond)
			d = readCounters(t, l, "in0").sub(before)
			if d.forwarded == 0 || d.passed["ct_state"] == 0 {
				t.Fatalf("udp exchange over 3s: forwarded %d, to Linux %v; want the first 2s as ct_state, then forwarded", d.forwarded, d.passed)
			}

			// Translated: Linux decides the connection (and its mapping); its later packets are
			// translated by the fast path as the entry says, both ways: MASQUERADE to the sink's
			// own address, then a DNAT of another address to the sink's.
			sh(t, tb.DUT, "iptables -t nat -A PREROUTING -d 198.19.0.99 -p tcp -j DNAT --to-destination 198.19.0.1")
			// Until linuxfp follows the rule, the connection's first segments are Linux's
			// (fenced) and would not count towards its liberal mark.
			waitFenceOpen(t, l)
			for _, tc := range []struct{ name, listen, dial string }{
				{"masqueraded", "198.18.1.2", ""},
				{"dnat", "198.19.0.1", "198.19.0.99"},
			} {
				st0, _ := l.Client.Status()
				beforeIn := readCounters(t, l, "in0")
				ec := dialEchoVia(t, tb, tc.listen, tc.dial)
				ec.exchange(t, 5)
				eventually(t, 3*time.Second, tc.name+" connection marked liberal", func() error {
					if st, err := l.Client.Status(); err != nil || st.CTLiberal < st0.CTLiberal+1 {
						return fmt.Errorf("liberal marks %d (%v)", st.CTLiberal, err)
					}
					return nil
				})
				ec.exchange(t, 5) // the other direction's first segments meet the mark too
				midIn, midOut := readCounters(t, l, "in0"), readCounters(t, l, "out0")
				ec.exchange(t, 300)
				din, dout := readCounters(t, l, "in0").sub(midIn).ownOnly(), readCounters(t, l, "out0").sub(midOut).ownOnly()
				if din.forwarded < 300 || dout.forwarded < 300 || len(din.passed)+len(dout.passed) > 0 {
					t.Fatalf("%s connection, established: forwarded %d out and %d back; to Linux %v and %v",
						tc.name, din.forwarded, dout.forwarded, din.passed, dout.passed)
				}
				ec.close()
				time.Sleep(50 * time.Millisecond)
				if d := readCounters(t, l, "in0").sub(beforeIn); d.passed["ct_state"] < 2 {
					t.Fatalf("%s connection: to Linux %v, want its SYN and FIN", tc.name, d.passed)
				}
			}
		})
	}
}

// echoConn is a TCP connection from gen to an echo server in the sink.
type echoConn struct {
	ln   net.Listener
	c    net.Conn
	port uint16
	i    int
}

func dialEcho(t *testing.T, tb *testbed.Testbed, addr string) *echoConn {
	t.Helper()
	return dialEchoVia(t, tb, addr, "")
}

// dialEchoVia is dialEcho connecting to dial (the server's port on another address, which the
// DUT translates) instead of addr.
func dialEchoVia(t *testing.T, tb *testbed.Testbed, addr, dial string) *echoConn {
	t.Helper()
	e := &echoConn{}
	if err := tb.Sink.Do(func() (err error) { e.ln, err = net.Listen("tcp", net.JoinHostPort(addr, "0")); return err }); err != nil {
		t.Fatal(err)
	}
	e.port = uint16(e.ln.Addr().(*net.TCPAddr).Port)
	go func() {
		for {
			c, err := e.ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	to := e.ln.Addr().String()
	if dial != "" {
		to = net.JoinHostPort(dial, fmt.Sprint(e.port))
	}
	if err := tb.Gen.Do(func() (err error) { e.c, err = net.DialTimeout("tcp", to, 3*time.Second); return err }); err != nil {
		e.ln.Close()
		t.Fatalf("tcp connect through the DUT: %v", err)
	}
	t.Cleanup(func() { e.close() })
	return e
}

// exchange sends n messages and checks each comes back unaltered.
func (e *echoConn) exchange(t *testing.T, n int) {
	t.Helper()
	e.c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1000)
	for k := 0; k < n; k++ {
		e.i++
		msg := []byte(strings.Repeat(string(rune('a'+e.i%26)), 1+e.i%1000))
		if _, err := e.c.Write(msg); err != nil {
			t.Fatalf("tcp write %d: %v", e.i, err)
		}
		if _, err := io.ReadFull(e.c, buf[:len(msg)]); err != nil {
			t.Fatalf("tcp read %d: %v", e.i, err)
		}
		if string(buf[:len(msg)]) != string(msg) {
			t.Fatalf("tcp message %d altered", e.i)
		}
	}
}

// close closes the connection (FIN both ways) and the server; it returns the server's port.
func (e *echoConn) close() uint16 {
	if e.c != nil {
		e.c.Close()
		e.ln.Close()
		e.c = nil
	}
	return e.port
}

// ctEntry finds the conntrack entry of the connection to dst:dport in ns.
func ctEntry(ns *nsutil.NS, proto uint8, dst string, dport uint16) (conntrack.Flow, error) {
	var found conntrack.Flow
	err := ns.Do(func() error {
		c, err := conntrack.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		fs, err := c.Dump(nil)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if f.TupleOrig.Proto.Protocol == proto && f.TupleOrig.IP.DestinationAddress == netip.MustParseAddr(dst) &&
				f.TupleOrig.Proto.DestinationPort == dport {
				found = f
				return nil
			}
		}
		var all []string
		for _, f := range fs {
			all = append(all, fmt.Sprint(f.TupleOrig))
		}
		return errString("no entry to " + dst + " among: " + strings.Join(all, "; "))
	})
	return found, err
}

// udpEcho sends n datagrams from gen to a server on addr in the sink, one every gap, each
// answered; it fails the test if an answer is missing or altered.
func udpEcho(t *testing.T, tb *testbed.Testbed, addr string, n int, gap time.Duration) {
	t.Helper()
	var srv net.PacketConn
	if err := tb.Sink.Do(func() (err error) { srv, err = net.ListenPacket("udp", net.JoinHostPort(addr, "0")); return err }); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		buf := make([]byte, 2000)
		for {
			k, from, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			srv.WriteTo(buf[:k], from)
		}
	}()
	var c net.Conn
	if err := tb.Gen.Do(func() (err error) { c, err = net.Dial("udp", srv.LocalAddr().String()); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 2000)
	for i := 0; i < n; i++ {
		msg := fmt.Sprintf("linuxfp udp %d", i)
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatalf("udp write %d: %v", i, err)
		}
		k, err := c.Read(buf)
		if err != nil || string(buf[:k]) != msg {
			t.Fatalf("udp answer %d: %q, %v", i, buf[:k], err)
		}
		time.Sleep(gap)
	}
}

// A rule before conntrack (raw PREROUTING) that drops an established connection's packets: Linux
// drops them before nf_conntrack_in(), so their entry is not refreshed and expires on its own.
// The fast path drops them too, and does not refresh the entry either.
func TestConntrackRawDropNoRefresh(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			sh(t, tb.Sink, "ip addr add 198.19.0.1/32 dev eth0")
			sh(t, tb.DUT, flannelishNAT)
			l := startLinuxfp(t, tb)
			waitStatus(t, l, "in0", "ipv4 router with conntrack", func(it *status.Interface) bool {
				return it.Program != nil && contains(it.Program.Families, "ipv4") && hasNote(it, "conntrack: netfilter tracks")
			})
			// An ASSURED UDP flow (replies, and a packet more than 2 s after the first).
			var srv net.PacketConn
			if err := tb.Sink.Do(func() (err error) { srv, err = net.ListenPacket("udp", "198.19.0.1:0"); return err }); err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			go func() {
				buf := make([]byte, 2000)
				for {
					k, from, err := srv.ReadFrom(buf)
					if err != nil {
						return
					}
					srv.WriteTo(buf[:k], from)
				}
			}()
			var c net.Conn
			if err := tb.Gen.Do(func() (err error) { c, err = net.Dial("udp", srv.LocalAddr().String()); return err }); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			port := uint16(srv.LocalAddr().(*net.UDPAddr).Port)
			buf := make([]byte, 100)
			for i := range 12 {
				c.SetDeadline(time.Now().Add(time.Second))
				if _, err := c.Write([]byte("assure")); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Read(buf); err != nil {
					t.Fatalf("answer %d: %v", i, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			f, err := ctEntry(tb.DUT, unix.IPPROTO_UDP, "198.19.0.1", port)
			if err != nil {
				t.Fatal(err)
			}
			if !f.Status.Assured() {
				t.Fatalf("flow not ASSURED: %v", f.Status)
			}

			sh(t, tb.DUT, fmt.Sprintf("iptables -t raw -A PREROUTING -p udp --dport %d -j DROP", port))
			want := "netfilter rules compiled into 1 "
			waitStatus(t, l, "in0", want, func(it *status.Interface) bool { return hasNote(it, want) })
			t0, err := ctEntry(tb.DUT, unix.IPPROTO_UDP, "198.19.0.1", port)
			if err != nil {
				t.Fatal(err)
			}
			before, cb := droppedOf(t, l, "in0"), readCounters(t, l, "in0")
			c.SetDeadline(time.Time{})
			deadline, sent := time.Now().Add(2500*time.Millisecond), uint64(0)
			for time.Now().Before(deadline) {
				if _, err := c.Write([]byte("dropped before conntrack")); err != nil {
					t.Fatalf("send: %v", err)
				}
				sent++
				time.Sleep(20 * time.Millisecond)
			}
			t1, err := ctEntry(tb.DUT, unix.IPPROTO_UDP, "198.19.0.1", port)
			if err != nil {
				t.Fatal(err)
			}
			if d := droppedOf(t, l, "in0") - before; d < sent*9/10 {
				t.Fatalf("the fast path dropped %d of the %d datagrams (forwarded %d, to Linux %v)", d, sent,
					readCounters(t, l, "in0").sub(cb).forwarded, readCounters(t, l, "in0").sub(cb).passed)
			}
			if t1.Timeout+2 > t0.Timeout {
				t.Fatalf("entry timeout %d s before, %d s after 2.5 s of datagrams dropped in raw: refreshed", t0.Timeout, t1.Timeout)
			}
		})
	}
}
