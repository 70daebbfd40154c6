package nft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The rule dump is ours, not google/nftables' GetRules: v0.3.0 silently skips expressions it has
// no type for (expr.go: "continue // unsupported expression type") and ignores attributes it does
// not know (bitwise shifts read as a mask), and a rule missing one of its expressions is wider
// than the real one: a wrong verdict. Here every expression is kept, by name and raw attributes,
// and translate.go decides what each means. One dump reads every rule of every table (GetRules
// needs a round trip per chain; kube-proxy makes thousands of chains).

// rawRule is one rule as the kernel dumps it.
type rawRule struct {
	Family   uint8 // NFPROTO_* of the table
	Table    string
	Chain    string
	Handle   uint64
	Position uint64
	Exprs    []rawExpr
}

// rawExpr is one expression: its name and its attributes (type without NLA_F_NESTED).
type rawExpr struct {
	Name  string
	Attrs map[uint16][]byte
}

func (e rawExpr) has(t uint16) bool { _, ok := e.Attrs[t]; return ok }

func (e rawExpr) u32(t uint16) (uint32, bool) {
	b, ok := e.Attrs[t]
	if !ok || len(b) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(b), true
}

func (e rawExpr) str(t uint16) string {
	b := e.Attrs[t]
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// data reads a nested NFTA_DATA_VALUE (cmp, range, bitwise, immediate data).
func (e rawExpr) data(t uint16) ([]byte, bool) {
	b, ok := e.Attrs[t]
	if !ok {
		return nil, false
	}
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, false
	}
	for ad.Next() {
		if ad.Type()&nlaTypeMask == unix.NFTA_DATA_VALUE {
			return ad.Bytes(), true
		}
	}
	return nil, false
}

const nlaTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)

// dial opens a netfilter netlink socket in netns (0: the caller's).
func dial(netns int) (*netlink.Conn, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: netns})
	if err != nil {
		return nil, fmt.Errorf("dial netfilter netlink: %w", err)
	}
	return c, nil
}

// generation reads the nf_tables ruleset generation, which every committed change increments.
func generation(c *netlink.Conn) (uint32, error) {
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN),
			Flags: netlink.Request,
		},
		Data: []byte{unix.NFPROTO_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		return 0, fmt.Errorf("nftables generation: %w", err)
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, err
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
	}
	return 0, errors.New("nftables generation: no NFTA_GEN_ID in the answer")
}

// dumpRules reads every rule of every table.
func dumpRules(c *netlink.Conn) ([]rawRule, error) {
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: []byte{unix.NFPROTO_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		return nil, fmt.Errorf("dump nftables rules: %w", err)
	}
	rules := make([]rawRule, 0, len(msgs))
	for _, m := range msgs {
		if m.Header.Flags&netlink.DumpInterrupted != 0 {
			return nil, errInterrupted
		}
		if len(m.Data) < 4 {
			continue
		}
		r := rawRule{Family: m.Data[0]}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, fmt.Errorf("decode nftables rule: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			switch ad.Type() & nlaTypeMask {
			case unix.NFTA_RULE_TABLE:
				r.Table = ad.String()
			case unix.NFTA_RULE_CHAIN:
				r.Chain = ad.String()
			case unix.NFTA_RULE_HANDLE:
				r.Handle = ad.Uint64()
			case unix.NFTA_RULE_POSITION:
				r.Position = ad.Uint64()
			case unix.NFTA_RULE_EXPRESSIONS:
				ad.Nested(func(nd *netlink.AttributeDecoder) error {
					for nd.Next() {
						e, err := decodeExpr(nd.Bytes())
						if err != nil {
							return err
						}
						r.Exprs = append(r.Exprs, e)
					}
					return nil
				})
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("decode nftables rule %s %s handle %d: %w", r.Table, r.Chain, r.Handle, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

var errInterrupted = errors.New("nftables dump interrupted by a change")

// rawTable is a table's family, name and flags. google/nftables v0.3.0 lists tables too, but reads
// NFTA_TABLE_FLAGS in host byte order, which loses the dormant flag on x86.
type rawTable struct {
	Family uint8
	Name   string
	Flags  uint32
}

func dumpTables(c *netlink.Conn) ([]rawTable, error) {
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETTABLE),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: []byte{unix.NFPROTO_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		return nil, fmt.Errorf("dump nftables tables: %w", err)
	}
	var tables []rawTable
	for _, m := range msgs {
		if m.Header.Flags&netlink.DumpInterrupted != 0 {
			return nil, errInterrupted
		}
		if len(m.Data) < 4 {
			continue
		}
		t := rawTable{Family: m.Data[0]}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, fmt.Errorf("decode nftables table: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			switch ad.Type() & nlaTypeMask {
			case unix.NFTA_TABLE_NAME:
				t.Name = ad.String()
			case unix.NFTA_TABLE_FLAGS:
				t.Flags = ad.Uint32()
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("decode nftables table: %w", err)
		}
		tables = append(tables, t)
	}
	return tables, nil
}

func decodeExpr(b []byte) (rawExpr, error) {
	e := rawExpr{Attrs: map[uint16][]byte{}}
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return e, err
	}
	var data []byte
	for ad.Next() {
		switch ad.Type() & nlaTypeMask {
		case unix.NFTA_EXPR_NAME:
			e.Name = ad.String()
		case unix.NFTA_EXPR_DATA:
			data = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return e, err
	}
	if data == nil {
		return e, nil
	}
	a, err := parseAttrs(data)
	a.Name = e.Name
	return a, err
}

// parseAttrs reads one level of attributes.
func parseAttrs(b []byte) (rawExpr, error) {
	e := rawExpr{Attrs: map[uint16][]byte{}}
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return e, err
	}
	for ad.Next() {
		e.Attrs[ad.Type()&nlaTypeMask] = ad.Bytes()
	}
	return e, ad.Err()
}
