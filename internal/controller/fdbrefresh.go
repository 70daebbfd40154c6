package controller

import (
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/graph"
)

type fdbKey struct {
	bridge int
	mac    [6]byte
}

// fdbLearning indexes, from a plan, the FDB entries the data plane may ask to refresh: learned
// (not local) entries on ports that learn.
func fdbLearning(p *graph.Plan) map[fdbKey]int {
	learning := map[int]bool{}
	for _, dv := range p.Data.L2 {
		if dv.Flags&dataplane.L2Learning != 0 {
			learning[dv.Ifindex] = true
		}
	}
	out := map[fdbKey]int{}
	for _, e := range p.Data.FDB {
		if e.Local || !learning[e.Port] {
			continue
		}
		k := fdbKey{bridge: e.Bridge}
		copy(k.mac[:], e.MAC)
		out[k] = e.Port
	}
	return out
}

// refreshFDB does in Linux what a received frame does to its source's FDB entry
// (br_fdb_update(): the entry's age restarts), for an address the fast path forwarded frames
// from. RTM_NEWNEIGH with NTF_USE is the kernel's interface for exactly this (hardware offloads
// use it); it changes nothing else and sends no event. The request is dropped if, by the
// controller's latest view, the address is no longer learned on that port (it moved, was
// deleted or flushed): refreshing it then would undo what Linux just did.
func (c *Controller) refreshFDB(r dataplane.FDBRefresh) {
	k := fdbKey{bridge: r.Bridge}
	copy(k.mac[:], r.MAC)
	c.mu.Lock()
	port, ok := c.fdb[k]
	c.mu.Unlock()
	if !ok || port != r.Port {
		c.log.Debug("fdb refresh skipped: entry changed", "bridge", r.Bridge, "mac", r.MAC, "port", r.Port)
		return
	}
	err := netlink.NeighSet(&netlink.Neigh{
		LinkIndex:    r.Port,
		Family:       unix.AF_BRIDGE,
		State:        unix.NUD_REACHABLE,
		Flags:        unix.NTF_USE | unix.NTF_MASTER,
		HardwareAddr: net.HardwareAddr(r.MAC),
	})
	if err != nil {
		c.log.Warn("fdb refresh failed", "port", r.Port, "mac", r.MAC, "err", err)
		return
	}
	c.mu.Lock()
	c.fdbRefreshes++
	c.mu.Unlock()
}
