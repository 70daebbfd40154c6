package controller

import (
	"errors"

	"github.com/linuxfp/linuxfp/internal/conntrack"
	"github.com/linuxfp/linuxfp/internal/dataplane"
)

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
