package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// What watches linuxfp in ModeLinuxfpMonitor and ModeLinuxfpMetrics, as an operator's tools
// would while it forwards.

// startMonitor runs `linuxfp monitor -j` in ns against l, reading and discarding its output, and
// returns once l says it is connected.
func startMonitor(ns *nsutil.NS, bin string, l *testbed.Linuxfp) (stop func() error, err error) {
	cmd := exec.Command("ip", "netns", "exec", ns.Name, bin, "monitor", "-j")
	cmd.Stdout = io.Discard
	var stderr testbed.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start linuxfp monitor: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop = func() error {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
			return nil
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("linuxfp monitor did not stop on SIGINT")
		}
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(l.Log.String(), "monitor connected"); {
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("linuxfp monitor did not connect; its stderr: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return stop, nil
}

// startScraper reads http://addr/metrics in ns every second until stopped.
func startScraper(ns *nsutil.NS, addr string) (stop func() error, err error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, a)
				return err
			})
			return c, err
		}}}
	scrape := func() error {
		resp, err := hc.Get("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/metrics: %s", resp.Status)
		}
		return nil
	}
	if err := scrape(); err != nil {
		return nil, fmt.Errorf("scrape linuxfp's metrics: %w", err)
	}
	quit, done := make(chan struct{}), make(chan error, 1)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var failed error
		for {
			select {
			case <-quit:
				done <- failed
				return
			case <-t.C:
				if err := scrape(); err != nil && failed == nil {
					failed = fmt.Errorf("scrape linuxfp's metrics: %w", err)
				}
			}
		}
	}()
	return func() error { close(quit); return <-done }, nil
}
