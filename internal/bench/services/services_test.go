package services

import (
	"bytes"
	"context"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/harness/benchtest"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

func TestServicesConfigDefaults(t *testing.T) {
	c := Config{Run: harness.Run{Binary: "linuxfp", Modes: []harness.Mode{harness.ModeLinuxfpTC, harness.ModeLinux}}, Services: []int{1000, 1, 100, 1},
		Workloads: []Workload{UDP, CRR}}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Services, []int{1, 100, 1000}) || !slices.Equal(c.Modes, []harness.Mode{harness.ModeLinux, harness.ModeLinuxfpTC}) ||
		!slices.Equal(c.Workloads, []Workload{CRR, UDP}) {
		t.Errorf("services %v, modes %v, workloads %v: want sorted, deduplicated, in report order", c.Services, c.Modes, c.Workloads)
	}
	if c.Pods != 6 || c.CRRWorkers <= 0 || c.RRSessions <= 0 || c.Streams <= 0 || c.GenCores != 1 || c.FrameSize != 64 ||
		c.Duration <= 0 || c.Warmup <= 0 || c.Rounds <= 0 || c.Log == nil {
		t.Errorf("defaults not set: %+v", c)
	}
	want := []Case{{Services: 1}, {Services: 100}, {Services: 1000}, {Services: 1000, FromPods: true}, {Services: 1000, Masquerade: true}}
	if got := c.cases(); !slices.Equal(got, want) {
		t.Errorf("cases %v, want %v", got, want)
	}
	if got := (&Config{Services: []int{}}).cases(); !slices.Equal(got, []Case{{Masquerade: true}}) {
		t.Errorf("masquerade alone: cases %v", got)
	}
	// IPv6: a case after each service count's IPv4 one, and after the IPv4 from-pods case; the
	// masquerade case is IPv4's only.
	dual := Config{Services: []int{1, 100}, Families: []harness.Family{harness.IPv4, harness.IPv6}}
	want = []Case{{Services: 1}, {Services: 1, IPv6: true}, {Services: 100}, {Services: 100, IPv6: true},
		{Services: 100, FromPods: true}, {Services: 100, FromPods: true, IPv6: true}, {Services: 100, Masquerade: true}}
	if got := dual.cases(); !slices.Equal(got, want) {
		t.Errorf("dual-stack cases %v, want %v", got, want)
	}
	only6 := Config{Services: []int{1}, Families: []harness.Family{harness.IPv6}}
	if got := only6.cases(); !slices.Equal(got, []Case{{Services: 1, IPv6: true}, {Services: 1, FromPods: true, IPv6: true}}) {
		t.Errorf("IPv6 alone: cases %v", got)
	}
	for _, bad := range []Config{
		{Run: harness.Run{Binary: "linuxfp"}, Services: []int{0}},
		{Run: harness.Run{Binary: "linuxfp"}, Services: []int{20000}},
		{Run: harness.Run{Binary: "linuxfp", Modes: []harness.Mode{harness.ModeCeiling}}},
		{Run: harness.Run{Binary: "linuxfp"}, Pods: 2},
		{Run: harness.Run{Binary: "linuxfp"}, FrameSize: 1500},
		{Run: harness.Run{Binary: "linuxfp"}, GenCores: 1000},
		{Run: harness.Run{Binary: "linuxfp"}, Services: []int{}, NoMasquerade: true},
		{Run: harness.Run{Modes: []harness.Mode{harness.ModeLinuxfp}}},                                     // no binary to run
		{Run: harness.Run{Binary: "linuxfp"}, Families: []harness.Family{harness.IPv6}, Services: []int{}}, // masquerade: IPv4's
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if _, err := ParseWorkload("udp"); err != nil {
		t.Error(err)
	}
	if _, err := ParseWorkload("tcp"); err == nil {
		t.Error("workload tcp accepted")
	}
}

// The result keeps the medians of the completed rounds and their ratios to Linux, checks issue 6's
// target per case, and flags what a reader must know.
func TestServicesResult(t *testing.T) {
	cfg := Config{Run: harness.Run{Modes: Modes, Rounds: 3}, Workloads: []Workload{CRR, UDP}, Services: []int{1}}
	r := newResult(cfg)
	one, masq := Case{Services: 1}, Case{Services: 1, Masquerade: true}
	backends := map[string]uint64{"198.19.1.2": 10}
	for _, v := range []float64{1, 3, 2} {
		r.add(one, UDP, harness.ModeLinux, Round{Value: v, Flows: 1, Backends: backends})
		r.add(masq, UDP, harness.ModeLinux, Round{Value: v, Flows: 1, Backends: backends})
		r.add(one, CRR, harness.ModeLinux, Round{Value: 1000 * v, AvgUs: 100 * v, P99Us: 300 * v, Backends: backends})
	}
	fp := &harness.NodeFastPath{FastPathCounts: harness.FastPathCounts{FastPathed: map[string]uint64{"forwarded": 90}, Passed: map[string]uint64{"ct_new": 10}},
		Interfaces: map[string]*harness.FastPathCounts{"in0": {FastPathed: map[string]uint64{"forwarded": 90}, Passed: map[string]uint64{"ct_new": 10}}}}
	r.add(one, UDP, harness.ModeLinuxfp, Round{Value: 7, Flows: 1, Backends: backends, FastPath: fp, Hooks: map[string]string{"in0": "xdp"}})
	r.add(one, UDP, harness.ModeLinuxfp, Round{Error: "no frame reached the sinks"})
	r.add(one, UDP, harness.ModeLinuxfpTC, Round{Value: 5, Flows: 0, Backends: backends})
	r.add(masq, UDP, harness.ModeLinuxfp, Round{Value: 4, Flows: 1, Backends: map[string]uint64{}})
	r.add(one, CRR, harness.ModeLinuxfp, Round{Value: 1500, AvgUs: 150, P99Us: 900, Errors: 2, FirstError: "i/o timeout", Backends: backends})
	r.finish(time.Minute)

	if len(r.Rows) != 3 || r.Rows[0].Workload != CRR || r.Rows[1].Workload != UDP || r.Rows[2].Case != masq {
		t.Fatalf("rows in the wrong order: %+v", r.Rows)
	}
	udp := r.Rows[1]
	if l := udp.Modes[harness.ModeLinux]; l.Value != 2 || l.Failed != 0 {
		t.Errorf("Linux: %+v", l)
	}
	if f := udp.Modes[harness.ModeLinuxfp]; f.Value != 7 || f.Failed != 1 || len(f.Rounds) != 2 {
		t.Errorf("linuxfp: %+v", f)
	}
	if udp.OverLinux[harness.ModeLinuxfp] != 3.5 || udp.OverLinux[harness.ModeLinuxfpTC] != 2.5 {
		t.Errorf("ratios %v", udp.OverLinux)
	}
	if crr := r.Rows[0]; crr.Modes[harness.ModeLinux].AvgUs != 200 || crr.OverLinux[harness.ModeLinuxfp] != 0.75 {
		t.Errorf("crr: %+v %v", crr.Modes[harness.ModeLinux], crr.OverLinux)
	}
	if len(r.Targets) != 2 || r.Targets[0].Case != one || !r.Targets[0].Met[harness.ModeLinuxfp] || r.Targets[0].Met[harness.ModeLinuxfpTC] ||
		r.Targets[1].Case != masq || r.Targets[1].Met[harness.ModeLinuxfp] {
		t.Errorf("targets %+v", r.Targets)
	}
	if !r.Measured() || (*Result)(nil).Measured() {
		t.Error("Measured")
	}
	var out bytes.Buffer
	r.WriteTable(&out)
	for _, s := range []string{
		"1 service       crr  conn/s", "0.75x", "+50.0%", "masquerade       udp    Mpps",
		"1 service: linuxfp 3.50x (met), linuxfp-tc 2.50x (not met)", "masquerade: linuxfp 2.00x (not met)",
		"forwarded 90", "ct_new 10", "in0 xdp 100 runs 90.0%",
		"! linuxfp, 1 service, udp, round 2 failed: no frame reached the sinks",
		"! linuxfp, 1 service, crr, round 1: 2 connections failed (i/o timeout)",
		"! linuxfp-tc, 1 service, udp, round 1: 0 of the 1 flows had a conntrack entry after the warm-up",
		"! linuxfp, masquerade, udp, round 1: no endpoint received anything",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
}

// The benchmark runs end to end, small and short, in every mode: every case and workload gives a
// number in every mode, the traffic reaches the endpoints (every pod for the connections to random
// services, one per flow's conntrack entry for udp), linuxfp's programs report what they did and
// take the udp flows, and every namespace the benchmark created is gone afterwards.
func TestRunServices(t *testing.T) {
	benchtest.NeedRoot(t)
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("iptables-restore not installed")
	}
	bin := filepath.Join(t.TempDir(), "linuxfp")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/linuxfp").CombinedOutput(); err != nil {
		t.Fatalf("build linuxfp: %v\n%s", err, out)
	}
	// A prefix of its own: other tests, and other runs of this one, may run at the same time.
	prefix := benchtest.Prefix("lfp-svcb")
	before := benchtest.Namespaces(t, prefix)
	res, err := Run(context.Background(), Config{Services: []int{2}, Pods: 3,
		CRRWorkers: 2, RRSessions: 2, Streams: 2, Prefix: prefix,
		Run: harness.Run{Binary: bin, Duration: 200 * time.Millisecond, Warmup: 100 * time.Millisecond, Rounds: 1}})
	for _, ns := range benchtest.Namespaces(t, prefix) {
		if !slices.Contains(before, ns) {
			t.Errorf("namespace %s left behind", ns)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 3*len(Workloads) {
		t.Fatalf("%d rows, want %d", len(res.Rows), 3*len(Workloads))
	}
	for _, row := range res.Rows {
		for _, m := range Modes {
			sm := row.Modes[m]
			if sm == nil || len(sm.Rounds) != 1 {
				t.Errorf("%s, %s, %s: not measured", m, row.Case, row.Workload)
				continue
			}
			rd := sm.Rounds[0]
			where := string(m) + ", " + row.Case.String() + ", " + string(row.Workload)
			if rd.Error != "" || sm.Value <= 0 || rd.Count == 0 {
				t.Errorf("%s: %+v", where, rd)
			}
			var reached uint64
			for _, n := range rd.Backends {
				reached += n
			}
			if reached == 0 {
				t.Errorf("%s: no endpoint received anything", where)
			}
			if row.Workload == CRR && !row.Case.Masquerade && len(rd.Backends) != 3 {
				t.Errorf("%s: connections to random services reached %v, want all 3 pods", where, rd.Backends)
			}
			if row.Workload == UDP {
				want := 2
				if row.Case.Masquerade {
					want = 1
				}
				if rd.Flows != want || rd.Offered == 0 {
					t.Errorf("%s: %d flows in conntrack (want %d), %d frames offered", where, rd.Flows, want, rd.Offered)
				}
			}
			if !m.RunsLinuxfp() {
				if rd.FastPath != nil {
					t.Errorf("%s: linuxfp counters without linuxfp", where)
				}
				continue
			}
			if rd.FastPath == nil || rd.FastPath.Runs() == 0 || len(rd.Hooks) == 0 {
				t.Errorf("%s: linuxfp's programs report nothing: %+v, hooks %v", where, rd.FastPath, rd.Hooks)
				continue
			}
			// From pod 0, a flow whose endpoint is pod 0 itself goes back out of its own port:
			// Linux's (hairpin); both flows may have drawn it (1 in 9). Around them, a few
			// packets meet other reasons (conntrack states Linux moves, a stray multicast).
			var passed uint64
			for _, n := range rd.FastPath.Passed {
				passed += n
			}
			onlyHairpin := passed > 0 && rd.FastPath.Passed["hairpin"] >= passed*99/100
			if row.Workload == UDP && rd.FastPath.Fast() == 0 && !(row.Case.FromPods && onlyHairpin) {
				t.Errorf("%s: linuxfp fast-pathed none of the established flows' packets (to Linux: %v)", where, rd.FastPath.Passed)
			}
		}
	}
}

// The IPv6 cases run end to end on a dual-stack node, in either of kube-proxy's modes, among the
// IPv4 ones (pod 0 holds the pod cases' generators of both families): from the client, and from
// the pods (the node's bridge carries the DNAT'd packets, br_netfilter's IPv6 hooks translate
// them). The generator's IPv6 flows to the services' IPv6 cluster IPs each get a conntrack entry
// (DNAT to an endpoint's IPv6 address), reach the endpoints, and linuxfp fast-paths them (but a
// flow from pod 0 whose endpoint is pod 0 itself: hairpin, Linux's); a half-closed download over
// IPv6 reaches the endpoints from either side; every case of both families measures; the
// namespaces are gone afterwards.
func TestRunServicesIPv6(t *testing.T) {
	benchtest.NeedRoot(t)
	bin := filepath.Join(t.TempDir(), "linuxfp")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/linuxfp").CombinedOutput(); err != nil {
		t.Fatalf("build linuxfp: %v\n%s", err, out)
	}
	for _, mode := range []testbed.ProxyMode{testbed.ProxyIPTables, testbed.ProxyNFTables} {
		t.Run(string(mode), func(t *testing.T) { runServicesIPv6(t, bin, mode) })
	}
}

func runServicesIPv6(t *testing.T, bin string, mode testbed.ProxyMode) {
	tool := map[testbed.ProxyMode]string{testbed.ProxyIPTables: "ip6tables-restore", testbed.ProxyNFTables: "nft"}[mode]
	if _, err := exec.LookPath(tool); err != nil {
		t.Skip(tool + " not installed")
	}
	// A prefix of its own: other tests, and other runs of this one, may run at the same time.
	prefix := benchtest.Prefix("lfp-svcb6")
	before := benchtest.Namespaces(t, prefix)
	modes := []harness.Mode{harness.ModeLinux, harness.ModeLinuxfp}
	res, err := Run(context.Background(), Config{Services: []int{2}, Pods: 3, Prefix: prefix, Streams: 2,
		Workloads: []Workload{DownloadHalfClosed, UDP}, Families: []harness.Family{harness.IPv4, harness.IPv6}, ProxyMode: mode,
		Run: harness.Run{Binary: bin, Modes: modes, Duration: 200 * time.Millisecond, Warmup: 100 * time.Millisecond, Rounds: 1}})
	for _, ns := range benchtest.Namespaces(t, prefix) {
		if !slices.Contains(before, ns) {
			t.Errorf("namespace %s left behind", ns)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, row := range res.Rows {
		got = append(got, row.Case.String()+" "+string(row.Workload))
	}
	for _, c := range []string{"2 services", "2 services, IPv6", "from pods", "from pods, IPv6", "masquerade"} {
		want = append(want, c+" download-halfclosed", c+" udp")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q", got, want)
	}
	for _, row := range res.Rows {
		for _, m := range modes {
			sm := row.Modes[m]
			where := string(m) + ", " + row.Case.String() + ", " + string(row.Workload)
			if sm == nil || len(sm.Rounds) != 1 {
				t.Fatalf("%s: not measured", where)
			}
			rd := sm.Rounds[0]
			if rd.Error != "" || rd.Count == 0 || len(rd.Backends) == 0 {
				t.Errorf("%s: %+v (want traffic at the endpoints)", where, rd)
			}
			if !row.Case.IPv6 {
				continue // TestRunServices checks the IPv4 cases
			}
			for addr := range rd.Backends {
				if a, err := netip.ParseAddr(addr); err != nil || !a.Is6() {
					t.Errorf("%s: endpoint %q, want a pod's IPv6 address", where, addr)
				}
			}
			if row.Workload != UDP {
				continue
			}
			if rd.Flows != 2 {
				t.Errorf("%s: %d flows in conntrack, want 2", where, rd.Flows)
			}
			if !m.RunsLinuxfp() {
				continue
			}
			fp := rd.FastPath
			if fp == nil {
				t.Fatalf("%s: no linuxfp counters", where)
			}
			// From pod 0 both flows may have drawn pod 0 itself (1 in 9): hairpin, Linux's.
			var passed uint64
			for _, n := range fp.Passed {
				passed += n
			}
			onlyHairpin := passed > 0 && fp.Passed["hairpin"] >= passed*99/100
			if fp.Fast() < rd.Count/2 && !(row.Case.FromPods && onlyHairpin) {
				t.Errorf("%s: linuxfp fast-pathed too little of %d frames: %+v", where, rd.Count, fp)
			}
		}
	}
}
