package controller

import (
	"context"
	"time"

	"github.com/linuxfp/linuxfp/internal/observe"
)

// burst is a run of events the controller follows with one update.
type burst struct {
	dirty       observe.Dirty // every kind the events marked
	first, last time.Time     // when the first and the last event arrived
	n           int           // how many events
}

// coalesce gathers into one burst the event ev and those that follow it on c, until none
// arrived for quiet, or maxDelay after ev was taken, whichever is first: a command that makes
// many changes (ip link add of a veth pair, an iptables-restore) costs one update, and a
// steady stream of events still gets one every maxDelay. ok is false when ctx ended.
func coalesce(ctx context.Context, c <-chan observe.Event, ev observe.Event, quiet, maxDelay time.Duration) (b burst, ok bool) {
	b = burst{dirty: ev.Dirty, first: ev.At, last: ev.At, n: 1}
	deadline := time.NewTimer(maxDelay)
	defer deadline.Stop()
	for {
		q := time.NewTimer(quiet)
		select {
		case <-ctx.Done():
			q.Stop()
			return b, false
		case ev = <-c:
			q.Stop()
			b.dirty |= ev.Dirty
			b.last = ev.At
			b.n++
		case <-q.C:
			return b, true
		case <-deadline.C:
			q.Stop()
			return b, true
		}
	}
}
