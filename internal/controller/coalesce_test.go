package controller

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/observe"
)

func event(d observe.Dirty, at time.Time) observe.Event { return observe.Event{Dirty: d, At: at} }

// The events queued behind the first are one burst: their kinds together, the first and the
// last arrival, how many.
func TestCoalesceQueued(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := make(chan observe.Event, 8)
	c <- event(observe.DirtyRoutes, t0.Add(1))
	c <- event(observe.DirtyLinks|observe.DirtyTC, t0.Add(2))
	b, ok := coalesce(context.Background(), c, event(observe.DirtyAddrs, t0), time.Millisecond, time.Hour)
	want := burst{dirty: observe.DirtyAddrs | observe.DirtyRoutes | observe.DirtyLinks | observe.DirtyTC, first: t0, last: t0.Add(2), n: 3}
	if !ok || !reflect.DeepEqual(b, want) {
		t.Fatalf("burst %+v ok %v, want %+v", b, ok, want)
	}
}

// A steady stream of events, never quiet for long enough, still ends in a burst by maxDelay, and
// what arrives after it is left on the channel.
func TestCoalesceMaxDelay(t *testing.T) {
	c := make(chan observe.Event)
	stop := make(chan struct{})
	sent := make(chan int)
	go func() {
		n := 0
		defer func() { sent <- n }()
		for {
			select {
			case c <- event(observe.DirtyRoutes, time.Now()):
				n++
			case <-stop:
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	b, ok := coalesce(context.Background(), c, event(observe.DirtyLinks, time.Now()), time.Hour, 50*time.Millisecond)
	close(stop)
	n := <-sent
	if !ok || b.dirty != observe.DirtyLinks|observe.DirtyRoutes || b.n != n+1 {
		t.Fatalf("burst %+v ok %v after %d events sent, want all of them and the first", b, ok, n)
	}
}

// A cancelled context ends the wait: the controller stops.
func TestCoalesceCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := coalesce(ctx, make(chan observe.Event), event(observe.DirtyAll, time.Now()), time.Hour, time.Hour); ok {
		t.Fatal("coalesce went on after its context ended")
	}
}

// The counts of the changes the events are for come with the burst; while one waits, the quiet
// is fencedQuiet, not the configured one.
func TestCoalesceCounted(t *testing.T) {
	c := make(chan observe.Event, 8)
	c <- observe.Event{Dirty: observe.DirtyRoutes, At: time.Now(), Counted: []observe.Counted{{Unit: 0, Seq: 2}}}
	first := observe.Event{Dirty: observe.DirtyNetfilter, At: time.Now(), Counted: []observe.Counted{{Unit: 1, Seq: 7}}}
	done := make(chan burst)
	go func() {
		b, _ := coalesce(context.Background(), c, first, time.Hour, time.Hour)
		done <- b
	}()
	select {
	case b := <-done:
		want := []observe.Counted{{Unit: 1, Seq: 7}, {Unit: 0, Seq: 2}}
		if !reflect.DeepEqual(b.counted, want) || b.n != 2 {
			t.Fatalf("burst %+v, want counts %v of 2 events", b, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a burst with counted changes waited for the configured quiet (an hour)")
	}
}
