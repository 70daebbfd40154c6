package e2e

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// A MAC moves to another bridge port (a frame from it arrives there, here a broadcast that only
// Linux sees): the bridge learns the move in its data path, not over netlink. From that moment
// frames to the MAC must go to the new port, as with Linux alone, never to the old one.
func TestBridgeMoveFollowedAtOnce(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := bridgeTestbed(t, h.opts, `ip link add br0 type bridge
ip link set in0 master br0
ip link set out0 master br0`)
			mover, err := nsutil.New(nsPrefix + "-mover")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mover.Close() })
			sh(t, tb.DUT, "ip link add out1 type veth peer name eth1 netns "+mover.Name+"\nip link set out1 master br0\nip link set out1 up")
			sh(t, mover, "ip link set eth1 up")
			l := startLinuxfp(t, tb)
			st, err := l.Client.Status()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(st.FDBWatch, "event") {
				t.Fatalf("bridge FDB watch %q, want events", st.FDBWatch)
			}
			sinkSpeaks(t, tb)
			waitBridged(t, tb, l)

			sinkMAC := tb.SinkMAC
			moverIdx := linkIndex(t, mover, "eth1")
			out1 := linkIndex(t, tb.DUT, "out1")
			// Captures at both ends, and gen's socket, ready before the move.
			atSink, atMover := openCapture(t, tb.Sink, tb.SinkIfindex), openCapture(t, mover, moverIdx)
			defer unix.Close(atSink)
			defer unix.Close(atMover)
			var c net.Conn
			if err := tb.Gen.Do(func() error {
				var err error
				c, err = net.Dial("udp", net.JoinHostPort(sinkL2, "9"))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer c.Close()

			h, err := netlink.NewHandleAt(tb.DUT.Handle())
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			before := readCounters(t, l, "in0")
			// The move: a broadcast from the sink's MAC on out1.
			frame := append(append(bytes.Repeat([]byte{0xff}, 6), sinkMAC...), 0x88, 0xb5)
			frame = append(frame, make([]byte, 46)...)
			if err := mover.Do(func() error {
				fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: moverIdx, Halen: 6})
			}); err != nil {
				t.Fatal(err)
			}
			// As soon as Linux's bridge has it on out1, gen sends to it.
			deadline := time.Now().Add(time.Second)
			for moved := false; !moved; {
				if time.Now().After(deadline) {
					t.Fatal("the bridge did not learn the sink's MAC on out1")
				}
				ns, err := h.NeighList(out1, unix.AF_BRIDGE)
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range ns {
					moved = moved || bytes.Equal(n.HardwareAddr, sinkMAC)
				}
			}
			for i := 0; i < 20; i++ {
				c.Write([]byte("linuxfp fdb move probe"))
			}
			toSink, toMover := countFrames(atSink, "linuxfp fdb move probe"), countFrames(atMover, "linuxfp fdb move probe")
			d := readCounters(t, l, "in0").sub(before).ownOnly()
			t.Logf("probes at in0: forwarded %d, to Linux %v", d.forwarded, d.passed)
			if toSink != 0 || toMover != 20 {
				t.Fatalf("after the move: %d datagrams to the old port (sink), %d of 20 to the new one (Linux alone: 0 and 20)", toSink, toMover)
			}
		})
	}
}

// A bridge port disabled forwards nothing from the moment the command returns, as in Linux:
// the port's state is data in the fast path, and the request that changes it is counted by the
// fence (AF_BRIDGE link requests). (Without STP a port set to blocking is made forwarding again
// by the kernel at once; disabled stays.)
func TestBridgePortDisabledAtOnce(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := bridgeTestbed(t, h.opts, `ip link add br0 type bridge
ip link set in0 master br0
ip link set out0 master br0`)
			l := startLinuxfp(t, tb)
			sinkSpeaks(t, tb)
			waitBridged(t, tb, l)
			if got := probesAfterArgs(t, tb, []string{"bridge", "link", "set", "dev", "out0", "state", "0"}, sinkL2, 20); got != 0 {
				t.Errorf("out0 disabled, then %d of 20 datagrams to the sink behind it arrived (Linux forwards none)", got)
			}
		})
	}
}
