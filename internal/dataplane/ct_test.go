package dataplane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"

	lfpct "github.com/linuxfp/linuxfp/internal/conntrack"
	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/packet"
)

// The conntrack module against entries of the kernel's own table, created through ctnetlink in
// the test namespace: which connections the fast path takes, that it refreshes their timeout as
// Linux would, and that it asks for TCP connections to be made liberal. The conntrack cache is on
// (a packet repeated within a jiffy is judged from it); TestConntrackCache tests the cache itself.
// liberalAfter is LFP_CT_LIBERAL_AFTER (bpf/lib/ct.h): the segment of a not-liberal TCP
// connection that makes the fast path ask for it to be marked liberal.
const liberalAfter = 4

// ctTestData is the conntrack module's data the tests run with: both families, the cache on, the
// sysctls' default timeouts but CLOSE_WAIT's, which is kube-proxy's (1 h).
func ctTestData() CT {
	return CT{Active4: true, Active6: true, Cache: true,
		TCPEstablished: 432000 * time.Second, TCPCloseWait: 3600 * time.Second, TCPUnack: 300 * time.Second,
		TCPRetrans: 300 * time.Second, TCPMaxRetrans: 3, UDPStream: 120 * time.Second, UDP: 30 * time.Second}
}

// ctConn is a ctnetlink connection in the test's namespace, closed when the test ends.
func (env *testEnv) ctConn(t *testing.T) *conntrack.Conn {
	t.Helper()
	var ct *conntrack.Conn
	if err := env.ns.Do(func() (err error) { ct, err = conntrack.Dial(nil); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ct.Close() })
	return ct
}

func TestConntrack(t *testing.T) {
	env := newTestEnv(t)
	ct := env.ctConn(t)
	ctData := ctTestData()
	sync := func(c CT) {
		t.Helper()
		err := env.ns.Do(func() error {
			return env.dp.Sync(Data{TxData: txTo(env.out, env.in), CT: c})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sync(ctData)
	// Requests are timed on arrival: the data plane asks at most once a second per connection,
	// and the loops below can take longer than a second.
	type timedRequest struct {
		CTRequest
		at time.Time
	}
	requests := make(chan timedRequest, 64)
	if err := env.dp.ReadCTRequests(func(r CTRequest) { requests <- timedRequest{r, time.Now()} }); err != nil {
		t.Fatal(err)
	}

	src, dst := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.19.0.9")
	src6, dst6 := netip.MustParseAddr("2001:2::2"), netip.MustParseAddr("2001:2:0:f100::9")
	liberal := uint16(0x0808) // IP_CT_TCP_FLAG_BE_LIBERAL, as flags and mask
	const (
		tcpSynSent     = 1
		tcpEstablished = 3
		tcpFinWait     = 4
		tcpCloseWait   = 5
		tcpLastAck     = 6
		tcpTimeWait    = 7
	)
	seen := conntrack.StatusSeenReply | conntrack.StatusAssured
	tcpFlow := func(s, d netip.Addr, sport uint16, state uint8, flags uint16) conntrack.Flow {
		f := conntrack.NewFlow(unix.IPPROTO_TCP, seen, s, d, sport, 80, 60, 0)
		f.ProtoInfo.TCP = &conntrack.ProtoInfoTCP{State: state, OriginalFlags: flags, ReplyFlags: flags}
		return f
	}
	udpFlow := func(sport uint16, status conntrack.Status) conntrack.Flow {
		return conntrack.NewFlow(unix.IPPROTO_UDP, status, src, dst, sport, 53, 60, 0)
	}
	// ctnetlink creates an entry with no status bits; they are set by an update, which must
	// keep CONFIRMED.
	create := func(f conntrack.Flow) {
		t.Helper()
		status := f.Status
		f.Status = 0
		err := env.ns.Do(func() error {
			if err := ct.Create(f); err != nil {
				return err
			}
			f.Status, f.ProtoInfo = status|conntrack.StatusConfirmed, conntrack.ProtoInfo{}
			return ct.Update(f)
		})
		if err != nil {
			t.Fatalf("create %v: %v", f.TupleOrig, err)
		}
	}
	flows := []conntrack.Flow{
		tcpFlow(src, dst, 1001, tcpEstablished, liberal),
		tcpFlow(src, dst, 1002, tcpEstablished, 0),
		tcpFlow(src, dst, 1003, tcpSynSent, liberal),
		tcpFlow(src6, dst6, 1004, tcpEstablished, liberal),
		udpFlow(2001, conntrack.StatusSeenReply|conntrack.StatusAssured),
		udpFlow(2002, conntrack.StatusSeenReply),
		udpFlow(2003, 0),
		tcpFlow(src, dst, 1005, tcpEstablished, 0),
		tcpFlow(src, dst, 1006, tcpCloseWait, liberal),
		tcpFlow(src, dst, 1007, tcpFinWait, liberal),
		tcpFlow(src, dst, 1008, tcpLastAck, liberal),
		tcpFlow(src, dst, 1012, tcpTimeWait, liberal),
		func() conntrack.Flow { // picked up mid-stream, no reply seen
			f := tcpFlow(src, dst, 1013, tcpEstablished, liberal)
			f.Status = conntrack.StatusAssured
			return f
		}(),
		// The last segment Linux saw left data unacknowledged (IP_CT_TCP_FLAG_DATA_UNACKNOWLEDGED).
		tcpFlow(src, dst, 1014, tcpEstablished, liberal|0x1010),
	}
	for _, f := range flows {
		create(f)
	}
	get := func(f conntrack.Flow) conntrack.Flow { t.Helper(); return env.ctDump(t, ct, f) }
	timeout := func(f conntrack.Flow) uint32 { t.Helper(); return get(f).Timeout }

	// tcpData is a segment with 26 bytes of data, tcp one without: 12 bytes of options (NOPs)
	// instead, so that the frame needs no padding to Ethernet's minimum.
	tcpSized := func(s, d netip.Addr, sport, dport uint16, flags byte, data int) []byte {
		l4 := 14 + 20
		if s.Is6() {
			l4 = 14 + 40
		}
		sp := packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: s, Dst: d, Proto: layers.IPProtocolTCP,
			SrcPort: sport, DstPort: dport, Size: l4 + 20 + 12 + data}
		b := sp.Bytes()
		b[l4+12] = 8 << 4
		copy(b[l4+20:], bytes.Repeat([]byte{1}, 12))
		b[l4+13] = flags // the TCP checksum is not looked at
		return b
	}
	tcp := func(s, d netip.Addr, sport, dport uint16, flags byte) []byte {
		return tcpSized(s, d, sport, dport, flags, 0)
	}
	tcpData := func(s, d netip.Addr, sport, dport uint16, flags byte) []byte {
		return tcpSized(s, d, sport, dport, flags, 26)
	}
	udp := func(sport, dport uint16) []byte {
		return packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: src, Dst: dst, SrcPort: sport, DstPort: dport, Size: 60}.Bytes()
	}
	const ack, syn, fin, rst = 0x10, 0x02, 0x01, 0x04
	reply := tcp(dst, src, 80, 1001, ack)
	copy(reply, macOut) // received on out0
	zeroWindow := func(b []byte) []byte {
		b[14+20+14], b[14+20+15] = 0, 0
		return b
	}
	replyCW := tcpData(dst, src, 80, 1006, ack)
	copy(replyCW, macOut)
	cases := []struct {
		name    string
		pkt     []byte
		out     bool // received on out0 (default in0)
		want    Reason
		output  []byte          // when forwarded (default: to out0's nexthop)
		refresh *conntrack.Flow // its timeout must be Linux's afterwards
		timeout uint32          // that timeout, in s (default: established TCP, or UDP's)
		repeat  int             // times the packet is sent (default 1)
	}{
		{name: "tcp established, liberal", pkt: tcp(src, dst, 1001, 80, ack), want: Forwarded, refresh: &flows[0]},
		// Data: its sender's data is unacknowledged (tcp_in_window() sets the flag).
		{name: "tcp established, data", pkt: tcpData(src, dst, 1001, 80, ack|0x08), want: Forwarded, refresh: &flows[0], timeout: 300},
		{name: "tcp established, reply direction", pkt: reply, out: true, want: Forwarded,
			output: packet.Forwarded(reply, macIn, macPeer), refresh: &flows[0]},
		{name: "tcp established, ipv6", pkt: tcp(src6, dst6, 1004, 80, ack), want: Forwarded, refresh: &flows[3]},
		{name: "tcp fin", pkt: tcp(src, dst, 1001, 80, ack|fin), want: PassCTState},
		{name: "tcp rst", pkt: tcp(src, dst, 1001, 80, rst), want: PassCTState},
		{name: "tcp syn", pkt: tcp(src, dst, 1001, 80, syn), want: PassCTState},
		// The request comes with the connection's LFP_CT_LIBERAL_AFTER-th such segment (ct.h).
		{name: "tcp not liberal: asks, Linux meanwhile", pkt: tcp(src, dst, 1002, 80, ack), want: PassCTLiberal, repeat: liberalAfter + 2},
		{name: "tcp not established", pkt: tcp(src, dst, 1003, 80, ack), want: PassCTState},
		// A half-closed connection: CLOSE_WAIT stays CLOSE_WAIT on an ACK, with its own timeout
		// (kube-proxy's 3600 s here), or the unacknowledged one with data.
		{name: "tcp close_wait", pkt: tcp(src, dst, 1006, 80, ack), want: Forwarded, refresh: &flows[8], timeout: 3600},
		{name: "tcp close_wait, reply direction", pkt: replyCW, out: true, want: Forwarded,
			output: packet.Forwarded(replyCW, macIn, macPeer), refresh: &flows[8], timeout: 300},
		{name: "tcp close_wait fin", pkt: tcp(src, dst, 1006, 80, ack|fin), want: PassCTState},
		{name: "tcp close_wait rst", pkt: tcp(src, dst, 1006, 80, rst), want: PassCTState},
		// An ACK moves FIN_WAIT to CLOSE_WAIT and LAST_ACK to TIME_WAIT; TIME_WAIT is not taken.
		{name: "tcp fin_wait", pkt: tcp(src, dst, 1007, 80, ack), want: PassCTState},
		{name: "tcp last_ack", pkt: tcp(src, dst, 1008, 80, ack), want: PassCTState},
		{name: "tcp time_wait", pkt: tcp(src, dst, 1012, 80, ack), want: PassCTState},
		// A zero window: the retransmission timeout where the state's is longer.
		{name: "tcp established, zero window", pkt: zeroWindow(tcp(src, dst, 1001, 80, ack)), want: Forwarded, refresh: &flows[0], timeout: 300},
		{name: "tcp close_wait, zero window", pkt: zeroWindow(tcp(src, dst, 1006, 80, ack)), want: Forwarded, refresh: &flows[8], timeout: 300},
		// ESTABLISHED without a reply seen (picked up mid-stream): at most the unacknowledged timeout.
		// The entry's flags are what the last segment Linux saw left: a pure ACK taken by the
		// fast path is judged by itself (it acknowledges the peer's data).
		{name: "tcp established, pure ack, entry flags data unacknowledged", pkt: tcp(src, dst, 1014, 80, ack), want: Forwarded, refresh: &flows[13]},
		{name: "tcp established, no reply seen", pkt: tcp(src, dst, 1013, 80, ack), want: Forwarded, refresh: &flows[12], timeout: 300},
		{name: "tcp unknown connection", pkt: tcp(src, dst, 1009, 80, ack), want: PassCTNew},
		{name: "udp assured", pkt: udp(2001, 53), want: Forwarded, refresh: &flows[4]},
		{name: "udp not assured yet", pkt: udp(2002, 53), want: PassCTState},
		{name: "udp unreplied, original direction", pkt: udp(2003, 53), want: Forwarded, refresh: &flows[6]},
		{name: "udp unreplied, a first reply", pkt: packet.Spec{SrcMAC: macPeer, DstMAC: macOut, Src: dst, Dst: src,
			SrcPort: 53, DstPort: 2003, Size: 60}.Bytes(), out: true, want: PassCTState},
		{name: "udp unknown", pkt: udp(2009, 53), want: PassCTNew},
		{name: "tcp without ack: invalid", pkt: tcp(src, dst, 1001, 80, 0x08), want: PassCTInvalid},
		{name: "tcp header length beyond the packet", pkt: func() []byte {
			b := tcp(src, dst, 1001, 80, ack)
			b[14+20+12] = 0xf0
			return b
		}(), want: PassCTInvalid},
		{name: "udp length beyond the packet", pkt: func() []byte {
			b := udp(2001, 53)
			b[14+20+4], b[14+20+5] = 0x05, 0xdc
			return b
		}(), want: PassCTInvalid},
		{name: "icmp", pkt: packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: src, Dst: dst, Proto: layers.IPProtocolICMPv4, ICMPType: 8, Size: 60}.Bytes(), want: PassCTProto},
	}
	// A short connection (fewer segments than LFP_CT_LIBERAL_AFTER) is not asked for: it would
	// be over before the marking could help. Were it asked for, its request would come first.
	env.hook = HookXDP
	short := env.prog(t, true, true)
	for i := 0; i < liberalAfter-1; i++ {
		env.checkRoutedOn(t, short, tcp(src, dst, 1005, 80, ack), env.in, PassCTLiberal, nil)
	}
	for _, hook := range hooks {
		env.hook = hook
		prog := env.prog(t, true, true)
		// out0 runs the same kind of program, with its own MAC (counting into the same slot).
		env.loadOut0(t, hook)
		for _, c := range cases {
			t.Run(string(hook)+"/"+c.name, func(t *testing.T) {
				// Every packet of a known connection refreshes it, forwarded or not: start from
				// short timeouts.
				for _, f := range flows {
					f.Timeout, f.Status, f.ProtoInfo = 60, 0, conntrack.ProtoInfo{}
					if err := env.ns.Do(func() error { return ct.Update(f) }); err != nil {
						t.Fatal(err)
					}
				}
				in := env.in
				if c.out {
					in = env.out
				}
				for i := 0; i < max(c.repeat, 1); i++ {
					env.checkRoutedOn(t, prog, c.pkt, in, c.want, c.output)
				}
				if c.refresh != nil {
					want := uint32(120)
					switch {
					case c.timeout != 0:
						want = c.timeout
					case c.refresh.TupleOrig.Proto.Protocol == unix.IPPROTO_TCP:
						want = 432000
					case c.refresh.Status&conntrack.StatusSeenReply == 0:
						want = 30
					}
					if got := timeout(*c.refresh); got < want-2 || got > want {
						t.Fatalf("timeout %d after the packet, want %d (refreshed as Linux would)", got, want)
					}
				}
			})
		}
	}

	// The not-liberal connection was asked for, in its original direction; the controller's
	// ctnetlink message makes it liberal, and the fast path then takes it.
	var first timedRequest
	select {
	case r := <-requests:
		first = r
		want := lfpct.Tuple{Proto: unix.IPPROTO_TCP, Src: src, Dst: dst, SPort: 1002, DPort: 80}
		if r.Tuple != want || r.Reply {
			t.Fatalf("request %+v, want %+v original", r, want)
		}
		c, err := func() (c *lfpct.Client, err error) {
			err = env.ns.Do(func() error { c, err = lfpct.Dial(); return err })
			return
		}()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.SetTCPLiberal(r.Tuple, r.Reply); err != nil {
			t.Fatal(err)
		}
		gone := lfpct.Tuple{Proto: unix.IPPROTO_TCP, Src: src, Dst: dst, SPort: 4444, DPort: 80}
		if err := c.SetTCPLiberal(gone, false); !errors.Is(err, lfpct.ErrNoEntry) {
			t.Fatalf("marking a connection that does not exist: %v, want ErrNoEntry", err)
		}
	case <-time.After(time.Second):
		t.Fatal("no request to make the connection liberal")
	}
	// Later requests for the same connection (the tc loop may run a second after the XDP one)
	// are allowed, each at least a second after the one before; the slack covers the ring's
	// delivery.
	for last := first; ; {
		var r timedRequest
		select {
		case r = <-requests:
		case <-time.After(100 * time.Millisecond):
		}
		if r.at.IsZero() {
			break
		}
		if r.CTRequest != first.CTRequest {
			t.Fatalf("a request %+v for another connection than %+v", r.CTRequest, first.CTRequest)
		}
		if gap := r.at.Sub(last.at); gap < 900*time.Millisecond {
			t.Fatalf("a second request %+v %v after the one before: one per connection and second", r.CTRequest, gap)
		}
		last = r
	}
	env.hook = HookXDP
	env.checkRouted(t, env.prog(t, true, true), tcp(src, dst, 1002, 80, ack), Forwarded, nil)
	if f := get(flows[1]); f.ProtoInfo.TCP == nil || f.ProtoInfo.TCP.State != tcpEstablished {
		t.Fatalf("marking liberal changed the TCP state: %+v", f.ProtoInfo.TCP)
	}

	// nf_conntrack_checksum=1: Linux verifies the L4 checksum where the skb's state does not
	// vouch for it (a test skb is CHECKSUM_NONE, an XDP frame has no state): so does the fast
	// path, and a bad one is INVALID for conntrack. A UDP checksum of 0 is not checked.
	cs := ctData
	cs.Checksum = true
	sync(cs)
	good := packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: src, Dst: dst, Proto: layers.IPProtocolTCP,
		SrcPort: 1001, DstPort: 80, Size: 1000}.Bytes()
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 0x5a
	zero := udp(2001, 53)
	zero[14+20+6], zero[14+20+7] = 0, 0
	big := packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: src, Dst: dst, SrcPort: 2001, DstPort: 53, Size: 1400}.Bytes()
	for _, hook := range hooks {
		env.hook = hook
		env.checkRouted(t, env.prog(t, true, true), good, Forwarded, nil)
		env.checkRouted(t, env.prog(t, true, true), bad, PassCTInvalid, nil)
		env.checkRouted(t, env.prog(t, true, true), zero, Forwarded, nil)
		env.checkRouted(t, env.prog(t, true, true), big, Forwarded, nil)
	}
	// Short L4 parts are summed in place (ct.h, CT_CSUM_INLINE): each length modulo 4 (the last
	// 1-3 bytes padded as a word), IPv4 and IPv6 pseudo headers, a wrong checksum field and a
	// wrong last byte found, and Ethernet's padding of a short frame (not part of the IP packet)
	// left out of the sum. A forwarded frame leaves without its padding.
	for _, hook := range hooks {
		env.hook = hook
		for n := range 4 {
			for _, c := range []struct {
				name     string
				spec     packet.Spec
				l4, csum int // the L4 header's offset, its checksum's offset in it
			}{
				{"udp", packet.Spec{Src: src, Dst: dst, SrcPort: 2001, DstPort: 53, Size: 14 + 20 + 8 + n}, 14 + 20, 6},
				{"tcp", packet.Spec{Src: src, Dst: dst, Proto: layers.IPProtocolTCP, SrcPort: 1001, DstPort: 80,
					Size: 14 + 20 + 20 + n}, 14 + 20, 16},
				{"tcp ipv6", packet.Spec{Src: src6, Dst: dst6, Proto: layers.IPProtocolTCP, SrcPort: 1004, DstPort: 80,
					Size: 14 + 40 + 20 + n}, 14 + 40, 16},
			} {
				c.spec.SrcMAC, c.spec.DstMAC = macPeer, macIn
				if n > 0 {
					c.spec.Payload = bytes.Repeat([]byte{0xa5}, n)
				}
				padded := c.spec.Bytes() // padded to 60 bytes by the serialiser where shorter
				end := 14 + 20 + n + map[bool]int{true: 8, false: 20}[c.name == "udp"]
				if c.spec.Src.Is6() {
					end += 20
				}
				if binary.BigEndian.Uint16(padded[12:]) == 0x0800 && int(binary.BigEndian.Uint16(padded[16:]))+14 != end {
					t.Fatalf("%s: IPv4 length %d, want %d", c.name, binary.BigEndian.Uint16(padded[16:]), end-14)
				}
				out := packet.Forwarded(padded[:end], macOut, macNext)
				env.checkRouted(t, env.prog(t, true, true), padded, Forwarded, out)
				if end < len(padded) {
					padded[len(padded)-1] ^= 0x5a
					env.checkRouted(t, env.prog(t, true, true), padded, Forwarded, out)
				}
				for _, at := range []int{c.l4 + c.csum, end - 1} {
					bad := append([]byte(nil), padded...)
					bad[at] ^= 0x01
					t.Logf("%s: %s, %d bytes of payload, byte %d wrong", hook, c.name, n, at)
					env.checkRouted(t, env.prog(t, true, true), bad, PassCTInvalid, nil)
				}
			}
		}
	}
	env.hook = HookXDP

	// nf_conntrack_tcp_be_liberal=1: every connection is liberal, no request needed.
	c2 := ctData
	c2.TCPLiberal = true
	sync(c2)
	create(tcpFlow(src, dst, 1010, tcpEstablished, 0))
	env.checkRouted(t, env.prog(t, true, true), tcp(src, dst, 1010, 80, ack), Forwarded, nil)
	// Not active: no lookup at all (an unknown connection is forwarded as before).
	sync(CT{})
	env.checkRouted(t, env.prog(t, true, true), tcp(src, dst, 1011, 80, ack), Forwarded, nil)
}

// The conntrack cache (bpf/lib/ct.h): a packet whose entry a CPU found before is judged from that
// entry without the kernel's lookup, only while it is what the lookup would find. Entries with a
// fixed timeout need no refresh, so every packet after the first is the cache's: a deleted entry,
// one replaced by an entry of another state, and an expired one must each be seen as the kernel's
// lookup sees them.
func TestConntrackCache(t *testing.T) {
	env := newTestEnv(t)
	ct := env.ctConn(t)
	ctData := ctTestData()
	sync := func(c CT) {
		t.Helper()
		if err := env.ns.Do(func() error { return env.dp.Sync(Data{TxData: txTo(env.out, env.in), CT: c}) }); err != nil {
			t.Fatal(err)
		}
	}
	sync(ctData)
	src, dst := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.19.0.9")
	const established, synSent = 3, 1
	flow := func(state uint8, timeout uint32) conntrack.Flow {
		f := conntrack.NewFlow(unix.IPPROTO_TCP, 0, src, dst, 3001, 80, timeout, 0)
		f.ProtoInfo.TCP = &conntrack.ProtoInfoTCP{State: state, OriginalFlags: 0x0808, ReplyFlags: 0x0808}
		return f
	}
	create := func(f conntrack.Flow) {
		t.Helper()
		err := env.ns.Do(func() error {
			if err := ct.Create(f); err != nil {
				return err
			}
			f.Status = conntrack.StatusConfirmed | conntrack.StatusSeenReply | conntrack.StatusAssured | conntrack.StatusFixedTimeout
			f.ProtoInfo = conntrack.ProtoInfo{}
			return ct.Update(f)
		})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
	}
	remove := func(f conntrack.Flow) {
		t.Helper()
		if err := env.ns.Do(func() error { return ct.Delete(f) }); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	pkt := packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: src, Dst: dst, Proto: layers.IPProtocolTCP,
		SrcPort: 3001, DstPort: 80, Size: 60}.Bytes()
	pkt[14+20+13] = 0x10 // ACK
	// place is the offset in a CPU's range of the place of the connection's tuple, with source
	// port sport.
	place := func(sport uint16) uint32 {
		return ctPlaceOf(unix.IPPROTO_TCP, netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, 80))
	}
	// other: another connection, without an entry, whose tuple has the same place.
	var other []byte
	for sp := uint16(3002); other == nil; sp++ {
		if place(sp) == place(3001) {
			other = append([]byte(nil), pkt...)
			binary.BigEndian.PutUint16(other[14+20:], sp)
		}
	}
	for _, hook := range hooks {
		env.hook = hook
		prog := env.prog(t, true, true)
		t.Run(string(hook), func(t *testing.T) {
			env.ctClear(t)
			f := flow(established, 600)
			create(f)
			env.checkRouted(t, prog, pkt, Forwarded, nil)
			if len(env.ctPlaces(t)) == 0 {
				t.Fatal("no entry in the conntrack cache after a forwarded packet")
			}
			env.checkRouted(t, prog, pkt, Forwarded, nil)
			// An object freed at the entry's address (the watcher moves its slot's count,
			// ct_frees_map.h): the kept address is not read again, the lookup fills the place
			// anew with the count as it is now.
			var slot uint32
			for _, pl := range env.ctPlaces(t) { // the test's one connection: each place holds its entry
				slot = ctFreeSlot(pl.Ct)
			}
			var n uint64
			if err := env.dp.maps.LfpCtFrees.Lookup(slot, &n); err != nil {
				t.Fatal(err)
			}
			if err := env.dp.maps.LfpCtFrees.Put(slot, n+1); err != nil {
				t.Fatal(err)
			}
			env.checkRouted(t, prog, pkt, Forwarded, nil)
			k, refilled, ok := uint32(0), linuxfpLfpCtPlace{}, false
			for i, pl := range env.ctPlaces(t) {
				if pl.Freed == n+1 {
					k, refilled, ok = i, pl, true
				}
			}
			if !ok {
				t.Fatalf("no place holds the count %d its slot moved to: the kept address was read", n+1)
			}
			// Another connection, without an entry, whose tuple the cache keeps in the same place
			// (the refilled one, copied to every CPU's range: on whichever CPU the test runs).
			env.ctSpread(t, k, refilled)
			env.checkRouted(t, prog, other, PassCTNew, nil)
			// Deleted: the kernel's lookup finds nothing.
			remove(f)
			env.checkRouted(t, prog, pkt, PassCTNew, nil)
			// Back, in a state Linux keeps: whatever memory the entry now has.
			create(flow(synSent, 600))
			env.checkRouted(t, prog, pkt, PassCTState, nil)
			remove(flow(synSent, 600))
			// Expired (its timeout fixed at 1 s): gone for the kernel's lookup, even before the
			// garbage collector has taken it out of the table.
			create(flow(established, 1))
			env.checkRouted(t, prog, pkt, Forwarded, nil)
			time.Sleep(1100 * time.Millisecond)
			env.checkRouted(t, prog, pkt, PassCTNew, nil)
			_ = env.ns.Do(func() error { return ct.Delete(flow(established, 1)) })
		})
	}
	// Where the watcher does not see the frees, the cache is off: nothing is kept.
	off := ctData
	off.Cache = false
	sync(off)
	env.hook = HookXDP
	env.ctClear(t)
	create(flow(established, 600))
	env.checkRouted(t, env.prog(t, true, true), pkt, Forwarded, nil)
	if len(env.ctPlaces(t)) != 0 {
		t.Fatal("an entry kept in the conntrack cache while it is off")
	}
}

// ctFreeSlot is lfp_ct_free_slot() (bpf/include/ct_frees_map.h).
func ctFreeSlot(addr uint64) uint32 {
	return uint32(((addr >> 6) * 0x9e3779b97f4a7c15) >> (64 - 10))
}

// ctCacheShift is LFP_CT_CACHE_SHIFT (bpf/lib/ct.h): each CPU has a range of 1<<ctCacheShift
// places in the conntrack cache, and a tuple has its place at the same offset in every range.
const ctCacheShift = 9

// ctPlaceOf is ct_cache_place()'s offset in a CPU's range for the tuple of a TCP or UDP packet
// from src to dst: the words of struct bpf_sock_tuple (addresses and ports in network byte
// order, loaded little-endian), each mixed in by a multiplication.
func ctPlaceOf(proto uint8, src, dst netip.AddrPort) uint32 {
	var b []byte
	b = append(b, src.Addr().AsSlice()...)
	b = append(b, dst.Addr().AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	b = binary.BigEndian.AppendUint16(b, dst.Port())
	w := func(i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }
	h := (uint32(proto) ^ w(0)) * 0x9e3779b1
	h = (h ^ w(1)) * 0x85ebca6b
	h = (h ^ w(2)) * 0xc2b2ae35
	for i := 3; i < len(b)/4; i++ { // IPv6: the rest of the addresses, then the ports
		h = (h ^ w(i)) * 0x9e3779b1
	}
	return h >> (32 - ctCacheShift)
}

// ctPlaces returns the places of the conntrack cache that hold an entry, by key.
func (e *testEnv) ctPlaces(t testing.TB) map[uint32]linuxfpLfpCtPlace {
	t.Helper()
	held := map[uint32]linuxfpLfpCtPlace{}
	var k uint32
	var pl linuxfpLfpCtPlace
	it := e.dp.maps.LfpCtCache.Iterate()
	for it.Next(&k, &pl) {
		if pl.Ct != 0 {
			held[k] = pl
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return held
}

// ctSpread copies pl, the place at key, to its offset in every CPU's range: the next packet of
// its tuple finds it whichever CPU the test runs on.
func (e *testEnv) ctSpread(t testing.TB, key uint32, pl linuxfpLfpCtPlace) {
	t.Helper()
	for k := key % (1 << ctCacheShift); k < e.dp.maps.LfpCtCache.MaxEntries(); k += 1 << ctCacheShift {
		if err := e.dp.maps.LfpCtCache.Put(k, pl); err != nil {
			t.Fatal(err)
		}
	}
}

// ctClear empties every place of the conntrack cache.
func (e *testEnv) ctClear(t testing.TB) {
	t.Helper()
	for k := uint32(0); k < e.dp.maps.LfpCtCache.MaxEntries(); k++ {
		if err := e.dp.maps.LfpCtCache.Put(k, linuxfpLfpCtPlace{}); err != nil {
			t.Fatal(err)
		}
	}
}

// ctnetlink's attributes (include/uapi/linux/netfilter/nfnetlink_conntrack.h) that ctCreateNAT
// sends.
const (
	// The message's.
	ctaTupleOrig, ctaTupleReply, ctaProtoinfo, ctaNATSrc, ctaTimeout, ctaNATDst = 1, 2, 4, 6, 7, 13
	// A tuple's, then those of its CTA_TUPLE_IP and CTA_TUPLE_PROTO.
	ctaTupleIP, ctaTupleProto                      = 1, 2
	ctaIPv4Src, ctaIPv4Dst, ctaIPv6Src, ctaIPv6Dst = 1, 2, 3, 4
	ctaProtoNum, ctaProtoSrcPort, ctaProtoDstPort  = 1, 2, 3
	// CTA_PROTOINFO's, then its CTA_PROTOINFO_TCP's.
	ctaProtoinfoTCP                                                           = 1
	ctaProtoinfoTCPState, ctaProtoinfoTCPFlagsOrig, ctaProtoinfoTCPFlagsReply = 1, 4, 5
	// CTA_NAT_SRC's or CTA_NAT_DST's, then its CTA_NAT_PROTO's.
	ctaNATV4MinIP, ctaNATV4MaxIP, ctaNATProto, ctaNATV6MinIP, ctaNATV6MaxIP = 1, 2, 3, 4, 5
	ctaProtoNATPortMin, ctaProtoNATPortMax                                  = 1, 2
)

// ctCreateNAT creates the conntrack entry of an ESTABLISHED TCP connection from src to dst, liberal
// in both directions, whose destination (dnat) or source a NAT rule translated to to, and returns
// it as a flow of ti-mo/conntrack, with the reply tuple the kernel computes for it. The entry is
// translated as a rule's would be: CTA_NAT_DST or CTA_NAT_SRC makes ctnetlink call
// nf_nat_setup_info(), which alters the reply tuple and sets IPS_DST_NAT or IPS_SRC_NAT. Those bits
// cannot be given as the entry's status (ctnetlink leaves them as they are), and ti-mo/conntrack
// sends no NAT attributes, so the request is built here; the status is set afterwards, as for the
// other tests' entries.
func (e *testEnv) ctCreateNAT(t testing.TB, src, dst netip.AddrPort, dnat bool, to netip.AddrPort, timeout uint32) conntrack.Flow {
	t.Helper()
	family, ipSrc, ipDst, natMin, natMax := netfilter.ProtoIPv4, uint16(ctaIPv4Src), uint16(ctaIPv4Dst), uint16(ctaNATV4MinIP), uint16(ctaNATV4MaxIP)
	if src.Addr().Is6() {
		family, ipSrc, ipDst, natMin, natMax = netfilter.ProtoIPv6, ctaIPv6Src, ctaIPv6Dst, ctaNATV6MinIP, ctaNATV6MaxIP
	}
	tuple := func(typ uint16, s, d netip.AddrPort) netfilter.Attribute {
		return netfilter.Attribute{Type: typ, Nested: true, Children: []netfilter.Attribute{
			{Type: ctaTupleIP, Nested: true, Children: []netfilter.Attribute{
				{Type: ipSrc, Data: s.Addr().AsSlice()},
				{Type: ipDst, Data: d.Addr().AsSlice()},
			}},
			{Type: ctaTupleProto, Nested: true, Children: []netfilter.Attribute{
				{Type: ctaProtoNum, Data: []byte{unix.IPPROTO_TCP}},
				{Type: ctaProtoSrcPort, Data: netfilter.Uint16Bytes(s.Port())},
				{Type: ctaProtoDstPort, Data: netfilter.Uint16Bytes(d.Port())},
			}},
		}}
	}
	liberal := []byte{0x08, 0x08} // IP_CT_TCP_FLAG_BE_LIBERAL, as flags and mask
	nat := netfilter.Attribute{Type: ctaNATSrc, Nested: true, Children: []netfilter.Attribute{
		{Type: natMin, Data: to.Addr().AsSlice()},
		{Type: natMax, Data: to.Addr().AsSlice()},
		{Type: ctaNATProto, Nested: true, Children: []netfilter.Attribute{
			{Type: ctaProtoNATPortMin, Data: netfilter.Uint16Bytes(to.Port())},
			{Type: ctaProtoNATPortMax, Data: netfilter.Uint16Bytes(to.Port())},
		}},
	}}
	if dnat {
		nat.Type = ctaNATDst
	}
	tmo := netfilter.Attribute{Type: ctaTimeout}
	tmo.PutUint32(timeout)
	attrs := []netfilter.Attribute{
		tuple(ctaTupleOrig, src, dst),
		tuple(ctaTupleReply, dst, src), // untranslated: the NAT setup alters it
		tmo,
		{Type: ctaProtoinfo, Nested: true, Children: []netfilter.Attribute{
			{Type: ctaProtoinfoTCP, Nested: true, Children: []netfilter.Attribute{
				{Type: ctaProtoinfoTCPState, Data: []byte{3}}, // TCP_CONNTRACK_ESTABLISHED
				{Type: ctaProtoinfoTCPFlagsOrig, Data: liberal},
				{Type: ctaProtoinfoTCPFlagsReply, Data: liberal},
			}},
		}},
		nat,
	}
	req, err := netfilter.MarshalNetlink(netfilter.Header{
		SubsystemID: netfilter.NFSubsysCTNetlink,
		MessageType: 0, // IPCTNL_MSG_CT_NEW
		Family:      family,
		Flags:       netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Excl,
	}, attrs)
	if err != nil {
		t.Fatal(err)
	}
	err = e.ns.Do(func() error {
		c, err := netfilter.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Query(req)
		return err
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("ctnetlink cannot set up NAT: a kernel without CONFIG_NF_NAT (%v)", err)
	}
	if err != nil {
		t.Fatalf("create %v > %v translated to %v: %v", src, dst, to, err)
	}
	f := conntrack.NewFlow(unix.IPPROTO_TCP, 0, src.Addr(), dst.Addr(), src.Port(), dst.Port(), timeout, 0)
	// The reply tuple: the translated original tuple, inverted.
	if dnat {
		f.TupleReply.IP.SourceAddress, f.TupleReply.Proto.SourcePort = to.Addr(), to.Port()
	} else {
		f.TupleReply.IP.DestinationAddress, f.TupleReply.Proto.DestinationPort = to.Addr(), to.Port()
	}
	return f
}

// ctDump reads the entry of f's original tuple back from the kernel. (conntrack.Conn.Get waits
// forever with this module's netlink library version; a dump works.)
func (e *testEnv) ctDump(t testing.TB, ct *conntrack.Conn, f conntrack.Flow) conntrack.Flow {
	t.Helper()
	var all []conntrack.Flow
	if err := e.ns.Do(func() (err error) { all, err = ct.Dump(nil); return err }); err != nil {
		t.Fatal(err)
	}
	for _, g := range all {
		if g.TupleOrig == f.TupleOrig {
			return g
		}
	}
	t.Fatalf("no entry %v", f.TupleOrig)
	return conntrack.Flow{}
}

// The conntrack cache with translated connections (bpf/lib/ct.h, nat.h): a packet of a DNAT'd or
// SNAT'd connection, in either direction, is judged from the kept entry as from the one the
// kernel's lookup returns. Its place keeps the direction of the entry's tuple the packet matched;
// the tuple of that direction is what a later packet in the place is compared with, and the
// packet leaves with the inverse of the other direction's tuple. The entries' timeouts are fixed:
// nothing to refresh, so a packet whose place holds its entry is answered from the cache alone
// (ct_forward). The packets it must leave as are built from the translated addresses and ports,
// with their checksums computed anew (nat.h updates them incrementally).
func TestConntrackCacheNAT(t *testing.T) {
	env := newTestEnv(t)
	// The IPv6 client on in0, to which replies are forwarded (the IPv4 one is in the topology).
	if err := env.ns.Script("ip -6 neigh replace 2001:2::2 lladdr 02:00:00:00:00:05 dev in0 nud permanent"); err != nil {
		t.Fatal(err)
	}
	ct := env.ctConn(t)
	ctData := ctTestData()
	ctData.NAT4, ctData.NAT6 = true, true
	if err := env.ns.Do(func() error { return env.dp.Sync(Data{TxData: txTo(env.out, env.in), CT: ctData}) }); err != nil {
		t.Fatal(err)
	}
	// seg is a TCP segment with data, its checksums right.
	seg := func(src, dst netip.AddrPort, mac net.HardwareAddr) []byte {
		return packet.Spec{SrcMAC: macPeer, DstMAC: mac, Src: src.Addr(), Dst: dst.Addr(), Proto: layers.IPProtocolTCP,
			SrcPort: src.Port(), DstPort: dst.Port(), Size: 100}.Bytes()
	}
	// A direction of a connection: its packets' addresses and ports, the device they come in by,
	// what they leave as, and the direction of the entry's tuple they match.
	type direction struct {
		name      string
		src, dst  netip.AddrPort
		in        int
		pkt, want []byte
		dir       uint32
	}
	type connection struct {
		name string
		dirs [2]direction // original, reply
	}
	var conns []connection
	ap := netip.MustParseAddrPort
	for _, c := range []struct {
		name     string
		src, dst netip.AddrPort // the connection's first packet, from a client on in0
		dnat     bool           // a DNAT rule translated its destination (else an SNAT rule its source)
		to       netip.AddrPort
	}{
		{"dnat", ap("198.18.0.2:3101"), ap("198.19.50.1:80"), true, ap("198.19.0.9:8080")},
		{"snat", ap("198.18.0.2:3102"), ap("198.19.0.9:80"), false, ap("198.18.1.1:40001")},
		{"dnat ipv6", ap("[2001:2::2]:3103"), ap("[2001:2:0:f150::1]:80"), true, ap("[2001:2:0:f100::9]:8080")},
	} {
		f := env.ctCreateNAT(t, c.src, c.dst, c.dnat, c.to, 600)
		// The kernel translated it as a rule would have.
		natBit := conntrack.StatusSrcNAT
		if c.dnat {
			natBit = conntrack.StatusDstNAT
		}
		if g := env.ctDump(t, ct, f); g.TupleReply != f.TupleReply || g.Status&conntrack.StatusNATMask != natBit {
			t.Fatalf("%s: entry %v > %v, status %v; want the reply tuple %v and %v", c.name, g.TupleOrig, g.TupleReply, g.Status, f.TupleReply, natBit)
		}
		f.Status = conntrack.StatusConfirmed | conntrack.StatusSeenReply | conntrack.StatusAssured | conntrack.StatusFixedTimeout
		f.ProtoInfo = conntrack.ProtoInfo{}
		if err := env.ns.Do(func() error { return ct.Update(f) }); err != nil {
			t.Fatal(err)
		}
		// Replies come from the server to the translated source, by out0, and leave by in0 as
		// from the address the client sent to.
		rsrc := netip.AddrPortFrom(f.TupleReply.IP.SourceAddress, f.TupleReply.Proto.SourcePort)
		rdst := netip.AddrPortFrom(f.TupleReply.IP.DestinationAddress, f.TupleReply.Proto.DestinationPort)
		conns = append(conns, connection{c.name, [2]direction{
			{"original", c.src, c.dst, env.in, seg(c.src, c.dst, macIn), packet.Forwarded(seg(rdst, rsrc, macIn), macOut, macNext), 0},
			{"reply", rsrc, rdst, env.out, seg(rsrc, rdst, macOut), packet.Forwarded(seg(c.dst, c.src, macOut), macIn, macPeer), 1},
		}})
	}
	for _, hook := range hooks {
		env.hook = hook
		prog := env.prog(t, true, true)
		// out0 runs the same kind of program, with its own MAC (as in TestConntrack).
		env.loadOut0(t, hook)
		for _, c := range conns {
			// The original direction first, then the reply, each from an empty place.
			env.ctClear(t)
			for _, d := range c.dirs {
				t.Run(string(hook)+"/"+c.name+"/"+d.name, func(t *testing.T) {
					// The kernel's lookup: the packet leaves translated, and the place of its tuple
					// keeps the entry, with the direction of the tuple it matched.
					env.checkRoutedOn(t, prog, d.pkt, d.in, Forwarded, d.want)
					off := ctPlaceOf(unix.IPPROTO_TCP, d.src, d.dst)
					k, pl, ok := uint32(0), linuxfpLfpCtPlace{}, false
					for i, p := range env.ctPlaces(t) {
						if i%(1<<ctCacheShift) == off {
							k, pl, ok = i, p, true
						}
					}
					if !ok {
						t.Fatal("no entry in the place of the packet's tuple after it was forwarded")
					}
					if pl.Dir != d.dir {
						t.Fatalf("the place keeps direction %d, want %d", pl.Dir, d.dir)
					}
					// From the cache, whichever CPU the test runs on: the same bytes.
					env.ctSpread(t, k, pl)
					env.checkRoutedOn(t, prog, d.pkt, d.in, Forwarded, d.want)
					// A tuple of the same direction with another source port, whose place is the
					// same: not the kept entry's (the tuple of the place's direction is compared),
					// and the kernel's lookup finds none.
					other := d.src
					for other == d.src || ctPlaceOf(unix.IPPROTO_TCP, other, d.dst) != off {
						other = netip.AddrPortFrom(other.Addr(), other.Port()+1)
					}
					mac := macIn
					if d.in == env.out {
						mac = macOut
					}
					env.checkRoutedOn(t, prog, seg(other, d.dst, mac), d.in, PassCTNew, nil)
				})
			}
		}
	}
}

// The conntrack cache where the refresh moves the entry's timeout (ct_forward in bpf/lib/ct.h):
// Linux refreshes the entry of every packet it tracks, and nothing is written through the cache's
// read-only view. A packet whose place holds its entry, and whose refresh moves the timeout, is
// forwarded all the same, and the timeout read back afterwards is what Linux's refresh makes it:
// through the kernel's lookup at once where no rule before conntrack may drop the packet; where
// one may, after the filter (the refresh deferred), and only if no such rule dropped it: conntrack
// never saw the packet then. A rule after conntrack (forward) that drops it does not undo the
// refresh.
func TestConntrackCacheRefresh(t *testing.T) {
	env := newTestEnv(t)
	ct := env.ctConn(t)
	ctData := ctTestData()
	sync := func(filter *compile.Program) {
		t.Helper()
		err := env.ns.Do(func() error {
			return env.dp.Sync(Data{TxData: txTo(env.out, env.in), CT: ctData, Filter: FilterData{Prog4: filter}})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	src, dst := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.19.0.9")
	// Established, liberal, a reply seen; the timeout not fixed.
	f := conntrack.NewFlow(unix.IPPROTO_TCP, 0, src, dst, 3401, 80, 600, 0)
	f.ProtoInfo.TCP = &conntrack.ProtoInfoTCP{State: 3, OriginalFlags: 0x0808, ReplyFlags: 0x0808}
	err := env.ns.Do(func() error {
		if err := ct.Create(f); err != nil {
			return err
		}
		f.Status = conntrack.StatusConfirmed | conntrack.StatusSeenReply | conntrack.StatusAssured
		f.ProtoInfo = conntrack.ProtoInfo{}
		return ct.Update(f)
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	setTimeout := func(s uint32) {
		t.Helper()
		g := f
		g.Status, g.Timeout = 0, s
		if err := env.ns.Do(func() error { return ct.Update(g) }); err != nil {
			t.Fatal(err)
		}
	}
	// A segment without data: Linux refreshes the entry to the established timeout. (Without
	// the padding to Ethernet's minimum the frame is built with, which forwarding removes.)
	pkt := packet.Spec{SrcMAC: macPeer, DstMAC: macIn, Src: src, Dst: dst, Proto: layers.IPProtocolTCP,
		SrcPort: 3401, DstPort: 80}.Bytes()[:14+20+20]
	const refreshed = 432000
	// A filter with a rule in raw PREROUTING (before conntrack) and one in FORWARD (after it).
	filter := func(raw, fwd model.Rule) *compile.Program {
		t.Helper()
		rs := model.NewRuleset(model.IPv4)
		for _, c := range []struct {
			key  model.ChainKey
			base *model.BaseChain
			rule model.Rule
		}{
			{model.ChainKey{TableFamily: "ip", Table: "raw", Chain: "PREROUTING"},
				&model.BaseChain{Hook: model.Prerouting, Priority: model.PriorityRaw, Type: model.ChainFilter, Policy: model.PolicyAccept}, raw},
			{model.ChainKey{TableFamily: "ip", Table: "filter", Chain: "FORWARD"},
				&model.BaseChain{Hook: model.Forward, Type: model.ChainFilter, Policy: model.PolicyAccept}, fwd},
		} {
			c.rule.ID = model.RuleID{Chain: c.key, Handle: 1}
			rs.AddChain(&model.Chain{Key: c.key, Base: c.base, Rules: []*model.Rule{&c.rule}})
		}
		rs.Sort()
		p, err := compile.Compile(rs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !p.PreCTDrop {
			t.Fatalf("no drop before conntrack:\n%s", p)
		}
		return p
	}
	// drop is a rule that drops packets from (to) prefix.
	drop := func(dir model.Dir, prefix string) model.Rule {
		return model.Rule{Matches: []model.Match{model.Addr{Dir: dir, Prefix: pfx(prefix)}}, Verdict: model.Verdict{Kind: model.Drop}}
	}
	fromOthers, fromThis := drop(model.Src, "198.18.9.0/24"), drop(model.Src, "198.18.0.2/32")
	toOthers, toThis := drop(model.Dst, "198.19.9.0/24"), drop(model.Dst, "198.19.0.9/32")
	cases := []struct {
		name    string
		filter  *compile.Program
		want    Reason
		timeout uint32 // s, after the packet
	}{
		{"no filter: at once", nil, Forwarded, refreshed},
		{"deferred: accepted", filter(fromOthers, toOthers), Forwarded, refreshed},
		{"deferred: dropped before conntrack", filter(fromThis, toOthers), FilterDropped, 60},
		{"deferred: dropped after conntrack", filter(fromOthers, toThis), FilterDropped, refreshed},
	}
	// Each case from the cache and, the cache emptied before the packet, through the kernel's
	// lookup: the deferred refresh moves the entry either way judged.
	for _, hook := range hooks {
		env.hook = hook
		prog := env.prog(t, true, true)
		for _, c := range cases {
			for _, cached := range []bool{true, false} {
				name := string(hook) + "/" + c.name
				if !cached {
					name += ", looked up"
				}
				t.Run(name, func(t *testing.T) {
					// The kernel's lookup keeps the entry (refreshed: its timeout is the one Linux gives
					// it now), then every CPU has it in the packet's place.
					sync(nil)
					env.ctClear(t)
					env.checkRouted(t, prog, pkt, Forwarded, nil)
					places := env.ctPlaces(t)
					if len(places) != 1 {
						t.Fatalf("%d places hold an entry after a forwarded packet, want 1", len(places))
					}
					for k, pl := range places {
						env.ctSpread(t, k, pl)
					}
					// The timeout moved back (an update in place: the kept entry is still the one the
					// kernel's lookup returns), and the filter of the case.
					sync(c.filter)
					setTimeout(60)
					if !cached {
						env.ctClear(t)
					}
					if c.want == Forwarded {
						env.checkRouted(t, prog, pkt, Forwarded, nil)
					} else if _, _, r := env.run(t, prog, pkt); r != c.want {
						t.Fatalf("reason %v, want %v", r, c.want)
					}
					if got := env.ctDump(t, ct, f).Timeout; got < c.timeout-2 || got > c.timeout {
						t.Fatalf("timeout %d s after the packet, want %d (as Linux's refresh leaves it)", got, c.timeout)
					}
				})
			}
		}
	}
}

// A program built without the conntrack module (Spec.Conntrack4/6 off: no conntrack users when it
// was loaded) forwards as long as the configuration says conntrack does not run; once it says it
// does (a first rule that tracks connections), that program hands every packet of the family to
// Linux until its replacement, built with the module, is installed.
func TestConntrackBuiltOut(t *testing.T) {
	env := newTestEnv(t)
	for _, hook := range hooks {
		env.hook = hook
		t.Run(string(hook), func(t *testing.T) {
			prog, err := env.dp.LoadProgram(Spec{Ifindex: env.in, Name: "in0", MAC: MACOf(macIn), Hook: hook, Router4: true, Router6: true}, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer prog.Close()
			for _, c := range []struct {
				ct   CT
				want Reason
			}{
				{CT{}, Forwarded},
				{CT{Active4: true, Active6: true, UDP: 30 * time.Second, UDPStream: 120 * time.Second}, PassReloading},
			} {
				err := env.ns.Do(func() error {
					return env.dp.Sync(Data{TxData: txTo(env.out, env.in), CT: c.ct})
				})
				if err != nil {
					t.Fatal(err)
				}
				env.checkRouted(t, prog, v4("198.18.0.2", "198.19.0.9").Bytes(), c.want, nil)
				env.checkRouted(t, prog, v6("2001:2::2", "2001:2:0:f100::9").Bytes(), c.want, nil)
			}
		})
	}
}

// ct_jiffy_ms is set only where msecs_to_jiffies() is the rounded-up division the data plane
// does (ct_timeout_is in bpf/lib/ct.h).
func TestJiffyMs(t *testing.T) {
	for _, c := range []struct {
		hz   int
		ok   bool
		want uint32
	}{{1000, true, 1}, {250, true, 4}, {100, true, 10}, {300, true, 0}, {1024, true, 0}, {0, true, 0}, {250, false, 0}} {
		if got := jiffyMsOf(c.hz, c.ok); got != c.want {
			t.Errorf("HZ %d (known %v): %d ms per jiffy, want %d", c.hz, c.ok, got, c.want)
		}
	}
}

// The filter's checks before its rules, with conntrack's state: a packet whose state no rule
// tests is accepted without its leaf (here an overflow leaf, which would otherwise hand it to
// Linux), but only where the mark is 0 (the rules were compiled for mark 0: a veth whose peer
// is in this namespace may set one, and its packets are Linux's); a rule that does test the
// state still decides.
func TestFilterCtStateNoRule(t *testing.T) {
	env := newTestEnv(t)
	ct := env.ctConn(t)
	src, dst := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.19.0.9")
	for _, dport := range []uint16{53, 54} {
		f := conntrack.NewFlow(unix.IPPROTO_UDP, 0, src, dst, 2001, dport, 60, 0)
		err := env.ns.Do(func() error {
			if err := ct.Create(f); err != nil {
				return err
			}
			f.Status = conntrack.StatusSeenReply | conntrack.StatusAssured | conntrack.StatusConfirmed
			return ct.Update(f)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	invalidDrop := func(dport uint16) *model.Rule {
		return &model.Rule{Matches: []model.Match{model.CtState{States: model.CtInvalid}, model.Proto{Proto: model.ProtoUDP},
			model.Ports{Dir: model.Dst, Ranges: []model.PortRange{{From: dport, To: dport}}}}, Verdict: model.Verdict{Kind: model.Drop}}
	}
	// More rules than a leaf holds, all for INVALID packets, and a mark match folded away.
	var rules []*model.Rule
	for i := range compile.MaxLeaf + 1 {
		rules = append(rules, invalidDrop(uint16(1000+i)))
	}
	rules = append(rules, &model.Rule{Matches: []model.Match{model.Mark{Value: 1, Mask: 1}}, Verdict: model.Verdict{Kind: model.Drop}})
	overflow := forwardProgram(t, model.IPv4, nil, rules...)
	if !overflow.HasMark || overflow.CtNoRule&model.CtEstablished == 0 || len(overflow.Leaves) != 1 || !overflow.Leaves[0].Overflow {
		t.Fatalf("want one overflow leaf, mark folded, no rule for ESTABLISHED:\n%s", overflow)
	}
	// A rule for ESTABLISHED packets to port 53.
	estDrop := invalidDrop(53)
	estDrop.Matches[0] = model.CtState{States: model.CtEstablished}
	established := forwardProgram(t, model.IPv4, nil, invalidDrop(1000), estDrop)
	// A rule for ESTABLISHED packets to one host, and a mark match folded away: /0's leaf has
	// no rule, and the filter's quick accept takes it only where the mark is safe.
	hostEst := invalidDrop(53)
	hostEst.Matches = append(hostEst.Matches, model.Addr{Dir: model.Dst, Prefix: netip.MustParsePrefix("203.0.113.9/32")})
	hostEst.Matches[0] = model.CtState{States: model.CtEstablished}
	hostMark := forwardProgram(t, model.IPv4, nil, hostEst, &model.Rule{Matches: []model.Match{model.Mark{Value: 1, Mask: 1}}, Verdict: model.Verdict{Kind: model.Drop}})
	if !hostMark.HasMark || hostMark.CtNoRule&model.CtEstablished != 0 {
		t.Fatalf("want a mark folded and a rule for ESTABLISHED:\n%s", hostMark)
	}
	ctData := CT{Active4: true, UDPStream: 120 * time.Second, UDP: 30 * time.Second}
	udp := func(dport uint16) []byte {
		s := v4(src.String(), dst.String())
		s.SrcPort, s.DstPort = 2001, dport
		return s.Bytes()
	}
	for _, c := range []struct {
		name       string
		prog       *compile.Program
		markUnsafe bool
		dport      uint16
		want       Reason
	}{
		{"no rule for the state, overflow leaf", overflow, false, 53, Forwarded},
		{"no rule for the state, mark unsafe", overflow, true, 53, PassFilter},
		{"a rule for the state matches", established, false, 53, FilterDropped},
		{"a rule for the state does not match", established, false, 54, Forwarded},
		{"/0 leaf without rules, mark safe", hostMark, false, 53, Forwarded},
		{"/0 leaf without rules, mark unsafe", hostMark, true, 53, PassFilter},
	} {
		err := env.ns.Do(func() error {
			return env.dp.Sync(Data{TxData: txTo(env.out, env.in), CT: ctData, Filter: FilterData{Prog4: c.prog}})
		})
		if err != nil {
			t.Fatal(err)
		}
		prog, err := env.dp.LoadProgram(Spec{Ifindex: env.in, Name: "in0", MAC: MACOf(macIn), Hook: HookXDP, Router4: true, Router6: true,
			Conntrack4: true, Conntrack6: true, MarkUnsafe: c.markUnsafe}, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _, reason := env.run(t, prog, udp(c.dport))
		prog.Close()
		if reason != c.want {
			t.Errorf("%s: %v, want %v", c.name, reason, c.want)
		}
	}
}

// loadOut0 loads out0's program, a router with conntrack of the same kind as in0's, with out0's
// MAC, at hook: its data is then there for the packets received on out0 (the replies).
func (env *testEnv) loadOut0(t *testing.T, hook Hook) {
	t.Helper()
	p, err := env.dp.LoadProgram(Spec{Ifindex: env.out, Name: "out0", MAC: MACOf(macOut), Hook: hook, Router4: true, Router6: true,
		Conntrack4: true, Conntrack6: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}
