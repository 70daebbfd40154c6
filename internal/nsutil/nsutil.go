// Package nsutil creates and enters network namespaces for tests and benchmarks.
//
// Namespaces are created with `ip netns add` (so `ip netns exec` works on them, as a person
// debugging a failed test would expect) under unique names, and removed by Close.
package nsutil

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
)

// NS is a named network namespace.
type NS struct {
	Name   string
	handle netns.NsHandle
}

// New creates a namespace named <prefix>-<random>. Prefixes start with "lfp" so leftovers are
// easy to find (`ip netns list | grep ^lfp`).
func New(prefix string) (*NS, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	name := prefix + "-" + hex.EncodeToString(b[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		exec.Command("ip", "netns", "del", name).Run()
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	ns := &NS{Name: name, handle: h}
	// Loopback up, as any host has it.
	if _, err := ns.Run("ip", "link", "set", "lo", "up"); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}

// Handle is the namespace's file descriptor.
func (n *NS) Handle() netns.NsHandle { return n.handle }

// Close deletes the namespace.
func (n *NS) Close() error {
	n.handle.Close()
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", n.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

// Do runs fn on an OS thread that is inside the namespace, then returns the thread to the
// original namespace. If that fails the thread stays locked, so Go retires it.
func (n *NS) Do(fn func() error) error {
	return Do(n.handle, fn)
}

// Do runs fn inside the namespace h (see NS.Do).
func Do(h netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("enter netns: %w", err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("leave netns: %w", err)
			return // thread stays locked and is discarded
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Run runs a command inside the namespace and returns its combined output.
func (n *NS) Run(args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.Name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in %s: %s: %w: %s", n.Name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Script runs a setup script inside the namespace: each line is one command, split on spaces; the first error
// stops.
func (n *NS) Script(script string) error {
	for _, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, err := n.Run(strings.Fields(line)...); err != nil {
			return err
		}
	}
	return nil
}
