package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// ipset changes send no notification. linuxfp sees each ipset command as the kernel applies
// it (the netlink watcher) and reads the sets only then: an idle host with a large set in use
// costs nothing, and a change is followed.
func TestIPSetFollowedByEvents(t *testing.T) {
	requireTool(t, "ipset")
	tb := newTestbed(t, testbed.Options{})
	// A large blacklist (50,000 addresses no test sends to) used by a DROP rule.
	var b strings.Builder
	b.WriteString("create lfpblk hash:ip maxelem 100000\n")
	for i := 0; i < 50000; i++ {
		fmt.Fprintf(&b, "add lfpblk 198.19.%d.%d\n", 128+i/256%128, i%256)
	}
	cmd := exec.Command("ip", "netns", "exec", tb.DUT.Name, "ipset", "restore", "-exist")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipset restore: %v: %s", err, out)
	}
	sh(t, tb.DUT, "iptables -A FORWARD -m set --match-set lfpblk dst -j DROP")
	l := startLinuxfp(t, tb)
	waitVerdict(t, tb, l, "198.19.9.1", "forwarded", 10)

	reads := func() uint64 { return ipsetReads(t, l) }
	// Idle, and a set changed in another namespace: no read.
	r0 := reads()
	sh(t, tb.Gen, "ipset create lfpother hash:ip\nipset add lfpother 198.19.9.1")
	time.Sleep(time.Second)
	if r1 := reads(); r1 != r0 {
		t.Fatalf("ipsets read %d times while nothing changed here", r1-r0)
	}
	// Each change here is read and followed.
	sh(t, tb.DUT, "ipset add lfpblk 198.19.9.1")
	waitVerdict(t, tb, l, "198.19.9.1", "dropped", 0)
	waitVerdict(t, tb, l, "198.19.9.2", "forwarded", 10)
	sh(t, tb.DUT, "ipset del lfpblk 198.19.9.1")
	waitVerdict(t, tb, l, "198.19.9.1", "forwarded", 10)
	// swap with a set holding the address, then flush.
	sh(t, tb.DUT, "ipset create lfpnew hash:ip\nipset add lfpnew 198.19.9.3\nipset swap lfpnew lfpblk")
	waitVerdict(t, tb, l, "198.19.9.3", "dropped", 0)
	sh(t, tb.DUT, "ipset flush lfpblk")
	waitVerdict(t, tb, l, "198.19.9.3", "forwarded", 10)
	if r := reads(); r-r0 < 4 {
		t.Fatalf("ipsets read %d times for the changes, want one or more each", r-r0)
	}
}

// Sets that change with no netlink message: members that expire (timeout), and members a SET
// target adds as packets pass (here in INPUT, where the fast path never looks). A copy of such a
// set in the fast path would be stale at once: rules that test them hand packets to Linux.
func TestIPSetChangedWithoutMessage(t *testing.T) {
	requireTool(t, "ipset")
	tb := newTestbed(t, testbed.Options{})
	sh(t, tb.DUT, `ipset create lfpto hash:ip timeout 600
ipset create lfpknock hash:ip
iptables -A INPUT -p udp --dport 9 -j SET --add-set lfpknock src
iptables -A FORWARD -d 198.19.10.0/24 -m set --match-set lfpknock src -j DROP
iptables -A FORWARD -d 198.19.9.0/24 -m set --match-set lfpto dst -j DROP`)
	l := startLinuxfp(t, tb)
	waitVerdict(t, tb, l, "198.19.9.1", "filter", 10)
	waitVerdict(t, tb, l, "198.19.10.1", "filter", 10)

	// A member that expires: dropped while it is one, forwarded once the kernel's timer has
	// removed it (no event says so).
	sh(t, tb.DUT, "ipset add lfpto 198.19.9.1 timeout 1")
	waitVerdict(t, tb, l, "198.19.9.1", "filter", 0)
	time.Sleep(1500 * time.Millisecond)
	waitVerdict(t, tb, l, "198.19.9.1", "filter", 10)

	// gen knocks on the DUT's port 9: the SET target adds its address, and Linux drops what it
	// then sends to 198.19.10.0/24.
	if out, err := tb.Gen.Run("bash", "-c", "echo knock > /dev/udp/198.18.0.1/9"); err != nil {
		t.Fatalf("knock: %v: %s", err, out)
	}
	waitVerdict(t, tb, l, "198.19.10.1", "filter", 0)
	if out, err := tb.DUT.Run("ipset", "test", "lfpknock", "198.18.0.2"); err != nil {
		t.Fatalf("the knock did not add gen's address: %v: %s", err, out)
	}
}

// A rule change reads no ipset (none changed: their commands are seen as made), and still the
// rules follow sets made or changed while no rule tested them.
func TestIPSetNotReadForRuleChanges(t *testing.T) {
	requireTool(t, "ipset")
	requireTool(t, "iptables")
	tb := newTestbed(t, testbed.Options{})
	sh(t, tb.DUT, `ipset create lfpblk hash:ip
ipset add lfpblk 198.19.9.1
ipset create lfpidle hash:ip
iptables -A FORWARD -m set --match-set lfpblk dst -j DROP`)
	l := startLinuxfp(t, tb)
	waitVerdict(t, tb, l, "198.19.9.1", "dropped", 0)
	reads := func() uint64 { return ipsetReads(t, l) }
	r0 := reads()
	sh(t, tb.DUT, "iptables -I FORWARD -d 198.19.9.2 -j DROP")
	waitVerdict(t, tb, l, "198.19.9.2", "dropped", 0)
	if r := reads(); r != r0 {
		t.Errorf("the sets were read %d times for a rule change", r-r0)
	}
	// A set made after the last read, and a change of a set no rule tested: the rules that
	// start to test them see their members.
	sh(t, tb.DUT, `ipset create lfpnew hash:ip
ipset add lfpnew 198.19.9.5
ipset add lfpidle 198.19.9.6
iptables -I FORWARD -m set --match-set lfpnew dst -j DROP
iptables -I FORWARD -m set --match-set lfpidle dst -j DROP`)
	waitVerdict(t, tb, l, "198.19.9.5", "dropped", 0)
	waitVerdict(t, tb, l, "198.19.9.6", "dropped", 0)
	waitVerdict(t, tb, l, "198.19.9.7", "forwarded", 10)
}

// ipsetReads is how many times linuxfp has read the ipsets; the test fails where ipset
// commands are not seen as they are made (the sets would be polled).
func ipsetReads(t *testing.T, l *testbed.Linuxfp) uint64 {
	t.Helper()
	st, err := l.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.IPSetWatch, "event") {
		t.Fatalf("ipsets watched by %q, want events", st.IPSetWatch)
	}
	return st.IPSetReads
}
