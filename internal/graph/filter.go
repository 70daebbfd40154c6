package graph

import (
	"fmt"
	"time"

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
	f := filterOf(s)
	switch {
	case f == nil:
		return prefix(reasons), nil
	case f.Err[fam] != "":
		return append(prefix(reasons), "filter module: "+f.Err[fam]), nil
	case f.Tracked[fam] && s.Sysctl.Conntrack.TCPTimeoutEstablished == 0:
		return []string{"netfilter tracks connections (" + trackedWhy(f, fam) + "), and the nf_conntrack sysctls could not be read (the conntrack module needs them)"}, nil
	}
	if f.Tracked[fam] {
		// Netfilter tracks every connection of the family: the conntrack module
		// (bpf/lib/ct.h) takes only established connections, as Linux would see them.
		n := "conntrack: netfilter tracks connections (" + trackedWhy(f, fam) + "): Linux decides every new one; the fast path takes the later packets of established ones"
		switch {
		case f.PrePost[fam]:
			n += " (translated ones: Linux's, a rule on prerouting or postrouting would see them before or after the translation: " + f.PrePostWhy[fam] + ")"
		default:
			n += ", translating them as their entry says"
		}
		notes = append(notes, n)
	}
	p := f.Prog[fam]
	if p == nil || p.Empty {
		return nil, notes
	}
	linux := 0
	for _, r := range p.Rules {
		if r.Action == compile.ActLinux {
			linux++
		}
	}
	return nil, append(notes, fmt.Sprintf("filter module: %d netfilter rules compiled into %d (%d hand the packets that reach them to Linux)",
		f.Rules[fam], len(p.Rules), linux))
}

// ctActive: the conntrack module runs for family fam (netfilter tracks its forwarded
// connections, and the family is not off for another netfilter reason).
func ctActive(s *observe.Snapshot, fam int) bool {
	off, _ := netfilterWhy(s, fam)
	f := filterOf(s)
	return f != nil && f.Tracked[fam] && len(off) == 0
}

// ctData is what the conntrack module reads.
func ctData(s *observe.Snapshot) dataplane.CT {
	c := s.Sysctl.Conntrack
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	return dataplane.CT{
		Active4: ctActive(s, 0), Active6: ctActive(s, 1),
		NAT4:           ctActive(s, 0) && !filterOf(s).PrePost[0],
		NAT6:           ctActive(s, 1) && !filterOf(s).PrePost[1],
		TCPLiberal:     c.TCPBeLiberal,
		Checksum:       c.Checksum,
		TCPEstablished: sec(c.TCPTimeoutEstablished),
		TCPCloseWait:   sec(c.TCPTimeoutCloseWait),
		TCPUnack:       sec(c.TCPTimeoutUnack),
		TCPRetrans:     sec(c.TCPTimeoutMaxRetrans),
		TCPMaxRetrans:  c.TCPMaxRetrans,
		UDPStream:      sec(c.UDPTimeoutStream),
		UDP:            sec(c.UDPTimeout),
	}
}

// filterData is what the filter module reads: the programs of the families it classifies, and
// every interface's pattern bits.
func filterData(s *observe.Snapshot) dataplane.FilterData {
	var fd dataplane.FilterData
	f := filterOf(s)
	if f == nil {
		return fd
	}
	var progs [2]*compile.Program
	for fam := range progs {
		off, _ := netfilterWhy(s, fam)
		if p := f.Prog[fam]; len(off) == 0 && p != nil && !p.Empty {
			progs[fam] = p
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
		fd.Ifaces = append(fd.Ifaces, fi)
	}
	return fd
}

// markUnsafe: lk's packets may carry a mark: a veth whose peer is in this namespace carries skbs
// of this namespace's stack, marks included; elsewhere (a NIC, another namespace) the mark is 0
// at XDP.
func markUnsafe(lk *observe.Link) bool { return lk.Kind == "veth" && lk.PeerNetnsID == -1 }

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

// trackedWhy says what makes netfilter track family fam's connections: the first cause and how
// many more.
func trackedWhy(f *Filter, fam int) string {
	why := f.TrackedWhy[fam]
	switch len(why) {
	case 0:
		return "nat chains"
	case 1:
		return why[0]
	}
	return fmt.Sprintf("%s, and %d more", why[0], len(why)-1)
}
