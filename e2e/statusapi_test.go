package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The status API answers only root and holders of CAP_NET_ADMIN, and nobody else can make it
// hold file descriptors or time.

// nobody is the unprivileged user the tests connect as.
const nobody = 65534

// runAs runs the linuxfp binary with args in ns as attr says; it returns the output and the
// exit code.
func runAs(t *testing.T, ns *nsutil.NS, attr *syscall.SysProcAttr, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(linuxfpBin, args...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = attr
	// The child is forked from the thread Do moved into ns, so it runs in ns.
	err := ns.Do(cmd.Run)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v", args, err)
	}
	return out.String(), 0
}

func TestStatusAPIAccess(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	// TestMain builds the binary in a directory only root may enter.
	if err := os.Chmod(filepath.Dir(linuxfpBin), 0o755); err != nil {
		t.Fatal(err)
	}

	nobodyWith := func(caps ...uintptr) *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}, AmbientCaps: caps}
	}
	for _, tc := range []struct {
		name string
		attr *syscall.SysProcAttr
		ok   bool
	}{
		{"nobody", nobodyWith(), false},
		{"nobody with CAP_NET_RAW", nobodyWith(unix.CAP_NET_RAW), false},
		{"nobody with CAP_NET_ADMIN", nobodyWith(unix.CAP_NET_ADMIN), true},
		// Root of a user namespace of its own, as unshare -Ur makes it: every capability,
		// but in that namespace only. (Without the setuid inside, the child would keep the
		// test's own uid 0 and be root.)
		{"nobody as root of its own user namespace", &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: nobody, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: nobody, Size: 1}},
		}, false},
	} {
		out, code := runAs(t, tb.DUT, tc.attr, "status")
		switch {
		case tc.ok && (code != 0 || !strings.Contains(out, "in0")):
			t.Errorf("%s: exit %d, want the status:\n%s", tc.name, code, out)
		case !tc.ok && (code == 0 || !strings.Contains(out, "needs root or CAP_NET_ADMIN")):
			t.Errorf("%s: exit %d, want a refusal naming root and CAP_NET_ADMIN:\n%s", tc.name, code, out)
		}
	}

	// Root: the command in both forms, and the changes.
	out, err := tb.DUT.Run(linuxfpBin, "status")
	if err != nil || !strings.Contains(out, "in0") {
		t.Fatalf("root: linuxfp status: %v\n%s", err, out)
	}
	out, err = tb.DUT.Run(linuxfpBin, "status", "-j")
	if err != nil {
		t.Fatal(err)
	}
	var st status.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.PID == 0 || len(st.Interfaces) == 0 {
		t.Fatalf("root: linuxfp status -j: %v, pid %d, %d interfaces\n%s", err, st.PID, len(st.Interfaces), out)
	}
	if ch, err := l.Client.Changes(0); err != nil || len(ch) == 0 {
		t.Fatalf("root: changes: %v, %d", err, len(ch))
	}
}

// statusFloodEnv makes the test binary the unprivileged flood of TestStatusAPIFlood (see
// statusFlood) instead of running tests.
const statusFloodEnv = "LINUXFP_E2E_STATUS_FLOOD"

func init() {
	if os.Getenv(statusFloodEnv) != "" {
		os.Exit(statusFlood())
	}
}

const floodConns = 3000

// TestStatusAPIFlood: thousands of connections from an unprivileged user, each holding a
// half-sent request, neither pile up in linuxfp nor keep a configuration change from reaching
// the fast path. linuxfp runs with 1024 file descriptors, a common default, which the held
// connections would exhaust if linuxfp kept them.
func TestStatusAPIFlood(t *testing.T) {
	requireTool(t, "iptables")
	tb := newTestbed(t, testbed.Options{})
	wrapper := filepath.Join(t.TempDir(), "linuxfp")
	script := "#!/bin/sh\nulimit -n 1024\nexec " + linuxfpBin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := tb.StartLinuxfp(wrapper)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, l)
	waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)

	flood := exec.Command(os.Args[0])
	flood.Env = append(os.Environ(), statusFloodEnv+"=1")
	var floodErr bytes.Buffer
	flood.Stderr = &floodErr
	toFlood, err := flood.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fromFlood, err := flood.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.DUT.Do(flood.Start); err != nil {
		t.Fatal(err)
	}
	ended := false
	end := func() {
		if !ended {
			ended = true
			toFlood.Close() // the flood closes its connections and exits
			flood.Wait()
		}
	}
	defer end()
	replies := bufio.NewScanner(fromFlood)
	reply := func() string {
		t.Helper()
		if !replies.Scan() {
			end()
			t.Fatalf("flood ended: %v\n%s", replies.Err(), floodErr.String())
		}
		return replies.Text()
	}
	if r := reply(); r != fmt.Sprintf("open %d", floodConns) {
		t.Fatalf("flood: %q, want %d connections open", r, floodConns)
	}

	// A configuration change while the flood holds its connections reaches the fast path.
	sh(t, tb.DUT, "iptables -A FORWARD -d 198.19.3.0/24 -j DROP")
	waitVerdict(t, tb, l, "198.19.3.1", "dropped", 0)

	// linuxfp closed every one of them, and answered none.
	eventually(t, 5*time.Second, "linuxfp closes the flood's connections", func() error {
		fmt.Fprintln(toFlood, "check")
		var closed, answered int
		if _, err := fmt.Sscanf(reply(), "closed %d answered %d", &closed, &answered); err != nil {
			t.Fatal(err)
		}
		if answered > 0 {
			t.Fatalf("linuxfp answered %d requests of uid %d", answered, nobody)
		}
		if closed < floodConns {
			return fmt.Errorf("%d of %d closed", closed, floodConns)
		}
		return nil
	})
	end()

	st, err := l.Client.Status()
	if err != nil {
		t.Fatalf("root's status after the flood: %v", err)
	}
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", st.PID)); err == nil {
		t.Logf("linuxfp holds %d file descriptors after the flood", len(fds))
	}
}

// statusFlood runs in the DUT as root, becomes uid nobody without capabilities, opens
// floodConns connections to the status socket, each with a half-sent request, and says
// "open N". Each line "check" on stdin is answered "closed C answered A": of the connections,
// how many linuxfp closed and how many it answered with 200. At the end of stdin it closes
// them and exits.
func statusFlood() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "flood:", err)
		return 2
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fail(err)
	}
	if err := syscall.Setresgid(nobody, nobody, nobody); err != nil {
		return fail(err)
	}
	if err := syscall.Setresuid(nobody, nobody, nobody); err != nil {
		return fail(err)
	}
	if b, err := os.ReadFile("/proc/self/status"); err != nil || !strings.Contains(string(b), "CapEff:\t0000000000000000") {
		return fail(fmt.Errorf("still holding capabilities (%v)", err))
	}
	time.AfterFunc(time.Minute, func() { os.Exit(3) }) // whatever happens to the test

	type conn struct {
		c        net.Conn
		got      []byte
		closed   bool
		answered bool
	}
	var conns []*conn
	deadline := time.Now().Add(20 * time.Second)
	for len(conns) < floodConns && time.Now().Before(deadline) {
		c, err := net.Dial("unix", status.SocketName)
		if err != nil { // the backlog is full: let linuxfp accept
			time.Sleep(time.Millisecond)
			continue
		}
		io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: linuxfp\r\n")
		conns = append(conns, &conn{c: c})
	}
	fmt.Printf("open %d\n", len(conns))
	in := bufio.NewScanner(os.Stdin)
	buf := make([]byte, 4096)
	for in.Scan() {
		var closed, answered int
		for _, c := range conns {
			rc, err := c.c.(*net.UnixConn).SyscallConn()
			if err != nil {
				return fail(err)
			}
			for !c.closed {
				var n int
				var rerr error
				rc.Read(func(fd uintptr) bool {
					n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
					return true
				})
				if rerr == unix.EAGAIN {
					break
				}
				c.got = append(c.got, buf[:max(n, 0)]...)
				c.closed = rerr != nil || n == 0
			}
			c.answered = bytes.HasPrefix(c.got, []byte("HTTP/1.1 200"))
			if c.closed {
				closed++
			}
			if c.answered {
				answered++
			}
		}
		fmt.Printf("closed %d answered %d\n", closed, answered)
	}
	for _, c := range conns {
		c.c.Close()
	}
	return 0
}
