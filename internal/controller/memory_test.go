package controller

import (
	"io"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/graph"
)

// When a large ruleset is dropped (or read), the heap it freed goes back to the kernel at once;
// an apply that keeps the filter state, or changes only small ones, forces no collection.
func TestReturnMemoryAfterLargeDrop(t *testing.T) {
	c := &Controller{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	forced := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	big := &graph.Filter{CompileTime: 2 * time.Second}
	small := &graph.Filter{CompileTime: time.Millisecond}
	small2 := &graph.Filter{CompileTime: time.Millisecond}

	// 256 MB of small objects, live through a collection and then dropped: what a large
	// ruleset's snapshot and its compile leave when the ruleset is flushed.
	garbage := make([][]byte, 0, 1<<16)
	for range cap(garbage) {
		garbage = append(garbage, make([]byte, 4096))
	}
	runtime.GC()
	runtime.KeepAlive(garbage)
	garbage = nil
	before, _ := heapBytes()

	for _, tc := range []struct {
		name          string
		before, after *graph.Filter
	}{{"unchanged", big, big}, {"small to small", small, small2}, {"none to small", nil, small}} {
		f := forced()
		c.returnMemory(largeReplaced(tc.before, tc.after))
		if forced() != f {
			t.Errorf("%s: a collection was forced", tc.name)
		}
	}
	f := forced()
	c.returnMemory(largeReplaced(big, small))
	if forced() == f {
		t.Fatal("large ruleset dropped: no collection forced")
	}
	after, live := heapBytes()
	if after > before/2 || after > live+64<<20 {
		t.Errorf("large ruleset dropped: %d MB of heap still mapped (was %d MB), %d MB live", after>>20, before>>20, live>>20)
	}
}
