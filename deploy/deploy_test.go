// Package deploy holds the files that install linuxfp as a service (systemd units, Kubernetes
// manifests); its tests check them against what linuxfp needs.
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/cli"
)

// capNames are the capabilities `linuxfp run` checks for.
func capNames() []string {
	var out []string
	for _, c := range cli.RunCapabilities {
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return out
}

var units = []string{"systemd/linuxfp.service", "systemd/linuxfp@.service"}

// The units hold exactly the capabilities linuxfp run checks for.
func TestSystemdCapabilities(t *testing.T) {
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
			var got []string
			n := 0
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, key+"="); ok {
					got = append(got, strings.Fields(v)...)
					n++
				}
			}
			slices.Sort(got)
			if want := capNames(); n != 1 || !slices.Equal(got, want) {
				t.Errorf("%s: %d %s lines %v, want one with %v", u, n, key, got, want)
			}
		}
	}
}

// systemd-analyze verify accepts the units without a warning (an unknown or misspelt key is a
// warning, not an error, for systemd).
func TestSystemdVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed (apt-get install systemd)")
	}
	// verify checks that ExecStart names an executable: the test binary stands in for
	// /usr/local/bin/linuxfp.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "ExecStart=/usr/local/bin/linuxfp run\n") {
			t.Fatalf("%s: ExecStart is not /usr/local/bin/linuxfp run", u)
		}
		b = []byte(strings.ReplaceAll(string(b), "/usr/local/bin/linuxfp", self))
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(u)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"linuxfp.service", "linuxfp@test.service"} {
		cmd := exec.Command("systemd-analyze", "verify", name)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
}
