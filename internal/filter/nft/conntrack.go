package nft

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Netfilter registers conntrack's hooks in a namespace, for a family, only while something there
// needs it (nf_ct_netns_get): a nat chain, a rule with a ct expression or a conntrack match or
// target, a ct helper or timeout object ... on any hook, even input or output, and even in a
// regular chain no rule jumps to (the expression takes the reference when the rule is added). A
// forwarded packet is then tracked, whatever the forward path's own rules are. The list below
// errs towards "tracked": a family wrongly taken as tracked only sends new connections to Linux;
// one wrongly taken as untracked would let the fast path skip conntrack.

// conntrackExprs are nf_tables expressions whose init takes a conntrack reference.
var conntrackExprs = map[string]string{
	"ct": "a ct expression", "nat": "a nat expression", "masq": "masquerade", "redir": "redirect",
	"notrack": "notrack", "connlimit": "connlimit", "flow_offload": "a flowtable offload",
	"synproxy": "synproxy", "ct_expect": "a ct expectation",
}

// conntrackXT are xtables matches and targets (nft_compat) that need conntrack.
var conntrackXT = map[string]bool{
	"conntrack": true, "state": true, "connmark": true, "connbytes": true, "connlabel": true,
	"connlimit": true, "helper": true, "cluster": true, "ipvs": true, "CT": true, "NOTRACK": true,
	"CONNMARK": true, "CONNSECMARK": true, "SYNPROXY": true, "DNAT": true, "SNAT": true,
	"MASQUERADE": true, "REDIRECT": true, "NETMAP": true,
}

// conntrackObjects are named object types whose init takes a conntrack reference.
var conntrackObjects = map[uint32]string{
	unix.NFT_OBJECT_CT_HELPER: "ct helper", unix.NFT_OBJECT_CT_TIMEOUT: "ct timeout",
	unix.NFT_OBJECT_CT_EXPECT: "ct expectation", unix.NFT_OBJECT_SYNPROXY: "synproxy",
}

// rawObject is a named nf_tables object (counter, quota, ct helper ...).
type rawObject struct {
	Family uint8
	Table  string
	Name   string
	Type   uint32
}

// dumpObjects lists every named object of every table (names and types only).
func dumpObjects(c *netlink.Conn) ([]rawObject, error) {
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETOBJ),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: []byte{unix.NFPROTO_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		return nil, fmt.Errorf("dump nftables objects: %w", err)
	}
	var objs []rawObject
	for _, m := range msgs {
		if m.Header.Flags&netlink.DumpInterrupted != 0 {
			return nil, errInterrupted
		}
		if len(m.Data) < 4 {
			continue
		}
		o := rawObject{Family: m.Data[0]}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, fmt.Errorf("decode nftables object: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			switch ad.Type() & nlaTypeMask {
			case unix.NFTA_OBJ_TABLE:
				o.Table = ad.String()
			case unix.NFTA_OBJ_NAME:
				o.Name = ad.String()
			case unix.NFTA_OBJ_TYPE:
				o.Type = ad.Uint32()
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("decode nftables object: %w", err)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// conntrackUsers says, per family (IPv4 [0], IPv6 [1]), what makes netfilter track its
// connections, one description per table and cause.
func conntrackUsers(chains []*nftables.Chain, rules []rawRule, objs []rawObject) (users [2][]string) {
	seen := [2]map[string]bool{{}, {}}
	add := func(fam uint8, what string) {
		for i, f := range []uint8{unix.NFPROTO_IPV4, unix.NFPROTO_IPV6} {
			if (fam == f || fam == unix.NFPROTO_INET) && !seen[i][what] {
				seen[i][what] = true
				users[i] = append(users[i], what)
			}
		}
	}
	for _, ch := range chains {
		if ch.Hooknum != nil && ch.Type == nftables.ChainTypeNAT {
			add(uint8(ch.Table.Family), fmt.Sprintf("%s %s: nat chain %s", FamilyName(ch.Table.Family), ch.Table.Name, ch.Name))
		}
	}
	for _, r := range rules {
		for _, e := range r.Exprs {
			what := conntrackExprs[e.Name]
			if (e.Name == "match" || e.Name == "target") && conntrackXT[e.str(xtName)] {
				what = "xt " + e.Name + " " + e.str(xtName)
			}
			if e.Name == "objref" {
				// A reference by name (NFTA_OBJREF_IMM_TYPE) to an object whose own init
				// took the reference (listed below); a reference through a map: any type.
				if t, ok := e.u32(objrefImmType); !ok || conntrackObjects[t] != "" {
					what = "an object reference"
				}
			}
			if what != "" {
				add(r.Family, fmt.Sprintf("%s %s: %s", FamilyName(nftables.TableFamily(r.Family)), r.Table, what))
			}
		}
	}
	for _, o := range objs {
		if what := conntrackObjects[o.Type]; what != "" {
			add(o.Family, fmt.Sprintf("%s %s: %s object %s", FamilyName(nftables.TableFamily(o.Family)), o.Table, what, o.Name))
		}
	}
	sort.Strings(users[0])
	sort.Strings(users[1])
	return users
}

const objrefImmType = 1 // NFTA_OBJREF_IMM_TYPE
