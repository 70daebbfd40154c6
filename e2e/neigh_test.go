package e2e

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/testbed"
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
			staleThenSend(t, tb, l, "02:00:5e:00:53:78")
			eventually(t, 3*time.Second, "the STALE neighbour's packet counted", func() error {
				if c := readCounters(t, l, "in0"); c.passed["neighbour_stale"] == 0 {
					return errString("no neighbour_stale packet")
				}
				return nil
			})
		})
	}
}

// staleThenSend makes the DUT's neighbour entry of the sink STALE by itself, with the controller
// stopped (the sink, now with MAC mac, asks for the DUT's MAC: an ARP request and nothing else,
// since a ping's reply would be a packet Linux sends to the neighbour, moving it on itself), then
// sends one datagram through the DUT, and fails the test unless that datagram moved the entry on
// (to DELAY), as with Linux alone: a fast path that kept it from Linux leaves it STALE.
func staleThenSend(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, mac string) {
	t.Helper()
	state := func() string {
		out, _ := tb.DUT.Run("ip", "neigh", "show", "198.18.1.2", "dev", "out0")
		return out
	}
	// Frozen first: whatever the sink sends after its change (an ICMP error to the generator
	// needs its ARP request too) reaches a controller that reads nothing until the end.
	thaw := freeze(t, l)
	sh(t, tb.Sink, "ip link set eth0 address "+mac+"\nip neigh flush dev eth0")
	sendARPRequest(t, tb.Sink, "eth0", mac, "198.18.1.2", "198.18.1.1")
	eventually(t, 2*time.Second, "the DUT learnt the new MAC", func() error {
		if s := state(); !strings.Contains(s, mac) {
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

// The STALE mirror full: a neighbour the kernel makes STALE when the tracepoints have no room
// to add it still sends its next packet to Linux (every packet to a neighbour goes to Linux,
// counted as neighbour_mirror_lost), and the fast path comes back once the controller has read
// the neighbours and written the set again. The set is filled from here with entries no
// neighbour has. Without the tracepoints' count of losses the neighbour stays STALE. The hosts
// send no router solicitations: one arriving with the set full would make another neighbour
// STALE for good (nothing here sends to a host's link-local address), and every packet to a
// neighbour would rightly stay with Linux.
func TestNeighbourMirrorFull(t *testing.T) {
	tb := newTestbed(t, testbed.Options{NoRouterSolicit: true})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.19.6.1")
	fillStale(t, tb)
	staleThenSend(t, tb, l, "02:00:5e:00:53:79")
	eventually(t, 3*time.Second, "the packet counted as neighbour_mirror_lost", func() error {
		if c := readCounters(t, l, "in0"); c.passed["neighbour_mirror_lost"] == 0 {
			return errString("no neighbour_mirror_lost packet")
		}
		return nil
	})
	// The controller reads the neighbours after the change and writes the set: the neighbour
	// Linux probed is STALE no more, so nothing is missing and the fast path comes back.
	waitFastPath(t, tb, l, "198.19.6.1")
}

// The STALE mirror full when the controller reads the neighbours: it cannot write the STALE
// neighbour either, and every packet to a neighbour goes to Linux. The datagram that moves the
// neighbour to DELAY (Linux notifies no such move) wakes the controller through the
// tracepoints, which rereads and writes the set, now without it: the fast path comes back at
// once. Without that wake it would wait for the neighbour's next notification, here 30 s away
// (delay_first_probe_time). No router solicitations, as in TestNeighbourMirrorFull.
func TestNeighbourMirrorFullUncovered(t *testing.T) {
	tb := newTestbed(t, testbed.Options{NoRouterSolicit: true})
	sh(t, tb.DUT, "sysctl -qw net.ipv4.neigh.out0.delay_first_probe_time=30")
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.19.6.1")
	fillStale(t, tb)
	counts := dataplaneMap(t, tb.DUT, "in0", "lfp_stale_count")
	const mac = "02:00:5e:00:53:7a"
	sh(t, tb.Sink, "ip link set eth0 address "+mac+"\nip neigh flush dev eth0")
	sendARPRequest(t, tb.Sink, "eth0", mac, "198.18.1.2", "198.18.1.1")
	eventually(t, 3*time.Second, "the controller found the set full", func() error {
		var c uint64
		if err := counts.Lookup(uint32(1), &c); err != nil {
			return err
		}
		if c != ^uint64(0) {
			return errString("the controller's part of lfp_stale_count is not 'not covered'")
		}
		return nil
	})
	sendUDP(t, tb, "198.19.6.1", 1)
	if c := readCounters(t, l, "in0"); c.passed["neighbour_mirror_lost"] == 0 {
		t.Fatalf("the datagram to a STALE neighbour with the set full: to Linux %v, want neighbour_mirror_lost", c.passed)
	}
	waitFastPath(t, tb, l, "198.19.6.1")
}

// fillStale fills linuxfp's STALE set in the DUT with entries no neighbour has, until there is
// no room; the map goes with linuxfp's programs.
func fillStale(t *testing.T, tb *testbed.Testbed) {
	t.Helper()
	stale := dataplaneMap(t, tb.DUT, "in0", "lfp_stale")
	type key struct {
		Ifindex, Family uint32
		Addr            [4]uint32
	}
	for i := uint32(1); ; i++ {
		k := key{Ifindex: 1 << 30, Family: unix.AF_INET, Addr: [4]uint32{i}}
		err := stale.Update(k, uint32(0), ebpf.UpdateNoExist)
		if errors.Is(err, unix.E2BIG) {
			return
		}
		if err != nil {
			t.Fatalf("fill lfp_stale: %v", err)
		}
	}
}

// dataplaneMap opens the map called name of the program linuxfp attached to dev in ns (at XDP
// or tcx ingress): other linuxfp instances on this machine have maps of the same name.
func dataplaneMap(t *testing.T, ns *nsutil.NS, dev, name string) *ebpf.Map {
	t.Helper()
	ids := attachedPrograms(t, ns, dev)
	for _, id := range ids {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		info, err := p.Info()
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		mapIDs, _ := info.MapIDs()
		for _, mid := range mapIDs {
			m, err := ebpf.NewMapFromID(mid)
			if err != nil {
				t.Fatal(err)
			}
			if mi, err := m.Info(); err == nil && mi.Name == name {
				t.Cleanup(func() { m.Close() })
				return m
			}
			m.Close()
		}
	}
	t.Fatalf("no map %s in the programs on %s", name, dev)
	return nil
}
