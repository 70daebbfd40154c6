package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// What an operator meets first: a mistyped flag or pattern says what is wrong and where to look,
// a hangup stops linuxfp cleanly, and the log says the truth about redirect targets.

func TestRunArgumentErrors(t *testing.T) {
	// In a namespace of its own, and bounded: were an argument accepted, linuxfp would run.
	ns, err := nsutil.New(nsPrefix + "-args")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--bogus"}, []string{"unknown flag: --bogus", "linuxfp run --help"}},
		{[]string{"run", "--interfaces", "eth[0"}, []string{`interface pattern "eth[0"`, "syntax error in pattern", "--help"}},
		{[]string{"run", "--exclude", "ok*,[x"}, []string{`interface pattern "[x"`}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, linuxfpBin}, c.args...)...).CombinedOutput()
		cancel()
		if err == nil {
			t.Errorf("linuxfp %s: exit 0, want an error", strings.Join(c.args, " "))
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("linuxfp %s: %q does not say %q", strings.Join(c.args, " "), out, w)
			}
		}
	}
}

func TestHangupStopsCleanly(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l, err := tb.StartLinuxfp(linuxfpBin)
	if err != nil {
		t.Fatal(err)
	}
	if !progAttached(t, tb.DUT, "in0") {
		t.Fatal("no program on in0 while linuxfp runs")
	}
	if err := l.StopWith(syscall.SIGHUP); err != nil {
		t.Fatalf("after SIGHUP: %v\n%s", err, l.Log.String())
	}
	if !strings.Contains(l.Log.String(), "stopped; all programs detached") {
		t.Errorf("no shutdown line after SIGHUP:\n%s", l.Log.String())
	}
	if progAttached(t, tb.DUT, "in0") || progAttached(t, tb.DUT, "out0") {
		t.Error("a program is still attached after SIGHUP")
	}
	// Loopback is never an egress of forwarded packets: no line about it being one or not.
	if strings.Contains(l.Log.String(), "redirect target: its packets go to Linux\" interface=lo") {
		t.Errorf("the log calls lo a redirect target that is not ready:\n%s", l.Log.String())
	}
}

// --hook xdp where no interface can run native XDP (bridge devices have none) warns once that
// nothing is accelerated, instead of running idle in silence.
func TestHookXDPWithoutNativeXDPWarns(t *testing.T) {
	ns, err := nsutil.New("mon-noxdp")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	sh(t, ns, `ip link add d0 type bridge
ip link add d1 type bridge
ip link set d0 up
ip link set d1 up
ip addr add 198.18.0.1/24 dev d0
ip addr add 198.18.1.1/24 dev d1
sysctl -qw net.ipv4.ip_forward=1`)
	l, err := testbed.StartLinuxfpIn(ns, linuxfpBin, func(st *status.Status) bool {
		decided := 0
		for _, it := range st.Interfaces {
			if it.Name == "d0" || it.Name == "d1" {
				decided++
			}
		}
		return decided == 2
	}, "--hook", "xdp")
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, l)
	eventually(t, 3*time.Second, "the warning", func() error {
		if n := strings.Count(l.Log.String(), "--hook xdp: no interface here can run native XDP"); n != 1 {
			return fmt.Errorf("said %d times", n)
		}
		return nil
	})
}
