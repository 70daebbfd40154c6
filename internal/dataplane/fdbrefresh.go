package dataplane

import (
	"encoding/binary"
	"net"
	"time"
)

// FDBRefreshInterval is how often, at most, the data plane asks for one learned address to be
// refreshed in Linux (see bridge_refresh in bpf/lib/fdb.h).
const FDBRefreshInterval = time.Second

// FDBRefresh is a learned address the fast path keeps forwarding frames from: Linux, which does
// not see those frames, must refresh its FDB entry or it would age out.
type FDBRefresh struct {
	Bridge, Port int
	MAC          net.HardwareAddr
}

// ReadFDBRefreshes delivers the data plane's refresh requests to fn until Close.
func (d *Dataplane) ReadFDBRefreshes(fn func(FDBRefresh)) error {
	return d.readRing(d.maps.LfpFdbRefresh, "fdb refresh ring", func(b []byte) {
		// struct lfp_fdb_refresh_ev: bridge u32, port u32, mac[6], pad u16.
		if len(b) < 14 {
			return
		}
		fn(FDBRefresh{
			Bridge: int(binary.NativeEndian.Uint32(b[0:])),
			Port:   int(binary.NativeEndian.Uint32(b[4:])),
			MAC:    append(net.HardwareAddr(nil), b[8:14]...),
		})
	})
}
