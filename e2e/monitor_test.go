package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// `linuxfp monitor` shows the packets the fast path drops (an iptables FORWARD DROP rule) and
// hands to Linux (TTL 1), with reason, interface and addresses; -w writes them to a pcap file
// gopacket reads; --type drop shows the drop alone. Three monitors run at once. At XDP and at tc.
func TestMonitor(t *testing.T) {
	requireTool(t, "iptables")
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) { testMonitor(t, h.hook, h.opts) })
	}
}

func testMonitor(t *testing.T, hook string, opts testbed.Options) {
	tb := newTestbedAs(t, "mon", opts)
	sh(t, tb.DUT, "iptables -A FORWARD -d 198.19.3.0/24 -j DROP")
	l := startLinuxfp(t, tb)
	waitVerdict(t, tb, l, "198.19.3.1", "dropped", 0)
	in0, err := l.Interface("in0")
	if err != nil {
		t.Fatal(err)
	}
	if in0.Program == nil || in0.Program.Hook != hook {
		t.Fatalf("in0's program: %+v, want one at %s", in0.Program, hook)
	}

	pcapFile := filepath.Join(t.TempDir(), "mon.pcap")
	all := startMonitor(t, tb, "-j")
	drops := startMonitor(t, tb, "-j", "--type", "drop")
	capture := startMonitor(t, tb, "-w", pcapFile, "-c", "2", "--reason", "filter_dropped,ttl_exceeded", "--snaplen", "200")
	eventually(t, 3*time.Second, "three monitors connected", func() error {
		if !strings.Contains(l.Log.String(), "monitors=3") {
			return fmt.Errorf("not in the log")
		}
		return nil
	})

	sendMarked(t, tb, "198.19.4.1", 1, "lfp-mon-ttl")
	sendMarked(t, tb, "198.19.3.1", 64, "lfp-mon-drop")

	isTTL := func(p monitorLine) bool { return p.Dst == "198.19.4.1" && p.Proto == "udp" }
	isDrop := func(p monitorLine) bool { return p.Dst == "198.19.3.1" && p.Proto == "udp" }
	got := all.waitFor(t, "the TTL 1 packet and the drop", func(ps []monitorLine) bool {
		return anyOf(ps, isTTL) && anyOf(ps, isDrop)
	})
	for _, p := range got {
		want := map[bool]string{true: "pass ttl_exceeded", false: "drop filter_dropped"}[isTTL(p)]
		if !isTTL(p) && !isDrop(p) {
			continue
		}
		if p.Type+" "+p.Reason != want || p.Interface != "in0" || p.Ifindex != in0.Ifindex || p.Src != "198.18.0.2" ||
			p.DstPort != 9 || p.SrcPort == 0 || p.Hook != in0.Program.Hook || p.Len < 42 {
			t.Errorf("monitor -j: %+v, want %s on in0 (ifindex %d, hook %s) from 198.18.0.2 to port 9", p, want, in0.Ifindex, in0.Program.Hook)
		}
	}

	// --type drop: a second drop sent after the TTL 1 packet has been reported comes after
	// anything the filter let through, so the lines up to it are all there is to see.
	sendMarked(t, tb, "198.19.3.2", 64, "lfp-mon-drop2")
	dropped := drops.waitFor(t, "the second drop", func(ps []monitorLine) bool {
		return anyOf(ps, func(p monitorLine) bool { return p.Dst == "198.19.3.2" })
	})
	for _, p := range dropped {
		if p.Type != "drop" || isTTL(p) {
			t.Errorf("monitor --type drop: %+v", p)
		}
	}
	if !anyOf(dropped, isDrop) {
		t.Errorf("monitor --type drop did not show the first drop: %+v", dropped)
	}

	// -w with -c 2: exits after the two packets, its file holds their bytes.
	if err := capture.wait(); err != nil {
		t.Fatalf("monitor -w: %v\n%s", err, capture.stderr.String())
	}
	f, err := os.Open(pcapFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet || r.Snaplen() != 200 {
		t.Errorf("pcap link type %v, snap length %d: want Ethernet, 200", r.LinkType(), r.Snaplen())
	}
	seen := map[string]uint8{}
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil || ci.CaptureLength != len(data) || ci.Length != len(data) ||
			!ip.SrcIP.Equal(net.ParseIP("198.18.0.2")) || udp.DstPort != 9 {
			t.Errorf("pcap packet %+v: %x", ci, data)
			continue
		}
		seen[string(udp.Payload)] = ip.TTL
	}
	if ttl, ok := seen["lfp-mon-ttl"]; !ok || ttl != 1 {
		t.Errorf("pcap: TTL 1 packet %v (ttl %d), want it with its TTL 1; packets: %v", ok, ttl, seen)
	}
	if _, ok := seen["lfp-mon-drop"]; !ok || len(seen) != 2 {
		t.Errorf("pcap: packets %v, want the TTL 1 packet and the first drop", seen)
	}

	// The last monitor gone, the data plane reports nothing.
	all.stop(t)
	drops.stop(t)
	eventually(t, 3*time.Second, "monitors disconnected", func() error {
		if !strings.Contains(l.Log.String(), "monitors=0") {
			return fmt.Errorf("not in the log")
		}
		return nil
	})
}

// monitorLine is what the test reads of a line of `linuxfp monitor -j`.
type monitorLine struct {
	Interface string `json:"interface"`
	Ifindex   int    `json:"ifindex"`
	Type      string `json:"type"`
	Reason    string `json:"reason"`
	Hook      string `json:"hook"`
	Len       int    `json:"len"`
	Proto     string `json:"proto"`
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	SrcPort   uint16 `json:"sport"`
	DstPort   uint16 `json:"dport"`
}

func anyOf(ps []monitorLine, f func(monitorLine) bool) bool {
	for _, p := range ps {
		if f(p) {
			return true
		}
	}
	return false
}

// monitorProc is a `linuxfp monitor` running against the DUT's linuxfp.
type monitorProc struct {
	cmd    *exec.Cmd
	stderr *strings.Builder
	mu     sync.Mutex
	lines  []monitorLine
	bad    []string
	done   chan error
}

func startMonitor(t *testing.T, tb *testbed.Testbed, args ...string) *monitorProc {
	t.Helper()
	m := &monitorProc{stderr: &strings.Builder{}, done: make(chan error, 1)}
	m.cmd = exec.Command(linuxfpBin, append([]string{"monitor", "-n", tb.DUT.Name}, args...)...)
	m.cmd.Stderr = m.stderr
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var p monitorLine
			m.mu.Lock()
			if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
				m.bad = append(m.bad, sc.Text())
			} else {
				m.lines = append(m.lines, p)
			}
			m.mu.Unlock()
		}
		m.done <- m.cmd.Wait()
	}()
	t.Cleanup(func() { m.cmd.Process.Kill(); m.wait() })
	return m
}

// waitFor waits until the lines read satisfy cond, and returns them.
func (m *monitorProc) waitFor(t *testing.T, what string, cond func([]monitorLine) bool) []monitorLine {
	t.Helper()
	var got []monitorLine
	eventually(t, 3*time.Second, "monitor shows "+what, func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.bad) > 0 {
			t.Fatalf("monitor printed lines that are not JSON: %q", m.bad)
		}
		got = append([]monitorLine(nil), m.lines...)
		if !cond(got) {
			return fmt.Errorf("lines %+v; stderr %s", got, m.stderr.String())
		}
		return nil
	})
	return got
}

// wait waits for the monitor to exit (at most 5 s).
func (m *monitorProc) wait() error {
	select {
	case err := <-m.done:
		m.done <- err
		return err
	case <-time.After(5 * time.Second):
		return fmt.Errorf("still running")
	}
}

// stop interrupts the monitor, which exits 0.
func (m *monitorProc) stop(t *testing.T) {
	t.Helper()
	m.cmd.Process.Signal(syscall.SIGINT)
	if err := m.wait(); err != nil {
		t.Errorf("monitor after SIGINT: %v\n%s", err, m.stderr.String())
	}
}

// sendMarked sends one datagram carrying payload from the gen namespace to dst:9 with the
// given TTL.
func sendMarked(t *testing.T, tb *testbed.Testbed, dst string, ttl int, payload string) {
	t.Helper()
	err := tb.Gen.Do(func() error {
		c, err := net.Dial("udp", net.JoinHostPort(dst, "9"))
		if err != nil {
			return err
		}
		defer c.Close()
		rc, err := c.(*net.UDPConn).SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TTL, ttl)
		}); err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		_, err = c.Write([]byte(payload))
		return err
	})
	if err != nil {
		t.Fatalf("send to %s: %v", dst, err)
	}
}
