package observe

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// Wake asks the controller to re-read the kinds d now. It never blocks: with C full a reaction
// is coming anyway, and the request is dropped.
func (w *Watcher) Wake(d Dirty) {
	select {
	case w.C <- Event{Dirty: d, At: time.Now()}:
	default:
	}
}

// WakeAfter calls Wake(d) after delay; the returned timer cancels it.
func (w *Watcher) WakeAfter(delay time.Duration, d Dirty) *time.Timer {
	return time.AfterFunc(delay, func() { w.Wake(d) })
}

// ipset sends no netlink notification. Its commands are seen as they are made where the netlink
// watcher attaches (netlinkwatch.go); elsewhere, while rules use sets, they are re-read every
// ipsetPollMin, or 20 times as long as a read took (a large set costs at most ~5% of a CPU), at
// most ipsetPollMax.
const (
	ipsetPollMin = 50 * time.Millisecond
	ipsetPollMax = time.Second
)

// setPoll is what the ipset poll needs to know of the last plan.
type setPoll struct {
	mu       sync.Mutex
	use      bool
	readTime time.Duration
}

// PollSets tells the watcher whether the compiled rules test ipset membership and how long the
// last read of the sets took. Without ipset events, it polls the sets while they are used.
func (w *Watcher) PollSets(use bool, readTime time.Duration) {
	w.sets.mu.Lock()
	defer w.sets.mu.Unlock()
	w.sets.use, w.sets.readTime = use, readTime
}

func (w *Watcher) pollSets(ctx context.Context) {
	t := time.NewTimer(ipsetPollMin)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.sets.mu.Lock()
			use, readTime := w.sets.use, w.sets.readTime
			w.sets.mu.Unlock()
			t.Reset(min(max(ipsetPollMin, 20*readTime), ipsetPollMax))
			if use {
				w.Wake(DirtyIPSet)
			}
		}
	}
}

// pollLegacy: iptables-legacy tables appear without any event, and a packet socket is opened
// and bound without any (readPacketTaps); both are cheap to read, on one ticker. New legacy
// tables re-read netfilter; a change of the taps re-reads the taps alone.
func (w *Watcher) pollLegacy(ctx context.Context) {
	last4, last6 := legacyTables()
	lastTaps := readPacketTaps()
	t := time.NewTicker(w.LegacyPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			v4, v6 := legacyTables()
			if !slices.Equal(v4, last4) || !slices.Equal(v6, last6) {
				last4, last6 = v4, v6
				w.send(ctx, DirtyNetfilter)
			}
			if taps := readPacketTaps(); !maps.Equal(taps, lastTaps) {
				lastTaps = taps
				w.send(ctx, DirtyTaps)
			}
		}
	}
}
