package controller

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/observe"
	"github.com/linuxfp/linuxfp/internal/status"
)

func TestInterfaceSamples(t *testing.T) {
	c := func(n uint64) status.Counter { return status.Counter{Packets: n, Bytes: 100 * n} }
	it := status.Interface{Name: "in0", Program: &status.Program{},
		Forwarded: c(1), Bridged: c(2), Dropped: c(3), ToTC: c(4), Encapsulated: c(5), Decapsulated: c(6),
		Passed: map[string]status.Counter{"not_for_us": c(7), "fenced": c(8), "apply_failed": c(9)}}
	got := interfaceSamples(it)
	want := []sample{
		{"forwarded", "forwarded", c(1)},
		{"bridged", "bridged", c(2)},
		{"dropped", "filter_dropped", c(3)},
		{"to_tc", "to_tc", c(4)},
		{"encapsulated", "encapsulated", c(5)},
		{"decapsulated", "decapsulated", c(6)},
		{"to_linux", "apply_failed", c(9)},
		{"to_linux", "fenced", c(8)},
		{"to_linux", "not_for_us", c(7)},
	}
	// The reasons for Linux come after the fast-path outcomes, in map order.
	if len(got) > 6 {
		slices.SortFunc(got[6:], func(a, b sample) int { return strings.Compare(a.reason, b.reason) })
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	// An interface without a program has nothing counted: no series.
	if s := interfaceSamples(status.Interface{Name: "lo"}); len(s) != 0 {
		t.Errorf("no program: got %v, want none", s)
	}
}

func TestReadyAfterFirstApply(t *testing.T) {
	c := &Controller{}
	if c.ready() == nil {
		t.Error("ready before the first apply")
	}
	c.seq = 1
	if err := c.ready(); err != nil {
		t.Errorf("not ready after the first apply: %v", err)
	}
}

func TestHealthy(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := &Controller{w: &observe.Watcher{Failed: make(chan error, 1)}, metrics: &promState{progressAt: t0}}
	if err := c.healthy(t0); err != nil {
		t.Fatalf("idle: %v", err)
	}
	// One apply, seen busy at every look for longer than stallAfter: stuck.
	c.busy.Store(true)
	if err := c.healthy(t0.Add(time.Second)); err != nil {
		t.Fatalf("busy for a second: %v", err)
	}
	if err := c.healthy(t0.Add(stallAfter)); err != nil {
		t.Fatalf("busy for stallAfter: %v", err)
	}
	if c.healthy(t0.Add(stallAfter+2*time.Second)) == nil {
		t.Fatal("busy with no apply recorded for longer than stallAfter: healthy")
	}
	// An apply recorded since the last look is progress, busy or not.
	c.seq++
	if err := c.healthy(t0.Add(stallAfter + 3*time.Second)); err != nil {
		t.Fatalf("an apply recorded: %v", err)
	}
	// Seen idle in between: a later apply starts a new count.
	c.busy.Store(false)
	c.healthy(t0.Add(10 * stallAfter))
	c.busy.Store(true)
	if err := c.healthy(t0.Add(10*stallAfter + time.Second)); err != nil {
		t.Fatalf("busy a second after idle: %v", err)
	}
	// A watcher's failure the loop has not taken.
	c.busy.Store(false)
	c.w.Failed <- errors.New("rtnetlink: gone")
	if c.healthy(t0.Add(11*stallAfter)) == nil {
		t.Fatal("a failed watcher: healthy")
	}
}
