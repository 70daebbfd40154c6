package observe

import (
	"strings"
	"testing"
)

// Every sysctl the controller reads must keep the fence closed when written; the others must
// not (a CNI plugin writes accept_ra for each pod it adds).
func TestForwardingSysctlsCoverReads(t *testing.T) {
	var read []string
	sysctlRead = func(p string) { read = append(read, p) }
	defer func() { sysctlRead = nil }()
	readSysctls(map[int]*Link{1: {Name: "in0"}, 2: {Name: "veth1234abcd"}}, Sysctls{}, true, func(*Link) bool { return true })
	if len(read) < 20 {
		t.Fatalf("only %d sysctls read: %v", len(read), read)
	}
	for _, p := range read {
		if !forwardingSysctl(p, true) {
			t.Errorf("%s is read for the fast path but its writes would not keep the fence closed", p)
		}
	}
	for _, p := range []string{"net/ipv6/conf/veth1234abcd/accept_ra", "net/ipv4/conf/eth0/arp_notify",
		"net/ipv6/conf/eth0/accept_dad", "net/core/somaxconn", "net/ipv4/tcp_rmem", "net/ipv4/conf/in0/accept_local"} {
		if forwardingSysctl(p, false) {
			t.Errorf("%s keeps the fence closed, but nothing reads it", p)
		}
	}
	// The FIB cache's IPv6 settings matter only while it may be on.
	for _, p := range []string{"net/ipv6/conf/veth1234abcd/accept_ra", "net/ipv6/conf/in0/forwarding", "net/ipv6/conf/all/ignore_routes_with_linkdown", "net/ipv6/conf/out0/mtu"} {
		if forwardingSysctl(p, false) || !forwardingSysctl(p, true) {
			t.Errorf("%s: keeps the fence closed without the FIB cache %v, with it %v; want false, true", p, forwardingSysctl(p, false), forwardingSysctl(p, true))
		}
	}
	if long := "net/ipv6/conf/" + strings.Repeat("x", SysctlNameMax) + "/accept_ra"; !forwardingSysctl(long[:SysctlNameMax-1], false) {
		t.Error("a name the hook cut must count as mattering")
	}
}
