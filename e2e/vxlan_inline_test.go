package e2e

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The DUT's out0 program routes what it decapsulates for flannel.1 as flannel.1's program would
// (bpf/lib/vxlan.h, cfg_vxlan_rx_route) only where that is what Linux does with the packet
// received on flannel.1. Datagrams from the sink's side of the overlay to gen, each case
// against what Linux does: a FORWARD rule on `-i flannel.1` (the inline route must see the
// packet coming in on flannel.1), rp_filter on flannel.1 (flannel.1's program would not route:
// the inline one must not either), a packet socket on flannel.1 (tcpdump sees what is received
// there), and flannel.1's own receive counters, which neither the redirect into flannel.1 nor
// the inline route counts (the driver's vxlan_rcv() does; README's VXLAN module says so).
func TestVXLANDecapRoutedInline(t *testing.T) {
	const n = 20
	for _, c := range []struct {
		name   string
		dut    string // DUT configuration before linuxfp starts
		inline bool   // out0 routes flannel.1's frames itself
		taken  bool   // the fast path forwards the datagrams (else Linux decapsulates them)
		src    string // the datagrams' source, on the sink's lo
		want   int    // datagrams gen receives
		tap    bool   // a packet socket on the DUT's flannel.1 while they pass
		// tapLate: that socket is opened after linuxfp has started routing inline; the poll
		// of the packet sockets must hand flannel.1's frames back to its receive path.
		tapLate bool
	}{
		{name: "routed inline", inline: true, taken: true, src: "198.19.2.5", want: n},
		{name: "forward rule on -i flannel.1", dut: "iptables -A FORWARD -i flannel.1 -p udp --dport 9 -j DROP",
			inline: true, src: "198.19.2.5", want: 0},
		// 198.18.0.99 is routed out of in0: strict reverse-path filtering on flannel.1 drops it.
		{name: "rp_filter on flannel.1", dut: "sysctl -qw net/ipv4/conf/flannel.1/rp_filter=1",
			src: "198.18.0.99", want: 0},
		{name: "packet socket on flannel.1", src: "198.19.2.5", want: n, tap: true},
		{name: "packet socket opened on flannel.1 while linuxfp runs", inline: true, src: "198.19.2.5", want: n,
			tap: true, tapLate: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := newTestbed(t, testbed.Options{})
			vxlanOverlay(t, tb, "udpcsum")
			sh(t, tb.Sink, "ip addr add 198.18.0.99/32 dev lo")
			if c.dut != "" {
				sh(t, tb.DUT, c.dut)
			}
			tap := -1
			if c.tap && !c.tapLate {
				tap = openCapture(t, tb.DUT, linkIndex(t, tb.DUT, "flannel.1"))
				defer unix.Close(tap)
			}
			l := startLinuxfp(t, tb)
			waitStatus(t, l, "flannel.1", "flannel.1's program and the decision about its decapsulated frames", func(it *status.Interface) bool {
				return it.Program != nil && (hasNote(it, "routed by the underlay's program") || hasNote(it, "go through its receive path"))
			})
			waitStatus(t, l, "in0", "in0 as an egress into gen's namespace", func(it *status.Interface) bool { return it.TCPeer })
			if it, _ := l.Interface("flannel.1"); hasNote(it, "routed by the underlay's program") != c.inline {
				t.Errorf("flannel.1's notes %q, want routed inline %v", it.Notes, c.inline)
			}
			if c.tapLate {
				tap = openCapture(t, tb.DUT, linkIndex(t, tb.DUT, "flannel.1"))
				defer unix.Close(tap)
				waitStatus(t, l, "flannel.1", "flannel.1's frames back on its receive path after a packet socket opened", func(it *status.Interface) bool {
					return hasNote(it, "go through its receive path")
				})
			}
			// The tunnel's UDP flow and gen's neighbour entry exist before the datagrams
			// that are counted.
			sendUDPBetween(t, tb.Sink, c.src, "198.18.0.2", 3, "warm")
			time.Sleep(100 * time.Millisecond)
			if tap >= 0 {
				countFrames(tap, "warm")
			}
			gen := openCapture(t, tb.Gen, linkIndex(t, tb.Gen, "eth0"))
			defer unix.Close(gen)
			rx := rxPackets(t, tb.DUT, "flannel.1")
			out0 := readInterface(t, l, "out0")
			before, beforeLinux := out0.Decapsulated.Packets, out0.Passed["vxlan_rx"].Packets
			sendUDPBetween(t, tb.Sink, c.src, "198.18.0.2", n, "inline")
			if got := countFrames(gen, "inline"); got != c.want {
				t.Errorf("gen received %d of %d datagrams, Linux: %d", got, n, c.want)
			}
			// The sink's stack leaves the inner checksum to offload, and its vxlan driver sets
			// up the tunnel's offloads: the fast path decapsulates such a packet only to
			// forward it itself (bpf/lib/vxlan.h, vxlan_undo); everything else is Linux's, as
			// the VXLAN packet it came as (flannel.1's driver counts it then). Most of them:
			// GRO on out0 may merge a few into a train, which is Linux's.
			out0 = readInterface(t, l, "out0")
			dec, linux, d := out0.Decapsulated.Packets-before, out0.Passed["vxlan_rx"].Packets-beforeLinux, rxPackets(t, tb.DUT, "flannel.1")-rx
			if c.taken {
				if dec < n/2 {
					t.Errorf("decapsulated %d of %d on out0: not the fast path's (to Linux %v)", dec, n, out0.Passed)
				}
				if d != 0 {
					t.Errorf("flannel.1's rx_packets grew by %d: the fast path's decapsulation never counted there", d)
				}
			} else {
				if dec != 0 || linux < n/2 {
					t.Errorf("out0 decapsulated %d and handed %d of %d to Linux as VXLAN packets, want none and all", dec, linux, n)
				}
				if d < n/2 {
					t.Errorf("flannel.1's rx_packets grew by %d: Linux's vxlan_rcv() did not decapsulate the %d datagrams", d, n)
				}
			}
			if tap >= 0 {
				if got := countFrames(tap, "inline"); got != n {
					t.Errorf("a packet socket on flannel.1 saw %d of %d datagrams", got, n)
				}
			}
		})
	}
}

// sendUDPBetween sends n datagrams carrying marker from src (an address of ns) to dst:9.
func sendUDPBetween(t *testing.T, ns *nsutil.NS, src, dst string, n int, marker string) {
	t.Helper()
	err := ns.Do(func() error {
		d := net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("udp", net.JoinHostPort(dst, "9"))
		if err != nil {
			return err
		}
		defer c.Close()
		for i := 0; i < n; i++ {
			c.Write([]byte(fmt.Sprintf("linuxfp e2e %s %d", marker, i)))
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send from %s to %s: %v", src, dst, err)
	}
}

// rxPackets is dev's receive counter in ns (what `ip -s link` shows).
func rxPackets(t *testing.T, ns *nsutil.NS, dev string) uint64 {
	t.Helper()
	out, err := ns.Run("cat", "/sys/class/net/"+dev+"/statistics/rx_packets")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
