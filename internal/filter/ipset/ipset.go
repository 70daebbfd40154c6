// Package ipset reads ipset sets (type, options, members) from the kernel over netlink.
//
// It is hand-written on mdlayher/netlink because no maintained Go library returns what the
// filter module must know to be exact: vishvananda/netlink's IpsetList drops each entry's flags
// (so a `nomatch` entry reads as a match), the set's kernel index (xt_set rules refer to sets by
// index, not name) and the hash:ip netmask, and logs unknown attributes to the standard logger;
// the small ipset-only modules on the module proxy add and delete entries but do not list them.
// Anything this reader does not understand marks the set Unsupported, so rules that use it go to
// Linux.
//
// ipset sends no netlink notifications: a change of set members is not an event the way an
// nf_tables change is. Whoever keeps a model up to date must re-read sets (or be told).
package ipset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// Netlink constants of ipset (include/uapi/linux/netfilter/ipset/ip_set.h); x/sys/unix has none.
const (
	nfnlSubsysIPSet = 6
	cmdList         = 7
	protocol        = 7 // IPSET_PROTOCOL; 7 is needed for IPSET_ATTR_INDEX in dumps

	attrProtocol  = 1
	attrSetName   = 2
	attrTypeName  = 3
	attrRevision  = 4
	attrFamily    = 5
	attrFlags     = 6
	attrData      = 7
	attrADT       = 8
	attrLineNo    = 9
	attrProtoMin  = 10
	attrIndex     = 11
	attrIP        = 1
	attrCIDR      = 3
	attrPort      = 4
	attrTimeout   = 6
	attrProto     = 7
	attrCADTFlags = 8
	attrInitVal   = 17
	attrHashSize  = 18
	attrMaxElem   = 19
	attrNetmask   = 20
	attrBucket    = 21
	attrResize    = 22
	attrSize      = 23
	attrElements  = 24
	attrRefs      = 25
	attrMemSize   = 26
	attrBytes     = 24 // ADT level (IPSET_ATTR_CADT_MAX + 8)
	attrPackets   = 25
	attrComment   = 26
	attrSkbMark   = 27
	attrSkbPrio   = 28
	attrSkbQueue  = 29
	attrPad       = 30
	attrIPv4      = 1
	attrIPv6      = 2

	flagNoMatch      = 1 << 2
	flagWithCounters = 1 << 3
	flagWithComment  = 1 << 4
	flagWithForceAdd = 1 << 5
	flagWithSkbInfo  = 1 << 6

	nlaTypeMask = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
)

// Options say where to read.
type Options struct {
	// NetNS is a network namespace file descriptor; 0 reads the caller's namespace.
	NetNS int
}

// ErrNoIPSet is returned when the kernel has no ipset support.
var ErrNoIPSet = errors.New("ipset not supported by the kernel")

// List returns every set, by name.
func List(o Options) (map[string]*model.IPSet, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: o.NetNS})
	if err != nil {
		return nil, fmt.Errorf("dial netfilter netlink: %w", err)
	}
	defer c.Close()
	ae := netlink.NewAttributeEncoder()
	ae.Uint8(attrProtocol, protocol)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	req := netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(nfnlSubsysIPSet<<8 | cmdList),
			Flags: netlink.Request | netlink.Dump,
		},
		// nfgenmsg: family, version, resource id.
		Data: append([]byte{unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0}, attrs...),
	}
	for try := 0; ; try++ {
		msgs, err := c.Execute(req)
		if err != nil {
			if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.ENOENT) {
				return nil, ErrNoIPSet
			}
			return nil, fmt.Errorf("ipset list: %w", err)
		}
		interrupted := false
		for _, m := range msgs {
			interrupted = interrupted || m.Header.Flags&netlink.DumpInterrupted != 0
		}
		if interrupted && try < 10 {
			continue
		}
		return parse(msgs)
	}
}

func parse(msgs []netlink.Message) (map[string]*model.IPSet, error) {
	sets := map[string]*model.IPSet{}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, fmt.Errorf("ipset list: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		var s *model.IPSet
		var family uint8
		var typ string
		var data, adt []byte
		var index uint16
		haveIndex := false
		for ad.Next() {
			switch ad.Type() & nlaTypeMask {
			case attrSetName:
				name := ad.String()
				s = sets[name]
				if s == nil {
					s = &model.IPSet{Name: name}
					sets[name] = s
				}
			case attrTypeName:
				typ = ad.String()
			case attrFamily:
				family = ad.Uint8()
			case attrIndex:
				index, haveIndex = ad.Uint16(), true
			case attrData:
				data = ad.Bytes()
			case attrADT:
				adt = ad.Bytes()
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("ipset list: %w", err)
		}
		if s == nil {
			continue
		}
		if typ != "" { // the header message of a set
			s.Type = typ
			switch family {
			case unix.NFPROTO_IPV4:
				s.Family = model.IPv4
			case unix.NFPROTO_IPV6:
				s.Family = model.IPv6
			default:
				unsupported(s, fmt.Sprintf("family %d", family))
			}
			if !haveIndex {
				return nil, fmt.Errorf("ipset list: set %s without index (kernel older than ipset protocol 7?)", s.Name)
			}
			s.Index = index
			if model.Dimensions(typ) == 0 {
				unsupported(s, "type "+typ+" is not modelled")
			}
		}
		if data != nil {
			if err := header(s, data); err != nil {
				return nil, err
			}
		}
		if adt != nil {
			if err := entries(s, adt); err != nil {
				return nil, err
			}
		}
	}
	for _, s := range sets {
		slices.SortFunc(s.Entries, func(a, b model.SetEntry) int {
			if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
				return c
			}
			if a.Prefix.Bits() != b.Prefix.Bits() {
				return a.Prefix.Bits() - b.Prefix.Bits()
			}
			if a.Proto != b.Proto {
				return int(a.Proto) - int(b.Proto)
			}
			return int(a.Port) - int(b.Port)
		})
	}
	return sets, nil
}

// unsupported records the first reason a set is not modelled.
func unsupported(s *model.IPSet, why string) {
	if s.Unsupported == "" {
		s.Unsupported = why
	}
}

// header reads the set's options. Options that change how lookups work and that the model does not
// know make the set Unsupported.
func header(s *model.IPSet, b []byte) error {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return fmt.Errorf("ipset %s header: %w", s.Name, err)
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch t := ad.Type() & nlaTypeMask; t {
		case attrNetmask:
			n := int(ad.Uint8())
			full := 32
			if s.Family == model.IPv6 {
				full = 128
			}
			if n != full {
				s.Netmask = n
			}
			if s.Type != "hash:ip" && n != full {
				unsupported(s, fmt.Sprintf("%s with netmask %d", s.Type, n))
			}
		case attrTimeout:
			// Members expire by a kernel timer, and no event says when: a copy of the set
			// would keep matching an address Linux no longer does.
			s.Timeout = true
			unsupported(s, "members expire (timeout) without an event")
		case attrCADTFlags:
			f := ad.Uint32()
			if rest := f &^ (flagWithCounters | flagWithComment | flagWithForceAdd | flagWithSkbInfo); rest != 0 {
				unsupported(s, fmt.Sprintf("set flags %#x", rest))
			}
		case attrInitVal, attrHashSize, attrMaxElem, attrBucket, attrResize, attrSize, attrElements, attrRefs, attrMemSize, attrPad:
			// Sizing and statistics: no effect on lookups.
		default:
			// E.g. a bitmask (hash:ip `bitmask`), a mark mask, a port range of a bitmap.
			unsupported(s, fmt.Sprintf("header attribute %d", t))
		}
	}
	if err := ad.Err(); err != nil {
		return fmt.Errorf("ipset %s header: %w", s.Name, err)
	}
	return nil
}

func entries(s *model.IPSet, b []byte) error {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return fmt.Errorf("ipset %s members: %w", s.Name, err)
	}
	for ad.Next() {
		if ad.Type()&nlaTypeMask != attrData {
			continue
		}
		e, why, err := entry(s, ad.Bytes())
		if err != nil {
			return err
		}
		if why != "" {
			unsupported(s, why)
			continue
		}
		s.Entries = append(s.Entries, e)
	}
	if err := ad.Err(); err != nil {
		return fmt.Errorf("ipset %s members: %w", s.Name, err)
	}
	return nil
}

func entry(s *model.IPSet, b []byte) (e model.SetEntry, unsupported string, err error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return e, "", fmt.Errorf("ipset %s member: %w", s.Name, err)
	}
	ad.ByteOrder = binary.BigEndian
	var addr netip.Addr
	cidr := -1
	for ad.Next() {
		switch t := ad.Type() & nlaTypeMask; t {
		case attrIP:
			nd, err := netlink.NewAttributeDecoder(ad.Bytes())
			if err != nil {
				return e, "", fmt.Errorf("ipset %s member address: %w", s.Name, err)
			}
			for nd.Next() {
				switch nd.Type() & nlaTypeMask {
				case attrIPv4, attrIPv6:
					a, ok := netip.AddrFromSlice(nd.Bytes())
					if !ok {
						return e, "", fmt.Errorf("ipset %s: member address of %d bytes", s.Name, len(nd.Bytes()))
					}
					addr = a
				}
			}
		case attrCIDR:
			cidr = int(ad.Uint8())
		case attrPort:
			e.Port = ad.Uint16()
		case attrProto:
			e.Proto = ad.Uint8()
		case attrCADTFlags:
			f := ad.Uint32()
			e.NoMatch = f&flagNoMatch != 0
			if f&^flagNoMatch != 0 {
				return e, fmt.Sprintf("member flags %#x", f), nil
			}
		case attrTimeout, attrBytes, attrPackets, attrComment, attrSkbMark, attrSkbPrio, attrSkbQueue, attrPad:
			// Extensions that do not change membership (skbinfo would, through SET targets
			// only, which are Linux verdicts).
		default:
			return e, fmt.Sprintf("member attribute %d", t), nil
		}
	}
	if err := ad.Err(); err != nil {
		return e, "", fmt.Errorf("ipset %s member: %w", s.Name, err)
	}
	if !addr.IsValid() {
		return e, "member without address", nil
	}
	if cidr < 0 {
		cidr = addr.BitLen()
	}
	p, err := addr.Prefix(cidr)
	if err != nil {
		return e, "", fmt.Errorf("ipset %s member %s/%d: %w", s.Name, addr, cidr, err)
	}
	e.Prefix = p
	return e, "", nil
}
