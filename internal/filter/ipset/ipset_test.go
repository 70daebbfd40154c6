package ipset

import (
	"fmt"
	"math/rand"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/nsutil"
)

func TestList(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (creates a network namespace)")
	}
	if _, err := exec.LookPath("ipset"); err != nil {
		t.Skip("ipset not installed (scripts/deps.sh installs it)")
	}
	ns, err := nsutil.New("lfp-ipset")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	restore := `
create a hash:ip family inet
add a 198.18.0.1
add a 198.18.0.2
create b hash:net family inet6
add b 2001:2::/48
add b 2001:2:0:1::/64 nomatch
create c hash:ip,port family inet timeout 600 counters comment
add c 198.18.0.3,tcp:80 timeout 100
add c 198.18.0.3,udp:53
add c 198.18.0.4,icmp:8/0
create d hash:net,port family inet
add d 198.18.4.0/24,sctp:9
create e hash:ip family inet netmask 24
add e 198.18.7.9
create f hash:net,iface family inet
add f 198.18.0.0/16,eth0
create g list:set
create h hash:ip family inet bitmask 255.255.0.255
add h 198.18.1.1
`
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "ipset", "restore")
	cmd.Stdin = strings.NewReader(restore)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipset restore: %v: %s", err, out)
	}
	var sets map[string]*model.IPSet
	if err := ns.Do(func() (err error) { sets, err = List(Options{}); return }); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for name, s := range sets {
		var es []string
		for _, e := range s.Entries {
			es = append(es, e.String())
		}
		got[name] = fmt.Sprintf("%s %s netmask=%d timeout=%v unsupported=%q [%s]", s.Type, s.Family, s.Netmask, s.Timeout, s.Unsupported, strings.Join(es, " "))
	}
	want := map[string]string{
		"a": `hash:ip ipv4 netmask=0 timeout=false unsupported="" [198.18.0.1/32 198.18.0.2/32]`,
		"b": `hash:net ipv6 netmask=0 timeout=false unsupported="" [2001:2::/48 2001:2:0:1::/64 nomatch]`,
		"c": `hash:ip,port ipv4 netmask=0 timeout=true unsupported="members expire (timeout) without an event" [198.18.0.3/32,tcp:80 198.18.0.3/32,udp:53 198.18.0.4/32,icmp:2048]`,
		"d": `hash:net,port ipv4 netmask=0 timeout=false unsupported="" [198.18.4.0/24,sctp:9]`,
		"e": `hash:ip ipv4 netmask=24 timeout=false unsupported="" [198.18.7.0/32]`,
		"f": `hash:net,iface ipv4 netmask=0 timeout=false unsupported="type hash:net,iface is not modelled" []`,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("set %s:\n got %s\nwant %s", name, got[name], w)
		}
	}
	for _, name := range []string{"g", "h"} { // list:set; hash:ip with a bitmask
		if s := sets[name]; s == nil || s.Unsupported == "" {
			t.Errorf("set %s should be read and unsupported: %+v", name, s)
		}
	}
	// Indexes are distinct: xt_set rules refer to sets by them.
	seen := map[uint16]string{}
	for name, s := range sets {
		if o, dup := seen[s.Index]; dup {
			t.Errorf("sets %s and %s share index %d", o, name, s.Index)
		}
		seen[s.Index] = name
	}
}

// sortEntries gives model.CompareSetEntries's order, members sharing an address included.
func TestSortEntries(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	var es []model.SetEntry
	for range 5000 {
		var b [16]byte
		b[0], b[1], b[2], b[3] = 0x20, 0x01, 0, 2
		r.Read(b[14:])
		es = append(es, model.SetEntry{Prefix: netip.PrefixFrom(netip.AddrFrom16(b), 120+r.Intn(9))})
		a := netip.AddrFrom4([4]byte{198, 18, byte(r.Intn(4)), byte(r.Intn(256))})
		es = append(es, model.SetEntry{Prefix: netip.PrefixFrom(a, 24+r.Intn(9)).Masked(), Proto: uint8(6 + 11*r.Intn(2)), Port: uint16(r.Intn(4))})
	}
	want := slices.Clone(es)
	slices.SortFunc(want, model.CompareSetEntries)
	sortEntries(es)
	if !slices.Equal(es, want) {
		t.Fatal("sortEntries's order is not model.CompareSetEntries's")
	}
}
