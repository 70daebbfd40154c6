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
	"slices"
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

// BatchScript is Script, except that each run of consecutive iproute2 lines with the same
// options runs as one `ip -batch`, which stops at the first error too: a process per line costs
// milliseconds, and the testbeds configure a hundred routes each.
func (n *NS) BatchScript(script string) error {
	var opts []string // the options of the lines in lines, when they are batched
	var lines []string
	flush := func() error {
		if len(lines) == 0 {
			return nil
		}
		defer func() { lines = lines[:0] }()
		if len(lines) == 1 {
			_, err := n.Run(slices.Concat([]string{"ip"}, opts, strings.Fields(lines[0]))...)
			return err
		}
		args := slices.Concat([]string{"netns", "exec", n.Name, "ip"}, opts, []string{"-batch", "-"})
		cmd := exec.Command("ip", args...)
		cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
		out, err := cmd.CombinedOutput()
		if err != nil {
			what := strings.Join(slices.Concat([]string{"ip"}, opts, []string{"-batch"}), " ")
			// ip names the line that failed ("Command failed -:N").
			if i := bytes.LastIndex(out, []byte("Command failed -:")); i >= 0 {
				var k int
				if _, serr := fmt.Sscanf(string(out[i:]), "Command failed -:%d", &k); serr == nil && k >= 1 && k <= len(lines) {
					what = strings.Join(slices.Concat([]string{"ip"}, opts, []string{lines[k-1]}), " ")
				}
			}
			return fmt.Errorf("in %s: %s: %w: %s", n.Name, what, err, bytes.TrimSpace(out))
		}
		return nil
	}
	for _, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		o, rest, ok := batchable(f)
		if ok && len(lines) > 0 && slices.Equal(o, opts) {
			lines = append(lines, strings.Join(rest, " "))
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		if ok {
			opts, lines = o, append(lines, strings.Join(rest, " "))
			continue
		}
		if _, err := n.Run(f...); err != nil {
			return err
		}
	}
	return flush()
}

// batchable tells whether a command can be a line of `ip -batch` with the same meaning, and
// splits it into ip's options (only -4 and -6, which apply to the whole batch) and the line: an
// ip command on an object that is not a namespace, with none of the quotes, escapes or comment
// signs that ip's batch parser reads and a command line does not.
func batchable(f []string) (opts, line []string, ok bool) {
	if len(f) < 2 || f[0] != "ip" {
		return nil, nil, false
	}
	i := 1
	for i < len(f) && strings.HasPrefix(f[i], "-") {
		if f[i] != "-4" && f[i] != "-6" {
			return nil, nil, false
		}
		i++
	}
	if i == len(f) || f[i] == "netns" {
		return nil, nil, false
	}
	for _, a := range f[i:] {
		if strings.ContainsAny(a, "\"'\\#") {
			return nil, nil, false
		}
	}
	return f[1:i], f[i:], true
}
