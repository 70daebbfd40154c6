package controller

import (
	"testing"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/observe"
)

func TestTakenOpensOnlyWhatWasTakenIn(t *testing.T) {
	var tk taken
	limited := func(seq dataplane.FenceSeq) dataplane.FenceSeq {
		tk.limit(&seq)
		return seq
	}
	// Counts 1 and 3 of IPv4 taken in, 2 still on its way: only 1 may open.
	tk.take([]observe.Counted{{Unit: 0, Seq: 1}, {Unit: 0, Seq: 3}, {Unit: 1, Seq: 1}})
	if got := limited(dataplane.FenceSeq{3, 1, 7}); got != (dataplane.FenceSeq{1, 1, 7}) {
		t.Fatalf("got %v, want {1 1 7} (the sysctl unit is not limited)", got)
	}
	tk.take([]observe.Counted{{Unit: 0, Seq: 2}})
	if got := limited(dataplane.FenceSeq{3, 2, 0}); got != (dataplane.FenceSeq{3, 1, 0}) {
		t.Fatalf("got %v, want {3 1 0}", got)
	}
	// A read of everything covers what was counted before it, events lost or not; an event
	// arriving afterwards for a count it covered changes nothing.
	tk.all(dataplane.FenceSeq{5, 4, 0})
	tk.take([]observe.Counted{{Unit: 0, Seq: 4}, {Unit: 1, Seq: 6}})
	if got := limited(dataplane.FenceSeq{6, 6, 0}); got != (dataplane.FenceSeq{5, 4, 0}) {
		t.Fatalf("got %v, want {5 4 0}", got)
	}
	tk.take([]observe.Counted{{Unit: 1, Seq: 5}, {Unit: 0, Seq: 6}})
	if got := limited(dataplane.FenceSeq{6, 6, 0}); got != (dataplane.FenceSeq{6, 6, 0}) {
		t.Fatalf("got %v, want {6 6 0}", got)
	}
}
