package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// FilterData is what the filter module reads: the compiled ruleset of each family (nil or
// Empty: not classified) and, per interface, the pattern bits of the rules' -i/-o patterns its
// name matches.
type FilterData struct {
	Prog4, Prog6 *compile.Program
	Ifaces       []FilterIface
}

// FilterIface is one interface as the filter module sees it.
type FilterIface struct {
	Ifindex int
	// Bits are the pattern bits (compile.Program.Patterns) its name matches, per family.
	Bits [2]uint64
}

// Filter flags in lfp_config.fw_flags (enum lfp_fw_flags), IPv4's: IPv6's is the next bit.
const (
	fwActive4     = uint32(linuxfpLfpFwFlagsLFP_FW_ACTIVE4)
	fwCutSrc4     = uint32(linuxfpLfpFwFlagsLFP_FW_CUT_SRC4)
	fwHasMark4    = uint32(linuxfpLfpFwFlagsLFP_FW_HAS_MARK4)
	fwHasCtState4 = uint32(linuxfpLfpFwFlagsLFP_FW_HAS_CTSTATE4)
	fwPreCTDrop4  = uint32(linuxfpLfpFwFlagsLFP_FW_PRE_CT_DROP4)
	fwFibSrc4     = uint32(linuxfpLfpFwFlagsLFP_FW_FIB_SRC4)
	fwFibDst4     = uint32(linuxfpLfpFwFlagsLFP_FW_FIB_DST4)
	fwHasIf4      = uint32(linuxfpLfpFwFlagsLFP_FW_HAS_IF4)
	fwDefLeaf4    = uint32(linuxfpLfpFwFlagsLFP_FW_DEFAULT_LEAF4)
	fwShort4      = uint32(linuxfpLfpFwFlagsLFP_FW_SHORT4)

	// DefaultFilterRules is the most flat rules the filter takes when Options say nothing: as
	// many as a ruleset may compile to.
	DefaultFilterRules = compile.MaxRules
)

// filterMaps are the maps whose size is the filter's capacity: two banks of it.
var filterMaps = []string{"lfp_fw_rules", "lfp_fw_leaves", "lfp_fw_lpm", "lfp_fw_hosts", "lfp_fw_stats"}

// ErrFilterCapacity: a ruleset has more flat rules or leaves than the filter maps hold.
var ErrFilterCapacity = errors.New("ruleset exceeds the filter's capacity")

// filterState is what the data plane last wrote for the filter module.
type filterState struct {
	bank         uint32
	flags        uint32
	prog4, prog6 *compile.Program
	lpm          [2][]linuxfpLfpFwLpmKey  // LPM keys written per bank
	hosts        [2][]linuxfpLfpFwHostKey // full-length cut prefixes written per bank
	ruleBase     [2]uint32                // where each family's rules start in the bank
	// defLeaf: per family, with LFP_FW_DEFAULT_LEAF*, the leaf of the cut's /0, relative to
	// the bank.
	defLeaf [2]uint32
	// ctNone: per family, the conntrack states no rule can match (compile.Program.CtNoRule).
	ctNone [2]uint8
	// sets: lfp_fw_sets' entries by set id; setEntries: the compiled entries each set id was
	// last written from, so that a ruleset change does not rebuild and diff an unchanged set
	// (a 1,000,000-entry one took 1.8 s).
	// hostFilter, shortFilter, setFilter: lfp_fw_host_filter's, lfp_fw_short_filter's and
	// lfp_fw_set_filter's words that have a bit set; setBuckets: how many full-length keys
	// lfp_fw_sets holds in each bucket.
	hostFilter, shortFilter, setFilter map[uint32]uint64
	setBuckets                         map[uint32]int
	sets                               map[uint16]map[linuxfpLfpFwSetKey]uint8
	setEntries                         map[uint16][]model.SetEntry
	ifs                                map[uint32]linuxfpLfpFwIf
	// setIDs name the sets in lfp_fw_sets, by family and ipset name, for as long as a ruleset
	// written uses them; next: those of the ruleset written last (in use after the flip).
	setIDs, next map[setName]uint16
}

// setName is an ipset as rules of a family refer to it.
type setName struct {
	fam  int
	name string
}

// Set entries are not banked: a set keeps its id across rulesets, and a change of its contents
// (ipset add, del ...) is an update of those entries in place, as Linux's rules see a set's
// new contents at once. A ruleset that stops using a set keeps its entries until the flip.

// setIDsFor gives every set of the programs an id: the one it has, or one no set has.
func (st *filterState) setIDsFor(progs []*compile.Program) (map[setName]uint16, error) {
	ids := map[setName]uint16{}
	taken := map[uint16]bool{}
	for _, id := range st.setIDs {
		taken[id] = true
	}
	free := uint16(0)
	for fam, p := range progs {
		if p == nil || p.Empty {
			continue
		}
		for _, s := range p.Sets {
			n := setName{fam, s.Name}
			if _, ok := ids[n]; ok {
				continue
			}
			if id, ok := st.setIDs[n]; ok {
				ids[n] = id
				continue
			}
			for taken[free] {
				if free++; free == 0 {
					return nil, errors.New("filter: more than 65,536 ipsets")
				}
			}
			ids[n], taken[free] = free, true
		}
	}
	return ids, nil
}

func wordsOf(a netip.Addr) [4]uint32 { return addrWords(a) }

func maskWords(bits int, v6 bool) (m [4]uint32) {
	n := 4
	if !v6 {
		n = 1
	}
	for i := 0; i < n; i++ {
		b := min(max(bits-32*i, 0), 32)
		var w uint32
		if b > 0 {
			w = ^uint32(0) << (32 - b)
		}
		var be [4]byte
		binary.BigEndian.PutUint32(be[:], w)
		m[i] = binary.NativeEndian.Uint32(be[:])
	}
	return m
}

// syncFilter brings the filter maps to f. A changed ruleset is written into the inactive bank,
// then the bank is flipped with the config (written by the caller after this returns): packets
// see the old ruleset or the new one, never a mix. Unchanged programs are not rewritten.
func (d *Dataplane) syncFilter(f FilterData) (flags, bank uint32, err error) {
	st := &d.fw
	if st.sets == nil {
		st.sets = map[uint16]map[linuxfpLfpFwSetKey]uint8{}
		st.setEntries = map[uint16][]model.SetEntry{}
		st.setIDs = map[setName]uint16{}
		st.ifs = map[uint32]linuxfpLfpFwIf{}
		st.hostFilter, st.shortFilter, st.setFilter = map[uint32]uint64{}, map[uint32]uint64{}, map[uint32]uint64{}
		st.setBuckets = map[uint32]int{}
	}
	ifs := map[uint32]linuxfpLfpFwIf{}
	for _, i := range f.Ifaces {
		ifs[uint32(i.Ifindex)] = linuxfpLfpFwIf{Bits: i.Bits}
	}
	if err := syncMap(d.maps.LfpFwIfs, st.ifs, ifs); err != nil {
		return st.flags, st.bank, err
	}
	if f.Prog4 == st.prog4 && f.Prog6 == st.prog6 {
		return st.flags, st.bank, nil
	}
	if err := d.fitFilterLocked(f); err != nil {
		return st.flags, st.bank, err
	}
	next := st.bank ^ 1
	var rules []linuxfpLfpFwRule
	var leaves []linuxfpLfpFwLeaf
	var lpm []linuxfpLfpFwLpmKey
	var lpmVals []uint32
	var hosts []linuxfpLfpFwHostKey
	var hostVals []uint32
	ids, err := st.setIDsFor([]*compile.Program{f.Prog4, f.Prog6})
	if err != nil {
		return st.flags, st.bank, err
	}
	// The running ruleset's sets the new one does not use stay as they are until the flip
	// (dropOldSets); the new one's are written below, each only if its entries changed.
	setsDone := map[uint16]bool{}
	flags = 0
	var defLeaf [2]uint32
	var ctNone [2]uint8
	for fam, p := range []*compile.Program{f.Prog4, f.Prog6} {
		if p == nil || p.Empty {
			continue
		}
		v6 := fam == 1
		flags |= fwActive4 << fam
		if p.Cut == compile.CutSrc {
			flags |= fwCutSrc4 << fam
		}
		if p.HasMark {
			flags |= fwHasMark4 << fam
		}
		if p.HasCtState {
			flags |= fwHasCtState4 << fam
		}
		ctNone[fam] = p.CtNoRule
		if p.PreCTDrop {
			flags |= fwPreCTDrop4 << fam
		}
		if p.FibLocalSrc {
			flags |= fwFibSrc4 << fam
		}
		if p.FibLocalDst {
			flags |= fwFibDst4 << fam
		}
		// Sets whose entries are all full-length: their tests may skip the lookup on the bit array.
		hostSets := make([]bool, len(p.Sets))
		for i, s := range p.Sets {
			hostSets[i] = !slices.ContainsFunc(s.Entries, func(e model.SetEntry) bool { return !e.Prefix.IsSingleIP() })
		}
		ruleBase, leafBase := uint32(len(rules)), uint32(len(leaves))
		st.ruleBase[fam] = ruleBase
		if n, l := int(ruleBase)+len(p.Rules), int(leafBase)+len(p.Leaves); n > d.fwCap || l > d.fwCap {
			return st.flags, st.bank, fmt.Errorf("filter: %d flat rules and %d leaves: %w of %d (linuxfp run --filter-rules)", n, l, ErrFilterCapacity, d.fwCap)
		}
		for _, r := range p.Rules {
			var br linuxfpLfpFwRule
			if len(r.Tests) > len(br.T) {
				return st.flags, st.bank, errors.New("filter: rule with too many tests")
			}
			br.Ntests = uint8(len(r.Tests))
			if r.PreCT {
				br.PreCt = 1
			}
			br.Action = uint8(r.Action)
			br.SkipTo = ruleBase + uint32(r.SkipTo)
			for i, t := range r.Tests {
				bt := &br.T[i]
				bt.Kind, bt.A, bt.B = uint8(t.Kind), t.A, t.B
				if t.Kind == compile.TestIif || t.Kind == compile.TestOif {
					flags |= fwHasIf4 << fam
				}
				if t.Invert {
					bt.Inv = 1
				}
				switch t.Kind {
				case compile.TestSrc, compile.TestDst:
					pf := t.Prefix.Masked()
					bt.Addr, bt.Mask = wordsOf(pf.Addr()), maskWords(pf.Bits(), v6)
				case compile.TestSet:
					s := p.Sets[t.A]
					bt.A = ids[setName{fam, s.Name}]
					bt.B = t.B
					if s.HasPort {
						bt.B |= compile.SetHasPort
					}
					if hostSets[t.A] {
						bt.B |= setHosts
					}
					if s.HashIP {
						bt.B |= setHashIP
						bits := s.Netmask
						if bits == 0 {
							bits = 128
							if !v6 {
								bits = 32
							}
						}
						bt.Mask = maskWords(bits, v6)
					}
				}
			}
			rules = append(rules, br)
		}
		for _, l := range p.Leaves {
			var bl linuxfpLfpFwLeaf
			if l.Overflow || len(l.Rules) > len(bl.Rules) {
				bl.Overflow = 1
			} else {
				bl.N = uint32(len(l.Rules))
				for i, ri := range l.Rules {
					bl.Rules[i] = ruleBase + uint32(ri)
				}
				bl.Guard = leafGuard(p, l, hostSets)
			}
			leaves = append(leaves, bl)
		}
		// short: the cut's prefixes shorter than an address; zero: /0 is one of them; wide: an
		// IPv6 one lfp_fw_short_filter cannot hold (shortFilterWords).
		short, zero, wide := 0, false, false
		for _, lp := range p.Prefixes {
			pf := lp.Prefix.Masked()
			if pf.IsSingleIP() {
				hosts = append(hosts, linuxfpLfpFwHostKey{Sel: next<<8 | uint32(fam), Addr: wordsOf(pf.Addr())})
				hostVals = append(hostVals, leafBase+uint32(lp.Leaf))
				continue
			}
			short++
			if fam == 1 && pf.Bits() > 0 && pf.Bits() < fwShortMin6 {
				wide = true
			}
			if pf.Bits() == 0 {
				zero, defLeaf[fam] = true, leafBase+uint32(lp.Leaf)
			}
			lpm = append(lpm, linuxfpLfpFwLpmKey{Prefixlen: 32 + uint32(pf.Bits()), Sel: next<<8 | uint32(fam), Addr: wordsOf(pf.Addr())})
			lpmVals = append(lpmVals, leafBase+uint32(lp.Leaf))
		}
		// /0's leaf is taken without the LPM lookup (it is written to the trie all the same)
		// for an address that is no host entry and, where there are other short prefixes, in
		// none of them by lfp_fw_short_filter.
		if zero {
			if !wide {
				flags |= fwDefLeaf4 << fam
			}
			short--
		}
		if short > 0 {
			flags |= fwShort4 << fam
		}
		for _, s := range p.Sets {
			id := ids[setName{fam, s.Name}]
			if setsDone[id] {
				continue
			}
			setsDone[id] = true
			if err := d.syncSet(id, s.Entries); err != nil {
				return st.flags, st.bank, err
			}
		}
	}
	// The inactive bank: its counters from zero, rules and leaves by index, then its LPM (old keys out first: an LPM
	// entry of the inactive bank is never consulted).
	if err := zeroPerCPU(d.maps.LfpFwStats, next*uint32(d.fwCap), len(rules)); err != nil {
		return st.flags, st.bank, fmt.Errorf("filter counters: %w", err)
	}
	if err := putArray(d.maps.LfpFwRules, next*uint32(d.fwCap), rules); err != nil {
		return st.flags, st.bank, err
	}
	if err := putArray(d.maps.LfpFwLeaves, next*uint32(d.fwCap), leaves); err != nil {
		return st.flags, st.bank, err
	}
	// The short prefixes' bits as the host filter's below: the new keys' before they go in,
	// the inactive bank's old keys' cleared only once they are out.
	if err := syncFilter(d.maps.LfpFwShortFilter, st.shortFilter, shortFilterWords(st.lpm[0], st.lpm[1], lpm)); err != nil {
		return st.flags, st.bank, err
	}
	for _, k := range st.lpm[next] {
		if err := d.maps.LfpFwLpm.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return st.flags, st.bank, fmt.Errorf("filter lpm: %w", err)
		}
	}
	st.lpm[next] = nil
	for i, k := range lpm {
		if err := d.maps.LfpFwLpm.Put(k, lpmVals[i]); err != nil {
			return st.flags, st.bank, fmt.Errorf("filter lpm: %w", err)
		}
		st.lpm[next] = append(st.lpm[next], k)
	}
	if err := syncFilter(d.maps.LfpFwShortFilter, st.shortFilter, shortFilterWords(st.lpm[0], st.lpm[1])); err != nil {
		return st.flags, st.bank, err
	}
	// The host filter's bits: those of the new keys before they go in, those of the inactive
	// bank's old keys cleared only once they are out.
	if err := syncFilter(d.maps.LfpFwHostFilter, st.hostFilter, hostFilterWords(st.hosts[0], st.hosts[1], hosts)); err != nil {
		return st.flags, st.bank, err
	}
	for _, k := range st.hosts[next] {
		if err := d.maps.LfpFwHosts.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return st.flags, st.bank, fmt.Errorf("filter hosts: %w", err)
		}
	}
	// Before the write: keys a failed batch left are deleted with the bank's next write.
	st.hosts[next] = hosts
	if len(hosts) > 0 {
		if _, err := d.maps.LfpFwHosts.BatchUpdate(hosts, hostVals, nil); err != nil {
			return st.flags, st.bank, fmt.Errorf("filter hosts: %w", err)
		}
	}
	if err := syncFilter(d.maps.LfpFwHostFilter, st.hostFilter, hostFilterWords(st.hosts[0], st.hosts[1])); err != nil {
		return st.flags, st.bank, err
	}
	// Until the flip both rulesets' ids are taken.
	for n, id := range ids {
		st.setIDs[n] = id
	}
	st.next = ids
	st.prog4, st.prog6 = f.Prog4, f.Prog6
	st.flags, st.bank, st.defLeaf, st.ctNone = flags, next, defLeaf, ctNone
	return flags, next, nil
}

// leafGuard is lfp_fw_leaf.guard: 1 + the index in the leaf's first rule of a set test that
// every rule of the leaf has, on a set of full-length entries (hostSets); 0 if there is none.
// Where the test is false, no rule of the leaf matches, and the packet is accepted.
func leafGuard(p *compile.Program, l compile.Leaf, hostSets []bool) uint32 {
	if len(l.Rules) == 0 {
		return 0
	}
	has := func(r compile.Rule, g compile.Test) bool {
		return slices.ContainsFunc(r.Tests, func(t compile.Test) bool {
			return t.Kind == compile.TestSet && !t.Invert && t.A == g.A && t.B == g.B
		})
	}
	for j, g := range p.Rules[l.Rules[0]].Tests {
		if g.Kind != compile.TestSet || g.Invert || !hostSets[g.A] {
			continue
		}
		all := true
		for _, ri := range l.Rules[1:] {
			if !has(p.Rules[ri], g) {
				all = false
				break
			}
		}
		if all {
			return uint32(j + 1)
		}
	}
	return 0
}

// fwFilterShift is LFP_FW_FILTER_SHIFT (bpf/lib/filter.h): the filters' buckets are this many
// bits of a hash.
const fwFilterShift = 18

// fwMix and fwMixAddr are fw_mix() and fw_mix_addr() (bpf/lib/filter.h).
func fwMix(h, w uint32) uint32 { return (h ^ w) * 0x9e3779b1 }

func fwMixAddr(h uint32, a [4]uint32, v6 bool) uint32 {
	h = fwMix(h, a[0])
	if v6 {
		h = fwMix(fwMix(fwMix(h, a[1]), a[2]), a[3])
	}
	return h
}

// fwHostBucket is fw_host_bucket(): the bucket of k's address in lfp_fw_host_filter.
func fwHostBucket(k linuxfpLfpFwHostKey) uint32 {
	v6 := k.Sel&0xff == 1
	seed := uint32(4)
	if v6 {
		seed = 6
	}
	return fwMixAddr(seed, k.Addr, v6) >> (32 - fwFilterShift)
}

// fwSetBucket is fw_set_bucket(): the bucket of a full-length key in lfp_fw_set_filter.
func fwSetBucket(k linuxfpLfpFwSetKey) uint32 {
	h := fwMix(k.Set, uint32(k.Proto)<<16|uint32(k.Port))
	return fwMixAddr(h, k.Addr, k.Prefixlen == 64+128) >> (32 - fwFilterShift)
}

// fwShortMin6 is LFP_FW_SHORT_MIN6: the shortest IPv6 prefix whose /64 blocks
// lfp_fw_short_filter holds.
const fwShortMin6 = 54

// fwShortBucket is fw_short_bucket(): the bucket in lfp_fw_short_filter of address a (words as
// in the maps) of family v6: IPv4's first 16 bits, a hash of IPv6's first 64.
func fwShortBucket(a [4]uint32, v6 bool) uint32 {
	if v6 {
		return 1<<16 | fwMix(fwMix(6, a[0]), a[1])>>16
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], a[0])
	return uint32(binary.BigEndian.Uint16(b[:2]))
}

// shortFilterWords are lfp_fw_short_filter's words with the bits of the blocks the keys' prefixes
// overlap (/0 aside: its leaf is the one the filter stands for; IPv6 prefixes shorter than
// fwShortMin6 aside: a bank with one takes no leaf without the trie).
func shortFilterWords(keys ...[]linuxfpLfpFwLpmKey) map[uint32]uint64 {
	w := map[uint32]uint64{}
	set := func(a [4]uint32, v6 bool) {
		bk := fwShortBucket(a, v6)
		w[bk/64] |= 1 << (bk % 64)
	}
	for _, ks := range keys {
		for _, k := range ks {
			bits := int(k.Prefixlen) - 32
			if bits <= 0 {
				continue
			}
			var b [16]byte
			for i := range 4 {
				binary.NativeEndian.PutUint32(b[4*i:], k.Addr[i])
			}
			if k.Sel&0xff == 1 {
				if bits < fwShortMin6 {
					continue
				}
				// Every /64 the prefix overlaps: its own, or 2^(64-bits) from its first.
				first := binary.BigEndian.Uint64(b[:8])
				for i := range uint64(1) << max(0, 64-bits) {
					var blk [8]byte
					binary.BigEndian.PutUint64(blk[:], first+i)
					set([4]uint32{binary.NativeEndian.Uint32(blk[:4]), binary.NativeEndian.Uint32(blk[4:])}, true)
				}
				continue
			}
			top := binary.BigEndian.Uint16(b[:2])
			n := 1
			if bits < 16 {
				n = 1 << (16 - bits)
				top &^= uint16(n - 1)
			}
			for i := range n {
				binary.BigEndian.PutUint16(b[:2], top+uint16(i))
				set([4]uint32{binary.NativeEndian.Uint32(b[:4])}, false)
			}
		}
	}
	return w
}

// hostFilterWords are lfp_fw_host_filter's words with the bits of the keys.
func hostFilterWords(keys ...[]linuxfpLfpFwHostKey) map[uint32]uint64 {
	w := map[uint32]uint64{}
	for _, ks := range keys {
		for _, k := range ks {
			b := fwHostBucket(k)
			w[b/64] |= 1 << (b % 64)
		}
	}
	return w
}

// behind: the families whose ruleset in f differs from the one written (after a failed
// syncFilter, the ones still classified by a ruleset Linux has replaced).
func (st *filterState) behind(f FilterData) Families {
	var b Families
	if f.Prog4 != st.prog4 {
		b |= IPv4
	}
	if f.Prog6 != st.prog6 {
		b |= IPv6
	}
	return b
}

// dropOldSets removes the entries of the sets only the old ruleset used (after the flip), and
// frees their ids.
func (d *Dataplane) dropOldSets() error {
	st := &d.fw
	if st.next == nil {
		return nil
	}
	inUse := map[uint16]bool{}
	for _, id := range st.next {
		inUse[id] = true
	}
	for id, cur := range st.sets {
		if inUse[id] {
			continue
		}
		gone := slices.Collect(maps.Keys(cur))
		if err := syncMap(d.maps.LfpFwSets, cur, map[linuxfpLfpFwSetKey]uint8{}); err != nil {
			delete(st.setEntries, id)
			return err
		}
		if err := d.setFilterCount(gone, -1); err != nil {
			return err
		}
		delete(st.sets, id)
		delete(st.setEntries, id)
	}
	st.setIDs, st.next = st.next, nil
	return nil
}

// syncSet brings set id's entries in lfp_fw_sets to entries, unless it was written from equal
// entries last time. Entries come in model.CompareSetEntries order: from the last ones written,
// only the members added, removed or changed are written (an ipset add to a set of 1,000,000
// members writes one entry, and builds no map of them all). A failed write leaves it to be
// compared whole next time.
func (d *Dataplane) syncSet(id uint16, entries []model.SetEntry) error {
	st := &d.fw
	last, ok := st.setEntries[id]
	if ok && slices.Equal(last, entries) {
		return nil
	}
	delete(st.setEntries, id)
	cur := st.sets[id]
	if !ok || cur == nil || !slices.IsSortedFunc(entries, model.CompareSetEntries) || !slices.IsSortedFunc(last, model.CompareSetEntries) {
		want := make(map[linuxfpLfpFwSetKey]uint8, len(entries))
		for _, e := range entries {
			k, v := setKey(id, e)
			want[k] = v
		}
		if cur == nil {
			cur = map[linuxfpLfpFwSetKey]uint8{}
			st.sets[id] = cur
		}
		var added, gone []linuxfpLfpFwSetKey
		for k := range want {
			if _, ok := cur[k]; !ok {
				added = append(added, k)
			}
		}
		for k := range cur {
			if _, ok := want[k]; !ok {
				gone = append(gone, k)
			}
		}
		if err := d.setFilterCount(added, 1); err != nil {
			return err
		}
		if err := syncMap(d.maps.LfpFwSets, cur, want); err != nil {
			return err
		}
		if err := d.setFilterCount(gone, -1); err != nil {
			return err
		}
		st.setEntries[id] = entries
		return nil
	}
	// Removals first: a member replaced by one with the same key (its nomatch flag changed) is
	// written after.
	var put, gone []model.SetEntry
	i, j := 0, 0
	for i < len(last) || j < len(entries) {
		var c int
		switch {
		case i == len(last):
			c = 1
		case j == len(entries):
			c = -1
		default:
			c = model.CompareSetEntries(last[i], entries[j])
		}
		switch {
		case c < 0:
			gone = append(gone, last[i])
			i++
		case c > 0:
			put = append(put, entries[j])
			j++
		default:
			if last[i] != entries[j] {
				put = append(put, entries[j])
			}
			i++
			j++
		}
	}
	// The keys that come in (new, or deleted and written again) are counted in before, the
	// ones deleted out after.
	goneKeys := make([]linuxfpLfpFwSetKey, len(gone))
	deleted := make(map[linuxfpLfpFwSetKey]bool, len(gone))
	for i, e := range gone {
		goneKeys[i], _ = setKey(id, e)
		deleted[goneKeys[i]] = true
	}
	var added []linuxfpLfpFwSetKey
	for _, e := range put {
		k, _ := setKey(id, e)
		if _, ok := cur[k]; !ok || deleted[k] {
			added = append(added, k)
		}
	}
	if err := d.setFilterCount(added, 1); err != nil {
		return err
	}
	for _, k := range goneKeys {
		if err := d.maps.LfpFwSets.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete from %s: %w", d.maps.LfpFwSets, err)
		}
		delete(cur, k)
	}
	for _, e := range put {
		k, v := setKey(id, e)
		if err := d.maps.LfpFwSets.Put(k, v); err != nil {
			return fmt.Errorf("update %s: %w", d.maps.LfpFwSets, err)
		}
		cur[k] = v
	}
	if err := d.setFilterCount(goneKeys, -1); err != nil {
		return err
	}
	st.setEntries[id] = entries
	return nil
}

// setFilterCount counts the full-length keys in (delta 1: before they are written) or out (-1:
// once they are deleted) of lfp_fw_set_filter's buckets, and writes the words whose bits that
// sets or clears. After a failed write a key may stay counted: its bit stays set, which costs
// only the lookup.
func (d *Dataplane) setFilterCount(keys []linuxfpLfpFwSetKey, delta int) error {
	st := &d.fw
	changed := map[uint32]bool{}
	for _, k := range keys {
		if k.Prefixlen != 64+32 && k.Prefixlen != 64+128 {
			continue
		}
		b := fwSetBucket(k)
		n := st.setBuckets[b] + delta
		switch {
		case n <= 0:
			delete(st.setBuckets, b)
			st.setFilter[b/64] &^= 1 << (b % 64)
		case n == 1 && delta > 0:
			st.setBuckets[b] = n
			st.setFilter[b/64] |= 1 << (b % 64)
		default:
			st.setBuckets[b] = n
			continue
		}
		changed[b/64] = true
	}
	for w := range changed {
		if err := d.maps.LfpFwSetFilter.Put(w, st.setFilter[w]); err != nil {
			return fmt.Errorf("update %s: %w", d.maps.LfpFwSetFilter, err)
		}
		if st.setFilter[w] == 0 {
			delete(st.setFilter, w)
		}
	}
	return nil
}

// setKey is member e of set id as lfp_fw_sets holds it: 1 where it matches, 0 for nomatch.
func setKey(id uint16, e model.SetEntry) (linuxfpLfpFwSetKey, uint8) {
	pf := e.Prefix.Masked()
	k := linuxfpLfpFwSetKey{Prefixlen: 64 + uint32(pf.Bits()), Set: uint32(id),
		Proto: e.Proto, Port: e.Port, Addr: wordsOf(pf.Addr())}
	if e.NoMatch {
		return k, 0
	}
	return k, 1
}

const (
	setHashIP = 8  // LFP_FW_SET_HASH_IP
	setHosts  = 16 // LFP_FW_SET_HOSTS
)

// zeroPerCPU zeroes n per-CPU counters at consecutive indexes from base, in one batch when the
// kernel allows (10,000 rules: one syscall, not 10,000).
func zeroPerCPU(m *ebpf.Map, base uint32, n int) error {
	if n == 0 {
		return nil
	}
	cpus := ebpf.MustPossibleCPU()
	keys := make([]uint32, n)
	for i := range keys {
		keys[i] = base + uint32(i)
	}
	// Per-CPU batches take every key's values for every possible CPU, one after the other.
	if _, err := m.BatchUpdate(keys, make([]linuxfpLfpCounter, n*cpus), nil); err == nil {
		return nil
	}
	zero := make([]linuxfpLfpCounter, cpus)
	for _, k := range keys {
		if err := m.Put(k, zero); err != nil {
			return err
		}
	}
	return nil
}

// putArray writes vals at consecutive indexes from base, in one batch when the kernel allows.
func putArray[V any](m *ebpf.Map, base uint32, vals []V) error {
	if len(vals) == 0 {
		return nil
	}
	keys := make([]uint32, len(vals))
	for i := range keys {
		keys[i] = base + uint32(i)
	}
	if _, err := m.BatchUpdate(keys, vals, nil); err == nil {
		return nil
	}
	for i := range vals {
		if err := m.Put(keys[i], vals[i]); err != nil {
			return fmt.Errorf("update %s: %w", m, err)
		}
	}
	return nil
}

// RuleCounter is what the fast path counted for one netfilter rule (or chain policy): packets
// it matched there (Linux's own counters never see those).
type RuleCounter struct {
	Family string `json:"family"`
	Rule   string `json:"rule"`
	// Outcome is what the fast path did with the packets the rule decided (Outcome*); Why says,
	// for OutcomeLinux, what makes them Linux's.
	Outcome string  `json:"outcome"`
	Why     string  `json:"why,omitempty"`
	Counter Counter `json:"counter"`
}

// What the fast path did with the packets a rule decided.
const (
	OutcomeDropped = "dropped"
	OutcomeMatched = "matched" // accepted, or returned from / went past its chain
	OutcomeLinux   = "linux"   // handed to Linux: the rule, or what decides before it, is Linux's
)

func outcome(a compile.Action) string {
	switch a {
	case compile.ActDrop:
		return OutcomeDropped
	case compile.ActLinux:
		return OutcomeLinux
	}
	return OutcomeMatched
}

// FilterCounters sums the fast path's per-flat-rule counters by the rule they come from and what
// happened to the packets, for the rulesets installed now: nonzero ones, and with linux every
// rule that hands packets to Linux, counted or not.
func (d *Dataplane) FilterCounters(linux bool) ([]RuleCounter, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := &d.fw
	var out []RuleCounter
	var per []linuxfpLfpCounter
	for fam, p := range []*compile.Program{st.prog4, st.prog6} {
		if p == nil || p.Empty || st.flags&(fwActive4<<fam) == 0 {
			continue
		}
		type group struct{ name, outcome, why string }
		sums := map[group]*Counter{}
		var order []group
		for i, r := range p.Rules {
			key := st.bank*uint32(d.fwCap) + st.ruleBase[fam] + uint32(i)
			if err := d.maps.LfpFwStats.Lookup(key, &per); err != nil {
				return nil, fmt.Errorf("filter counters: %w", err)
			}
			var c Counter
			for _, x := range per {
				c.Packets += x.Packets
				c.Bytes += x.Bytes
			}
			if c.Packets == 0 && !(linux && r.Action == compile.ActLinux) {
				continue
			}
			g := group{name: originName(r.Origin), outcome: outcome(r.Action)}
			if r.Action == compile.ActLinux {
				g.why = r.Origin.Note
			}
			if sums[g] == nil {
				sums[g] = &Counter{}
				order = append(order, g)
			}
			sums[g].Packets += c.Packets
			sums[g].Bytes += c.Bytes
		}
		for _, g := range order {
			out = append(out, RuleCounter{Family: []string{"ipv4", "ipv6"}[fam], Rule: g.name, Outcome: g.outcome,
				Why: g.why, Counter: *sums[g]})
		}
	}
	return out, nil
}

func originName(o compile.Origin) string {
	switch {
	case o.Rule != nil:
		return o.Rule.ID.String()
	case o.Chain != nil:
		return o.Chain.Key.String() + " policy"
	}
	return o.Note
}

// filterModule is the filter's part of Sync once syncFilter has written its maps (Sync runs
// that first, for the gate): lfp_config flips to the bank written, and the sets only the old
// ruleset used are dropped after the flip.
type filterModule struct{ flags, bank uint32 }

func (f filterModule) sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
	cfg.FwFlags, cfg.FwBank, cfg.FwBase = linuxfpLfpFwFlags(f.flags), f.bank, f.bank*uint32(d.fwCap)
	cfg.FwDefaultLeaf, cfg.FwCtNone = d.fw.defLeaf, d.fw.ctNone
	return nil, []func() error{d.dropOldSets}
}
