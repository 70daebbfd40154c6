// Package filtertest loads rulesets into throwaway network namespaces for the filter module's
// tests: iptables-restore / ip6tables-restore, ipset restore, nft -f, and nfacct objects (which
// kube-proxy's rules need before they load), then reads them back with package nft.
package filtertest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/nft"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Require skips the test when it cannot run here (not root, a tool missing).
func Require(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (creates network namespaces)")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/deps.sh installs it)", tool)
		}
	}
}

// NewNS creates a namespace removed when the test ends.
func NewNS(t testing.TB, prefix string) *nsutil.NS {
	t.Helper()
	ns, err := nsutil.New(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Close(); err != nil {
			t.Error(err)
		}
	})
	return ns
}

// Stdin runs a command in ns with input on its standard input.
func Stdin(ns *nsutil.NS, input string, args ...string) error {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// IPTablesRestore loads an iptables-save format ruleset (ip6 for IPv6). Tables not named in it are
// left alone; those named are replaced (iptables-restore without --noflush).
func IPTablesRestore(ns *nsutil.NS, ip6 bool, rules string) error {
	tool := "iptables-restore"
	if ip6 {
		tool = "ip6tables-restore"
	}
	return Stdin(ns, rules, tool, "-w")
}

// IPSetRestore runs `ipset restore`.
func IPSetRestore(ns *nsutil.NS, script string) error { return Stdin(ns, script, "ipset", "restore") }

// NFT runs `nft -f -`.
func NFT(ns *nsutil.NS, script string) error { return Stdin(ns, script, "nft", "-f", "-") }

// NFAcct creates nfacct objects (what `nfacct add NAME` does, without needing the nfacct tool).
func NFAcct(ns *nsutil.NS, names ...string) error { return testbed.AddNFAcct(ns, names...) }

// Read reads the namespace's ruleset.
func Read(ns *nsutil.NS) (*nft.Snapshot, error) {
	return nft.Read(nft.Options{NetNS: int(ns.Handle())})
}
