// Package e2e runs linuxfp end to end in network namespaces: the real binary, real veths, real
// routes, packets sent and received. Needs root.
package e2e

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// linuxfpBin is the binary under test, built once by TestMain.
var linuxfpBin string

// nsPrefix starts the names of the namespaces the tests create (LFP_E2E_PREFIX, when several
// runs share a machine and each must tell its own).
var nsPrefix = cmp.Or(os.Getenv("LFP_E2E_PREFIX"), "lfp-e2e")

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: skipped, needs root (network namespaces, XDP)")
		return 0
	}
	dir, err := os.MkdirTemp("", "linuxfp-e2e-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.RemoveAll(dir)
	linuxfpBin = filepath.Join(dir, "linuxfp")
	// Static, as `make release` and `make image` build it: the image test runs this binary in
	// an otherwise empty root file system.
	build := exec.Command("go", "build", "-o", linuxfpBin, "../cmd/linuxfp")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	if err != nil {
		fmt.Printf("build linuxfp: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// newTestbed builds the gen -> dut -> sink topology for one test and removes it afterwards.
func newTestbed(t *testing.T, o testbed.Options) *testbed.Testbed {
	t.Helper()
	return newTestbedAs(t, nsPrefix, o)
}

// newTestbedAs is newTestbed with namespaces named after prefix.
func newTestbedAs(t *testing.T, prefix string, o testbed.Options) *testbed.Testbed {
	t.Helper()
	tb, err := testbed.New(prefix, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := tb.ResolveNeighbours(); err != nil {
		t.Fatal(err)
	}
	return tb
}

// startLinuxfp runs linuxfp in the DUT for the rest of the test.
func startLinuxfp(t *testing.T, tb *testbed.Testbed, args ...string) *testbed.Linuxfp {
	t.Helper()
	l, err := tb.StartLinuxfp(linuxfpBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, l)
	return l
}

// stopAtCleanup stops linuxfp at the end of the test and shows its log if the test failed.
func stopAtCleanup(t *testing.T, l *testbed.Linuxfp) {
	t.Cleanup(func() {
		l.Stop()
		if t.Failed() {
			t.Logf("linuxfp log:\n%s", l.Log.String())
		}
	})
}
