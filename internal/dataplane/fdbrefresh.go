package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
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
	rd, err := ringbuf.NewReader(d.maps.LfpFdbRefresh)
	if err != nil {
		return fmt.Errorf("fdb refresh ring: %w", err)
	}
	d.mu.Lock()
	d.closers = append(d.closers, func() { rd.Close() })
	d.mu.Unlock()
	go func() {
		for {
			rec, err := rd.Read()
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					d.log.Error("fdb refresh ring", "err", err)
				}
				return
			}
			// struct lfp_fdb_refresh_ev: bridge u32, port u32, mac[6], pad u16.
			if len(rec.RawSample) < 14 {
				continue
			}
			b := rec.RawSample
			fn(FDBRefresh{
				Bridge: int(binary.NativeEndian.Uint32(b[0:])),
				Port:   int(binary.NativeEndian.Uint32(b[4:])),
				MAC:    append(net.HardwareAddr(nil), b[8:14]...),
			})
		}
	}()
	return nil
}
