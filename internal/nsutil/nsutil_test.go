package nsutil

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestBatchable(t *testing.T) {
	for _, c := range []struct {
		line       string
		opts, rest string
		ok         bool
	}{
		{"ip route add 198.19.0.0/24 via 198.18.1.2", "", "route add 198.19.0.0/24 via 198.18.1.2", true},
		{"ip -6 addr add 2001:2::1/64 dev in0 nodad", "-6", "addr add 2001:2::1/64 dev in0 nodad", true},
		{"ip -d link show in0", "", "", false},
		{"ip netns exec x true", "", "", false},
		{"ip link set eth0 alias a#b", "", "", false},
		{"ethtool -K eth0 gro on", "", "", false},
		{"ip", "", "", false},
	} {
		opts, rest, ok := batchable(strings.Fields(c.line))
		if ok != c.ok || strings.Join(opts, " ") != c.opts || strings.Join(rest, " ") != c.rest {
			t.Errorf("batchable(%q) = %q, %q, %v; want %q, %q, %v", c.line, opts, rest, ok, c.opts, c.rest, c.ok)
		}
	}
}

// BatchScript runs every line, in order, across runs of ip lines, other commands and a change of
// ip's options; the first failing line stops it and is named in the error.
func TestBatchScript(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	ns, err := New("lfp-nsutil")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	err = ns.BatchScript(`
ip link add br9 type bridge
ip addr add 198.18.9.1/24 dev br9
ip link set br9 up
sysctl -qw net.ipv6.conf.br9.accept_ra=0
ip -6 addr add 2001:2:0:f900::1/64 dev br9 nodad
ip -6 route add 2001:2:0:fe99::/64 via 2001:2:0:f900::2
ip route add 198.19.9.0/24 via 198.18.9.2
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"ip", "-4", "route", "show", "198.19.9.0/24"},
		{"ip", "-6", "route", "show", "2001:2:0:fe99::/64"},
		{"sysctl", "-n", "net.ipv6.conf.br9.accept_ra"},
	} {
		out, err := ns.Run(c...)
		if err != nil || strings.TrimSpace(out) == "" || strings.TrimSpace(out) == "1" {
			t.Errorf("%s: %v: %q", strings.Join(c, " "), err, out)
		}
	}
	err = ns.BatchScript(`
ip route add 198.19.10.0/24 via 198.18.9.2
ip route add 198.19.11.0/24 via 198.18.8.2
ip route add 198.19.12.0/24 via 198.18.9.2
`)
	if err == nil || !strings.Contains(err.Error(), "ip route add 198.19.11.0/24 via 198.18.8.2") {
		t.Fatalf("error %v does not name the failing line", err)
	}
	out, err := ns.Run("ip", "-4", "route", "show")
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, p := range []string{"198.19.10.0/24", "198.19.12.0/24"} {
		if strings.Contains(out, p) {
			got = append(got, p)
		}
	}
	if !slices.Equal(got, []string{"198.19.10.0/24"}) {
		t.Errorf("routes after the failing batch: %v, want only the one before the failure:\n%s", got, out)
	}
}
