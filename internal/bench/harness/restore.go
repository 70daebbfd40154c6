package harness

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// Restore runs a restore tool (iptables-restore, ipset restore) in ns with input on its stdin.
func Restore(ns *nsutil.NS, input string, tool ...string) error {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, tool...)...)
	cmd.Stdin = strings.NewReader(input)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("in %s: %s: %w: %s", ns.Name, strings.Join(tool, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// DropRules is iptables-restore input that replaces the filter table with n DROP rules in
// FORWARD, one for each addr(0 .. n-1) in that order.
func DropRules(n int, addr func(int) netip.Addr) string {
	var b strings.Builder
	b.WriteString("*filter\n:FORWARD ACCEPT [0:0]\n")
	for i := range n {
		fmt.Fprintf(&b, "-A FORWARD -d %s/32 -j DROP\n", addr(i))
	}
	b.WriteString("COMMIT\n")
	return b.String()
}
