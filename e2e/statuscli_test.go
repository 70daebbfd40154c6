package e2e

import (
	"encoding/json"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// statusCLI is what these tests read of `linuxfp status -j`.
type statusCLI struct {
	PID           int     `json:"pid"`
	RatesInterval float64 `json:"rates_interval_seconds"`
	Interfaces    []struct {
		Name    string `json:"name"`
		Program *struct {
			ID uint32 `json:"id"`
		} `json:"program"`
		Forwarded struct {
			Packets uint64 `json:"packets"`
		} `json:"forwarded"`
		Rates *struct {
			Routed  float64 `json:"routed"`
			ToLinux float64 `json:"to_linux"`
		} `json:"rates"`
	} `json:"interfaces"`
	Version string `json:"version"`
}

// linuxfpStatus runs the binary's status command from this (the root) network namespace.
func linuxfpStatus(t *testing.T, args ...string) (statusCLI, string) {
	t.Helper()
	out, err := exec.Command(linuxfpBin, append([]string{"status"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("linuxfp status %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var st statusCLI
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("linuxfp status %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return st, string(out)
}

// `linuxfp status -n NETNS` asks the linuxfp of another namespace, as `ip -n` does, and says so
// clearly when there is no such namespace; -s shows the rates of the traffic sent meanwhile.
func TestStatusCLIOtherNamespace(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.18.1.2")

	st, out := linuxfpStatus(t, "-n", tb.DUT.Name, "-j")
	// The daemon says which build it is (a test build: "dev").
	if st.Version == "" {
		t.Errorf("status names no version:\n%s", out)
	}
	in0 := -1
	for i, it := range st.Interfaces {
		if it.Name == "in0" {
			in0 = i
		}
	}
	if in0 < 0 || st.Interfaces[in0].Program == nil || st.Interfaces[in0].Forwarded.Packets == 0 {
		t.Fatalf("status -n %s: no in0 with a program that forwarded packets:\n%s", tb.DUT.Name, out)
	}
	if st.Interfaces[in0].Rates != nil {
		t.Errorf("rates without -s:\n%s", out)
	}

	missing := tb.DUT.Name + "-none"
	b, err := exec.Command(linuxfpBin, "status", "-n", missing).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(b), "no such network namespace") {
		t.Errorf("status -n %s: %v, want exit 1 saying there is no such namespace:\n%s", missing, err, b)
	}

	// Traffic through in0 for as long as status -s takes its two readings.
	stop, sent := make(chan struct{}), make(chan error, 1)
	go func() {
		sent <- tb.Gen.Do(func() error {
			c, err := net.Dial("udp", "198.18.1.2:9")
			if err != nil {
				return err
			}
			defer c.Close()
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				c.Write([]byte("linuxfp e2e rates"))
				time.Sleep(time.Millisecond)
			}
		})
	}()
	st, out = linuxfpStatus(t, "-n", tb.DUT.Name, "-s", "-j")
	close(stop)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if st.RatesInterval <= 0 {
		t.Errorf("status -s -j: no rates_interval_seconds:\n%s", out)
	}
	for _, it := range st.Interfaces {
		if it.Name != "in0" {
			continue
		}
		if it.Rates == nil || it.Rates.Routed <= 0 {
			t.Fatalf("status -s: in0 routed no packets per second while traffic was sent through it:\n%s", out)
		}
		return
	}
	t.Fatalf("status -s: no in0:\n%s", out)
}
