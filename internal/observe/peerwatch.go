package observe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/mdlayher/socket"
	"golang.org/x/sys/unix"
)

// peerEvents is a link-event socket that also hears the namespaces that have an id here
// (NETLINK_LISTEN_ALL_NSID): a veth peer's checksum offload, MTU or XDP changes there, with no
// event here. mdlayher/netlink does not return the control message that says which namespace a
// message came from, so this socket is read with recvmsg(2): messages of this namespace carry
// none and are skipped (the main rtnetlink socket has them), the others name the peer that
// changed.
type peerEvents struct{ c *socket.Conn }

func dialPeerEvents() (*peerEvents, error) {
	c, err := socket.Socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE, "netlink", nil)
	if err != nil {
		return nil, err
	}
	if err := c.Bind(&unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groupMask(unix.RTNLGRP_LINK)}); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.SetsockoptInt(unix.SOL_NETLINK, unix.NETLINK_LISTEN_ALL_NSID, 1); err != nil {
		c.Close()
		return nil, fmt.Errorf("listen to all namespaces' link events: %w", err)
	}
	_ = c.SetReadBuffer(eventBuffer)
	return &peerEvents{c: c}, nil
}

func (p *peerEvents) Close() error { return p.c.Close() }

// receive reads one datagram and returns the links it names (nsid, ifindex) in other
// namespaces.
func (p *peerEvents) receive(ctx context.Context, buf, oob []byte) ([]peerRef, error) {
	n, oobn, _, _, err := p.c.Recvmsg(ctx, buf, oob, 0)
	if err != nil {
		return nil, err
	}
	nsid, ok := -1, false
	cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, err
	}
	for _, cm := range cmsgs {
		if cm.Header.Level == unix.SOL_NETLINK && cm.Header.Type == unix.NETLINK_LISTEN_ALL_NSID && len(cm.Data) >= 4 {
			nsid, ok = int(int32(binary.NativeEndian.Uint32(cm.Data))), true
		}
	}
	if !ok {
		return nil, nil // this namespace's own event
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return nil, err
	}
	var out []peerRef
	for _, m := range msgs {
		if (m.Header.Type == unix.RTM_NEWLINK || m.Header.Type == unix.RTM_DELLINK) && len(m.Data) >= 8 {
			out = append(out, peerRef{nsid: nsid, ifindex: int(int32(binary.NativeEndian.Uint32(m.Data[4:8])))})
		}
	}
	return out, nil
}

func (w *Watcher) receivePeers(ctx context.Context, p *peerEvents) {
	buf := make([]byte, 1<<16)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		refs, err := p.receive(ctx, buf, oob)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, unix.ENOBUFS) {
				w.overflowed(ctx, "rtnetlink (peer namespaces)")
				continue
			}
			w.fail(fmt.Errorf("event source rtnetlink (peer namespaces): %w", err))
			return
		}
		if len(refs) == 0 {
			continue
		}
		for _, r := range refs {
			w.changes.addPeer(r)
		}
		w.send(ctx, DirtyLinks)
	}
}
