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
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/linuxfp/linuxfp/internal/filter/nlsock"
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
	defer nlsock.CloseLater(c)
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
		sortEntries(s.Entries)
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
	err := attrs(b, func(t uint16, v []byte) error {
		if t != attrData {
			return nil
		}
		e, why, err := entry(s, v)
		if err != nil {
			return err
		}
		if why != "" {
			unsupported(s, why)
			return nil
		}
		s.Entries = append(s.Entries, e)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ipset %s members: %w", s.Name, err)
	}
	return nil
}

// attrs calls fn with the type (flags masked off) and value of each netlink attribute in b. A
// set's members are read with it rather than with an attribute decoder each: a set of
// 1,000,000 members is 2,000,000 attributes, and the decoders' allocations were a quarter of
// reading one.
func attrs(b []byte, fn func(t uint16, v []byte) error) error {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			return errors.New("truncated attribute")
		}
		if err := fn(binary.NativeEndian.Uint16(b[2:])&nlaTypeMask, b[4:l]); err != nil {
			return err
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return nil
}

func entry(s *model.IPSet, b []byte) (e model.SetEntry, unsupported string, err error) {
	var addr netip.Addr
	cidr := -1
	err = attrs(b, func(t uint16, v []byte) error {
		switch t {
		case attrIP:
			return attrs(v, func(t uint16, v []byte) error {
				if t == attrIPv4 || t == attrIPv6 {
					a, ok := netip.AddrFromSlice(v)
					if !ok {
						return fmt.Errorf("member address of %d bytes", len(v))
					}
					addr = a
				}
				return nil
			})
		case attrCIDR:
			if len(v) < 1 {
				return errors.New("short cidr")
			}
			cidr = int(v[0])
		case attrPort:
			if len(v) < 2 {
				return errors.New("short port")
			}
			e.Port = binary.BigEndian.Uint16(v)
		case attrProto:
			if len(v) < 1 {
				return errors.New("short proto")
			}
			e.Proto = v[0]
		case attrCADTFlags:
			if len(v) < 4 {
				return errors.New("short flags")
			}
			f := binary.BigEndian.Uint32(v)
			e.NoMatch = f&flagNoMatch != 0
			if f&^flagNoMatch != 0 && unsupported == "" {
				unsupported = fmt.Sprintf("member flags %#x", f)
			}
		case attrTimeout, attrBytes, attrPackets, attrComment, attrSkbMark, attrSkbPrio, attrSkbQueue, attrPad:
			// Extensions that do not change membership (skbinfo would, through SET targets
			// only, which are Linux verdicts).
		default:
			if unsupported == "" {
				unsupported = fmt.Sprintf("member attribute %d", t)
			}
		}
		return nil
	})
	if err != nil {
		return e, "", fmt.Errorf("ipset %s member: %w", s.Name, err)
	}
	if unsupported != "" {
		return e, unsupported, nil
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

// sortEntries sorts es in model.CompareSetEntries order, on keys of plain integers (the
// address's length and words), members with the same address by model.CompareSetEntries:
// comparing netip.Addr values for each of a set of 1,000,000 members was a third of reading it.
func sortEntries(es []model.SetEntry) {
	type key struct {
		hi, lo uint64
		v6     bool
		i      uint32
	}
	keys := make([]key, len(es))
	for i, e := range es {
		a := e.Prefix.Addr()
		b := a.As16()
		keys[i] = key{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:]), v6: a.Is6(), i: uint32(i)}
	}
	slices.SortFunc(keys, func(x, y key) int {
		switch {
		case x.v6 != y.v6:
			if y.v6 {
				return -1
			}
			return 1
		case x.hi != y.hi:
			return cmp.Compare(x.hi, y.hi)
		case x.lo != y.lo:
			return cmp.Compare(x.lo, y.lo)
		}
		return model.CompareSetEntries(es[x.i], es[y.i])
	})
	sorted := make([]model.SetEntry, len(es))
	for i, k := range keys {
		sorted[i] = es[k.i]
	}
	copy(es, sorted)
}
