package dataplane

import (
	"encoding/binary"
	"net/netip"

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
	return d.readRing(d.maps.LfpCtRequests, "conntrack request ring", func(b []byte) {
		if r, ok := parseCTRequest(b); ok {
			fn(r)
		}
	})
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
