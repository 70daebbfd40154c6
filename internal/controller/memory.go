package controller

import (
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/linuxfp/linuxfp/internal/graph"
)

// largeRead is how long reading and compiling a netfilter ruleset takes when it leaves much
// memory behind. A 50,000-rule ruleset takes ~2.5 s here and passes through ~300 MB of
// short-lived objects for a ~30 MB result; Go's background scavenger returns such a peak only
// slowly (RSS stayed at 300-390 MB after the ruleset was flushed), so when such a ruleset is
// read, or dropped, the freed heap is returned to the kernel at once.
const largeRead = 100 * time.Millisecond

// largeReplaced: an apply replaced the filter state before with after, and either is large
// (see largeRead). A boolean, so that the caller holds neither state for returnMemory.
func largeReplaced(before, after *graph.Filter) bool {
	return before != after && (large(before) || large(after))
}

// returnMemory returns the freed heap to the kernel after an apply that replaced a large filter
// state (see largeReplaced). It costs a garbage collection (tens of milliseconds with a large
// ruleset live), small beside the read.
func (c *Controller) returnMemory(largeReplaced bool) {
	if !largeReplaced {
		return
	}
	mapped, live := heapBytes()
	t0 := time.Now()
	debug.FreeOSMemory()
	mappedAfter, liveAfter := heapBytes()
	c.log.Debug("returned free heap to the kernel", "mapped_mb", mapped>>20, "live_mb", live>>20,
		"mapped_after_mb", mappedAfter>>20, "live_after_mb", liveAfter>>20, "took", time.Since(t0).Round(time.Millisecond))
}

func large(f *graph.Filter) bool { return f != nil && f.CompileTime >= largeRead }

// heapBytes is the heap Go keeps mapped (objects, free and unused space in spans) and what was
// live at the last collection.
func heapBytes() (mapped, live uint64) {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return v(0) + v(1) + v(2), v(3)
}
