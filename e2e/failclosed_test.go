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
// to (198.19.128.0/17, up to 32,768), then the extra lines.
func rulesFor(n int, extra ...string) string {
	var b strings.Builder
	b.WriteString("*filter\n:FORWARD ACCEPT [0:0]\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "-A FORWARD -d 198.19.%d.%d/32 -j DROP\n", 128+i/256, i%256)
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
	restore := func(rules string) { iptablesRestore(t, tb, rules) }
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
	// Logged once per failure, not once per retry.
	if n := strings.Count(l.Log.String(), "apply failed"); n != 2 {
		t.Fatalf("%d apply failures logged, want 2 (one per failed ruleset)", n)
	}
}

func iptablesRestore(t *testing.T, tb *testbed.Testbed, rules string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", tb.DUT.Name, "iptables-restore")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore: %v: %s", err, out)
	}
}

// A ruleset larger than the filter maps were made for: the maps (and every program) are
// replaced by larger ones, and the fast path decides the ruleset; flushed, the memory goes back.
func TestFilterMapsFollowRuleset(t *testing.T) {
	requireTool(t, "iptables-restore")
	for _, h := range hookTestbeds {
		t.Run(h.hook, func(t *testing.T) { testFilterMapsFollowRuleset(t, h.opts) })
	}
}

func testFilterMapsFollowRuleset(t *testing.T, opts testbed.Options) {
	tb := newTestbed(t, opts)
	l := startLinuxfp(t, tb)
	waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)
	prog := func() uint32 {
		t.Helper()
		it, err := l.Interface("in0")
		if err != nil || it.Program == nil {
			t.Fatalf("in0: %v %+v", err, it)
		}
		return it.Program.ID
	}
	before := prog()

	// 20,000 rules (the maps start at 16,384), the last one for the stream.
	iptablesRestore(t, tb, rulesFor(19999, "-A FORWARD -d 198.19.3.0/24 -j DROP"))
	eventually(t, 30*time.Second, "20,000 rules applied", func() error {
		fwd, dropped, passed, arrived := filterDelta(t, tb, l, "198.19.3.1", 10)
		if dropped < 10 || arrived != 0 || fwd != 0 {
			return fmt.Errorf("forwarded %d, dropped %d, arrived %d, to Linux %v", fwd, dropped, arrived, passed)
		}
		return nil
	})
	waitVerdict(t, tb, l, "198.19.4.1", "forwarded", 10)
	if after := prog(); after == before {
		t.Fatalf("in0 still runs program %d: the grown maps need new programs", after)
	}
	st, err := l.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.ApplyError != "" || len(st.FamiliesToLinux) != 0 {
		t.Fatalf("apply error %q, families to Linux %v", st.ApplyError, st.FamiliesToLinux)
	}

	// Flushed: the maps shrink back (their programs are replaced again) and the stream is fast.
	iptablesRestore(t, tb, rulesFor(0))
	waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)
	var resized []string
	for _, line := range strings.Split(l.Log.String(), "\n") {
		if strings.Contains(line, "filter maps resized") {
			resized = append(resized, line)
			t.Log(line)
		}
	}
	if len(resized) != 2 {
		t.Fatalf("filter maps resized %d times, want 2 (grown, then shrunk)", len(resized))
	}
}
