package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/linuxfp/linuxfp/internal/status"
)

// rates is one interface's packets per second over an interval, for the counters of the
// status table: routed (forwarded and encapsulated), bridged, dropped by the filter module and
// handed to Linux (every reason).
type rates struct {
	Routed  float64 `json:"routed"`
	Bridged float64 `json:"bridged"`
	Dropped float64 `json:"dropped"`
	ToLinux float64 `json:"to_linux"`
}

// totals are the packet counts rates are computed from.
type totals struct {
	routed, bridged, dropped, toLinux uint64
}

func interfaceTotals(it *status.Interface) totals {
	t := totals{
		routed:  it.Forwarded.Packets + it.Encapsulated.Packets,
		bridged: it.Bridged.Packets,
		dropped: it.Dropped.Packets,
	}
	for _, c := range it.Passed {
		t.toLinux += c.Packets
	}
	return t
}

// computeRates gives, per ifindex, the rates between two readings of the status taken dt apart.
// An interface is left out when a rate would be a guess: it had no program in either reading,
// its program was replaced in between (a new program may count in a reused slot), a counter went
// backwards, or the readings are from two different linuxfp processes.
func computeRates(prev, cur *status.Status, dt time.Duration) map[int]rates {
	out := map[int]rates{}
	if prev == nil || cur == nil || dt <= 0 || prev.PID != cur.PID || !prev.StartedAt.Equal(cur.StartedAt) {
		return out
	}
	before := map[int]*status.Interface{}
	for i := range prev.Interfaces {
		before[prev.Interfaces[i].Ifindex] = &prev.Interfaces[i]
	}
	sec := dt.Seconds()
	for i := range cur.Interfaces {
		it := &cur.Interfaces[i]
		p, ok := before[it.Ifindex]
		if !ok || it.Program == nil || p.Program == nil || p.Program.ID != it.Program.ID {
			continue
		}
		a, b := interfaceTotals(p), interfaceTotals(it)
		if b.routed < a.routed || b.bridged < a.bridged || b.dropped < a.dropped || b.toLinux < a.toLinux {
			continue
		}
		out[it.Ifindex] = rates{
			Routed:  float64(b.routed-a.routed) / sec,
			Bridged: float64(b.bridged-a.bridged) / sec,
			Dropped: float64(b.dropped-a.dropped) / sec,
			ToLinux: float64(b.toLinux-a.toLinux) / sec,
		}
	}
	return out
}

// formatRate writes packets per second as a person reads them: whole numbers, one decimal
// below 10 so a trickle does not read as 0, thousands and millions shortened.
func formatRate(r float64) string {
	switch {
	case r == 0:
		return "0/s"
	case r < 10:
		return fmt.Sprintf("%.1f/s", r)
	case r < 10_000:
		return fmt.Sprintf("%.0f/s", r)
	case r < 10_000_000:
		return fmt.Sprintf("%.0fk/s", r/1e3)
	}
	return fmt.Sprintf("%.0fM/s", r/1e6)
}

// counterCell is a table cell: the total, and with rates the rate beside it.
func counterCell(total uint64, rate float64, withRate bool) string {
	if !withRate {
		return fmt.Sprint(total)
	}
	return fmt.Sprintf("%d (%s)", total, formatRate(rate))
}

// The interface notes (internal/graph) that say a module runs where Program.Modules, which
// lists what the program was specialised for, does not name it: the filter module follows the
// ruleset through maps, and the VXLAN module runs in every tc program that routes IPv4 once a
// vxlan device is encapsulated or decapsulated in the fast path. statusrates_test.go checks
// that internal/graph still writes them.
const (
	noteFilter     = "filter module: " // then "N netfilter rules compiled into ..."; an error otherwise
	noteFilterOn   = "netfilter rules compiled into"
	noteVXLANEncap = "vxlan: IPv4 routed into it is encapsulated in the fast path"
	noteVXLANDecap = "vxlan: its IPv4 packets arriving on this host are decapsulated in the fast path"
)

// graphModules lists the modules its program runs, in the order a packet meets them: those
// of Program.Modules, then the filter module where a family it routes has a compiled ruleset,
// then the VXLAN module where its program has a tc stage that routes IPv4 and some vxlan device
// is handled in the fast path.
func graphModules(st *status.Status, it *status.Interface) []string {
	p := it.Program
	if p == nil {
		return nil
	}
	mods := append([]string(nil), p.Modules...)
	routes := func(fam string) bool { return slices.Contains(p.Families, fam) }
	filter := false
	for _, n := range it.Notes {
		for _, fam := range []string{"ipv4", "ipv6"} {
			if routes(fam) && strings.HasPrefix(n, fam+" "+noteFilter) && strings.Contains(n, noteFilterOn) {
				filter = true
			}
		}
	}
	if filter && !slices.Contains(mods, "filter") {
		mods = append(mods, "filter")
	}
	if (p.Hook == "tc" || p.TCAfterXDP) && routes("ipv4") && vxlanInFastPath(st) && !slices.Contains(mods, "vxlan") {
		mods = append(mods, "vxlan")
	}
	return mods
}

func vxlanInFastPath(st *status.Status) bool {
	for _, it := range st.Interfaces {
		for _, n := range it.Notes {
			if strings.HasPrefix(n, noteVXLANEncap) || strings.HasPrefix(n, noteVXLANDecap) {
				return true
			}
		}
	}
	return false
}
