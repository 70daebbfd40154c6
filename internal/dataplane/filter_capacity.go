package dataplane

import (
	"fmt"
	"maps"
	"math/bits"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
)

// The filter's maps are arrays (an inlined lookup per rule) made for a capacity: two banks of
// it. They start at initialFilterRules and follow the ruleset: a ruleset that does not fit gets
// maps twice its size or more (up to Options.FilterRules), and one that uses less than a quarter
// of a grown capacity gives the memory back. Programs hold their maps from the moment they are
// loaded, so new maps mean new programs: every kind in use is verified again with the new maps
// and swapped in with a link update, while the gate hands every packet to Linux.

// initialFilterRules is the capacity the maps are made with (LFP_FW_MAX_RULES): about 20 MB.
const initialFilterRules = 16384

// setFilterCapacity sizes the filter maps of the specs for n rules per bank.
func setFilterCapacity(specs []*ebpf.CollectionSpec, n int) {
	for _, cs := range specs {
		for _, name := range filterMaps {
			cs.Maps[name].MaxEntries = uint32(2 * n)
		}
	}
}

// filterCapacityFor is the capacity for a ruleset of n flat rules or leaves: a power of two
// with room for a quarter more.
func filterCapacityFor(n int) int {
	return 1 << bits.Len(uint(n+n/4))
}

// fitFilterLocked brings the filter maps to a capacity f fits in, or says it cannot.
func (d *Dataplane) fitFilterLocked(f FilterData) error {
	need := 0
	for _, p := range []*compile.Program{f.Prog4, f.Prog6} {
		if p != nil && !p.Empty {
			need += max(len(p.Rules), len(p.Leaves))
		}
	}
	want := d.fwCap
	switch {
	case need > d.fwMax:
		return fmt.Errorf("filter: %d flat rules or leaves: %w of %d (linuxfp run --filter-rules)", need, ErrFilterCapacity, d.fwMax)
	case need > d.fwCap:
		want = min(max(filterCapacityFor(need), 2*d.fwCap), d.fwMax)
	case d.fwCap > initialFilterRules && need < d.fwCap/4:
		want = max(filterCapacityFor(need), initialFilterRules)
	}
	if want == d.fwCap {
		return nil
	}
	return d.resizeFilterLocked(want)
}

// resizeFilterLocked replaces the filter maps with maps for n rules per bank, and every
// program with one using them. On failure the old maps and programs stay, and the caller's
// families stay with Linux (Sync holds them at the gate).
func (d *Dataplane) resizeFilterLocked(n int) error {
	t0 := time.Now()
	// Until the new ruleset is written, no packet may be decided with either map set.
	if err := d.setGateLocked(d.failed | BothFamilies); err != nil {
		return err
	}
	fresh := map[string]*ebpf.Map{}
	closeAll := func() {
		for _, m := range fresh {
			m.Close()
		}
	}
	for _, name := range filterMaps {
		ms := d.spec.Maps[name].Copy()
		ms.MaxEntries = uint32(2 * n)
		m, err := ebpf.NewMap(ms)
		if err != nil {
			closeAll()
			return fmt.Errorf("filter maps for %d rules: %w", n, err)
		}
		fresh[name] = m
	}
	shared := maps.Clone(d.shared)
	maps.Copy(shared, fresh)
	specs := []*ebpf.CollectionSpec{d.spec, d.tcSpec}
	setFilterCapacity(specs, n)

	// One program per kind in use, verified with the new maps before anything changes.
	kinds := map[progKind]bool{}
	for _, i := range d.ifaces {
		kinds[keyOf(i.Spec, false)] = true
		if i.tcLink != nil {
			kinds[keyOf(i.Spec, true)] = true
		}
	}
	progs := map[progKind]*ebpf.Program{}
	for k := range kinds {
		p, err := d.verify(k, shared)
		d.verified.Add(1)
		if err != nil {
			for _, p := range progs {
				p.Close()
			}
			closeAll()
			setFilterCapacity(specs, d.fwCap)
			return fmt.Errorf("programs for %d filter rules: %w", n, err)
		}
		progs[k] = p
	}
	// From here the new maps are the ones: a program that cannot be swapped is detached.
	d.mapsGen++
	// swap puts k's new program on link l in place of *cur (and its id in *id).
	swap := func(idx int, l link.Link, k progKind, cur **ebpf.Program, id *ebpf.ProgramID) error {
		p, err := progs[k].Clone()
		if err != nil {
			return err
		}
		pid, err := programID(p)
		if err == nil {
			err = l.Update(p)
		}
		if err != nil {
			p.Close()
			return err
		}
		(*cur).Close()
		*cur, *id = p, pid
		d.own(idx, pid)
		return nil
	}
	for idx, i := range d.ifaces {
		if err := swap(idx, i.link, keyOf(i.Spec, false), &i.prog, &i.ProgramID); err != nil {
			d.log.Warn("program not replaced with the resized filter's: detached, its packets go to Linux", "interface", i.Spec.Name, "err", err)
			d.removeLocked(idx)
			continue
		}
		if i.tcLink == nil {
			continue
		}
		if err := swap(idx, i.tcLink, keyOf(i.Spec, true), &i.tcProg, &i.TCProgramID); err != nil {
			d.log.Warn("tc program after XDP not replaced with the resized filter's: detached until asked again", "interface", i.Spec.Name, "err", err)
			d.detachCompanion(i)
		}
	}
	// Later loads use the new maps; the cache keeps the new programs only.
	old := d.shared
	d.shared = shared
	d.maps.LfpFwRules, d.maps.LfpFwLeaves, d.maps.LfpFwLpm = fresh["lfp_fw_rules"], fresh["lfp_fw_leaves"], fresh["lfp_fw_lpm"]
	d.maps.LfpFwHosts, d.maps.LfpFwStats = fresh["lfp_fw_hosts"], fresh["lfp_fw_stats"]
	d.closeProgramsLocked()
	done := make(chan struct{})
	close(done)
	for k, p := range progs {
		d.progs[k] = &cachedProg{prog: p, gen: d.mapsGen, shared: shared, loading: done, lastUsed: time.Now()}
	}
	for _, name := range filterMaps {
		old[name].Close()
	}
	// The new maps are empty: the next write fills a bank from scratch.
	st := &d.fw
	st.lpm, st.hosts, st.ruleBase = [2][]linuxfpLfpFwLpmKey{}, [2][]linuxfpLfpFwHostKey{}, [2]uint32{}
	st.prog4, st.prog6 = nil, nil
	d.log.Info("filter maps resized: programs reloaded, packets went to Linux meanwhile",
		"rules", n, "was", d.fwCap, "kinds", len(progs), "took", time.Since(t0).Round(time.Millisecond))
	d.fwCap = n
	return nil
}
