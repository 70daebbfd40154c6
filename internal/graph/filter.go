package graph

import (
	"fmt"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// netfilterWhy says whether netfilter rules on the forward path keep family fam (0 IPv4, 1 IPv6)
// from the fast path (off) or are handled by the filter module (notes).
func netfilterWhy(s *observe.Snapshot, fam int) (off, notes []string) {
	reasons, legacy := s.Netfilter.V4, s.Netfilter.LegacyV4
	if fam == 1 {
		reasons, legacy = s.Netfilter.V6, s.Netfilter.LegacyV6
	}
	if len(reasons) == 0 {
		return nil, nil
	}
	prefix := func(ws []string) []string {
		var out []string
		for _, w := range ws {
			out = append(out, "netfilter sees forwarded packets: "+w)
		}
		return out
	}
	if len(legacy) > 0 {
		return prefix(legacy), nil
	}
	f := s.Filter
	switch {
	case f == nil:
		return prefix(reasons), nil
	case f.Err[fam] != "":
		return append(prefix(reasons), "filter module: "+f.Err[fam]), nil
	case f.NAT[fam]:
		// A reply of a translated connection matches nothing in the rules (it is translated
		// back from the connection's conntrack entry): not modelled yet.
		return []string{"netfilter NAT rules: replies of translated connections need their conntrack entry (not modelled yet)"}, nil
	}
	p := f.Prog[fam]
	if p == nil || p.Empty {
		return nil, nil
	}
	linux := 0
	for _, r := range p.Rules {
		if r.Action == compile.ActLinux {
			linux++
		}
	}
	return nil, []string{fmt.Sprintf("filter module: %d netfilter rules compiled into %d (%d hand the packets that reach them to Linux)",
		f.Rules[fam], len(p.Rules), linux)}
}

// filterData is what the filter module reads: the programs of the families it classifies, and
// every interface's pattern bits.
func filterData(s *observe.Snapshot) dataplane.FilterData {
	var fd dataplane.FilterData
	if s.Filter == nil {
		return fd
	}
	var progs [2]*compile.Program
	for fam := range progs {
		off, notes := netfilterWhy(s, fam)
		if len(off) == 0 && len(notes) > 0 {
			progs[fam] = s.Filter.Prog[fam]
		}
	}
	fd.Prog4, fd.Prog6 = progs[0], progs[1]
	if fd.Prog4 == nil && fd.Prog6 == nil {
		return fd
	}
	for _, lk := range s.Links {
		fi := dataplane.FilterIface{Ifindex: lk.Index}
		for fam, p := range progs {
			if p == nil {
				continue
			}
			for i, pat := range p.Patterns {
				if pat.Matches(lk.Name) {
					fi.Bits[fam] |= 1 << i
				}
			}
		}
		// A veth whose peer is in this namespace carries skbs from this namespace's stack,
		// marks included; elsewhere (a NIC, another namespace) the mark is 0 at XDP.
		fi.MarkUnsafe = lk.Kind == "veth" && lk.PeerNetnsID == -1
		fd.Ifaces = append(fd.Ifaces, fi)
	}
	return fd
}

// filterNotes are the filter module's notes for the families an interface routes.
func filterNotes(s *observe.Snapshot, r4, r6 bool) []string {
	var out []string
	for fam, on := range []bool{r4, r6} {
		if !on {
			continue
		}
		_, notes := netfilterWhy(s, fam)
		for _, n := range notes {
			out = append(out, []string{"ipv4 ", "ipv6 "}[fam]+n)
		}
	}
	return out
}
