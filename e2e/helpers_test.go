package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// sendUDP sends n datagrams from the gen namespace to dst:9.
func sendUDP(t *testing.T, tb *testbed.Testbed, dst string, n int) {
	t.Helper()
	err := tb.Gen.Do(func() error {
		c, err := net.Dial("udp", net.JoinHostPort(dst, "9"))
		if err != nil {
			return err
		}
		defer c.Close()
		for i := 0; i < n; i++ {
			// ICMP port unreachable coming back can fail a later write on a connected
			// socket (ECONNREFUSED); that is not what these tests look at.
			c.Write([]byte(fmt.Sprintf("linuxfp e2e %d", i)))
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send to %s: %v", dst, err)
	}
}

// counters is a snapshot of one interface's fast-path counters.
type counters struct {
	forwarded uint64
	passed    map[string]uint64
}

func readCounters(t *testing.T, l *testbed.Linuxfp, iface string) counters {
	t.Helper()
	it, err := l.Interface(iface)
	if err != nil {
		t.Fatal(err)
	}
	c := counters{forwarded: it.Forwarded.Packets, passed: map[string]uint64{}}
	for r, v := range it.Passed {
		c.passed[r] = v.Packets
	}
	return c
}

func (c counters) sub(o counters) counters {
	d := counters{forwarded: c.forwarded - o.forwarded, passed: map[string]uint64{}}
	for r, v := range c.passed {
		if v-o.passed[r] > 0 {
			d.passed[r] = v - o.passed[r]
		}
	}
	return d
}

// ownOnly drops the reasons a unicast IP connection's packets can never be passed for (frames
// for another MAC or not IP at all: the hosts' own neighbour discovery and multicast listener
// reports, which may cross the link at any time; and martian sources: IPv6 neighbour discovery
// sent to the DUT's MAC from a link-local address, as a host's unicast probe of its neighbour
// entry is, while the tests' connections run between global addresses), for checks about one
// connection's packets.
func (c counters) ownOnly() counters {
	d := counters{forwarded: c.forwarded, passed: map[string]uint64{}}
	for r, v := range c.passed {
		if r != "not_for_us" && r != "not_ip" && r != "martian_source" {
			d.passed[r] = v
		}
	}
	return d
}

// trafficDelta sends n datagrams to dst and returns what in0's counters saw.
func trafficDelta(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, dst string, n int) counters {
	t.Helper()
	before := readCounters(t, l, "in0")
	sendUDP(t, tb, dst, n)
	time.Sleep(20 * time.Millisecond)
	return readCounters(t, l, "in0").sub(before)
}

// eventually retries f until it returns nil or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, timeout, err)
}

// waitFastPath waits until datagrams to dst are forwarded by the fast path.
func waitFastPath(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, dst string) {
	t.Helper()
	eventually(t, 3*time.Second, "fast path to "+dst, func() error {
		d := trafficDelta(t, tb, l, dst, 5)
		if d.forwarded == 0 {
			return fmt.Errorf("nothing fast-pathed; to Linux: %v", d.passed)
		}
		return nil
	})
}

// waitPassed waits until datagrams to dst go to Linux for reason, and none are fast-pathed.
func waitPassed(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, dst, reason string) {
	t.Helper()
	eventually(t, 3*time.Second, "datagrams to "+dst+" handed to Linux ("+reason+")", func() error {
		d := trafficDelta(t, tb, l, dst, 5)
		if d.forwarded != 0 || d.passed[reason] == 0 {
			return fmt.Errorf("fast-pathed %d, to Linux %v", d.forwarded, d.passed)
		}
		return nil
	})
}

// waitStatus waits until the status of iface satisfies cond.
func waitStatus(t *testing.T, l *testbed.Linuxfp, iface, what string, cond func(*status.Interface) bool) {
	t.Helper()
	eventually(t, 3*time.Second, what, func() error {
		it, err := l.Interface(iface)
		if err != nil {
			return err
		}
		if !cond(it) {
			return fmt.Errorf("status of %s: program %+v, notes %q, egress %v %q", iface, it.Program, it.Notes, it.Egress, it.EgressNote)
		}
		return nil
	})
}

func hasNote(it *status.Interface, sub string) bool {
	for _, n := range it.Notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

func sh(t *testing.T, ns *nsutil.NS, script string) {
	t.Helper()
	if err := ns.Script(script); err != nil {
		t.Fatal(err)
	}
}

// progAttached reports whether an XDP program or a tcx ingress program is attached to dev in ns.
func progAttached(t *testing.T, ns *nsutil.NS, dev string) bool {
	t.Helper()
	return len(attachedPrograms(t, ns, dev)) > 0
}

// attachedPrograms lists the programs attached to dev in ns: at XDP (any mode), then at tcx
// ingress.
func attachedPrograms(t *testing.T, ns *nsutil.NS, dev string) []ebpf.ProgramID {
	t.Helper()
	idx := linkIndex(t, ns, dev)
	var ids []ebpf.ProgramID
	err := ns.Do(func() error {
		l, err := netlink.LinkByIndex(idx)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.ProgId != 0 {
			ids = append(ids, ebpf.ProgramID(x.ProgId))
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		for _, p := range res.Programs {
			ids = append(ids, p.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("programs attached to %s: %v", dev, err)
	}
	return ids
}

// hookTestbeds are testbed options under which linuxfp picks each hook on in0 and out0: native
// XDP when gen and the sink compute their checksums, tc when they leave them to offload.
var hookTestbeds = []struct {
	hook string
	opts testbed.Options
}{
	{"xdp", testbed.Options{TxChecksumOff: true}},
	{"tc", testbed.Options{}},
}

func itoa(i int) string { return strconv.Itoa(i) }

// startLinuxfpWaitingFor runs linuxfp (with args) and waits only until iface has a program.
func startLinuxfpWaitingFor(t *testing.T, tb *testbed.Testbed, iface string, args ...string) *testbed.Linuxfp {
	t.Helper()
	l, err := tb.StartLinuxfpUntil(linuxfpBin, func(st *status.Status) bool {
		for _, it := range st.Interfaces {
			if it.Name == iface && it.Program != nil {
				return true
			}
		}
		return false
	}, args...)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, l)
	return l
}

// ipBatch feeds commands to `ip -batch -` in the calling thread's namespace.
func ipBatch(cmds string) error {
	cmd := exec.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(cmds)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -batch: %w: %s", err, out)
	}
	return nil
}

// captureDstMACs returns the destination MACs of the UDP datagrams (IPv4, or IPv6 without
// extension headers) to port 9 that arrive at the sink's eth0 while f runs, and until the
// capture has been quiet for 100 ms; once sent datagrams (what f sends, 0: unknown) have
// arrived, for 30 ms (a duplicate comes right after its original; only missing datagrams need
// the long wait).
func captureDstMACs(t *testing.T, tb *testbed.Testbed, sent int, f func()) []string {
	t.Helper()
	fd := openCapture(t, tb.Sink, tb.SinkIfindex)
	defer unix.Close(fd)
	f()
	quiet := func(d time.Duration) {
		tv := unix.NsecToTimeval(d.Nanoseconds())
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}
	quiet(100 * time.Millisecond)
	var macs []string
	buf := make([]byte, 2048)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			break
		}
		b := buf[:n]
		v4 := n >= 42 && b[12] == 0x08 && b[13] == 0 && b[23] == 17 && b[36] == 0 && b[37] == 9
		v6 := n >= 62 && b[12] == 0x86 && b[13] == 0xdd && b[20] == 17 && b[56] == 0 && b[57] == 9
		if v4 || v6 {
			macs = append(macs, net.HardwareAddr(b[0:6]).String())
			if len(macs) == sent {
				quiet(30 * time.Millisecond)
			}
		}
	}
	return macs
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// tcpEcho connects from gen to a server in the sink and exchanges n messages; it fails the test
// if any byte is lost or altered.
func tcpEcho(t *testing.T, tb *testbed.Testbed, n int) {
	t.Helper()
	tcpEchoTo(t, tb, "198.18.1.2", n)
}

// tcpEchoTo is tcpEcho with the sink's server on addr.
func tcpEchoTo(t *testing.T, tb *testbed.Testbed, addr string, n int) {
	t.Helper()
	var ln net.Listener
	if err := tb.Sink.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(addr, "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	var c net.Conn
	if err := tb.Gen.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second)
		return err
	}); err != nil {
		t.Fatalf("tcp connect through the DUT: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1000)
	for i := 0; i < n; i++ {
		msg := []byte(strings.Repeat(string(rune('a'+i%26)), 1+i%1000))
		if _, err := c.Write(msg); err != nil {
			t.Fatalf("tcp write %d: %v", i, err)
		}
		if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
			t.Fatalf("tcp read %d: %v", i, err)
		}
		if string(buf[:len(msg)]) != string(msg) {
			t.Fatalf("tcp message %d altered", i)
		}
	}
}

// requireTool skips the test when a command-line tool it drives is not installed.
func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed (make deps installs it)", name)
	}
}

// linkIndex is the ifindex of dev in ns.
func linkIndex(t *testing.T, ns *nsutil.NS, dev string) int {
	t.Helper()
	var idx int
	if err := ns.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		idx = l.Attrs().Index
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return idx
}

// sendUDPFrom sends n datagrams to dst:9 from the calling thread's namespace.
func sendUDPFrom(dst string, n int) error {
	c, err := net.Dial("udp", net.JoinHostPort(dst, "9"))
	if err != nil {
		return err
	}
	defer c.Close()
	for i := 0; i < n; i++ {
		c.Write([]byte(fmt.Sprintf("linuxfp e2e %d", i)))
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

// openCapture opens a packet socket that sees every frame arriving at (or leaving) ifindex in
// ns. The caller closes it.
func openCapture(t *testing.T, ns *nsutil.NS, ifindex int) int {
	t.Helper()
	var fd int
	err := ns.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex})
	})
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// countFrames counts the frames carrying marker a capture socket receives until it has been
// quiet for 200 ms.
func countFrames(fd int, marker string) int {
	tv := unix.Timeval{Usec: 200000}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	n, buf := 0, make([]byte, 2048)
	for {
		m, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return n
		}
		if bytes.Contains(buf[:m], []byte(marker)) {
			n++
		}
	}
}

// newServices builds a kube-proxy node (testbed.NewServices) and removes it at the end of the
// test.
func newServices(t *testing.T, name string, o testbed.ServicesOptions) *testbed.Services {
	t.Helper()
	s, err := testbed.NewServices(name, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// waitLiberalMarks waits until linuxfp has marked at least least TCP connections liberal in
// conntrack (status: ct_liberal), the mark the fast path needs before it forwards a connection.
func waitLiberalMarks(t *testing.T, l *testbed.Linuxfp, what string, least uint64) {
	t.Helper()
	eventually(t, 3*time.Second, what, func() error {
		if st, err := l.Client.Status(); err != nil || st.CTLiberal < least {
			return fmt.Errorf("liberal marks %d (%v)", st.CTLiberal, err)
		}
		return nil
	})
}
