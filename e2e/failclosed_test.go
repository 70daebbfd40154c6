package e2e

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// When the data plane cannot take the configuration Linux has (here a ruleset larger than the
// filter's capacity, made small with --filter-rules), the family's packets go to Linux
// (apply_failed) until it can: never the old ruleset, never no ruleset.

// rulesFor is an iptables-restore FORWARD ruleset of n DROP rules for addresses no test sends
// to, then the extra lines.
func rulesFor(n int, extra ...string) string {
	var b strings.Builder
	b.WriteString("*filter\n:FORWARD ACCEPT [0:0]\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "-A FORWARD -d 198.19.200.%d/32 -j DROP\n", i)
	}
	for _, l := range extra {
		b.WriteString(l + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func TestFilterOverCapacityFailsToLinux(t *testing.T) {
	requireTool(t, "iptables-restore")
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb, "--filter-rules", "16")
	waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)
	restore := func(rules string) {
		t.Helper()
		cmd := exec.Command("ip", "netns", "exec", tb.DUT.Name, "iptables-restore")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("iptables-restore: %v: %s", err, out)
		}
	}
	applyError := func(want bool) {
		t.Helper()
		eventually(t, 5*time.Second, fmt.Sprintf("apply error shown: %v", want), func() error {
			st, err := l.Client.Status()
			if err != nil {
				return err
			}
			if (st.ApplyError != "") != want || want != slices.Equal(st.FamiliesToLinux, []string{"ipv4"}) {
				return fmt.Errorf("apply error %q, families to Linux %v", st.ApplyError, st.FamiliesToLinux)
			}
			return nil
		})
	}

	// 20 rules, the last one for the stream: Linux drops it, and so must the host with linuxfp.
	restore(rulesFor(19, "-A FORWARD -d 198.19.3.0/24 -j DROP"))
	waitVerdict(t, tb, l, "198.19.3.1", "apply_failed", 0)
	waitVerdict(t, tb, l, "198.19.4.1", "apply_failed", 10)
	applyError(true)

	// A ruleset that fits: the fast path decides again.
	restore(rulesFor(0, "-A FORWARD -d 198.19.3.0/24 -j DROP"))
	waitVerdict(t, tb, l, "198.19.3.1", "dropped", 0)
	applyError(false)

	// The reverse: the DROP replaced by a ruleset too large that does not have it. Linux
	// forwards; the old ruleset (which drops) must not decide.
	restore(rulesFor(20))
	waitVerdict(t, tb, l, "198.19.3.1", "apply_failed", 10)
	applyError(true)

	restore(rulesFor(0))
	waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)
	applyError(false)
}
