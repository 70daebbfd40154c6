package observe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// readLinks dumps every link. One RTM_GETLINK dump gives both what vishvananda/netlink decodes
// and the IFLA_LINKINFO details it does not (a bridge port's STP state, locked/MAB flags, a
// bridge's nf_call_iptables, vxlan options: see decodeLinkInfo).
func readLinks() (map[int]*Link, error) {
	c, err := mnl.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return nil, fmt.Errorf("dial rtnetlink: %w", err)
	}
	defer c.Close()
	msgs, err := retryDump(func() ([]mnl.Message, error) {
		msgs, err := c.Execute(mnl.Message{
			Header: mnl.Header{Type: unix.RTM_GETLINK, Flags: mnl.Request | mnl.Dump},
			Data:   make([]byte, unix.SizeofIfInfomsg),
		})
		for _, m := range msgs {
			if err == nil && m.Header.Flags&mnl.DumpInterrupted != 0 {
				err = netlink.ErrDumpInterrupted
			}
		}
		return msgs, err
	})
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := make(map[int]*Link, len(msgs))
	if err := addLinks(out, msgs); err != nil {
		return nil, err
	}
	setMasterKinds(out)
	return out, nil
}

// addLinks decodes the RTM_NEWLINK messages among msgs into out, by index.
func addLinks(out map[int]*Link, msgs []mnl.Message) error {
	for _, m := range msgs {
		lk, err := decodeLink(m)
		if err != nil {
			return err
		}
		if lk != nil {
			out[lk.Index] = lk
		}
	}
	return nil
}

// readChangedLinks re-reads only the links idxs (the ones events named) into a copy of prev:
// a link event then costs one request per link it names, not a dump of every link. A link
// gone (ENODEV) is dropped.
func readChangedLinks(prev map[int]*Link, idxs []int) (map[int]*Link, error) {
	c, err := mnl.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return nil, fmt.Errorf("dial rtnetlink: %w", err)
	}
	defer c.Close()
	out := make(map[int]*Link, len(prev)+len(idxs))
	for idx, lk := range prev {
		out[idx] = lk
	}
	for _, idx := range idxs {
		req := make([]byte, unix.SizeofIfInfomsg)
		binary.NativeEndian.PutUint32(req[4:8], uint32(int32(idx)))
		msgs, err := c.Execute(mnl.Message{Header: mnl.Header{Type: unix.RTM_GETLINK, Flags: mnl.Request}, Data: req})
		if errors.Is(err, unix.ENODEV) {
			delete(out, idx)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get link %d: %w", idx, err)
		}
		delete(out, idx)
		if err := addLinks(out, msgs); err != nil {
			return nil, err
		}
	}
	setMasterKinds(out)
	return out, nil
}

// decodeLink decodes an RTM_NEWLINK message (nil for other messages).
func decodeLink(m mnl.Message) (*Link, error) {
	if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
		return nil, nil
	}
	l, err := netlink.LinkDeserialize(nil, m.Data)
	if err != nil {
		return nil, fmt.Errorf("decode link: %w", err)
	}
	a := l.Attrs()
	lk := &Link{
		Index:       a.Index,
		Name:        a.Name,
		Kind:        l.Type(),
		MTU:         a.MTU,
		MAC:         append(net.HardwareAddr(nil), a.HardwareAddr...),
		Up:          a.Flags&net.FlagUp != 0,
		OperUp:      a.RawFlags&unix.IFF_LOWER_UP != 0,
		Master:      a.MasterIndex,
		PeerNetnsID: a.NetNsID,
		Promisc:     a.RawFlags&unix.IFF_PROMISC != 0,
	}
	if lk.Kind == "device" {
		lk.Kind = ""
	}
	if lk.Kind == "veth" {
		lk.Peer = a.ParentIndex
	}
	if a.Xdp != nil && a.Xdp.Attached {
		lk.XDPProgID = a.Xdp.ProgId
	}
	ad, err := mnl.NewAttributeDecoder(m.Data[unix.SizeofIfInfomsg:])
	if err != nil {
		return nil, err
	}
	for ad.Next() {
		if ad.Type() == unix.IFLA_LINKINFO {
			ad.Nested(func(nad *mnl.AttributeDecoder) error {
				decodeLinkInfo(nad, lk)
				return nil
			})
		}
	}
	if err := ad.Err(); err != nil {
		return nil, fmt.Errorf("decode link %s: %w", lk.Name, err)
	}
	return lk, nil
}

func setMasterKinds(links map[int]*Link) {
	for _, lk := range links {
		lk.MasterKind = ""
		if m := links[lk.Master]; m != nil {
			lk.MasterKind = m.Kind
		}
	}
}
