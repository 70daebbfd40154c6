// Package benchtest holds what the benchmarks' tests share: skipping without root, pinning the
// test to one CPU, and reading a report.
package benchtest

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// NeedRoot skips the test unless it runs as root (it loads BPF programs or makes namespaces).
func NeedRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs")
	}
}

// PinThread keeps the test on one CPU: per-CPU state (the generator's, a chain's counters) is
// then read from that CPU's slot.
func PinThread(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	// The thread goes back to the pool afterwards: give it back all its CPUs first, or a later
	// test that reads the affinity (--cores checks it) sees one CPU.
	t.Cleanup(func() {
		unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	})
	set.Set(0)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
}

// ReportHas checks that r's report has every one of want, whatever the column widths, and returns
// the report with its spaces collapsed so.
func ReportHas(t *testing.T, r interface{ WriteTable(io.Writer) }, want ...string) string {
	t.Helper()
	var buf bytes.Buffer
	r.WriteTable(&buf)
	out := strings.Join(strings.Fields(buf.String()), " ")
	for _, s := range want {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, buf.String())
		}
	}
	return out
}

// Prefix is base with a random part: the namespaces of one run of a benchmark in a test, told
// apart from those of another run of the same test elsewhere on the machine.
func Prefix(base string) string {
	return fmt.Sprintf("%s%04x", base, rand.IntN(1<<16))
}

// Namespaces lists the namespaces whose names start with prefix.
func Namespaces(t *testing.T, prefix string) []string {
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			names = append(names, f[0])
		}
	}
	return names
}
