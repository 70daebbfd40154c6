package controller

import (
	"encoding/json"
	"net/http"
	"os"
	"sort"
	"strconv"
	"syscall"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/status"
)

const syscallEADDRINUSE = syscall.EADDRINUSE

func (c *Controller) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, c.status(r.URL.Query().Get("verbose") == "1"))
	})
	mux.HandleFunc("GET /v1/changes", func(w http.ResponseWriter, r *http.Request) {
		since, _ := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
		c.mu.Lock()
		out := []status.Change{}
		for _, ch := range c.changes {
			if ch.Seq > since {
				out = append(out, ch)
			}
		}
		c.mu.Unlock()
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /v1/monitor", c.serveMonitor)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (c *Controller) status(verbose bool) *status.Status {
	installed := c.dp.Installed()
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &status.Status{
		Version:        c.cfg.Metrics.Version,
		Commit:         c.cfg.Metrics.Commit,
		PID:            os.Getpid(),
		StartedAt:      c.started,
		HookOption:     string(c.cfg.Options.Hook),
		SysctlWatch:    c.w.SysctlMethod,
		IPSetWatch:     c.w.IPSetMethod,
		FDBWatch:       c.w.FDBMethod,
		NeighWatch:     c.w.NeighMethod,
		CtFreeWatch:    c.w.CtFreeMethod,
		IPSetReads:     c.obs.SetReads(),
		NetlinkChanges: c.w.NetlinkChanges(),
		Events:         c.events,
		Applies:        c.seq,
		Busy:           c.busy.Load(),
		Interfaces:     []status.Interface{},
	}
	if c.applyErr != "" {
		since := c.applyErrSince
		st.ApplyError, st.ApplyErrorSince = c.applyErr, &since
	}
	st.FamiliesToLinux = c.dp.Failed().Names()
	st.FenceWatch = c.w.Fence
	if f, err := c.dp.Fenced(); err == nil {
		st.Fenced = f.Names()
	}
	if st.FenceWatch {
		if seq, err := c.dp.Fence(); err == nil {
			st.FenceCounts = map[string]uint64{}
			for u, n := range seq {
				st.FenceCounts[dataplane.FenceUnitName(u)] = n
			}
		}
	}
	if n := len(c.changes); n > 0 {
		last := c.changes[n-1]
		st.LastApply = &last
	}
	if c.plan == nil {
		return st
	}
	st.NetfilterBackend = c.backend
	for i, fam := range []string{"ipv4", "ipv6"} {
		off := c.plan.FibCacheOff[i]
		st.FibCache = append(st.FibCache, status.FibCacheFamily{Family: fam, On: len(off) == 0, Off: off})
	}
	st.FDBEntries = len(c.plan.Data.FDB)
	if c.plan.Data.CT.Active4 {
		st.Conntrack = append(st.Conntrack, "ipv4")
	}
	if c.plan.Data.CT.Active6 {
		st.Conntrack = append(st.Conntrack, "ipv6")
	}
	st.CTLiberal, st.CTLiberalFailed = c.ctLiberal.Load(), c.ctLiberalFailed.Load()
	st.ProgramKinds, st.ProgramsVerified = c.dp.Kinds(), c.dp.Verified()
	if rcs, err := c.dp.FilterCounters(verbose); err == nil {
		for _, rc := range rcs {
			st.FilterRules = append(st.FilterRules, status.FilterRule{Family: rc.Family, Rule: rc.Rule, Outcome: rc.Outcome,
				Why: rc.Why, Counter: status.Counter(rc.Counter)})
		}
	}
	for idx, it := range c.plan.Interfaces {
		lk := c.links[idx]
		si := status.Interface{Ifindex: idx, Name: it.Name, Kind: lk.Kind, MAC: lk.MAC.String(), MTU: lk.MTU,
			Up: lk.Up, Carrier: lk.OperUp, Notes: it.Notes, Egress: it.Egress, EgressNote: it.EgressNote,
			TCEgress: it.TCEgress, TCPeer: it.TCPeer}
		if m, ok := c.links[lk.Master]; ok && lk.Master != 0 {
			si.Master = m.Name
		}
		if lk.Kind == "veth" {
			si.Peer, si.PeerNetnsID = lk.Peer, lk.PeerNetnsID
		}
		if in, ok := installed[idx]; ok {
			si.Program = &status.Program{
				ID: uint32(in.ProgramID), Hook: string(in.Spec.Hook), Modules: in.Spec.Modules(),
				Families: families(in.Spec), InstalledAt: in.InstalledAt,
				TCAfterXDP: in.TCProgramID != 0, TCID: uint32(in.TCProgramID),
			}
			if cs, err := c.dp.Counters(in.Slot); err == nil {
				si.Forwarded = status.Counter(cs[dataplane.Forwarded])
				si.Bridged = status.Counter(cs[dataplane.Bridged])
				si.Encapsulated = status.Counter(cs[dataplane.Encapsulated])
				si.Decapsulated = status.Counter(cs[dataplane.Decapsulated])
				si.Dropped = status.Counter(cs[dataplane.FilterDropped])
				si.ToTC = status.Counter(cs[dataplane.ToTC])
				si.Passed = map[string]status.Counter{}
				for r, cn := range cs {
					if !dataplane.Reason(r).FastPathed() && dataplane.Reason(r) != dataplane.ToTC && cn.Packets > 0 {
						si.Passed[dataplane.Reason(r).String()] = status.Counter(cn)
					}
				}
			}
		}
		st.Interfaces = append(st.Interfaces, si)
	}
	sort.Slice(st.Interfaces, func(i, j int) bool { return st.Interfaces[i].Ifindex < st.Interfaces[j].Ifindex })
	return st
}
