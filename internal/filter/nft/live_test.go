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

// render lists a ruleset's chains and rules, one line each, in a stable order.
func render(rs *model.Ruleset) []string {
	var keys []model.ChainKey
	for k := range rs.Chains {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b model.ChainKey) int { return strings.Compare(a.String(), b.String()) })
	var out []string
	for _, k := range keys {
		c := rs.Chains[k]
		head := "chain " + k.String()
		if c.Base != nil {
			head += fmt.Sprintf(" (%s %d %s policy %s)", c.Base.Hook, c.Base.Priority, c.Base.Type, c.Base.Policy)
		}
		out = append(out, head)
		for _, r := range c.Rules {
			out = append(out, fmt.Sprintf("%d: %s", r.ID.Position, r))
		}
	}
	return out
}

func compare(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	t.Errorf("%s: model differs\n got:\n\t%s\nwant:\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
}

func load(t *testing.T, sets, v4, v6, native string) *nft.Snapshot {
	t.Helper()
	filtertest.Require(t, "iptables-restore", "ip6tables-restore", "ipset", "nft")
	ns := filtertest.NewNS(t, "lfp-filt")
	if sets != "" {
		if err := filtertest.IPSetRestore(ns, sets); err != nil {
			t.Fatal(err)
		}
	}
	if v4 != "" {
		if err := filtertest.IPTablesRestore(ns, false, v4); err != nil {
			t.Fatal(err)
		}
	}
	if v6 != "" {
		if err := filtertest.IPTablesRestore(ns, true, v6); err != nil {
			t.Fatal(err)
		}
	}
	if native != "" {
		if err := filtertest.NFT(ns, native); err != nil {
			t.Fatal(err)
		}
	}
	s, err := filtertest.Read(ns)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every iptables form the model supports, and a sample of those it does not, as
// iptables-nft 1.8.9 encodes them.
const matrix4 = `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:USER - [0:0]
-A FORWARD -s 198.18.0.0/24 -j ACCEPT
-A FORWARD -s 198.18.0.5/32 -d 198.18.1.0/23 -j DROP
-A FORWARD ! -s 198.18.0.0/16 -j DROP
-A FORWARD -s 198.18.0.0/255.255.0.255 -j DROP
-A FORWARD -s 198.18.0.0/12 -j DROP
-A FORWARD -p tcp -j ACCEPT
-A FORWARD ! -p udp -j ACCEPT
-A FORWARD -p 47 -j ACCEPT
-A FORWARD -p tcp --dport 80 -j ACCEPT
-A FORWARD -p tcp --sport 1000:2000 -j ACCEPT
-A FORWARD -p udp ! --dport 53 -j ACCEPT
-A FORWARD -p udp ! --dport 53:60 -j ACCEPT
-A FORWARD -p tcp --dport 1024: -j ACCEPT
-A FORWARD -p tcp --dport :1024 -j ACCEPT
-A FORWARD -p tcp -m multiport --dports 80,443,8000:8080 -j ACCEPT
-A FORWARD -p tcp -m multiport ! --sports 80,443 -j ACCEPT
-A FORWARD -p tcp -m multiport --ports 80,443 -j ACCEPT
-A FORWARD -i eth0 -o eth1 -j ACCEPT
-A FORWARD -i veth+ ! -o br-+ -j ACCEPT
-A FORWARD -i + -j ACCEPT
-A FORWARD -m set --match-set s1 src -j DROP
-A FORWARD -m set ! --match-set s2 dst -j DROP
-A FORWARD -m set --match-set s3 src,dst -j DROP
-A FORWARD -m set --match-set s4 dst,dst -j DROP
-A FORWARD -p icmp --icmp-type 8 -j ACCEPT
-A FORWARD -p icmp --icmp-type 3/4 -j ACCEPT
-A FORWARD -p icmp ! --icmp-type echo-reply -j ACCEPT
-A FORWARD -p icmp --icmp-type any -j ACCEPT
-A FORWARD -m comment --comment "hello" -j ACCEPT
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -m state --state NEW -j ACCEPT
-A FORWARD -j REJECT
-A FORWARD -p tcp -j REJECT --reject-with tcp-reset
-A FORWARD -j LOG --log-prefix foo
-A FORWARD -j NFLOG
-A FORWARD -j USER
-A FORWARD -g USER
-A FORWARD -p tcp --tcp-flags SYN,ACK SYN -j ACCEPT
-A FORWARD -m mark --mark 0x1/0x1 -j ACCEPT
-A FORWARD -m mark ! --mark 0x4000 -j ACCEPT
-A FORWARD -m connmark --mark 0x1 -j ACCEPT
-A FORWARD -m limit --limit 10/second -j ACCEPT
-A FORWARD -m conntrack ! --ctstate INVALID -j ACCEPT
-A FORWARD -m conntrack --ctstate DNAT -j ACCEPT
-A FORWARD -m conntrack --ctstate NEW --ctorigdstport 80 -j ACCEPT
-A FORWARD -m state --state UNTRACKED,INVALID -j DROP
-A FORWARD -m addrtype --dst-type LOCAL -j DROP
-A FORWARD -m addrtype ! --src-type LOCAL --limit-iface-in -j DROP
-A FORWARD -m addrtype --src-type MULTICAST ! --dst-type LOCAL -j DROP
-A FORWARD -m addrtype --dst-type BROADCAST -j DROP
-A FORWARD -m addrtype --dst-type LOCAL,UNICAST -j DROP
-A FORWARD
-A USER -j RETURN
COMMIT
`

var want4 = []string{
	"chain ip filter FORWARD (forward 0 filter policy drop)",
	"0: -s 198.18.0.0/24 => accept",
	"1: -s 198.18.0.5/32 -d 198.18.0.0/23 => drop",
	"2: ! -s 198.18.0.0/16 => drop",
	"3: unknown(network header bytes 12-15 & 0xffff00ff == 0xc6120000) => drop",
	"4: -s 198.16.0.0/12 => drop",
	"5: -p tcp => accept",
	"6: ! -p udp => accept",
	"7: -p 47 => accept",
	"8: -p tcp --dport 80 => accept",
	"9: -p tcp --sport 1000:2000 => accept",
	"10: -p udp ! --dport 53 => accept",
	"11: -p udp ! --dport 53:60 => accept",
	"12: -p tcp --dport 1024:65535 => accept",
	"13: -p tcp --dport 0:1024 => accept",
	"14: -p tcp -m multiport --dports 80,443,8000:8080 => accept",
	"15: -p tcp -m multiport ! --sports 80,443 => accept",
	"16: -p tcp -m multiport --ports 80,443 => accept",
	"17: -i eth0 -o eth1 => accept",
	"18: -i veth+ ! -o br-+ => accept",
	"19: => accept",
	"20: -m set --match-set s1 src => drop",
	"21: -m set ! --match-set s2 dst => drop",
	"22: -m set --match-set s3 src,dst => drop",
	"23: -m set --match-set s4 dst,dst => drop",
	"24: -p icmp --icmp-type 8 => accept",
	"25: -p icmp --icmp-type 3/4 => accept",
	"26: -p icmp ! --icmp-type 0 => accept",
	"27: -p icmp --icmp-type any => accept",
	"28: => accept",
	"29: -m conntrack --ctstate RELATED,ESTABLISHED => accept",
	"30: -m conntrack --ctstate NEW => accept",
	"31: => linux (target REJECT)",
	"32: -p tcp => linux (target REJECT)",
	"33: => linux (target LOG)",
	"34: => linux (log)",
	"35: => jump USER",
	"36: => goto USER",
	"37: -p tcp unknown(transport header bytes 13-13 & 0x12 == 0x02) => accept",
	"38: -m mark --mark 0x1/0x1 => accept",
	"39: -m mark ! --mark 0x4000 => accept",
	"40: unknown(xt match connmark rev 1) => accept",
	"41: unknown(limit, stateful) => accept", // iptables-nft uses the native limit expression
	"42: -m conntrack ! --ctstate INVALID => accept",
	"43: unknown(xt match conntrack --ctstate SNAT/DNAT) => accept",
	"44: -m conntrack --ctstate NEW unknown(xt match conntrack (flags 0x200 besides --ctstate)) => accept",
	"45: -m conntrack --ctstate INVALID,UNTRACKED => drop",
	"46: -m addrtype --dst-type LOCAL => drop",
	"47: -m addrtype ! --src-type LOCAL --limit-iface => drop",
	"48: -s 224.0.0.0/4 -m addrtype ! --dst-type LOCAL => drop",
	"49: unknown(xt match addrtype rev 1: --dst-type mask 0x8) => drop",
	"50: unknown(xt match addrtype rev 1: --dst-type mask 0x6) => drop",
	"51: => continue",
	"chain ip filter USER",
	"0: => return",
}

const matrix6 = `*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -s 2001:2::/48 -j ACCEPT
-A FORWARD ! -d 2001:2:0:1::5/128 -j DROP
-A FORWARD -s 2001:2::/33 -j DROP
-A FORWARD -p ipv6-icmp --icmpv6-type 128 -j ACCEPT
-A FORWARD -p icmpv6 --icmpv6-type 1/3 -j ACCEPT
-A FORWARD -p tcp --dport 22 -j ACCEPT
-A FORWARD -m set --match-set s6 src -j DROP
-A FORWARD -i abcdefghijklmno -j ACCEPT
-A FORWARD -i abcdefghijklmn+ -j ACCEPT
-A FORWARD -m statistic --mode random --probability 0.5 -j DROP
-A FORWARD -m addrtype --dst-type LOCAL -j DROP
-A FORWARD -p tcp -m tcp --dport 80 ! --sport 5 -j DROP
-A FORWARD -m addrtype --dst-type LOCAL --limit-iface-in -j DROP
-A FORWARD -m addrtype ! --src-type MULTICAST -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 2001:2::1 -p tcp --dport 80 -j DNAT --to-destination [2001:2::2]:8080
-A POSTROUTING -o eth0 -j MASQUERADE
-A POSTROUTING -s 2001:2::/64 -j SNAT --to-source 2001:2::9
-A POSTROUTING -j RETURN
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -j MARK --set-xmark 0x4000/0x4000
-A FORWARD -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu
-A POSTROUTING -j CONNMARK --save-mark
COMMIT
*raw
:PREROUTING DROP [0:0]
-A PREROUTING -j CT --notrack
COMMIT
`

var want6 = []string{
	"chain ip6 filter FORWARD (forward 0 filter policy accept)",
	"0: -s 2001:2::/48 => accept",
	"1: ! -d 2001:2:0:1::5/128 => drop",
	"2: -s 2001:2::/33 => drop",
	"3: -p ipv6-icmp --icmp-type 128 => accept",
	"4: -p ipv6-icmp --icmp-type 1/3 => accept",
	"5: -p tcp --dport 22 => accept",
	"6: -m set --match-set s6 src => drop",
	"7: -i abcdefghijklmno => accept",
	"8: -i abcdefghijklmn+ => accept",
	"9: unknown(xt match statistic --mode random) => drop",
	"10: -m addrtype --dst-type LOCAL => drop",
	"11: -p tcp ! --sport 5 --dport 80 => drop",
	"12: unknown(xt match addrtype rev 1: --dst-type mask 0x4 --limit-iface) => drop",
	"13: ! -s ff00::/8 => drop",
	"chain ip6 mangle FORWARD (forward -150 filter policy accept)",
	"0: -p tcp unknown(transport header bytes 13-13 & 0x06 == 0x02) => linux (target TCPMSS)",
	"chain ip6 mangle POSTROUTING (postrouting -150 filter policy accept)",
	"0: => linux (target CONNMARK)",
	"chain ip6 mangle PREROUTING (prerouting -150 filter policy accept)",
	"0: => linux (target MARK)",
	"chain ip6 nat POSTROUTING (postrouting 100 nat policy accept)",
	"0: -o eth0 => linux (MASQUERADE translates the packet)",
	"1: -s 2001:2::/64 => linux (SNAT translates the packet)",
	"2: => return",
	"chain ip6 nat PREROUTING (prerouting -100 nat policy accept)",
	"0: -p tcp -d 2001:2::1/128 --dport 80 => linux (DNAT translates the packet)",
	"chain ip6 raw PREROUTING (prerouting -300 filter policy drop)",
	"0: => linux (target CT)",
}

func TestIPTablesForms(t *testing.T) {
	s := load(t, "create s1 hash:ip\ncreate s2 hash:net\ncreate s3 hash:ip,port\ncreate s4 hash:net,port\ncreate s6 hash:net family inet6\n",
		matrix4, matrix6, "")
	compare(t, "ipv4", render(s.IPv4), want4)
	compare(t, "ipv6", render(s.IPv6), want6)
	if len(s.Native) != 0 || len(s.Elsewhere) != 0 {
		t.Errorf("iptables tables listed as native %v / elsewhere %v", s.Native, s.Elsewhere)
	}
	// NAT targets are marked as such.
	for _, r := range s.IPv6.Chains[model.ChainKey{TableFamily: "ip6", Table: "nat", Chain: "POSTROUTING"}].Rules[:2] {
		if !r.Verdict.NAT {
			t.Errorf("%s: not marked NAT", r)
		}
	}
}

const native = `
table inet lfp {
	chain lfpfw {
		type filter hook forward priority 10; policy drop;
		ip saddr 198.18.0.0/24 drop
		ip6 saddr 2001:2::/48 drop
		tcp dport { 80, 443 } accept
		ct state established,related accept
		iifname "eth*" accept
		meta l4proto icmp icmp type echo-request accept
		icmpv6 type echo-request accept
		limit rate 10/second accept
		udp dport 53 jump sub
		th dport 22 accept
		tcp dport 23 counter
		ip protocol udp udp sport 9 drop
	}
	chain sub {
		ip daddr 198.19.1.1 return
		drop
	}
	chain lfppre {
		type filter hook prerouting priority -400; policy accept;
		iif "lo" accept
	}
	chain lfpin {
		type filter hook input priority 0; policy drop;
	}
}
table ip dormant {
	flags dormant;
	chain f {
		type filter hook forward priority 0; policy drop;
	}
}
table netdev nd {
	chain lfping {
		type filter hook ingress device lo priority 0; policy accept;
	}
}
table bridge br {
	chain lfpf {
		type filter hook forward priority 0; policy accept;
	}
}
`

func TestNative(t *testing.T) {
	s := load(t, "", "", "", native)
	compare(t, "ipv4", render(s.IPv4), []string{
		"chain inet lfp lfpfw (forward 10 filter policy drop)",
		"0: -s 198.18.0.0/24 => drop",
		"2: -p tcp -m multiport --dports 80,443 => accept",
		"3: -m conntrack --ctstate RELATED,ESTABLISHED => accept",
		"4: -i eth+ => accept",
		"5: -p icmp --icmp-type 8 => accept",
		"7: unknown(limit, stateful) => accept",
		"8: -p udp --dport 53 => jump sub",
		"9: unknown(transport header bytes 2-3 == 0x0016) => accept",
		"10: -p tcp --dport 23 => continue",
		"11: -p udp --sport 9 => drop",
		"chain inet lfp lfppre (prerouting -400 filter policy accept)",
		"0: unknown(meta iif == 0x01000000) => accept",
		"chain inet lfp sub",
		"0: -d 198.19.1.1/32 => return",
		"1: => drop",
	})
	compare(t, "ipv6", render(s.IPv6), []string{
		"chain inet lfp lfpfw (forward 10 filter policy drop)",
		"1: -s 2001:2::/48 => drop",
		"2: -p tcp -m multiport --dports 80,443 => accept",
		"3: -m conntrack --ctstate RELATED,ESTABLISHED => accept",
		"4: -i eth+ => accept",
		"5: -p icmp unknown(transport header bytes 0-0 == 0x08) => accept",
		"6: -p ipv6-icmp --icmp-type 128 => accept",
		"7: unknown(limit, stateful) => accept",
		"8: -p udp --dport 53 => jump sub",
		"9: unknown(transport header bytes 2-3 == 0x0016) => accept",
		"10: -p tcp --dport 23 => continue",
		"chain inet lfp lfppre (prerouting -400 filter policy accept)",
		"0: unknown(meta iif == 0x01000000) => accept",
		"chain inet lfp sub",
		"1: => drop",
	})
	compare(t, "native", s.Native, []string{
		"inet lfp lfpfw (hook forward priority 10)",
		"inet lfp lfppre (hook prerouting priority -400)",
	})
	compare(t, "elsewhere", s.Elsewhere, []string{
		"bridge br lfpf (hook forward priority 0)",
		"netdev nd lfping (hook ingress priority 0)",
	})
}

// What makes netfilter track connections is found on any hook, in regular chains, in objects.
func TestConntrackUsers(t *testing.T) {
	for _, tc := range []struct {
		name, v4, v6, native string
		want4, want6         []string
	}{
		{name: "nothing", v4: "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 22 -j ACCEPT\nCOMMIT\n"},
		{name: "input conntrack match", v4: "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m conntrack --ctstate NEW -j ACCEPT\nCOMMIT\n",
			want4: []string{"ip filter: xt match conntrack"}},
		{name: "empty nat table", v6: "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n",
			want6: []string{"ip6 nat: nat chain POSTROUTING", "ip6 nat: nat chain PREROUTING"}},
		{name: "regular chain no one jumps to", v4: "*raw\n:X - [0:0]\n-A X -j CT --notrack\nCOMMIT\n",
			want4: []string{"ip raw: xt target CT"}},
		{name: "native ct in an output chain", native: "table inet o {\n chain out {\n type filter hook output priority 0;\n ct state new counter\n }\n}\n",
			want4: []string{"inet o: a ct expression"}, want6: []string{"inet o: a ct expression"}},
		{name: "ct helper object", native: "table ip h {\n ct helper ftp {\n type \"ftp\" protocol tcp\n }\n}\n",
			want4: []string{"ip h: ct helper object ftp"}},
		{name: "counter object", native: "table ip c {\n counter x {\n }\n chain f {\n type filter hook forward priority 0;\n counter name \"x\"\n }\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := load(t, "", tc.v4, tc.v6, tc.native)
			compare(t, "ipv4", s.IPv4.Conntrack, tc.want4)
			compare(t, "ipv6", s.IPv6.Conntrack, tc.want6)
		})
	}
}

// TestNativeFib: `fib saddr|daddr type local` and its negation are modelled (model.FibLocal);
// other fib lookups (other types, sets of types, iif/oif/mark, the oif results) stay Unknown,
// and a fib load leaves the other registers alone.
func TestNativeFib(t *testing.T) {
	s := load(t, "", "", "", `
table inet lfpfib {
	chain f {
		type filter hook forward priority 10; policy accept;
		fib daddr type local drop
		fib saddr type != local accept
		ip daddr 198.19.1.1 fib saddr type local drop
		fib daddr type broadcast drop
		fib daddr type { local, broadcast } drop
		fib daddr . iif type local drop
		fib daddr . mark type != local drop
		fib daddr oif missing drop
	}
}
`)
	want := []string{
		"chain inet lfpfib f (forward 10 filter policy accept)",
		"0: fib daddr type local => drop",
		"1: fib saddr type != local => accept",
		"2: -d 198.19.1.1/32 fib saddr type local => drop",
		"3: unknown(fib daddr type == 0x03000000) => drop",
		"4: unknown(fib daddr type in set @__set0) => drop",
		"5: unknown(fib daddr iif type == 0x02000000) => drop",
		"6: unknown(fib daddr mark type != 0x02000000) => drop",
		"7: unknown(fib daddr present oif == 0x00000000) => drop",
	}
	compare(t, "ipv4", render(s.IPv4), want)
	// `ip daddr` implies `meta nfproto ipv4`: no IPv6 packet gets past it.
	compare(t, "ipv6", render(s.IPv6), slices.Delete(want, 3, 4))
}
