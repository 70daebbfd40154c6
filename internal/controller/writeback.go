package controller

import (
	"errors"
	"time"

	"github.com/linuxfp/linuxfp/internal/conntrack"
	"github.com/linuxfp/linuxfp/internal/dataplane"
)

// The data plane asks, through ring buffers, for what only the controller can do in Linux: to
// mark a TCP connection liberal in conntrack (setLiberal), and to attach the tc program after an
// XDP program (attachCompanion). (Bridge FDB entries the fast path forwards from are refreshed by
// Linux's bridge itself, from a frame handed to it: fdb_refresh_due in bpf/lib/fdb.h.) This file is every write the controller makes to Linux's state besides
// attaching programs.

// serveRequests starts reading the data plane's requests; stop ends what it opened.
func (c *Controller) serveRequests() (stop func(), err error) {
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
