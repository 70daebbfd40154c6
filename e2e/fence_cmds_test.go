package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The fence, command by command: for each configuration command, datagrams sent the moment it
// returns meet the new configuration as with Linux alone. Linux alone is measured in the same
// test (the same setup in a testbed without linuxfp), so a command after which Linux itself still
// forwards a few packets (or queues them) is compared with what Linux does, not with a constant.
//
// What each case guards (seen by disabling parts of linuxfp): the filter and ipset cases fail
// without the gate's family check (the fast path keeps the old verdict for all 20 datagrams);
// the route, address, link and neighbour cases pass even then, since the fast path asks the
// kernel's FIB and neighbour table for every packet; the bridge fdb del case fails (nothing
// flooded to out1) only without both the gate and the FDB watcher's count of moves; the
// nf_call_iptables case fails without bridge_out_port's check of the bridge device's fence.

// fenceCase is one command run in a DUT prepared by setup (a script run line by line).
type fenceCase struct {
	name  string
	setup string
	// argv is the command; a file for nft -f is written by file, if set, and its path replaces
	// "FILE" in argv.
	argv []string
	file string
	// bridge: the DUT is a bridge (bridgeTestbed) with a third port, out1, leading to a host
	// that captures what the bridge floods; argv is `bridge fdb del` of the sink's MAC unless
	// set.
	bridge bool
}

const fenceDst = "198.19.3.1"

// wrongMAC is a neighbour's address no host here has.
const wrongMAC = "02:00:00:00:00:99"

var fenceCases = []fenceCase{
	{name: "ipset del from a DROP set", setup: `ipset create lfpdrop hash:ip
ipset add lfpdrop ` + fenceDst + `
iptables -A FORWARD -m set --match-set lfpdrop dst -j DROP`,
		argv: []string{"ipset", "del", "lfpdrop", fenceDst}},
	{name: "ipset add to an ACCEPT set before a DROP rule", setup: `ipset create lfpok hash:ip
iptables -A FORWARD -m set --match-set lfpok dst -j ACCEPT
iptables -A FORWARD -d ` + fenceDst + ` -j DROP`,
		argv: []string{"ipset", "add", "lfpok", fenceDst}},
	{name: "nft add element to a set a drop rule tests", setup: `nft add table inet lfpf
nft add chain inet lfpf lfpchain { type filter hook forward priority 0 ; }
nft add set inet lfpf bl { type ipv4_addr ; }
nft add rule inet lfpf lfpchain ip daddr @bl drop`,
		argv: []string{"nft", "add", "element", "inet", "lfpf", "bl", "{ " + fenceDst + " }"}},
	{name: "iptables -D of a DROP rule", setup: "iptables -A FORWARD -d " + fenceDst + " -j DROP",
		argv: strings.Fields("iptables -D FORWARD -d " + fenceDst + " -j DROP")},
	{name: "iptables -I of a DROP rule before an ACCEPT rule", setup: "iptables -A FORWARD -d " + fenceDst + " -j ACCEPT",
		argv: strings.Fields("iptables -I FORWARD -d " + fenceDst + " -j DROP")},
	{name: "iptables -I of an ACCEPT rule before a DROP rule", setup: "iptables -A FORWARD -d " + fenceDst + " -j DROP",
		argv: strings.Fields("iptables -I FORWARD -d " + fenceDst + " -j ACCEPT")},
	{name: "iptables-restore of a ruleset that drops the stream", setup: "iptables -A FORWARD -d 198.19.4.1 -j DROP",
		argv: []string{"bash", "-c", `iptables-restore <<'EOF'
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -d ` + fenceDst + ` -j DROP
COMMIT
EOF`}},
	{name: "iptables-restore of a ruleset that no longer drops the stream", setup: "iptables -A FORWARD -d " + fenceDst + " -j DROP",
		argv: []string{"bash", "-c", `iptables-restore <<'EOF'
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -d 198.19.4.1 -j DROP
COMMIT
EOF`}},
	{name: "nft -f of a table that drops the stream", argv: []string{"nft", "-f", "FILE"},
		file: `table inet lfpf {
	chain lfpchain {
		type filter hook forward priority 0;
		ip daddr ` + fenceDst + ` drop
	}
}
`},
	{name: "ip route del of the stream's prefix", argv: strings.Fields("ip route del 198.19.3.0/24")},
	{name: "ip addr del of the next hop's subnet on out0", argv: strings.Fields("ip addr del 198.18.1.1/24 dev out0")},
	{name: "ip link set out0 down", argv: strings.Fields("ip link set out0 down")},
	{name: "ip neigh replace of the sink to a wrong MAC", argv: strings.Fields("ip neigh replace 198.18.1.2 lladdr " + wrongMAC + " dev out0")},
	// Linux resolves the sink again at once and sends the datagrams it queued meanwhile.
	{name: "ip neigh del of the sink", argv: strings.Fields("ip neigh del 198.18.1.2 dev out0")},
	// Linux floods frames to an address it forgot: the sink and the host behind out1 both get
	// them (the sink drops them silently so that it does not teach the bridge its MAC again).
	{name: "bridge fdb del of the sink's MAC", bridge: true},
	// A bridge option: with it, iptables sees the bridged IPv4 frames, and drops them. The
	// change fences br0 only, not the ports the frames go between.
	{name: "ip link set br0 type bridge nf_call_iptables 1", bridge: true,
		setup: "sysctl -qw net.bridge.bridge-nf-call-iptables=0\niptables -A FORWARD -d " + sinkL2 + " -j DROP",
		argv:  strings.Fields("ip link set br0 type bridge nf_call_iptables 1")},
}

// fenceResult is what one run of a case delivered: datagrams per destination MAC ("sink" for
// the sink's, "wrong" for wrongMAC) at the sink, and (bridge cases) at the host behind out1.
type fenceResult struct {
	sink, flooded map[string]int
}

func (r fenceResult) String() string {
	s := fmt.Sprintf("sink %v", r.sink)
	if r.flooded != nil {
		s += fmt.Sprintf(", out1 %v", r.flooded)
	}
	return s
}

func TestFenceCommands(t *testing.T) {
	for _, tool := range []string{"iptables", "iptables-restore", "ipset", "nft", "bridge", "bash"} {
		requireTool(t, tool)
	}
	// What Linux alone delivers after each command, measured once per case, in the testbed of
	// the first hook that needs it: it does not depend on the hosts' checksum offload, which is
	// all that differs between the hooks' testbeds (with either, every case delivers the same).
	linuxAlone := map[string]fenceResult{}
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) {
			for _, c := range fenceCases {
				t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
					linux, ok := linuxAlone[c.name]
					if !ok {
						linux = runFenceCase(t, h.opts, c, false)
						linuxAlone[c.name] = linux
					}
					fp := runFenceCase(t, h.opts, c, true)
					t.Logf("Linux alone: %v; linuxfp: %v", linux, fp)
					if !sameCounts(linux.sink, fp.sink) || !sameCounts(linux.flooded, fp.flooded) {
						t.Errorf("%s: datagrams sent right after it returned: Linux alone %v, linuxfp %v", c.name, linux, fp)
					}
				})
			}
		})
	}
}

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// runFenceCase builds a fresh testbed, applies c's setup, starts linuxfp if withLinuxfp (and
// waits until it follows the setup), sends a few datagrams to settle the neighbours and the
// bridge, then runs c's command and sends 20 datagrams the moment it returns.
func runFenceCase(t *testing.T, o testbed.Options, c fenceCase, withLinuxfp bool) fenceResult {
	t.Helper()
	const n = 20
	var tb *testbed.Testbed
	dst, argv := fenceDst, c.argv
	var extra *nsutil.NS
	var extraIdx int
	if c.bridge {
		tb = bridgeTestbed(t, o, ipBridge)
		dst = sinkL2
		var err error
		if extra, err = nsutil.New(nsPrefix + "-flood"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { extra.Close() })
		sh(t, tb.DUT, "ip link add out1 type veth peer name eth1 netns "+extra.Name+"\nip link set out1 master br0\nip link set out1 up")
		sh(t, extra, "ip link set eth1 up")
		extraIdx = linkIndex(t, extra, "eth1")
		// The sink answers nothing (no ICMP port unreachable), so only the ping below teaches
		// the bridge where its MAC is.
		sh(t, tb.Sink, "iptables -A INPUT -p udp --dport 9 -j DROP")
		sinkSpeaks(t, tb)
		if argv == nil {
			argv = []string{"bridge", "fdb", "del", tb.SinkMAC.String(), "dev", "out0", "master"}
		}
	} else {
		tb = newTestbed(t, o)
	}
	sh(t, tb.DUT, c.setup)
	if c.file != "" {
		path := filepath.Join(t.TempDir(), "rules.nft")
		if err := os.WriteFile(path, []byte(c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		argv = append([]string(nil), argv...)
		for i, a := range argv {
			if a == "FILE" {
				argv[i] = path
			}
		}
	}
	if withLinuxfp {
		t1 := time.Now()
		l := startLinuxfp(t, tb)
		t.Logf("TIMING start %v", time.Since(t1))
		t1 = time.Now()
		fenceSettle(t, tb, l, dst, c.bridge)
		t.Logf("TIMING settle %v", time.Since(t1))
	} else {
		sendUDP(t, tb, dst, 10)
		time.Sleep(50 * time.Millisecond)
	}
	if c.bridge {
		// Where the bridge has the sink now: the command below must remove an entry.
		if out, err := tb.DUT.Run("bridge", "fdb", "show", "dev", "out0"); err != nil || !strings.Contains(out, tb.SinkMAC.String()) {
			t.Fatalf("the bridge does not know the sink's MAC on out0 (%v): %s", err, out)
		}
	}
	points := []capturePoint{{tb.Sink, tb.SinkIfindex}}
	if extra != nil {
		points = append(points, capturePoint{extra, extraIdx})
	}
	got := probesAt(t, tb, argv, dst, n, points)
	// MACs differ from testbed to testbed: name them by role.
	role := func(m map[string]int) map[string]int {
		r := map[string]int{}
		for mac, k := range m {
			switch mac {
			case tb.SinkMAC.String():
				mac = "sink"
			case wrongMAC:
				mac = "wrong"
			}
			r[mac] += k
		}
		return r
	}
	r := fenceResult{sink: role(got[0])}
	if extra != nil {
		r.flooded = role(got[1])
	}
	return r
}

// fenceSettle waits until linuxfp follows the setup (no family fenced) and, if it can, takes
// the stream on its fast path (forwards, drops or bridges it); a stream it leaves to Linux is
// logged, not a failure.
func fenceSettle(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, dst string, bridge bool) {
	t.Helper()
	t1 := time.Now()
	waitFenceOpen(t, l)
	t.Logf("TIMING fenceopen %v", time.Since(t1))
	deadline := time.Now().Add(3 * time.Second)
	for {
		before, err := l.Interface("in0")
		if err != nil {
			t.Fatal(err)
		}
		sendUDP(t, tb, dst, 10)
		time.Sleep(20 * time.Millisecond)
		after, err := l.Interface("in0")
		if err != nil {
			t.Fatal(err)
		}
		fast := after.Forwarded.Packets - before.Forwarded.Packets + after.Dropped.Packets - before.Dropped.Packets
		if bridge {
			fast = after.Bridged.Packets - before.Bridged.Packets
		}
		if fast >= 10 {
			return
		}
		if time.Now().After(deadline) {
			passed := map[string]uint64{}
			for r, v := range after.Passed {
				if d := v.Packets - before.Passed[r].Packets; d > 0 {
					passed[r] = d
				}
			}
			t.Logf("before the command linuxfp hands the stream to Linux: fast-pathed %d of 10, to Linux %v", fast, passed)
			return
		}
	}
}

// capturePoint is an interface whose frames a probe counts.
type capturePoint struct {
	ns      *nsutil.NS
	ifindex int
}

// probesAt runs argv in the DUT and, the moment it returns, sends n datagrams to dst:9 from gen;
// it returns, for each capture point, how many arrived per destination MAC.
func probesAt(t *testing.T, tb *testbed.Testbed, argv []string, dst string, n int, points []capturePoint) []map[string]int {
	t.Helper()
	const marker = "linuxfp fence probe"
	fds := make([]int, len(points))
	for i, p := range points {
		fds[i] = openCapture(t, p.ns, p.ifindex)
		defer unix.Close(fds[i])
	}
	// The sender's socket belongs to gen's namespace from its creation on.
	var c net.Conn
	if err := tb.Gen.Do(func() error {
		var err error
		c, err = net.Dial("udp", net.JoinHostPort(dst, "9"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	args := append([]string{"netns", "exec", tb.DUT.Name}, argv...)
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	for i := 0; i < n; i++ {
		c.Write([]byte(marker))
	}
	// Each capture point waits for its own quiet period, all at the same time.
	res := make([]map[string]int, len(points))
	var wg sync.WaitGroup
	for i, fd := range fds {
		wg.Go(func() { res[i] = countFramesByMAC(fd, marker) })
	}
	wg.Wait()
	return res
}

// countFramesByMAC counts the frames carrying marker a capture socket receives, per destination
// MAC, until it has been quiet for 200 ms. Only frames the interface receives count (not ones it
// sends).
func countFramesByMAC(fd int, marker string) map[string]int {
	tv := unix.Timeval{Usec: 200000}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	counts, buf := map[string]int{}, make([]byte, 2048)
	for {
		m, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return counts
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if m >= 14 && bytes.Contains(buf[:m], []byte(marker)) {
			counts[net.HardwareAddr(buf[0:6]).String()]++
		}
	}
}
