package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// churnVeths is how many container-style veths each round creates and deletes: two rounds need
// more program slots than the data plane has (256), so the second round's programs attach only
// if every deleted veth's slot and state were given back.
const churnVeths = 200

// Configuration churn: 200 veths into a "pods" namespace are created in the DUT, each gets a
// program, and all are deleted again, twice, with linuxfp running. linuxfp must follow every
// deletion (each veth leaves its status, and the slots are reused by the second round), stay up,
// keep forwarding, and read every event: no event socket overflowed, so nothing was re-read in
// full. How long the deletions take with and without linuxfp is in docs/benchmarks.md ("Churn").
func TestChurnVeths(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	pods, err := nsutil.New(nsPrefix + "-pods")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pods.Close(); err != nil {
			t.Error(err)
		}
	})
	l := startLinuxfp(t, tb)
	waitFastPath(t, tb, l, "198.19.3.1")

	var add, addPeers, del strings.Builder
	for i := range churnVeths {
		fmt.Fprintf(&add, "link add ch%d type veth peer name ch%d netns %s\nlink set ch%d up\n", i, i, pods.Name, i)
		fmt.Fprintf(&addPeers, "link set ch%d up\n", i)
		fmt.Fprintf(&del, "link del ch%d\n", i)
	}
	for round := 1; round <= 2; round++ {
		ipBatchIn(t, tb.DUT, add.String())
		ipBatchIn(t, pods, addPeers.String())
		eventually(t, 20*time.Second, fmt.Sprintf("round %d: a program on each of %d new veths", round, churnVeths), func() error {
			st, err := l.Client.Status()
			if err != nil {
				return err
			}
			if n := churnProgrammed(st); n != churnVeths {
				return fmt.Errorf("%d of %d veths have a program (apply error: %q)", n, churnVeths, st.ApplyError)
			}
			return nil
		})
		gone := strings.Count(l.Log.String(), "interface gone; its program went with it")
		ipBatchIn(t, tb.DUT, del.String())
		eventually(t, 20*time.Second, fmt.Sprintf("round %d: the deleted veths gone from status", round), func() error {
			st, err := l.Client.Status()
			if err != nil {
				return err
			}
			if n := churnListed(st); n != 0 {
				return fmt.Errorf("%d deleted veths still listed", n)
			}
			return nil
		})
		// Each deleted veth's program is forgotten once.
		if n := strings.Count(l.Log.String(), "interface gone; its program went with it") - gone; n != churnVeths {
			t.Errorf("round %d: %d programs forgotten, want %d", round, n, churnVeths)
		}
	}
	st, err := l.Client.Status()
	if err != nil {
		t.Fatalf("linuxfp does not answer after the churn: %v", err)
	}
	if st.ApplyError != "" {
		t.Errorf("apply error after the churn: %s", st.ApplyError)
	}
	if strings.Contains(l.Log.String(), "event socket overflowed") {
		t.Errorf("an event socket overflowed during the churn (everything was re-read)")
	}
	waitFastPath(t, tb, l, "198.19.3.1")
}

// churnProgrammed counts the churn veths with a program.
func churnProgrammed(st *status.Status) int {
	n := 0
	for _, it := range st.Interfaces {
		if strings.HasPrefix(it.Name, "ch") && it.Program != nil {
			n++
		}
	}
	return n
}

// churnListed counts the churn veths in status.
func churnListed(st *status.Status) int {
	n := 0
	for _, it := range st.Interfaces {
		if strings.HasPrefix(it.Name, "ch") {
			n++
		}
	}
	return n
}

// ipBatchIn runs `ip -b` with cmds in ns.
func ipBatchIn(t *testing.T, ns *nsutil.NS, cmds string) {
	t.Helper()
	cmd := exec.Command("ip", "-n", ns.Name, "-b", "-")
	cmd.Stdin = strings.NewReader(cmds)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s -b: %v: %s", ns.Name, err, out)
	}
}
