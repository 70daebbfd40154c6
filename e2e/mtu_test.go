package e2e

import (
	"bytes"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// MTUs and attach refusals: linuxfp never makes a command fail that works without it, and an
// interface whose program the kernel refuses at one hook is not left without a fast path, nor
// retried on every change.

// Native XDP on in0 (gen computes its checksums): its veth peer, gen's eth0, takes MTU 9000 as
// it does without linuxfp (veth caps a peer's MTU only under an XDP program that is not
// frags-aware), and ordinary traffic stays fast-pathed at XDP.
func TestPeerMTUWhileXDP(t *testing.T) {
	tb := newTestbed(t, testbed.Options{TxChecksumOff: true})
	l := startLinuxfp(t, tb)
	waitStatus(t, l, "in0", "native XDP on in0", func(it *status.Interface) bool { return it.Program != nil && it.Program.Hook == "xdp" })
	id := programOf(t, l, "in0").ID

	sh(t, tb.Gen, "ip link set eth0 mtu 9000")
	sh(t, tb.Sink, "ip link set eth0 mtu 9000")

	waitFastPath(t, tb, l, "198.19.3.1")
	before := readCounters(t, l, "in0")
	tcpEcho(t, tb, 100)
	if d := readCounters(t, l, "in0").sub(before); d.forwarded < 100 {
		t.Fatalf("tcp exchange after the MTU change: %d fast-pathed on in0, to Linux %v", d.forwarded, d.passed)
	}
	if got := programOf(t, l, "in0"); got.ID != id || got.Hook != "xdp" {
		t.Fatalf("in0's program changed from %d (xdp) to %d (%s)", id, got.ID, got.Hook)
	}
}

// gen's eth0 at MTU 9000 before linuxfp starts: in0 still gets native XDP (before, the kernel
// refused it with ERANGE and nothing was installed), a stream is fast-pathed, and no apply
// reports an error however many changes follow.
func TestPeerMTU9000BeforeStart(t *testing.T) {
	tb := newTestbed(t, testbed.Options{TxChecksumOff: true})
	sh(t, tb.Gen, "ip link set eth0 mtu 9000")
	l := startLinuxfp(t, tb)
	if p := programOf(t, l, "in0"); p.Hook != "xdp" {
		t.Fatalf("in0: hook %s, want xdp; notes %q", p.Hook, iface(t, l, "in0").Notes)
	}
	before := readCounters(t, l, "in0")
	tcpEcho(t, tb, 100)
	if d := readCounters(t, l, "in0").sub(before); d.forwarded < 100 {
		t.Fatalf("tcp exchange: %d fast-pathed on in0, to Linux %v", d.forwarded, d.passed)
	}
	churn(t, tb, l, 3)
	noApplyErrors(t, l)
}

// A macvlan on in0 runs an XDP program (generic): the kernel refuses native XDP on in0 below it
// (EEXIST), and --hook auto installs the same modules at tc instead, once: the refusal is logged
// once and shown in the notes; later changes do not try native XDP again until in0 itself
// changes. At tc, in0's own frames are fast-pathed before the macvlan's receive handler; the
// macvlan's frames are not for in0's MAC and pass.
func TestAttachRefusedFallsBackToTC(t *testing.T) {
	tb := newTestbed(t, testbed.Options{TxChecksumOff: true})
	detach := xdpOnMacvlan(t, tb)
	l := startLinuxfp(t, tb)
	it := iface(t, l, "in0")
	if it.Program == nil || it.Program.Hook != "tc" || !hasNote(it, "hook tc: the kernel refused native XDP (attach xdp to in0: another XDP program is attached to it or to a device on top of it") {
		t.Fatalf("in0: program %+v, notes %q; want tc after the refused native XDP", it.Program, it.Notes)
	}
	id := it.Program.ID
	waitFastPath(t, tb, l, "198.19.3.1")

	churn(t, tb, l, 3)
	if n := strings.Count(l.Log.String(), "the kernel refused the first"); n != 1 {
		t.Fatalf("the refusal was logged %d times, want once:\n%s", n, l.Log.String())
	}
	if got := programOf(t, l, "in0"); got.ID != id {
		t.Fatalf("in0's program was replaced (%d -> %d) though nothing about in0 changed", id, got.ID)
	}
	noApplyErrors(t, l)

	// The macvlan's program goes and in0 changes (its MTU): native XDP is tried again, and taken.
	detach()
	sh(t, tb.DUT, "ip link set in0 mtu 1400")
	waitStatus(t, l, "in0", "native XDP on in0 once it changed", func(it *status.Interface) bool {
		return it.Program != nil && it.Program.Hook == "xdp"
	})
	waitFastPath(t, tb, l, "198.19.3.1")
	noApplyErrors(t, l)
}

// With --hook xdp there is no other hook: in0 is left to Linux with the error in its notes, the
// apply that met it reports it, and later changes neither try again nor report it again.
func TestAttachRefusedForcedHook(t *testing.T) {
	tb := newTestbed(t, testbed.Options{TxChecksumOff: true})
	xdpOnMacvlan(t, tb)
	l := startLinuxfpWaitingFor(t, tb, "out0", "--hook", "xdp")
	const refused = "attach xdp to in0: another XDP program is attached to it or to a device on top of it"
	waitStatus(t, l, "in0", "in0 left to Linux with the error", func(it *status.Interface) bool {
		return it.Program == nil && hasNote(it, "install failed: "+refused)
	})
	if progAttached(t, tb.DUT, "in0") {
		t.Fatal("a program is attached to in0")
	}
	churn(t, tb, l, 3)
	changes, err := l.Client.Changes(0)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, ch := range changes {
		if ch.Err != "" {
			failed = append(failed, ch.Err)
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0], refused) {
		t.Fatalf("applies with errors: %q; want exactly one, the refused attach", failed)
	}
	// Logged where it happened: the apply's error and the decision to leave in0 to Linux.
	if n := strings.Count(l.Log.String(), refused); n != 2 {
		t.Fatalf("the refusal appears %d times in the log, want 2:\n%s", n, l.Log.String())
	}
	if it := iface(t, l, "in0"); it.Program != nil {
		t.Fatalf("in0 got a program: %+v", it.Program)
	}
}

// xdpOnMacvlan adds macvlan mv0 on in0 in the DUT and attaches an XDP program (XDP_PASS, generic
// mode) to it; the returned function detaches it (it is detached at cleanup anyway).
func xdpOnMacvlan(t *testing.T, tb *testbed.Testbed) func() {
	t.Helper()
	sh(t, tb.DUT, "ip link add mv0 link in0 type macvlan mode bridge\nip link set mv0 up")
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	mv0 := linkIndex(t, tb.DUT, "mv0")
	var lk link.Link
	if err := tb.DUT.Do(func() error {
		var err error
		lk, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: mv0, Flags: link.XDPGenericMode})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close() })
	return func() { lk.Close() }
}

// Jumbo frames through the DUT (every link at MTU 9000, native XDP on in0 and out0): an 8000-byte
// datagram or echo arrives in several buffers at XDP and goes to Linux (multi_buffer), which
// forwards it as it does alone; where out0's MTU is smaller, Linux answers with the same ICMP
// fragmentation-needed, for multi-buffer frames and for linear ones (3000 bytes:
// fib_frag_needed) alike.
func TestJumboFrames(t *testing.T) {
	tb := newTestbed(t, testbed.Options{TxChecksumOff: true})
	sh(t, tb.Gen, "ip link set eth0 mtu 9000")
	sh(t, tb.DUT, "ip link set in0 mtu 9000\nip link set out0 mtu 9000")
	sh(t, tb.Sink, "ip link set eth0 mtu 9000")

	// Linux alone. Each fragNeeded goes to an address of its own: gen caches the path MTU.
	alone := jumboDatagrams(t, tb, 5)
	sh(t, tb.DUT, "ip link set out0 mtu 1500")
	aloneFrag := fragNeeded(t, tb, "198.19.20.1", 8000) + fragNeeded(t, tb, "198.19.21.1", 3000)
	sh(t, tb.DUT, "ip link set out0 mtu 9000")

	l := startLinuxfp(t, tb)
	if p := programOf(t, l, "in0"); p.Hook != "xdp" {
		t.Fatalf("in0: hook %s, want xdp; notes %q", p.Hook, iface(t, l, "in0").Notes)
	}
	waitFastPath(t, tb, l, "198.19.3.1")
	before := readCounters(t, l, "in0")
	withLfp := jumboDatagrams(t, tb, 5)
	d := readCounters(t, l, "in0").sub(before)
	if !bytes.Equal(withLfp, alone) {
		t.Fatalf("the sink received %d bytes with linuxfp, %d without (or different bytes)", len(withLfp), len(alone))
	}
	if d.passed["multi_buffer"] < 5 || d.forwarded != 0 {
		t.Fatalf("in0: %d fast-pathed, to Linux %v; want the 5 datagrams as multi_buffer", d.forwarded, d.passed)
	}

	sh(t, tb.DUT, "ip link set out0 mtu 1500")
	waitStatus(t, l, "out0", "out0 at MTU 1500", func(it *status.Interface) bool { return it.MTU == 1500 })
	before = readCounters(t, l, "in0")
	withFrag := fragNeeded(t, tb, "198.19.22.1", 8000) + fragNeeded(t, tb, "198.19.23.1", 3000)
	d = readCounters(t, l, "in0").sub(before)
	if withFrag != aloneFrag {
		t.Fatalf("ICMP answers differ:\nwith linuxfp %q\nalone        %q", withFrag, aloneFrag)
	}
	if d.passed["multi_buffer"] < 1 || d.passed["fib_frag_needed"] < 1 || d.forwarded != 0 {
		t.Fatalf("in0: %d fast-pathed, to Linux %v; want multi_buffer and fib_frag_needed", d.forwarded, d.passed)
	}
}

// jumboDatagrams sends n 8000-byte datagrams (each a different pattern) from gen to the sink
// and returns what the sink received, in order.
func jumboDatagrams(t *testing.T, tb *testbed.Testbed, n int) []byte {
	t.Helper()
	var pc net.PacketConn
	if err := tb.Sink.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", "198.18.1.2:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	got := make(chan []byte, 1)
	go func() {
		var all []byte
		buf := make([]byte, 9000)
		for i := 0; i < n; i++ {
			pc.SetReadDeadline(time.Now().Add(3 * time.Second))
			k, _, err := pc.ReadFrom(buf)
			if err != nil {
				break
			}
			all = append(all, buf[:k]...)
		}
		got <- all
	}()
	if err := tb.Gen.Do(func() error {
		c, err := net.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		for i := 0; i < n; i++ {
			if _, err := c.Write(bytes.Repeat([]byte{byte('a' + i)}, 8000)); err != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	all := <-got
	if len(all) != 8000*n {
		t.Fatalf("the sink received %d bytes of %d", len(all), 8000*n)
	}
	return all
}

// fragNeeded pings dst (routed out of out0) once with size bytes of payload and don't-fragment
// set, and returns ping's report of the ICMP answer (the address of dst left out).
func fragNeeded(t *testing.T, tb *testbed.Testbed, dst string, size int) string {
	t.Helper()
	out, _ := tb.Gen.Run("ping", "-M", "do", "-c", "1", "-W", "1", "-s", itoa(size), dst)
	m := regexp.MustCompile(`From \S+ icmp_seq=\d+ .*`).FindString(out)
	if m == "" {
		t.Fatalf("ping %s with %d bytes: no ICMP answer:\n%s", dst, size, out)
	}
	return m + "\n"
}

// churn makes n changes linuxfp reacts to (routes added) and waits until it has applied them.
func churn(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		st, err := l.Client.Status()
		if err != nil {
			t.Fatal(err)
		}
		sh(t, tb.DUT, fmt.Sprintf("ip route add 198.19.%d.0/24 via 198.18.1.2", 200+i))
		if err := l.WaitFor(3*time.Second, func(s *status.Status) bool { return s.Applies > st.Applies && !s.Busy }); err != nil {
			t.Fatal(err)
		}
	}
}

// noApplyErrors fails the test if any apply linuxfp recorded met an error.
func noApplyErrors(t *testing.T, l *testbed.Linuxfp) {
	t.Helper()
	changes, err := l.Client.Changes(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range changes {
		if ch.Err != "" {
			t.Fatalf("apply %d: %s", ch.Seq, ch.Err)
		}
	}
}

func iface(t *testing.T, l *testbed.Linuxfp, name string) *status.Interface {
	t.Helper()
	it, err := l.Interface(name)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

// programOf is the program attached to name (fails the test if none).
func programOf(t *testing.T, l *testbed.Linuxfp, name string) status.Program {
	t.Helper()
	it := iface(t, l, name)
	if it.Program == nil {
		t.Fatalf("%s has no program; notes %q", name, it.Notes)
	}
	return *it.Program
}
