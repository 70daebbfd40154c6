package observe

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/google/nftables"

	"github.com/linuxfp/linuxfp/internal/filter/nft"
)

// readNetfilter finds every netfilter hook that forwarded packets traverse and that holds
// something: a rule, a DROP policy, or a NAT chain (NAT binds connections even when its chains
// are empty). Until the filter module lands, the router hands the affected family to Linux.
//
// iptables on this system is iptables-nft: its rules are nf_tables rules, seen here. Legacy
// x_tables (iptables-legacy) tables are not visible to nf_tables and send no events: a loaded
// legacy table is treated as holding rules (see legacyTables).
//
// The chains and their rule counts are the filter's own read of the ruleset (r): reading it again
// costs as much (~100 ms for 10,000 rules here).
func readNetfilter(r *Ruleset) Netfilter {
	nf := Netfilter{Backend: "nf_tables", Ingress: map[string][]string{}, Egress: map[string][]string{}}
	for _, ch := range r.chains {
		if ch.Hooknum == nil {
			continue // not a base chain: reachable only by jumps from one
		}
		hook := *ch.Hooknum
		fam := ch.Table.Family
		name := fmt.Sprintf("nftables %s %s %s (hook %s)", nft.FamilyName(fam), ch.Table.Name, ch.Name, nft.HookName(fam, hook))
		var why []string
		if ch.Type == nftables.ChainTypeNAT {
			why = append(why, name+": NAT")
		}
		if ch.Policy != nil && *ch.Policy == nftables.ChainPolicyDrop {
			why = append(why, name+": policy drop")
		}
		if len(why) == 0 {
			if n := r.ruleCount(uint8(fam), ch.Table.Name, ch.Name); n > 0 {
				why = append(why, fmt.Sprintf("%s: %d rules", name, n))
			}
		}
		if len(why) == 0 {
			continue
		}
		switch fam {
		case nftables.TableFamilyNetdev:
			if hook == *nftables.ChainHookIngress {
				nf.Ingress[ch.Device] = append(nf.Ingress[ch.Device], why...)
			} else {
				nf.Egress[ch.Device] = append(nf.Egress[ch.Device], why...)
			}
		case nftables.TableFamilyBridge:
			// Every bridge-family hook sees bridged frames or frames to and from bridges.
			nf.Bridge = append(nf.Bridge, why...)
		case nftables.TableFamilyIPv4, nftables.TableFamilyIPv6, nftables.TableFamilyINet:
			if ch.Type != nftables.ChainTypeNAT {
				// Local paths: nat chains see only a connection's first packet.
				var l4, l6 *[]string
				switch hook {
				case *nftables.ChainHookOutput, *nftables.ChainHookPostrouting:
					l4, l6 = &nf.LocalOut4, &nf.LocalOut6
				case *nftables.ChainHookPrerouting, *nftables.ChainHookInput:
					l4, l6 = &nf.LocalIn4, &nf.LocalIn6
				}
				if l4 != nil {
					if fam != nftables.TableFamilyIPv6 {
						*l4 = append(*l4, why...)
					}
					if fam != nftables.TableFamilyIPv4 {
						*l6 = append(*l6, why...)
					}
				}
			}
			if !forwardPathHook(fam, hook) {
				continue
			}
			if ch.Device != "" && fam == nftables.TableFamilyINet && hook == inetIngress {
				// inet ingress is per device, like netdev ingress.
				nf.Ingress[ch.Device] = append(nf.Ingress[ch.Device], why...)
				continue
			}
			if fam != nftables.TableFamilyIPv6 {
				nf.V4 = append(nf.V4, why...)
			}
			if fam != nftables.TableFamilyIPv4 {
				nf.V6 = append(nf.V6, why...)
			}
		}
	}
	v4, v6 := legacyTables()
	if len(v4)+len(v6) > 0 {
		nf.Backend = "nf_tables+legacy"
	}
	for _, t := range v4 {
		w := "iptables-legacy table " + t + " loaded (legacy rules send no events; use iptables-nft)"
		nf.V4 = append(nf.V4, w)
		nf.LegacyV4 = append(nf.LegacyV4, w)
		nf.LocalOut4 = append(nf.LocalOut4, w)
		nf.LocalIn4 = append(nf.LocalIn4, w)
	}
	for _, t := range v6 {
		w := "ip6tables-legacy table " + t + " loaded (legacy rules send no events; use ip6tables-nft)"
		nf.V6 = append(nf.V6, w)
		nf.LegacyV6 = append(nf.LegacyV6, w)
		nf.LocalOut6 = append(nf.LocalOut6, w)
		nf.LocalIn6 = append(nf.LocalIn6, w)
	}
	sort.Strings(nf.V4)
	sort.Strings(nf.V6)
	sort.Strings(nf.Bridge)
	return nf
}

const inetIngress = 5 // NF_INET_INGRESS

// forwardPathHook: prerouting, forward, postrouting (and inet ingress) see forwarded packets;
// input and output do not.
func forwardPathHook(fam nftables.TableFamily, h nftables.ChainHook) bool {
	switch h {
	case *nftables.ChainHookPrerouting, *nftables.ChainHookForward, *nftables.ChainHookPostrouting:
		return true
	case inetIngress:
		return fam == nftables.TableFamilyINet
	}
	return false
}

// legacyTables lists the x_tables (iptables-legacy) tables loaded in this namespace. The kernel
// creates them on first use, and they are invisible to nf_tables.
func legacyTables() (v4, v6 []string) {
	read := func(p string) []string {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		return strings.Fields(string(b))
	}
	return read("/proc/net/ip_tables_names"), read("/proc/net/ip6_tables_names")
}
