package e2e

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
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

// --ct-cache=false: no free watch and no conntrack cache (every packet of a tracked connection
// asks the kernel's lookup), and the fast path forwards an established connection all the same.
// With the default, the same packets leave entries in the cache's places.
func TestConntrackCacheFlag(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		kept bool
	}{{"default", nil, true}, {"off", []string{"--ct-cache=false"}, false}} {
		t.Run(c.name, func(t *testing.T) {
			tb := newTestbed(t, testbed.Options{TxChecksumOff: true})
			sh(t, tb.Sink, "ip addr add 198.19.0.1/32 dev eth0")
			sh(t, tb.DUT, flannelishNAT)
			l := startLinuxfp(t, tb, c.args...)
			waitStatus(t, l, "in0", "ipv4 router on with conntrack", func(it *status.Interface) bool {
				return it.Program != nil && hasNote(it, "conntrack: netfilter tracks connections (ip nat: nat chain")
			})
			st, err := l.Client.Status()
			if err != nil {
				t.Fatal(err)
			}
			if off := strings.HasPrefix(st.CtFreeWatch, "off (--ct-cache=false)"); off == c.kept {
				t.Fatalf("conntrack free watch %q with %v", st.CtFreeWatch, c.args)
			}
			ec := dialEcho(t, tb, "198.19.0.1")
			ec.exchange(t, 5)
			waitLiberalMarks(t, l, "the connection marked liberal", 1)
			mid := readCounters(t, l, "in0")
			ec.exchange(t, 100)
			if d := readCounters(t, l, "in0").sub(mid).ownOnly(); d.forwarded < 100 || len(d.passed) > 0 {
				t.Fatalf("established, liberal connection: forwarded %d, to Linux %v; want all forwarded", d.forwarded, d.passed)
			}
			ec.close()
			var k uint32
			var place struct {
				Ct, Net, Freed uint64
				Dir, Pad       uint32
			}
			kept := 0
			it := dataplaneMap(t, tb.DUT, "in0", "lfp_ct_cache").Iterate()
			for it.Next(&k, &place) {
				if place.Ct != 0 {
					kept++
				}
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			if (kept > 0) != c.kept {
				t.Fatalf("%d places of the conntrack cache hold an entry with %v", kept, c.args)
			}
		})
	}
}

// With NAT rules netfilter tracks every connection. Linux decides each new one; the later
// packets of established, untranslated TCP connections are fast-pathed once conntrack has been
// told to be liberal about them; translated connections stay with Linux; Linux still sees the
// FIN and closes the entry as it would alone.
func TestConntrackEstablished(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			sh(t, tb.Sink, "ip addr add 198.19.0.1/32 dev eth0\nip -6 addr add 2001:2:0:f100::1/128 dev eth0 nodad")
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
			waitLiberalMarks(t, l, "the connection marked liberal", 1)
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
			// own address, then a DNAT of another address to the sink's; in IPv4 and IPv6.
			sh(t, tb.DUT, `iptables -t nat -A PREROUTING -d 198.19.0.99 -p tcp -j DNAT --to-destination 198.19.0.1
ip6tables -t nat -A POSTROUTING -o out0 -d 2001:2:0:1::2 -p tcp -j MASQUERADE
ip6tables -t nat -A PREROUTING -d 2001:2:0:f100::99 -p tcp -j DNAT --to-destination 2001:2:0:f100::1`)
			// Until linuxfp follows the rule, the connection's first segments are Linux's
			// (fenced) and would not count towards its liberal mark.
			waitFenceOpen(t, l)
			for _, tc := range []struct{ name, listen, dial string }{
				{"masqueraded", "198.18.1.2", ""},
				{"dnat", "198.19.0.1", "198.19.0.99"},
				{"ipv6 masqueraded", "2001:2:0:1::2", ""},
				{"ipv6 dnat", "2001:2:0:f100::1", "2001:2:0:f100::99"},
			} {
				st0, _ := l.Client.Status()
				beforeIn := readCounters(t, l, "in0")
				ec := dialEchoVia(t, tb, tc.listen, tc.dial)
				ec.exchange(t, 5)
				waitLiberalMarks(t, l, tc.name+" connection marked liberal", st0.CTLiberal+1)
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

// conntrackFlows lists the conntrack entries of ns.
func conntrackFlows(ns *nsutil.NS) (fs []conntrack.Flow, err error) {
	err = ns.Do(func() error {
		c, err := conntrack.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		fs, err = c.Dump(nil)
		return err
	})
	return fs, err
}

// flushConntrack empties the conntrack table of ns.
func flushConntrack(t *testing.T, ns *nsutil.NS) {
	t.Helper()
	if err := ns.Do(func() error {
		c, err := conntrack.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Flush()
	}); err != nil {
		t.Fatal(err)
	}
}

// ctEntry finds the conntrack entry of the connection to dst:dport in ns.
func ctEntry(ns *nsutil.NS, proto uint8, dst string, dport uint16) (conntrack.Flow, error) {
	fs, err := conntrackFlows(ns)
	if err != nil {
		return conntrack.Flow{}, err
	}
	for _, f := range fs {
		if f.TupleOrig.Proto.Protocol == proto && f.TupleOrig.IP.DestinationAddress == netip.MustParseAddr(dst) &&
			f.TupleOrig.Proto.DestinationPort == dport {
			return f, nil
		}
	}
	var all []string
	for _, f := range fs {
		all = append(all, fmt.Sprint(f.TupleOrig))
	}
	return conntrack.Flow{}, errString("no entry to " + dst + " among: " + strings.Join(all, "; "))
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
			sh(t, tb.Sink, "ip addr add 198.19.0.1/32 dev eth0\nip -6 addr add 2001:2:0:f100::1/128 dev eth0 nodad")
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

// A half-closed connection (the client shuts its sending side down after its request, the server
// then sends): once the server has acknowledged the client's FIN the entry is in CLOSE_WAIT for
// the rest of the transfer, which the fast path takes as it takes ESTABLISHED segments, on an
// untranslated (tracked) path and a DNAT'd one. The same exchange through Linux alone first, then
// with linuxfp: the entry's state and timeout mid-transfer (nf_conntrack_tcp_timeout_close_wait,
// set to kube-proxy's 3600 s: longer than the unacknowledged timeout, so Linux's choice between
// them shows) and after the server's FIN (TIME_WAIT) are the same; with linuxfp most of the download is fast-pathed, its bytes arrive intact, and the
// FIN and the ACK that ends LAST_ACK go to Linux.
func TestConntrackHalfClosed(t *testing.T) {
	const (
		tcpCloseWait = 5
		tcpTimeWait  = 7
		closeWait    = 3600
		pause        = 4 * time.Second        // before the second part: a timeout not refreshed shows
		settle       = 300 * time.Millisecond // for the client's last ACK (it may be delayed)
		first        = 1 << 20
		second       = 20 << 20
	)
	paths := []struct{ name, listen, dial string }{
		{"tracked", "198.19.0.1:0", "198.19.0.1:0"},
		{"dnat", "198.19.0.1:0", "198.19.0.99:0"},
	}
	type entry struct{ state, timeout uint32 }
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbedAs(t, nsPrefix+"-hc", h.opts)
			sh(t, tb.Sink, "ip addr add 198.19.0.1/32 dev eth0")
			sh(t, tb.DUT, flannelishNAT+"\niptables -t nat -A PREROUTING -d 198.19.0.99 -p tcp -j DNAT --to-destination 198.19.0.1\n"+
				"sysctl -qw net.netfilter.nf_conntrack_tcp_timeout_close_wait="+itoa(closeWait))
			read := func(hc *halfClosed) entry {
				t.Helper()
				f, err := ctEntry(tb.DUT, unix.IPPROTO_TCP, hc.dst, hc.port)
				if err != nil {
					t.Fatal(err)
				}
				if f.ProtoInfo.TCP == nil {
					t.Fatalf("entry without TCP state: %+v", f)
				}
				return entry{uint32(f.ProtoInfo.TCP.State), f.Timeout}
			}
			// Linux alone.
			var alone [2][2]entry // path, mid-transfer / closed
			for i, p := range paths {
				hc := startHalfClosed(t, tb.Sink, tb.Gen, p.listen, p.dial, true)
				hc.transfer(t, first)
				time.Sleep(pause)
				hc.transfer(t, second)
				time.Sleep(settle)
				alone[i][0] = read(hc)
				hc.finish(t)
				alone[i][1] = read(hc)
				if alone[i][0].state != tcpCloseWait || alone[i][1].state != tcpTimeWait {
					t.Fatalf("%s, Linux alone: entry %+v mid-transfer, %+v closed; want CLOSE_WAIT, then TIME_WAIT", p.name, alone[i][0], alone[i][1])
				}
			}

			l := startLinuxfp(t, tb)
			waitStatus(t, l, "in0", "ipv4 router on with conntrack", func(it *status.Interface) bool {
				return it.Program != nil && contains(it.Program.Families, "ipv4") && hasNote(it, "conntrack: netfilter tracks connections") &&
					hasNote(it, "translating them")
			})
			for i, p := range paths {
				st0, err := l.Client.Status()
				if err != nil {
					t.Fatal(err)
				}
				in0, out0 := readCounters(t, l, "in0"), readCounters(t, l, "out0")
				fwd0, passed0 := byteCounts(t, l, "in0", "out0")
				hc := startHalfClosed(t, tb.Sink, tb.Gen, p.listen, p.dial, true)
				hc.transfer(t, first)
				waitLiberalMarks(t, l, p.name+" connection marked liberal", st0.CTLiberal+1)
				time.Sleep(pause)
				hc.transfer(t, second)
				time.Sleep(settle)
				mid := read(hc)
				din, dout := readCounters(t, l, "in0").sub(in0).ownOnly(), readCounters(t, l, "out0").sub(out0).ownOnly()
				fwd1, passed1 := byteCounts(t, l, "in0", "out0")
				fwd, passed := fwd1-fwd0, passed1-passed0
				if fwd*100 < (fwd+passed)*90 {
					t.Errorf("%s: half-closed download of %d bytes: %d bytes forwarded, %d to Linux (packets: %d and %d forwarded, to Linux %v on the client's side and %v on the server's); want at least 90%% forwarded",
						p.name, first+second, fwd, passed, din.forwarded, dout.forwarded, din.passed, dout.passed)
				}
				t.Logf("%s: %d bytes forwarded, %d to Linux; packets: %d and %d forwarded, to Linux %v (client side) and %v (server side)",
					p.name, fwd, passed, din.forwarded, dout.forwarded, din.passed, dout.passed)
				in1, out1 := readCounters(t, l, "in0"), readCounters(t, l, "out0")
				hc.finish(t)
				closed := read(hc)
				din, dout = readCounters(t, l, "in0").sub(in1), readCounters(t, l, "out0").sub(out1)
				if dout.passed["ct_state"] == 0 || din.passed["ct_state"] == 0 {
					t.Errorf("%s: the server's FIN and the client's last ACK: to Linux %v (server side) and %v (client side), want ct_state on both",
						p.name, dout.passed, din.passed)
				}
				t.Logf("%s: entry mid-transfer %+v, closed %+v; Linux alone %+v", p.name, mid, closed, alone[i])
				for k, e := range []entry{mid, closed} {
					a := alone[i][k]
					if e.state != a.state || e.timeout+2 < a.timeout || e.timeout > a.timeout+2 {
						t.Errorf("%s, %s: entry %+v with linuxfp, %+v with Linux alone (state, timeout in s)",
							p.name, []string{"mid-transfer", "closed"}[k], e, a)
					}
				}
			}
		})
	}
}

// byteCounts sums what the fast path forwarded (routed or bridged) and handed to Linux on
// ifaces, in bytes (for reasons a unicast connection's packets can have: see ownOnly).
func byteCounts(t *testing.T, l *testbed.Linuxfp, ifaces ...string) (fwd, passed uint64) {
	t.Helper()
	for _, name := range ifaces {
		it, err := l.Interface(name)
		if err != nil {
			t.Fatal(err)
		}
		fwd += it.Forwarded.Bytes + it.Bridged.Bytes
		for r, v := range it.Passed {
			if r != "not_for_us" && r != "not_ip" {
				passed += v.Bytes
			}
		}
	}
	return fwd, passed
}

// halfClosed is a TCP connection from a client namespace to a server in another whose client
// sent a request and shut its sending side down (or, not half-closed, kept it open); the server
// then sends what transfer asks for, a stream of pseudo-random bytes the client checks.
type halfClosed struct {
	ln     net.Listener
	c      *net.TCPConn
	dst    string // the address the client connected to
	port   uint16
	send   chan int
	done   chan error
	stream *rand.ChaCha8 // what the client expects next
}

// startHalfClosed listens on listen (host:port, port 0 for any) in server and connects from
// client to dial (host:port, port 0 for the listener's), which the node's DNAT may take to listen.
func startHalfClosed(t *testing.T, server, client *nsutil.NS, listen, dial string, halfClose bool) *halfClosed {
	t.Helper()
	hc := &halfClosed{send: make(chan int), done: make(chan error, 1), stream: rand.NewChaCha8([32]byte{1})}
	if err := server.Do(func() (err error) { hc.ln, err = net.Listen("tcp", listen); return err }); err != nil {
		t.Fatal(err)
	}
	to := netip.MustParseAddrPort(dial)
	if to.Port() == 0 {
		to = netip.AddrPortFrom(to.Addr(), uint16(hc.ln.Addr().(*net.TCPAddr).Port))
	}
	hc.dst, hc.port = to.Addr().String(), to.Port()
	go func() {
		c, err := hc.ln.Accept()
		hc.ln.Close()
		if err != nil {
			hc.done <- err
			return
		}
		defer c.Close()
		// The request, up to the client's FIN if it half-closes.
		req := make([]byte, len(hcRequest))
		_, err = io.ReadFull(c, req)
		if err == nil && halfClose {
			var rest []byte
			rest, err = io.ReadAll(c)
			req = append(req, rest...)
		}
		if err != nil || string(req) != hcRequest {
			hc.done <- fmt.Errorf("request %q: %v", req, err)
			return
		}
		src := rand.NewChaCha8([32]byte{1})
		buf := make([]byte, 64<<10)
		for n := range hc.send {
			for n > 0 {
				k := min(n, len(buf))
				src.Read(buf[:k])
				if _, err := c.Write(buf[:k]); err != nil {
					hc.done <- err
					return
				}
				n -= k
			}
		}
		hc.done <- nil // and the FIN
	}()
	err := client.Do(func() error {
		c, err := net.DialTimeout("tcp", to.String(), 3*time.Second)
		if err != nil {
			return err
		}
		hc.c = c.(*net.TCPConn)
		return nil
	})
	if err != nil {
		hc.ln.Close()
		t.Fatalf("tcp connect to %s: %v", to, err)
	}
	t.Cleanup(func() { hc.c.Close(); hc.ln.Close() })
	if _, err := hc.c.Write([]byte(hcRequest)); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		if err := hc.c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	return hc
}

const hcRequest = "GET /\n"

// transfer has the server send n bytes, and checks the client receives them unaltered.
func (hc *halfClosed) transfer(t *testing.T, n int) {
	t.Helper()
	hc.c.SetDeadline(time.Now().Add(30 * time.Second))
	hc.send <- n
	got, want := make([]byte, 64<<10), make([]byte, 64<<10)
	for n > 0 {
		k := min(n, len(got))
		if _, err := io.ReadFull(hc.c, got[:k]); err != nil {
			t.Fatalf("half-closed download: %v (%d bytes short)", err, n)
		}
		hc.stream.Read(want[:k])
		if !bytes.Equal(got[:k], want[:k]) {
			t.Fatalf("half-closed download: bytes altered (%d bytes before the end of the part)", n)
		}
		n -= k
	}
}

// finish has the server close (its FIN), reads the client's end of the stream and closes the
// client (its last ACK was sent when the FIN arrived).
func (hc *halfClosed) finish(t *testing.T) {
	t.Helper()
	close(hc.send)
	if err := <-hc.done; err != nil {
		t.Fatalf("half-closed server: %v", err)
	}
	if rest, err := io.ReadAll(hc.c); err != nil || len(rest) > 0 {
		t.Fatalf("after the download: %d more bytes, %v; want the server's FIN", len(rest), err)
	}
	hc.c.Close()
	time.Sleep(50 * time.Millisecond) // the last ACK through the node
}

// Entries whose every packet Linux must see: with accounting on (nf_conntrack_acct), Linux
// counts each packet and its bytes in the entry, which a fast path cannot do; with a timeout
// policy of its own (nft `ct timeout set` on the connection's first packet; the rule is then
// removed and the entry keeps the policy), the entry is refreshed to the policy's timeout, not
// the sysctl's, until the policy's object is deleted. A one-way UDP stream (fast-pathed
// otherwise: an unreplied entry in its original direction) goes to Linux with the reason, and
// the entry ends as with Linux alone: every datagram counted, the policy's timeout kept.
// Without the check of the entry's extensions the entry counted 1 packet, and its timeout was
// refreshed to 30 s.
func TestConntrackExtensions(t *testing.T) {
	const n = 40
	// step: cmd runs in the DUT, then n-1 datagrams of the stream go through; reason is what
	// in0 counts them as ("": fast-pathed), check looks at the entry after them.
	type step struct {
		cmd, reason string
		check       func(f conntrack.Flow) error
	}
	cases := []struct {
		name, hook string
		setup      string
		// file: an nft ruleset loaded after setup.
		file  string
		steps []step
	}{
		{name: "accounting", hook: "xdp", setup: "sysctl -qw net.netfilter.nf_conntrack_acct=1",
			steps: []step{{reason: "ct_accounting", check: func(f conntrack.Flow) error {
				if f.CountersOrig.Packets != n {
					return fmt.Errorf("the entry counted %d packets, want %d (as Linux alone)", f.CountersOrig.Packets, n)
				}
				return nil
			}}}},
		{name: "timeout policy", hook: "tc",
			file: `table ip lfpct {
	ct timeout short {
		protocol udp;
		l3proto ip;
		policy = { unreplied : 7, replied : 7 }
	}
	chain pre {
		type filter hook prerouting priority filter; policy accept;
		ct state new udp dport 9 ct timeout set "short"
	}
}
`,
			steps: []step{
				// The rule goes: the filter has nothing to hand to Linux; the policy stays.
				{cmd: "nft flush chain ip lfpct pre", reason: "ct_timeout_policy", check: func(f conntrack.Flow) error {
					if f.Timeout > 7 {
						return fmt.Errorf("the entry's timeout is %d s, want at most the policy's 7 s (as Linux alone)", f.Timeout)
					}
					return nil
				}},
				// The policy's object goes: the sysctl times the entry again (30 s unreplied).
				{cmd: "nft delete table ip lfpct", check: func(f conntrack.Flow) error {
					if f.Timeout < 25 {
						return fmt.Errorf("the entry's timeout is %d s, want nf_conntrack_udp_timeout's 30 s (as Linux alone)", f.Timeout)
					}
					return nil
				}},
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var opts testbed.Options
			for _, h := range hookTestbeds {
				if h.hook == c.hook {
					opts = h.opts
				}
			}
			tb := newTestbed(t, opts)
			sh(t, tb.DUT, flannelishNAT+"\n"+c.setup)
			if c.file != "" {
				path := filepath.Join(t.TempDir(), "rules.nft")
				if err := os.WriteFile(path, []byte(c.file), 0o644); err != nil {
					t.Fatal(err)
				}
				sh(t, tb.DUT, "nft -f "+path)
			}
			l := startLinuxfp(t, tb)
			waitStatus(t, l, "in0", "ipv4 router with conntrack", func(it *status.Interface) bool {
				return it.Program != nil && hasNote(it, "conntrack: netfilter tracks")
			})
			dst := "198.19.5.1"
			var conn net.Conn
			if err := tb.Gen.Do(func() (err error) { conn, err = net.Dial("udp", dst+":9"); return err }); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.Write([]byte("first"))
			time.Sleep(50 * time.Millisecond)
			for _, s := range c.steps {
				if s.cmd != "" {
					sh(t, tb.DUT, s.cmd)
					waitFenceOpen(t, l)
				}
				before := readCounters(t, l, "in0")
				for range n - 1 {
					conn.Write([]byte("linuxfp conntrack extension"))
					time.Sleep(time.Millisecond)
				}
				time.Sleep(50 * time.Millisecond)
				f, err := ctEntry(tb.DUT, unix.IPPROTO_UDP, dst, 9)
				if err != nil {
					t.Fatal(err)
				}
				d := readCounters(t, l, "in0").sub(before)
				if err := s.check(f); err != nil {
					t.Errorf("%v; in0 fast-pathed %d, to Linux %v", err, d.forwarded, d.passed)
				}
				got, what := d.forwarded, "fast-pathed"
				if s.reason != "" {
					got, what = d.passed[s.reason], "counted as "+s.reason
				}
				if got < n-1 {
					t.Errorf("after %q: %d of %d datagrams %s (fast-pathed %d, to Linux %v)", s.cmd, got, n-1, what, d.forwarded, d.passed)
				}
			}
		})
	}
}

// A prerouting chain at priority filter whose rules run statements the fast path does not (nft
// `ct timeout set`, `log`) behind `ct state new` hands no established packet to Linux: such a
// packet can never meet them, so established connections stay in the fast path, untranslated
// and masqueraded alike. What the rules do act on stays Linux's: the connection to port 9 got
// the rule's timeout policy (its packets: ct_timeout_policy, the entry timed by the policy), and
// a one-way stream's later packets, which conntrack still calls NEW, meet the log rule (filter).
func TestConntrackCtStateNewStatement(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	sh(t, tb.Sink, "ip addr add 198.19.0.1/32 dev eth0")
	sh(t, tb.DUT, flannelishNAT)
	path := filepath.Join(t.TempDir(), "rules.nft")
	if err := os.WriteFile(path, []byte(`table ip lfpctnew {
	ct timeout short {
		protocol udp;
		l3proto ip;
		policy = { unreplied : 7, replied : 7 }
	}
	chain pre {
		type filter hook prerouting priority filter; policy accept;
		ct state new udp dport 9 ct timeout set "short"
		ct state new udp dport 10 log prefix "lfp-new "
	}
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, tb.DUT, "nft -f "+path)
	l := startLinuxfp(t, tb)
	waitStatus(t, l, "in0", "ipv4 router with conntrack", func(it *status.Interface) bool {
		return it.Program != nil && hasNote(it, "conntrack: netfilter tracks")
	})
	flows := []*udpFlow{
		newUDPFlow(t, tb, "198.19.0.1", 10), // untranslated (flannelishNAT returns it)
		newUDPFlow(t, tb, "198.18.1.2", 10), // masqueraded
		newUDPFlow(t, tb, "198.19.0.1", 9),  // the timeout policy's
	}
	// Replies for more than 2 s make a UDP entry ASSURED; before, its packets are Linux's.
	for range 30 {
		for _, f := range flows {
			f.ping(t)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, f := range flows {
		before := readCounters(t, l, "in0")
		for range 50 {
			f.ping(t)
		}
		d := readCounters(t, l, "in0").sub(before).ownOnly()
		if i < 2 && (d.forwarded < 50 || len(d.passed) > 0) {
			t.Errorf("established flow to %s: fast-pathed %d of 50, to Linux %v; want all fast-pathed", f.to, d.forwarded, d.passed)
		}
		if i == 2 && d.passed["ct_timeout_policy"] < 50 {
			t.Errorf("established flow to %s: fast-pathed %d of 50, to Linux %v; want all ct_timeout_policy", f.to, d.forwarded, d.passed)
		}
	}
	if e, err := ctEntry(tb.DUT, unix.IPPROTO_UDP, "198.19.0.1", 9); err != nil || e.Timeout > 7 {
		t.Errorf("the port 9 connection's entry: timeout %d s (%v), want at most the policy's 7 s", e.Timeout, err)
	}
	// No server answers at 198.19.0.2: the stream stays unreplied, NEW to conntrack.
	var c net.Conn
	if err := tb.Gen.Do(func() (err error) { c, err = net.Dial("udp", "198.19.0.2:10"); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := readCounters(t, l, "in0")
	for range 20 {
		c.Write([]byte("linuxfp one-way"))
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if d := readCounters(t, l, "in0").sub(before).ownOnly(); d.passed["ct_new"] != 1 || d.passed["filter"] < 19 {
		t.Errorf("one-way stream to port 10: fast-pathed %d, to Linux %v; want the first ct_new, the rest filter (the log rule)", d.forwarded, d.passed)
	}
}

// udpFlow is a UDP connection from gen to an echo server in the sink.
type udpFlow struct {
	to  string
	c   net.Conn
	buf []byte
}

func newUDPFlow(t *testing.T, tb *testbed.Testbed, addr string, port int) *udpFlow {
	t.Helper()
	f := &udpFlow{to: net.JoinHostPort(addr, fmt.Sprint(port)), buf: make([]byte, 2000)}
	var srv net.PacketConn
	if err := tb.Sink.Do(func() (err error) { srv, err = net.ListenPacket("udp", f.to); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
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
	if err := tb.Gen.Do(func() (err error) { f.c, err = net.Dial("udp", f.to); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.c.Close() })
	return f
}

// ping sends a datagram and waits for its echo.
func (f *udpFlow) ping(t *testing.T) {
	t.Helper()
	f.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := f.c.Write([]byte("linuxfp udp flow")); err != nil {
		t.Fatalf("udp write to %s: %v", f.to, err)
	}
	if k, err := f.c.Read(f.buf); err != nil || string(f.buf[:k]) != "linuxfp udp flow" {
		t.Fatalf("udp echo from %s: %q, %v", f.to, f.buf[:k], err)
	}
}
