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
	// counted: the fence's counts of the changes the events are for (see taken).
	counted []observe.Counted
}

// coalesce gathers into one burst the event ev and those that follow it on c, until none
// arrived for quiet, or maxDelay after ev was taken, whichever is first: a command that makes
// many changes (ip link add of a veth pair, an iptables-restore) costs one update, and a
// steady stream of events still gets one every maxDelay. While an event is for a change the
// fence counted, quiet is at most fencedQuiet: its families' packets go to Linux until the
// update, and the notifications that follow a command come within microseconds. ok is false
// when ctx ended.
func coalesce(ctx context.Context, c <-chan observe.Event, ev observe.Event, quiet, maxDelay time.Duration) (b burst, ok bool) {
	b = burst{dirty: ev.Dirty, first: ev.At, last: ev.At, n: 1, counted: ev.Counted}
	deadline := time.NewTimer(maxDelay)
	defer deadline.Stop()
	for {
		wait := quiet
		if len(b.counted) > 0 {
			wait = min(wait, fencedQuiet)
		}
		q := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			q.Stop()
			return b, false
		case ev = <-c:
			q.Stop()
			b.dirty |= ev.Dirty
			b.last = ev.At
			b.n++
			b.counted = append(b.counted, ev.Counted...)
		case <-q.C:
			return b, true
		case <-deadline.C:
			q.Stop()
			return b, true
		}
	}
}

// fencedQuiet is the quiet of coalesce while a change the fence counted waits.
const fencedQuiet = 250 * time.Microsecond
