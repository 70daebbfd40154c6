package e2e

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// A neighbour the kernel makes STALE by itself (a new MAC learnt from the neighbour's ARP
// request; no request, no notification read: the controller is frozen) sends its next packet to
// Linux, which moves it to DELAY and probes it again, as Linux alone does: the fast path never
// keeps forwarding to a neighbour nobody confirms.
func TestNeighbourStaleAtOnce(t *testing.T) {
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			tb := newTestbed(t, h.opts)
			l := startLinuxfp(t, tb)
			waitFastPath(t, tb, l, "198.19.6.1")
			state := func() string {
				out, _ := tb.DUT.Run("ip", "neigh", "show", "198.18.1.2", "dev", "out0")
				return out
			}
			sh(t, tb.Sink, "ip link set eth0 address 02:00:5e:00:53:78\nip neigh flush dev eth0")
			thaw := freeze(t, l)
			// The sink asks for the DUT's MAC (an ARP request and nothing else: a ping's reply
			// would be a packet Linux sends to the neighbour, moving it on itself).
			sendARPRequest(t, tb.Sink, "eth0", "02:00:5e:00:53:78", "198.18.1.2", "198.18.1.1")
			eventually(t, 2*time.Second, "the DUT learnt the new MAC", func() error {
				if s := state(); !strings.Contains(s, "02:00:5e:00:53:78") {
					return errString(s)
				}
				return nil
			})
			if s := state(); !strings.Contains(s, "STALE") {
				t.Fatalf("the DUT's neighbour after the sink's ARP request: %q, want STALE", s)
			}
			sendUDP(t, tb, "198.19.6.1", 1)
			s := state()
			thaw()
			if strings.Contains(s, "STALE") {
				t.Fatalf("after a packet to a STALE neighbour: %q; Linux alone moves it to DELAY (the fast path kept it from Linux)", s)
			}
			eventually(t, 3*time.Second, "the STALE neighbour's packet counted", func() error {
				if c := readCounters(t, l, "in0"); c.passed["neighbour_stale"] == 0 {
					return errString("no neighbour_stale packet")
				}
				return nil
			})
		})
	}
}

// sendARPRequest sends from dev in ns (MAC mac, address ip) one ARP request for target.
func sendARPRequest(t *testing.T, ns *nsutil.NS, dev, mac, ip, target string) {
	t.Helper()
	hw, err := net.ParseMAC(mac)
	if err != nil {
		t.Fatal(err)
	}
	f := arpRequest(hw, netip.MustParseAddr(ip), netip.MustParseAddr(target))(nil)
	err = ns.Do(func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifc.Index, Protocol: htons(unix.ETH_P_ARP), Halen: 6,
			Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}})
	})
	if err != nil {
		t.Fatal(err)
	}
}
