package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/cli"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// requiredCaps are the capabilities `linuxfp run` refuses to start without.
func requiredCaps() []cli.Capability {
	var out []cli.Capability
	for _, c := range cli.RunCapabilities {
		if c.Required {
			out = append(out, c)
		}
	}
	return out
}

// programsOn: in0 and out0 both have a program.
func programsOn(st *status.Status) bool {
	n := 0
	for _, it := range st.Interfaces {
		if (it.Name == "in0" || it.Name == "out0") && it.Program != nil {
			n++
		}
	}
	return n == 2
}

// cgroup2Mounted: the test's mount namespace has the cgroup v2 hierarchy mounted somewhere.
func cgroup2Mounted(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte(" - cgroup2 "))
}

// linuxfp run as an unprivileged user holding only the required capabilities installs its
// programs, its sysctl watcher (cgroup/sysctl) and its netlink watcher (tp_btf); without any one
// of them it refuses to start and names it.
func TestRunWithCapabilitiesOnly(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	// TestMain builds the binary in a directory only root may enter.
	if err := os.Chmod(filepath.Dir(linuxfpBin), 0o755); err != nil {
		t.Fatal(err)
	}
	nobodyWith := func(caps []cli.Capability) *syscall.SysProcAttr {
		var bits []uintptr
		for _, c := range caps {
			bits = append(bits, uintptr(c.Bit))
		}
		return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}, AmbientCaps: bits}
	}
	req := requiredCaps()
	for i, c := range req {
		others := append(append([]cli.Capability{}, req[:i]...), req[i+1:]...)
		out, code := runAs(t, tb.DUT, nobodyWith(others), "run")
		if code != 1 || !strings.Contains(out, "run needs "+c.Name+",") {
			t.Errorf("without %s: exit %d, want 1 and the capability named:\n%s", c.Name, code, out)
		}
	}
	out, code := runAs(t, tb.DUT, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}, "run")
	if code != 1 || !strings.Contains(out, "run needs CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_NET_BROADCAST,") {
		t.Errorf("without capabilities: exit %d, want 1 and every required one named:\n%s", code, out)
	}

	var log bytes.Buffer
	cmd := exec.Command(linuxfpBin, "run")
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = nobodyWith(req)
	// Started from a thread in the DUT's namespace, without `ip netns exec`, so the mount
	// namespace (and its cgroup2 mount) is the test's.
	if err := tb.DUT.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("linuxfp log:\n%s", log.String())
		}
	}()
	client := testbed.StatusClientIn(tb.DUT)
	var st *status.Status
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		st, err = client.Status()
		if err == nil && programsOn(st) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no programs on in0 and out0 within 10s (last error %v)", err)
		}
		select {
		case err := <-done:
			done <- err // for the deferred stop
			t.Fatalf("linuxfp exited: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if !strings.HasPrefix(st.IPSetWatch, "event:") {
		t.Errorf("ipset watch %q: the tp_btf netlink watcher should load with the required capabilities", st.IPSetWatch)
	}
	if !cgroup2Mounted(t) {
		t.Logf("no cgroup2 mount here: the cgroup/sysctl attach is not checked (sysctl watch %q)", st.SysctlWatch)
	} else if !strings.HasPrefix(st.SysctlWatch, "event:") {
		t.Errorf("sysctl watch %q: the cgroup/sysctl program should attach with the required capabilities", st.SysctlWatch)
	}
}
