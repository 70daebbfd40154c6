package nft

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// WrittenSets are the ipsets that packets change. The SET target (`-j SET --add-set` /
// `--del-set`, xt_SET) adds or deletes members as packets pass through its rule, in any chain
// (input and output too), and no netlink message tells anyone: a copy of such a set in the fast
// path would be stale from the next packet on. Mark makes them Unsupported, so rules that test
// them hand their packets to Linux.
type WrittenSets struct {
	// ByIndex: the kernel's set index -> which rule writes it.
	ByIndex map[uint16]string
	// All: a SET target whose sets could not be told (an unknown revision): every set.
	All string
}

// ipsetInvalidID is IPSET_INVALID_ID: no set in that slot of the target.
const ipsetInvalidID = 0xffff

// writtenSets finds the SET targets of every rule of every table.
func writtenSets(rules []rawRule) WrittenSets {
	w := WrittenSets{ByIndex: map[uint16]string{}}
	for _, r := range rules {
		for _, e := range r.Exprs {
			if e.Name != "target" || e.str(xtName) != "SET" {
				continue
			}
			why := fmt.Sprintf("changed by packets: SET target in %s %s %s", FamilyName(nftables.TableFamily(r.Family)), r.Table, r.Chain)
			rev, _ := e.u32(xtRev)
			idx, ok := setTargetIndexes(rev, e.Attrs[xtInfo])
			if !ok {
				if w.All == "" {
					w.All = why
				}
				continue
			}
			for _, i := range idx {
				if _, seen := w.ByIndex[i]; !seen && i != ipsetInvalidID {
					w.ByIndex[i] = why
				}
			}
		}
	}
	return w
}

// setTargetIndexes reads the set indexes of a struct xt_set_info_target_v<rev>: add_set and
// del_set (and map_set from revision 3), each a struct xt_set_info { ip_set_id_t index; u8 dim,
// flags; }; revision 0's struct xt_set_info_v0 is 32 bytes (index, padding, u32 flags[7]).
func setTargetIndexes(rev uint32, info []byte) ([]uint16, bool) {
	var offs []int
	switch rev {
	case 0:
		offs = []int{0, 32}
	case 1, 2:
		offs = []int{0, 4}
	case 3:
		offs = []int{0, 4, 8}
	default:
		return nil, false
	}
	var idx []uint16
	for _, o := range offs {
		if len(info) < o+2 {
			return nil, false
		}
		idx = append(idx, binary.NativeEndian.Uint16(info[o:]))
	}
	return idx, true
}

// Mark makes the sets packets change Unsupported (keeping an earlier reason).
func (w WrittenSets) Mark(sets map[string]*model.IPSet) {
	for _, s := range sets {
		if s.Nft {
			continue // not an ipset: Index is not the kernel's (readSets finds nf_tables sets packets change)
		}
		why := w.ByIndex[s.Index]
		if why == "" {
			why = w.All
		}
		if why != "" && s.Unsupported == "" {
			s.Unsupported = why
		}
	}
}
