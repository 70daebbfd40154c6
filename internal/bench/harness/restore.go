package harness

import (
	"bytes"
	"fmt"
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
