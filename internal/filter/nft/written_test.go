package nft

import (
	"encoding/binary"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

func setTarget(rev uint32, slots map[int]uint16, size int) rawExpr {
	info := make([]byte, size)
	for off, idx := range slots {
		binary.NativeEndian.PutUint16(info[off:], idx)
	}
	rv := make([]byte, 4)
	binary.BigEndian.PutUint32(rv, rev)
	return rawExpr{Name: "target", Attrs: map[uint16][]byte{xtName: []byte("SET\x00"), xtRev: rv, xtInfo: info}}
}

func TestWrittenSets(t *testing.T) {
	sets := func() map[string]*model.IPSet {
		return map[string]*model.IPSet{
			"a": {Name: "a", Index: 0}, "b": {Name: "b", Index: 1}, "c": {Name: "c", Index: 2},
			"d": {Name: "d", Index: 3, Unsupported: "earlier"},
		}
	}
	rules := []rawRule{
		{Family: 2, Table: "filter", Chain: "INPUT", Exprs: []rawExpr{setTarget(1, map[int]uint16{0: 1, 4: ipsetInvalidID}, 8)}},
		{Family: 10, Table: "filter", Chain: "OUTPUT", Exprs: []rawExpr{setTarget(3, map[int]uint16{0: ipsetInvalidID, 4: ipsetInvalidID, 8: 3}, 20)}},
	}
	s := sets()
	writtenSets(rules).Mark(s)
	if got := s["b"].Unsupported; got != "changed by packets: SET target in ip filter INPUT" {
		t.Errorf("b: %q", got)
	}
	if s["a"].Unsupported != "" || s["c"].Unsupported != "" || s["d"].Unsupported != "earlier" {
		t.Errorf("a %q, c %q, d %q", s["a"].Unsupported, s["c"].Unsupported, s["d"].Unsupported)
	}
	// Revision 0: add_set at 0, del_set at 32.
	s = sets()
	writtenSets([]rawRule{{Family: 2, Table: "t", Chain: "c", Exprs: []rawExpr{setTarget(0, map[int]uint16{0: ipsetInvalidID, 32: 2}, 64)}}}).Mark(s)
	if s["c"].Unsupported == "" || s["a"].Unsupported != "" {
		t.Errorf("rev 0: c %q, a %q", s["c"].Unsupported, s["a"].Unsupported)
	}
	// A revision not known, or a short info: every set.
	for _, e := range []rawExpr{setTarget(9, nil, 8), setTarget(1, nil, 3)} {
		s = sets()
		writtenSets([]rawRule{{Family: 2, Table: "t", Chain: "c", Exprs: []rawExpr{e}}}).Mark(s)
		for n, set := range s {
			if set.Unsupported == "" {
				t.Errorf("set %s not marked for %v", n, e)
			}
		}
	}
}
