package controller

import (
	"errors"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/conntrack"
	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/graph"
)

// The data plane asks, through ring buffers, for what only the controller can do in Linux: to
// refresh a bridge FDB entry the fast path forwarded from (refreshFDB), to mark a TCP connection
// liberal in conntrack (setLiberal), and to attach the tc program after an XDP program
// (attachCompanion). This file is every write the controller makes to Linux's state besides
// attaching programs.

// serveRequests starts reading the data plane's requests; stop ends what it opened.
func (c *Controller) serveRequests() (stop func(), err error) {
	if err := c.dp.ReadFDBRefreshes(c.refreshFDB); err != nil {
		return nil, err
	}
	if c.ct, err = conntrack.Dial(); err != nil {
		return nil, err
	}
	if err := c.dp.ReadCTRequests(c.setLiberal); err != nil {
		c.ct.Close()
		return nil, err
	}
	if err := c.dp.ReadTCRequests(func(ifindex int) { go c.attachCompanion(ifindex) }); err != nil {
		c.ct.Close()
		return nil, err
	}
	return func() { c.ct.Close() }, nil
}

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
// use it); it changes nothing else and sends no event. The request is dropped if the address
// may no longer be learned on that port (it moved, was deleted or flushed): NTF_USE would move
// it back, undoing what Linux just did. The controller's latest view lags the bridge by an
// apply, so the bridge FDB watcher's count of moves, which it keeps as the bridge changes, has
// the last word: the request carries the count its entry was read with, and any change to the
// entry since has moved it (dataplane.FDBUnmoved).
//
// What no check here can see is a move in the microseconds between it and NeighSet's
// br_fdb_update(): the refresh then moves the address back to the port the fast path forwarded
// its frame from, as if that frame, received a few ms earlier, had come after the one that
// moved it. The bridge then sends frames to the address by the old port until the address
// sends again from its new port (a frame the fast path hands to Linux: its entry's count has
// moved). Closing it would need the check inside the kernel's update, which no interface
// offers (the tracepoints only see it afterwards).
func (c *Controller) refreshFDB(r dataplane.FDBRefresh) {
	k := fdbKey{bridge: r.Bridge}
	copy(k.mac[:], r.MAC)
	c.mu.Lock()
	port, ok := c.fdb[k]
	c.mu.Unlock()
	if !ok || port != r.Port || !c.dp.FDBUnmoved(r) {
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

// setLiberal marks a TCP connection the fast path wants to take liberal in conntrack (see
// ct_tcp in bpf/lib/ct.h): from then on Linux, which sees only its SYN, FIN and RST segments,
// does not judge them against a sequence window the fast path's segments no longer move. The
// kernel's flowtable offload does the same to the connections it takes over. A connection that
// is gone by now is no error.
func (c *Controller) setLiberal(r dataplane.CTRequest) {
	err := c.ct.SetTCPLiberal(r.Tuple, r.Reply)
	switch {
	case err == nil:
		c.ctLiberal.Add(1)
		c.log.Debug("conntrack: TCP connection marked liberal for the fast path", "tuple", r.Tuple, "reply", r.Reply)
	case errors.Is(err, conntrack.ErrNoEntry):
		c.ctLiberalFailed.Add(1)
	default:
		c.ctLiberalFailed.Add(1)
		c.log.Warn("conntrack: marking a connection liberal failed; its packets stay with Linux", "err", err)
	}
}

// attachCompanion attaches the tc program after an XDP program that asked for one (see
// graph.tcAfterXDP); the data plane decides whether one is still wanted.
func (c *Controller) attachCompanion(ifindex int) {
	t0 := time.Now()
	id, err := c.dp.AttachCompanion(ifindex)
	name := ""
	if in, ok := c.dp.Installed()[ifindex]; ok {
		name = in.Spec.Name
	}
	switch {
	case err != nil:
		c.log.Warn("tc program after XDP not attached: the packets it would take go to Linux", "interface", name, "err", err)
	case id != 0:
		c.log.Info("attached tc program after XDP: packets only an skb can take are fast-pathed there",
			"interface", name, "program", id, "took", time.Since(t0).Round(time.Millisecond))
	}
}
