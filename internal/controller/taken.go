package controller

import (
	"sync"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// taken tracks, per family unit of the fence, which counted changes the controller has taken in:
// their events were merged into the dirty kinds of an apply, so that apply read what they
// changed. A change is counted (bpf/netlink_watch.c) before its event reaches the controller,
// and an ipset command's event waits for the commands to pause; an apply that reads the fence's
// count in between must not let that change through, as it does not know what to read for it.
// So the fence opens only up to a count all of whose changes were taken in, whatever order
// their events arrive in (two CPUs may count two changes in one order and send their events in
// the other).
type taken struct {
	mu    sync.Mutex
	upTo  dataplane.FenceSeq                         // every count up to this one was taken in
	above [len(dataplane.FenceSeq{})]map[uint64]bool // counts taken in above upTo
}

// take records the counts of an event the controller merged.
func (t *taken) take(cs []observe.Counted) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cs {
		if c.Unit < 0 || c.Unit >= len(t.upTo) || c.Unit == dataplane.FenceSysctl || c.Seq <= t.upTo[c.Unit] {
			continue
		}
		if t.above[c.Unit] == nil {
			t.above[c.Unit] = map[uint64]bool{}
		}
		t.above[c.Unit][c.Seq] = true
		t.advance(c.Unit)
	}
}

func (t *taken) advance(u int) {
	for t.above[u][t.upTo[u]+1] {
		delete(t.above[u], t.upTo[u]+1)
		t.upTo[u]++
	}
}

// all records a read of everything, started after seq was read: it covers every change
// counted up to seq, taken in or not (a lost event included).
func (t *taken) all(seq dataplane.FenceSeq) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for u := range t.upTo {
		if u == dataplane.FenceSysctl || seq[u] <= t.upTo[u] {
			continue
		}
		t.upTo[u] = seq[u]
		for s := range t.above[u] {
			if s <= seq[u] {
				delete(t.above[u], s)
			}
		}
		t.advance(u)
	}
}

// limit lowers seq's units to what was taken in (the sysctl unit has its own rule:
// Watcher.SysctlSettled).
func (t *taken) limit(seq *dataplane.FenceSeq) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for u := range t.upTo {
		if u != dataplane.FenceSysctl {
			seq[u] = min(seq[u], t.upTo[u])
		}
	}
}
