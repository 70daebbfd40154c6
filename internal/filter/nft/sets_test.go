package nft_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/filtertest"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/filter/nft"
)

const nftSets = `
table inet lfpsets {
	set blk4 { type ipv4_addr; elements = { 198.19.0.5, 198.19.1.9 } }
	set net4 { type ipv4_addr; flags interval; elements = { 198.19.0.0/24, 198.19.2.3-198.19.2.9, 198.19.4.0-198.19.4.255, 198.19.5.0-198.19.5.127 } }
	set net6 { type ipv6_addr; flags interval; elements = { 2001:2:0:f100::/64, 2001:2:0:f200::5-2001:2:0:f200::7 } }
	set ports { type inet_service; flags interval; elements = { 22, 8000-8080 } }
	set timed { type ipv4_addr; flags timeout; elements = { 198.19.0.7 } }
	set dyn { type ipv4_addr; size 100; flags dynamic; }
	set cat { type ipv4_addr . inet_service; elements = { 198.19.0.5 . 80 } }
	map vm { type ipv4_addr : verdict; elements = { 198.19.0.5 : drop } }
	set cat2 { type ipv4_addr . ipv4_addr; elements = { 198.19.0.1 . 198.19.0.2, 198.19.0.3 . 198.19.0.4 } }
	set cati { type ipv4_addr . inet_service; flags interval; elements = { 198.19.0.0/24 . 80-90 } }
	set cat3 { type ipv4_addr . inet_proto . inet_service; elements = { 198.19.0.5 . tcp . 80, 198.19.0.6 . udp . 53 } }
	set cat0 { type ipv4_addr . ipv4_addr; }
	chain g {
		ip saddr . ip daddr @cat2 iifname "in0" accept
		ip saddr . ip daddr != @cat2 oifname "out0" drop
		ip saddr . ip daddr != @cat2 return
		ip daddr . tcp dport @cati drop
		ip daddr . meta l4proto . th dport @cat3 accept
		ip daddr . th dport @cat drop
		ip saddr . ip daddr @cat2 ip daddr . tcp dport @cat drop
		ip daddr . tcp dport { 198.19.0.9 . 22, 198.19.0.9 . 23 } drop
		ip saddr . ip daddr @cat0 drop
		ip saddr . ip daddr != @cat0 accept
	}
	chain f {
		type filter hook forward priority 0; policy accept;
		ip daddr @blk4 drop
		ip saddr != @net4 accept
		ip6 daddr @net6 drop
		tcp dport @ports accept
		udp sport != { 53, 123 } drop
		ip daddr { 198.19.7.0/24, 198.19.9.9 } drop
		ip daddr @timed drop
		ip saddr @dyn drop
		ip daddr . tcp dport @cat drop
		ip daddr vmap @vm
		meta l4proto { tcp, udp } accept
		meta l4proto { tcp, udp } th dport { 53, 5353 } drop
		ip protocol != { icmp, gre } accept
		meta l4proto { tcp, icmp } th dport 53 drop
		add @dyn { ip saddr }
	}
}
`

// The sets' members as the model holds them.
func members(s *nft.Snapshot, name string) string {
	set := s.Sets[name]
	if set == nil {
		return "missing"
	}
	var es []string
	for _, e := range set.Entries {
		es = append(es, e.Prefix.String())
	}
	slices.Sort(es)
	return fmt.Sprintf("%s %s: %s", set.Family, set.Type, strings.Join(es, " "))
}

func TestNFTSets(t *testing.T) {
	filtertest.Require(t, "nft")
	ns := filtertest.NewNS(t, "nfs-read")
	if err := filtertest.NFT(ns, nftSets); err != nil {
		t.Fatal(err)
	}
	s, err := filtertest.Read(ns)
	if err != nil {
		t.Fatal(err)
	}
	name := func(set string) string { return nft.SetName(1, "lfpsets", set) }
	compare(t, "ipv4", render(s.IPv4), []string{
		"chain inet lfpsets f (forward 0 filter policy accept)",
		"0: daddr in " + name("blk4") + " => drop",
		"1: saddr not in " + name("net4") + " => accept",
		"3: -p tcp -m multiport --dports 22,8000:8080 => accept",
		"4: -p udp -m multiport ! --sports 53,123 => drop",
		"5: daddr in " + name("__set2") + " => drop",
		"6: unknown(network header bytes 16-19 in set @timed (elements time out (no message when one does))) => drop",
		"7: unknown(network header bytes 12-15 in set @dyn (dynamic set (packets add elements))) => drop",
		"8: -p tcp -d 198.19.0.5/32 --dport 80 => drop",
		"9: -d 198.19.0.5/32 => drop",
		"10: -p {tcp,udp} => accept",
		"11: -p {tcp,udp} -m multiport --dports 53,5353 => drop",
		"12: ! -p {icmp,47} => accept",
		"13: -p {icmp,tcp} unknown(transport header bytes 2-3 == 0x0035) => drop",
		"14: unknown(dynset, stateful) => continue",
		// Lookups of concatenations: one rule per element, or (negated) a jump to a chain made
		// for the rule, whose elements return.
		"chain inet lfpsets g",
		"0: -s 198.19.0.1/32 -d 198.19.0.2/32 -i in0 => accept",
		"0: -s 198.19.0.3/32 -d 198.19.0.4/32 -i in0 => accept",
		"1: => jump g handle 16 not in @cat2",
		"2: unknown(network header bytes 12-15 not in set @cat2 (a negated concatenation in a rule that ends with return)) => return",
		"3: -p tcp unknown(network header bytes 16-19 in set @cati (a concatenation with intervals)) => drop",
		"4: -d 198.19.0.5/32 -p tcp --dport 80 => accept",
		"4: -d 198.19.0.6/32 -p udp --dport 53 => accept",
		"5: unknown(network header bytes 16-19 in set @cat (a concatenation with a port, of packets that may have none)) => drop",
		"6: -s 198.19.0.1/32 -d 198.19.0.2/32 -p tcp unknown(network header bytes 16-19 in set @cat (a second lookup of a concatenation in the rule)) => drop",
		"6: -s 198.19.0.3/32 -d 198.19.0.4/32 -p tcp unknown(network header bytes 16-19 in set @cat (a second lookup of a concatenation in the rule)) => drop",
		"7: -p tcp -d 198.19.0.9/32 --dport 22 => drop",
		"7: -p tcp -d 198.19.0.9/32 --dport 23 => drop",
		"9: => accept", // not in an empty set; the lookup in it (8) never matches
		"chain inet lfpsets g handle 16 not in @cat2",
		"1: -s 198.19.0.1/32 -d 198.19.0.2/32 => return",
		"1: -s 198.19.0.3/32 -d 198.19.0.4/32 => return",
		"1: -o out0 => drop",
	})
	if t.Failed() {
		t.Logf("ipv6: %s", strings.Join(render(s.IPv6), "\n"))
	}
	for set, want := range map[string]string{
		"blk4":   "ipv4 hash:net: 198.19.0.5/32 198.19.1.9/32",
		"net4":   "ipv4 hash:net: 198.19.0.0/24 198.19.2.3/32 198.19.2.4/30 198.19.2.8/31 198.19.4.0/24 198.19.5.0/25",
		"net6":   "ipv6 hash:net: 2001:2:0:f100::/64 2001:2:0:f200::5/128 2001:2:0:f200::6/127",
		"__set2": "ipv4 hash:net: 198.19.7.0/24 198.19.9.9/32",
	} {
		if got := members(s, name(set)); got != want {
			t.Errorf("set %s: %s, want %s", set, got, want)
		}
	}
	if s.Sets[name("net6")] != nil && !slices.ContainsFunc(render(s.IPv6), func(l string) bool { return l == "2: daddr in "+name("net6")+" => drop" }) {
		t.Errorf("ipv6: no lookup of net6:\n%s", strings.Join(render(s.IPv6), "\n"))
	}
	if _, ok := s.Sets[name("timed")]; ok {
		t.Errorf("a set whose lookups are Unknown is in the sets")
	}
	_ = model.IPv4
}
