package e2e

import (
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// vxlanOverlay makes the DUT and the sink two Flannel-style VXLAN nodes over out0 <-> eth0: the
// DUT's flannel.1 (198.19.1.0/32) routes 198.19.2.0/24 to the sink's flannel.1 (198.19.2.0/32),
// which holds the "pod" address 198.19.2.5 and routes gen's subnet back over the overlay.
func vxlanOverlay(t *testing.T, tb *testbed.Testbed, dutOpts string) {
	t.Helper()
	mac := func(ns *nsutil.NS) string {
		out, err := ns.Run("cat", "/sys/class/net/flannel.1/address")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	sh(t, tb.DUT, `ip link add flannel.1 type vxlan id 1 local 198.18.1.1 dev out0 dstport 8472 nolearning `+dutOpts+`
ip link set flannel.1 mtu 1450
ip addr add 198.19.1.0/32 dev flannel.1
ip link set flannel.1 up`)
	sh(t, tb.Sink, `ip link add flannel.1 type vxlan id 1 local 198.18.1.2 dev eth0 dstport 8472 nolearning `+dutOpts+`
ip link set flannel.1 mtu 1450
ip addr add 198.19.2.0/32 dev flannel.1
ip addr add 198.19.2.5/32 dev lo
ip link set flannel.1 up`)
	dutMAC, sinkMAC := mac(tb.DUT), mac(tb.Sink)
	sh(t, tb.DUT, `ip route del 198.19.2.0/24
ip route add 198.19.2.0/24 via 198.19.2.0 dev flannel.1 onlink
ip neigh add 198.19.2.0 lladdr `+sinkMAC+` dev flannel.1 nud permanent
bridge fdb append `+sinkMAC+` dev flannel.1 dst 198.18.1.2`)
	sh(t, tb.Sink, `ip route add 198.18.0.0/24 via 198.19.1.0 dev flannel.1 onlink
ip neigh add 198.19.1.0 lladdr `+dutMAC+` dev flannel.1 nud permanent
bridge fdb append `+dutMAC+` dev flannel.1 dst 198.18.1.1`)
}

// Through a VXLAN overlay as Flannel makes it: packets routed into flannel.1 are encapsulated by
// the fast path; with an option it does not reproduce (here df) they are redirected to flannel.1
// and its driver encapsulates them. The frames
// flannel.1 decapsulates are routed by a tc program on it; the sink's VXLAN packets (no UDP
// checksum in the Flannel case) are decapsulated by the fast path on out0 first.
func TestVXLANOverlay(t *testing.T) {
	for _, c := range []struct {
		name, opts string
		encap      bool
	}{
		// flanneld's devices have udpcsum (vishvananda/netlink leaves the kernel default).
		{"flannel", "udpcsum", true},
		{"noudpcsum", "noudpcsum", true},
		// An option the fast path does not reproduce: the driver encapsulates.
		{"df set", "udpcsum df set", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := newTestbed(t, testbed.Options{})
			vxlanOverlay(t, tb, c.opts)
			l := startLinuxfp(t, tb)
			waitStatus(t, l, "flannel.1", "a tc program on flannel.1", func(it *status.Interface) bool {
				return it.Program != nil && it.Program.Hook == "tc" && it.TCEgress
			})
			if it, _ := l.Interface("flannel.1"); hasNote(it, "encapsulated in the fast path") != c.encap {
				t.Fatalf("flannel.1 notes %q", it.Notes)
			}
			before, beforeVx := readInterface(t, l, "in0"), readCounters(t, l, "flannel.1")
			tcpEchoTo(t, tb, "198.19.2.5", 300)
			in0, dv := readInterface(t, l, "in0"), readCounters(t, l, "flannel.1").sub(beforeVx)
			fwd := in0.Forwarded.Packets - before.Forwarded.Packets
			enc := in0.Encapsulated.Packets - before.Encapsulated.Packets
			if c.encap && (enc < 250 || fwd != 0) || !c.encap && (fwd < 250 || enc != 0) {
				t.Fatalf("gen -> pod: encapsulated %d, forwarded into flannel.1 %d (want encapsulation %v); to Linux %v",
					enc, fwd, c.encap, in0.Passed)
			}
			if dv.forwarded < 250 {
				t.Fatalf("pod -> gen: forwarded %d from flannel.1, to Linux %v", dv.forwarded, dv.passed)
			}
			if dec := readInterface(t, l, "out0").Decapsulated.Packets; dec < 250 {
				t.Fatalf("sink -> DUT: decapsulated %d on out0, to Linux %v", dec, readInterface(t, l, "out0").Passed)
			}
		})
	}
}

// readInterface is one interface's status.
func readInterface(t *testing.T, l *testbed.Linuxfp, iface string) *status.Interface {
	t.Helper()
	it, err := l.Interface(iface)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

// The outer UDP checksum of a udpcsum device: the driver computes it from the inner checksum
// left to offload (lco_csum()), so a frame crossing veths carries an outer checksum that only
// holds once the inner one is filled in, and the receiver, seeing CHECKSUM_PARTIAL, never checks
// it. So the test checks the relation itself on every VXLAN frame the sink receives, first from
// the driver (which proves the relation is the kernel's), then from the fast path.
func TestVXLANOuterChecksum(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	vxlanOverlay(t, tb, "udpcsum")
	check := func(t *testing.T, frames [][]byte) int {
		t.Helper()
		n := 0
		for _, f := range frames {
			if len(f) < 84+20 || f[12] != 8 || f[13] != 0 || f[23] != 17 || f[36] != 0x21 || f[37] != 0x18 || f[62] != 8 || f[63] != 0 {
				continue // not VXLAN with IPv4 inside
			}
			var field int
			switch f[64+9] {
			case 6:
				field = 84 + 16
			case 17:
				field = 84 + 6
			default:
				continue
			}
			want := lcoChecksum(f, field)
			if got := uint16(f[40])<<8 | uint16(f[41]); got != want {
				t.Errorf("outer UDP checksum %#04x, lco_csum() gives %#04x: %x", got, want, f)
			}
			n++
		}
		return n
	}
	linux := captureOn(t, tb.Sink, "eth0", func() { tcpEchoTo(t, tb, "198.19.2.5", 100) })
	if n := check(t, linux); n < 100 {
		t.Fatalf("%d VXLAN frames from the driver checked, want >= 100", n)
	}
	l := startLinuxfp(t, tb)
	waitStatus(t, l, "flannel.1", "encapsulation in the fast path", func(it *status.Interface) bool {
		return it.Program != nil && hasNote(it, "encapsulated in the fast path")
	})
	before := readInterface(t, l, "in0").Encapsulated.Packets
	fp := captureOn(t, tb.Sink, "eth0", func() { tcpEchoTo(t, tb, "198.19.2.5", 100) })
	if enc := readInterface(t, l, "in0").Encapsulated.Packets - before; enc < 100 {
		t.Fatalf("encapsulated %d, want the exchange's", enc)
	}
	if n := check(t, fp); n < 100 {
		t.Fatalf("%d VXLAN frames from linuxfp checked, want >= 100", n)
	}
}

// lcoChecksum is the outer UDP checksum udp_set_csum() computes for a VXLAN frame f whose inner
// checksum at field is left to offload: the complement of that field, plus the sum of the outer
// UDP header (checksum 0) up to the inner checksum's start, plus the pseudo header; 0 as 0xffff.
func lcoChecksum(f []byte, field int) uint16 {
	start := 84 // the inner L4 header: csum_start
	sum := uint32(^(uint16(f[field])<<8 | uint16(f[field+1])))
	for i := 34; i < start; i += 2 {
		if i == 40 {
			continue // the outer checksum itself counts as 0
		}
		sum += uint32(f[i])<<8 | uint32(f[i+1])
	}
	for i := 26; i < 34; i += 2 { // saddr, daddr
		sum += uint32(f[i])<<8 | uint32(f[i+1])
	}
	sum += 17 + (uint32(f[38])<<8 | uint32(f[39])) // protocol, UDP length
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	if c == 0 {
		c = 0xffff
	}
	return c
}

// captureOn returns the frames dev in ns received while fn ran.
func captureOn(t *testing.T, ns *nsutil.NS, dev string, fn func()) [][]byte {
	t.Helper()
	var fd int
	idx := linkIndex(t, ns, dev)
	if err := ns.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: idx})
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	var frames [][]byte
	done := make(chan struct{})
	var stop atomic.Bool
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for !stop.Load() {
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			frames = append(frames, append([]byte(nil), buf[:n]...))
		}
	}()
	fn()
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	<-done
	return frames
}

// The outer UDP source port of a TCP connection's VXLAN frames comes from the skb's flow hash,
// which the sender's socket set (sk_txhash, an L4 hash): the fast path takes a hash the skb holds
// as it is (ctx_hash_recalc in bpf/lib/ctx.h), as skb_get_hash() does. So one connection's frames
// leave with the port the driver gave them before linuxfp started; a hash computed anew from the
// packet would give another.
func TestVXLANSourcePortFromSocketHash(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	vxlanOverlay(t, tb, "udpcsum")
	var ln net.Listener
	if err := tb.Sink.Do(func() (err error) { ln, err = net.Listen("tcp", "198.19.2.5:0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	var c net.Conn
	if err := tb.Gen.Do(func() (err error) { c, err = net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	exchange := func(n int) {
		buf := make([]byte, 1)
		for i := 0; i < n; i++ {
			if _, err := c.Write([]byte{'x'}); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The connection's VXLAN frames to the pod, by outer source port.
	ports := func(frames [][]byte) map[uint16]int {
		p := map[uint16]int{}
		for _, f := range frames {
			if len(f) < 84+20 || f[12] != 8 || f[13] != 0 || f[23] != 17 || f[36] != 0x21 || f[37] != 0x18 ||
				f[62] != 8 || f[63] != 0 || f[64+9] != 6 || f[64+16] != 198 || f[64+17] != 19 || f[64+18] != 2 || f[64+19] != 5 {
				continue
			}
			p[uint16(f[34])<<8|uint16(f[35])]++
		}
		return p
	}
	linux := ports(captureOn(t, tb.Sink, "eth0", func() { exchange(20) }))
	if len(linux) != 1 {
		t.Fatalf("the driver's outer source ports %v, want one", linux)
	}
	l := startLinuxfp(t, tb)
	waitStatus(t, l, "flannel.1", "encapsulation in the fast path", func(it *status.Interface) bool {
		return it.Program != nil && hasNote(it, "encapsulated in the fast path")
	})
	before := readInterface(t, l, "in0").Encapsulated.Packets
	fp := ports(captureOn(t, tb.Sink, "eth0", func() { exchange(300) }))
	if enc := readInterface(t, l, "in0").Encapsulated.Packets - before; enc < 250 {
		t.Fatalf("encapsulated %d, want most of the exchange's", enc)
	}
	for p, n := range fp {
		if linux[p] == 0 {
			t.Fatalf("%d frames with outer source port %d; the driver's: %v", n, p, linux)
		}
	}
}

// The fast path keeps a vxlan device's data and the remote its FDB names with the FIB cache's
// answer that routes into the device (vxlan_remote() in bpf/lib/vxlan.h): a remote changed in
// the FDB must be where the next packets go, from the driver while the change is fenced and from
// the fast path after, never the old remote kept with an answer.
func TestVXLANRemoteChange(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	vxlanOverlay(t, tb, "udpcsum")
	l := startLinuxfp(t, tb)
	waitStatus(t, l, "flannel.1", "encapsulation in the fast path", func(it *status.Interface) bool {
		return it.Program != nil && hasNote(it, "encapsulated in the fast path")
	})
	sinkMAC := nsMAC(t, tb.Sink, "flannel.1").String()
	// The outer destinations of the VXLAN frames carrying gen's UDP datagrams to the pod.
	remotes := func(frames [][]byte) map[string]int {
		r := map[string]int{}
		for _, f := range frames {
			if len(f) < 84+8 || f[12] != 8 || f[13] != 0 || f[23] != 17 || f[36] != 0x21 || f[37] != 0x18 ||
				f[62] != 8 || f[63] != 0 || f[64+9] != 17 || net.IP(f[80:84]).String() != "198.19.2.5" {
				continue
			}
			r[net.IP(f[30:34]).String()]++
		}
		return r
	}
	encapsulated := func() uint64 { return readInterface(t, l, "in0").Encapsulated.Packets }
	before := encapsulated()
	got := remotes(captureOn(t, tb.Sink, "eth0", func() { sendUDP(t, tb, "198.19.2.5", 300) }))
	if enc := encapsulated() - before; enc < 250 || got["198.18.1.2"] < 250 || len(got) != 1 {
		t.Fatalf("before the change: encapsulated %d, outer destinations %v", enc, got)
	}
	sh(t, tb.Sink, "ip addr add 198.18.1.3/24 dev eth0")
	sh(t, tb.DUT, "bridge fdb replace "+sinkMAC+" dev flannel.1 dst 198.18.1.3")
	before = encapsulated()
	got = remotes(captureOn(t, tb.Sink, "eth0", func() { sendUDP(t, tb, "198.19.2.5", 400) }))
	if got["198.18.1.2"] != 0 || got["198.18.1.3"] < 350 {
		t.Fatalf("after the remote changed to 198.18.1.3: outer destinations %v", got)
	}
	if enc := encapsulated() - before; enc < 100 {
		t.Fatalf("after the remote changed: encapsulated %d in the fast path, want most of 400", enc)
	}
}

// The fast path keeps the vxlan device a VXLAN packet is for with the FIB cache (vxlan_rx_dev()
// in bpf/lib/vxlan.h): a change of that device must reach the next packets. Here the DUT's
// flannel.1 takes the sink's MAC, so the sink's frames come from the device's own address:
// vxlan_rcv() drops them as a loop, and the fast path must leave them to it instead of
// decapsulating them with the MAC it kept.
func TestVXLANRxDeviceChange(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	vxlanOverlay(t, tb, "udpcsum")
	l := startLinuxfp(t, tb)
	waitStatus(t, l, "flannel.1", "decapsulation in the fast path", func(it *status.Interface) bool {
		return it.Program != nil && hasNote(it, "decapsulated in the fast path")
	})
	sinkMAC := nsMAC(t, tb.Sink, "flannel.1").String()
	// The sink sends over the overlay: its route to gen's subnet is through flannel.1.
	send := func(n int) {
		t.Helper()
		if err := tb.Sink.Do(func() error {
			c, err := net.Dial("udp", "198.18.0.2:9")
			if err != nil {
				return err
			}
			defer c.Close()
			for i := 0; i < n; i++ {
				c.Write([]byte("linuxfp e2e"))
				time.Sleep(200 * time.Microsecond)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	decapsulated := func() uint64 { return readInterface(t, l, "out0").Decapsulated.Packets }
	before := decapsulated()
	send(200)
	if n := decapsulated() - before; n < 150 {
		t.Fatalf("before the change: decapsulated %d of 200, to Linux %v", n, readInterface(t, l, "out0").Passed)
	}
	// Once linuxfp follows the change: the frames on out0 are not fenced by a change of
	// flannel.1 (the link unit fences the devices changed), and the map is written then.
	sh(t, tb.DUT, "ip link set flannel.1 address "+sinkMAC)
	waitFenceOpen(t, l)
	before, passed := decapsulated(), readInterface(t, l, "out0").Passed["vxlan_rx"].Packets
	send(400)
	if n := decapsulated() - before; n != 0 {
		t.Fatalf("after flannel.1 took the sink's MAC: decapsulated %d of the sink's frames, which Linux drops", n)
	}
	if n := readInterface(t, l, "out0").Passed["vxlan_rx"].Packets - passed; n < 350 {
		t.Fatalf("after the change: %d frames handed to Linux as vxlan_rx, want the 400 sent; to Linux %v",
			n, readInterface(t, l, "out0").Passed)
	}
}
