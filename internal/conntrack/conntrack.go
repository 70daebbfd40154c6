// Package conntrack changes entries of the kernel's connection-tracking table through ctnetlink,
// for what the fast path cannot do from BPF.
//
// The one change is marking a TCP connection's tracking liberal (IP_CT_TCP_FLAG_BE_LIBERAL in
// both directions), as the kernel's own flowtable offload does for the connections it takes
// over: conntrack then stops judging segments by a sequence window it no longer sees moving. The
// message carries only the tuple and the two flag words with their masks, so nothing else of the
// entry is touched. (github.com/ti-mo/conntrack's Update always rewrites the TCP state and window
// scales too, racing the kernel's state machine: hence the message built here with its netfilter
// framing package.)
package conntrack

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"
)

// Tuple is one direction of a connection, as a packet of it carries it.
type Tuple struct {
	Proto    uint8 // IPPROTO_TCP, IPPROTO_UDP
	Src, Dst netip.Addr
	SPort    uint16
	DPort    uint16
}

func (t Tuple) String() string {
	return fmt.Sprintf("proto %d %s:%d -> %s:%d", t.Proto, t.Src, t.SPort, t.Dst, t.DPort)
}

// ErrNoEntry: the connection is not (any more) in the table.
var ErrNoEntry = errors.New("no conntrack entry")

// ctnetlink (include/uapi/linux/netfilter/nfnetlink_conntrack.h).
const (
	ipctnlMsgCtNew = 0

	ctaTupleOrig  = 1
	ctaTupleReply = 2
	ctaProtoinfo  = 4

	ctaTupleIP    = 1
	ctaTupleProto = 2

	ctaIPv4Src = 1
	ctaIPv4Dst = 2
	ctaIPv6Src = 3
	ctaIPv6Dst = 4

	ctaProtoNum     = 1
	ctaProtoSrcPort = 2
	ctaProtoDstPort = 3

	ctaProtoinfoTCP              = 1
	ctaProtoinfoTCPFlagsOriginal = 4
	ctaProtoinfoTCPFlagsReply    = 5

	tcpFlagBeLiberal = 0x08 // IP_CT_TCP_FLAG_BE_LIBERAL
)

// Client talks ctnetlink in the namespace it was opened in.
type Client struct {
	c *netfilter.Conn
}

// Dial opens a ctnetlink socket in the current network namespace.
func Dial() (*Client, error) {
	c, err := netfilter.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("open ctnetlink socket: %w", err)
	}
	return &Client{c: c}, nil
}

// Close closes the socket.
func (c *Client) Close() error { return c.c.Close() }

// SetTCPLiberal marks the TCP connection that t belongs to liberal in both directions. reply says
// that t is the connection's reply direction.
func (c *Client) SetTCPLiberal(t Tuple, reply bool) error {
	if t.Proto != unix.IPPROTO_TCP {
		return fmt.Errorf("%s: not TCP", t)
	}
	family := netfilter.ProtoIPv4
	src, dst := uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
	if t.Src.Is6() && !t.Src.Is4In6() {
		family = netfilter.ProtoIPv6
		src, dst = ctaIPv6Src, ctaIPv6Dst
	}
	which := uint16(ctaTupleOrig)
	if reply {
		which = ctaTupleReply
	}
	flags := []byte{tcpFlagBeLiberal, tcpFlagBeLiberal} // struct nf_ct_tcp_flags: flags, mask
	attrs := []netfilter.Attribute{
		{Type: which, Nested: true, Children: []netfilter.Attribute{
			{Type: ctaTupleIP, Nested: true, Children: []netfilter.Attribute{
				{Type: src, Data: t.Src.AsSlice()},
				{Type: dst, Data: t.Dst.AsSlice()},
			}},
			{Type: ctaTupleProto, Nested: true, Children: []netfilter.Attribute{
				{Type: ctaProtoNum, Data: []byte{t.Proto}},
				{Type: ctaProtoSrcPort, Data: netfilter.Uint16Bytes(t.SPort)},
				{Type: ctaProtoDstPort, Data: netfilter.Uint16Bytes(t.DPort)},
			}},
		}},
		{Type: ctaProtoinfo, Nested: true, Children: []netfilter.Attribute{
			{Type: ctaProtoinfoTCP, Nested: true, Children: []netfilter.Attribute{
				{Type: ctaProtoinfoTCPFlagsOriginal, Data: flags},
				{Type: ctaProtoinfoTCPFlagsReply, Data: flags},
			}},
		}},
	}
	// IPCTNL_MSG_CT_NEW without NLM_F_CREATE changes an existing entry and nothing else.
	req, err := netfilter.MarshalNetlink(netfilter.Header{
		SubsystemID: netfilter.NFSubsysCTNetlink,
		MessageType: netfilter.MessageType(ipctnlMsgCtNew),
		Family:      family,
		Flags:       netlink.Request | netlink.Acknowledge,
	}, attrs)
	if err != nil {
		return fmt.Errorf("%s: %w", t, err)
	}
	if _, err := c.c.Query(req); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%s: %w", t, ErrNoEntry)
		}
		return fmt.Errorf("mark %s liberal: %w", t, err)
	}
	return nil
}
