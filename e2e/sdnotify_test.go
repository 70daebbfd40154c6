package e2e

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Under systemd (Type=notify) linuxfp says READY=1 once its first data plane is installed: the
// status then shows the programs.
func TestSdNotifyReady(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	var log testbed.SyncBuffer
	cmd := exec.Command("ip", "netns", "exec", tb.DUT.Name, linuxfpBin, "run")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
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

	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("no notification within 15s")
		}
		t.Fatal(err)
	}
	// Asked at once: READY=1 must not come before the first apply.
	st, err := testbed.StatusClientIn(tb.DUT).Status()
	if err != nil {
		t.Fatal(err)
	}
	if msg := string(buf[:n]); !strings.Contains("\n"+msg+"\n", "\nREADY=1\n") {
		t.Fatalf("notification %q, want READY=1", msg)
	}
	if !programsOn(st) {
		t.Errorf("READY=1 arrived before the programs were installed on in0 and out0: %+v", st.Interfaces)
	}
}
