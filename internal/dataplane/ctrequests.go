package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/conntrack"
)

// CTRequest asks for a TCP connection's tracking to be made liberal (see ct_tcp in
// bpf/lib/ct.h): Tuple is a packet's, in the entry's reply direction when Reply.
type CTRequest struct {
	Tuple conntrack.Tuple
	Reply bool
}

// ReadCTRequests delivers the data plane's conntrack requests to fn until Close.
func (d *Dataplane) ReadCTRequests(fn func(CTRequest)) error {
	rd, err := ringbuf.NewReader(d.maps.LfpCtRequests)
	if err != nil {
		return fmt.Errorf("conntrack request ring: %w", err)
	}
	d.mu.Lock()
	d.closers = append(d.closers, func() { rd.Close() })
	d.mu.Unlock()
	go func() {
		for {
			rec, err := rd.Read()
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					d.log.Error("conntrack request ring", "err", err)
				}
				return
			}
			if r, ok := parseCTRequest(rec.RawSample); ok {
				fn(r)
			}
		}
	}()
	return nil
}

// parseCTRequest decodes a struct lfp_ct_req.
func parseCTRequest(b []byte) (CTRequest, bool) {
	// family u8, proto u8, dir u8, pad u8, src [16], dst [16], sport be16, dport be16
	if len(b) < 40 {
		return CTRequest{}, false
	}
	var src, dst netip.Addr
	switch b[0] {
	case unix.AF_INET:
		src, dst = netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4([4]byte(b[20:24]))
	case unix.AF_INET6:
		src, dst = netip.AddrFrom16([16]byte(b[4:20])), netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return CTRequest{}, false
	}
	return CTRequest{
		Tuple: conntrack.Tuple{Proto: b[1], Src: src, Dst: dst,
			SPort: binary.BigEndian.Uint16(b[36:]), DPort: binary.BigEndian.Uint16(b[38:])},
		Reply: b[2] == 1,
	}, true
}
