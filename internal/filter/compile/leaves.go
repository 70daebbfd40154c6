package compile

import (
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// Candidate selection. For a cut (source or destination address), every rule has a region of
// that address where it may match: the prefix of its positive test on the field (everything
// without one), minus the prefixes of its inverted tests on the field. Every such prefix, and
// /0, is a node of a prefix tree. An address's longest matching node N holds exactly the
// addresses of N that no deeper node holds, so the rules that may match there are those whose
// positive prefix contains N (added at or above N) and none of whose inverted prefixes contains
// N (removed at or above N): the leaf of N lists them in order. Nodes whose leaf is their
// parent's are left out of the prefixes, identical leaves are shared, and a leaf longer than
// MaxLeaf is an overflow leaf.

type node struct {
	prefix   netip.Prefix
	add      []int // rules whose positive prefix is this
	excl     []int // rules with an inverted prefix that is this
	children []int
	subExcl  int // exclusions in this subtree
}

type index struct {
	prefixes []LeafPrefix
	leaves   []Leaf
	worst    int // the longest candidate list (overflow leaves counted at their length)
	total    int // sum of list lengths over the prefixes
}

// selectCut builds the index for both cuts and keeps the one whose longest leaf is shortest,
// then whose leaves are shortest on average, then with fewer prefixes.
func selectCut(rules []Rule, fam model.Family) (Cut, []LeafPrefix, []Leaf) {
	d := buildIndex(rules, CutDst, fam)
	s := buildIndex(rules, CutSrc, fam)
	better := func(a, b *index) bool {
		if a.worst != b.worst {
			return a.worst < b.worst
		}
		// average: a.total/len(a.prefixes) < b.total/len(b.prefixes)
		if x, y := a.total*len(b.prefixes), b.total*len(a.prefixes); x != y {
			return x < y
		}
		return len(a.prefixes) <= len(b.prefixes)
	}
	if better(d, s) {
		return CutDst, d.prefixes, d.leaves
	}
	return CutSrc, s.prefixes, s.leaves
}

func buildIndex(rules []Rule, cut Cut, fam model.Family) *index {
	kind := TestDst
	if cut == CutSrc {
		kind = TestSrc
	}
	zero := netip.IPv4Unspecified()
	if fam == model.IPv6 {
		zero = netip.IPv6Unspecified()
	}
	root := netip.PrefixFrom(zero, 0)
	byPrefix := map[netip.Prefix]int{root: 0}
	nodes := []node{{prefix: root}}
	get := func(p netip.Prefix) int {
		i, ok := byPrefix[p]
		if !ok {
			i = len(nodes)
			byPrefix[p] = i
			nodes = append(nodes, node{prefix: p})
		}
		return i
	}
	for ri, r := range rules {
		pos := root
		var negs []netip.Prefix
		for _, t := range r.Tests {
			if t.Kind != kind {
				continue
			}
			if t.Invert {
				negs = append(negs, t.Prefix)
			} else if t.Prefix.Bits() > pos.Bits() {
				pos = t.Prefix // tests are simplified: positive prefixes nest
			}
		}
		n := get(pos)
		nodes[n].add = append(nodes[n].add, ri)
		for _, q := range negs {
			if contains(pos, q) && q != pos {
				n := get(q)
				nodes[n].excl = append(nodes[n].excl, ri)
			}
		}
	}
	// The tree: sorted by address then length, a node's parent is the closest earlier node
	// containing it.
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		pa, pb := nodes[a].prefix, nodes[b].prefix
		if c := pa.Addr().Compare(pb.Addr()); c != 0 {
			return c
		}
		return pa.Bits() - pb.Bits()
	})
	parent := make([]int, len(nodes))
	var stack []int
	for _, n := range order {
		for len(stack) > 0 && !contains(nodes[stack[len(stack)-1]].prefix, nodes[n].prefix) {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			parent[n] = stack[len(stack)-1]
			nodes[parent[n]].children = append(nodes[parent[n]].children, n)
		} else {
			parent[n] = -1 // the root
		}
		stack = append(stack, n)
	}
	// Exclusions per subtree, children before parents (reverse of the sorted order).
	for i := len(order) - 1; i >= 0; i-- {
		n := order[i]
		nodes[n].subExcl += len(nodes[n].excl)
		if p := parent[n]; p >= 0 {
			nodes[p].subExcl += nodes[n].subExcl
		}
	}

	ix := &index{}
	leafOf := map[string]int{}
	overflow := -1
	leaf := func(list []int, over bool) int {
		if over {
			if overflow < 0 {
				overflow = len(ix.leaves)
				ix.leaves = append(ix.leaves, Leaf{Overflow: true})
			}
			return overflow
		}
		key := make([]byte, 0, 4*len(list))
		for _, r := range list {
			key = binary.LittleEndian.AppendUint32(key, uint32(r))
		}
		if i, ok := leafOf[string(key)]; ok {
			return i
		}
		leafOf[string(key)] = len(ix.leaves)
		ix.leaves = append(ix.leaves, Leaf{Rules: slices.Clone(list)})
		return len(ix.leaves) - 1
	}
	// Walk the tree. size is the list length (for an overflowing subtree, a lower bound).
	var walk func(n int, active []int, size int, over bool, parentLeaf int)
	walk = func(n int, active []int, size int, over bool, parentLeaf int) {
		nd := &nodes[n]
		list := active
		if !over {
			if len(nd.excl) > 0 {
				list = make([]int, 0, len(active))
				for _, r := range active {
					if !slices.Contains(nd.excl, r) {
						list = append(list, r)
					}
				}
			}
			if len(nd.add) > 0 {
				list = mergeSorted(list, nd.add)
			}
			size = len(list)
		} else {
			size += len(nd.add)
		}
		li := leaf(list, over || size > MaxLeaf)
		ix.worst = max(ix.worst, size)
		if li != parentLeaf {
			ix.prefixes = append(ix.prefixes, LeafPrefix{Prefix: nd.prefix, Leaf: li})
			ix.total += size
		}
		for _, ch := range nd.children {
			// Deeper nodes only add rules, but for their exclusions: beyond that, they overflow.
			chOver := over || size-nodes[ch].subExcl > MaxLeaf
			walk(ch, list, size, chOver, li)
		}
	}
	walk(0, nil, 0, false, -1)
	return ix
}

// mergeSorted merges two ascending lists.
func mergeSorted(a, b []int) []int {
	out := make([]int, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || (i < len(a) && a[i] < b[j]) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out
}
