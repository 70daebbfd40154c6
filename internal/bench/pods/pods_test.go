package pods

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/harness/benchtest"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

func TestPodsConfigDefaults(t *testing.T) {
	c := Config{Run: harness.Run{Binary: "linuxfp", Modes: []harness.Mode{harness.ModeCeiling, harness.ModeLinuxfp, harness.ModeLinux}},
		Pairs: []int{10, 1, 5, 1}, Workloads: []Workload{WorkloadInter, WorkloadIntra}}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Pairs, []int{1, 5, 10}) || !slices.Equal(c.Workloads, Workloads) || !slices.Equal(c.Modes, DefaultModes) {
		t.Errorf("pairs %v, workloads %v, modes %v: want sorted, deduplicated, in report order", c.Pairs, c.Workloads, c.Modes)
	}
	if c.Duration <= 0 || c.Warmup <= 0 || c.Rounds <= 0 || c.Log == nil {
		t.Errorf("defaults not set: %+v", c)
	}
	for _, bad := range []Config{
		{Run: harness.Run{Binary: "linuxfp"}, Pairs: []int{0}},
		{Run: harness.Run{Binary: "linuxfp"}, Pairs: []int{maxPodPairs + 1}},
		{Run: harness.Run{Binary: "linuxfp", Modes: []harness.Mode{"xdp"}}},
		{Run: harness.Run{Modes: []harness.Mode{harness.ModeLinuxfp}}}, // no binary to run
		// The tc ceiling forwards between pods of one node only.
		{Run: harness.Run{Modes: []harness.Mode{harness.ModeCeilingTC}}},
		{Run: harness.Run{Modes: []harness.Mode{harness.ModeCeilingTC}}, Workloads: []Workload{WorkloadInter}},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	d := Config{Run: harness.Run{Binary: "linuxfp"}}
	if err := d.defaults(); err != nil || !slices.Equal(d.Modes, DefaultModes) {
		t.Errorf("no modes given: %v, %v; want the defaults, without ceiling-tc", d.Modes, err)
	}
	tc := Config{Run: harness.Run{Modes: []harness.Mode{harness.ModeCeilingTC, harness.ModeLinux}}, Workloads: []Workload{WorkloadIntra}}
	if err := tc.defaults(); err != nil || !slices.Equal(tc.Modes, []harness.Mode{harness.ModeLinux, harness.ModeCeilingTC}) {
		t.Errorf("ceiling-tc, intra: %v, %v", tc.Modes, err)
	}
	if _, err := ParseWorkload("intra"); err != nil {
		t.Error(err)
	}
	if _, err := ParseWorkload("pods"); err == nil {
		t.Error("workload pods accepted")
	}
}

// node1 holds the clients, then the intra-node servers; node2 the inter-node servers.
func TestPodsLayout(t *testing.T) {
	for _, tc := range []struct {
		workloads []Workload
		pods      [2]int
	}{
		{Workloads, [2]int{20, 10}},
		{[]Workload{WorkloadIntra}, [2]int{20, 0}},
		{[]Workload{WorkloadInter}, [2]int{10, 10}},
	} {
		l := newPodsLayout(Config{Pairs: []int{1, 10, 2}, Workloads: tc.workloads})
		if l.pods != tc.pods || l.max != 10 {
			t.Errorf("%v: layout %+v, want pods %v", tc.workloads, l, tc.pods)
		}
	}
	p := &testbed.Pods{}
	for i := range p.Nodes {
		p.Nodes[i] = &testbed.PodNode{Index: i + 1}
		for k := range 4 {
			p.Nodes[i].Pods = append(p.Nodes[i].Pods, &testbed.Pod{HostVeth: string(rune('a'+i)) + string(rune('0'+k))})
		}
	}
	l := podsLayout{pods: [2]int{4, 2}, max: 2}
	for _, tc := range []struct {
		w              Workload
		k              int
		client, server string
	}{
		{WorkloadIntra, 0, "a0", "a2"}, {WorkloadIntra, 1, "a1", "a3"},
		{WorkloadInter, 0, "a0", "b0"}, {WorkloadInter, 1, "a1", "b1"},
	} {
		c, s := l.pair(p, tc.w, tc.k)
		if c.HostVeth != tc.client || s.HostVeth != tc.server {
			t.Errorf("%s pair %d: %s -> %s, want %s -> %s", tc.w, tc.k, c.HostVeth, s.HostVeth, tc.client, tc.server)
		}
	}
}

// The result keeps medians of the completed rounds, the ratios of the medians, and the paper's
// targets per workload over all pair counts.
func TestPodsResult(t *testing.T) {
	r := newResult(Config{Run: harness.Run{Modes: Modes, Rounds: 3}, Workloads: Workloads, Pairs: []int{1, 2}})
	round := func(tps, avg float64) Round {
		return Round{LatencyRound: harness.LatencyRound{TPS: tps, AvgUs: avg, P99Us: 2 * avg, StddevUs: 1}}
	}
	for _, tps := range []float64{100, 300, 200} {
		r.add(WorkloadInter, 2, harness.ModeLinux, round(tps, 10))
		r.add(WorkloadIntra, 1, harness.ModeLinux, round(tps, 10))
	}
	lfpRound := func(tps, avg float64, nodes ...*harness.NodeFastPath) Round {
		rd := round(tps, avg)
		rd.Nodes = nodes
		return rd
	}
	node := func(name string, fast, passed map[string]uint64) *harness.NodeFastPath {
		c := harness.FastPathCounts{FastPathed: fast, Passed: passed}
		return &harness.NodeFastPath{Node: name, FastPathCounts: c, Interfaces: map[string]*harness.FastPathCounts{"eth0": &c}}
	}
	r.add(WorkloadInter, 2, harness.ModeLinuxfp, lfpRound(500, 7,
		node("node1", map[string]uint64{"forwarded": 200}, map[string]uint64{"vxlan_rx": 100}),
		node("node2", map[string]uint64{"forwarded": 200}, nil)))
	r.add(WorkloadInter, 2, harness.ModeLinuxfp, Round{LatencyRound: harness.LatencyRound{Error: "connection reset"}})
	r.add(WorkloadIntra, 1, harness.ModeLinuxfp, lfpRound(440, 8.3,
		node("node1", map[string]uint64{"bridged": 1000}, nil),
		node("node2", nil, map[string]uint64{"bridge_flood": 1})))
	r.add(WorkloadIntra, 1, harness.ModeCeiling, round(600, 5))
	r.add(WorkloadIntra, 1, harness.ModeCeilingTC, round(500, 6))
	r.finish(time.Minute)
	if len(r.Rows) != 2 || r.Rows[0].Workload != WorkloadIntra || r.Rows[1].Workload != WorkloadInter {
		t.Fatalf("rows %+v", r.Rows)
	}
	inter := r.Rows[1]
	if l := inter.Modes[harness.ModeLinux]; l.TPS != 200 || l.AvgUs != 10 || l.P99Us != 20 {
		t.Errorf("Linux medians %+v", l)
	}
	if f := inter.Modes[harness.ModeLinuxfp]; f.Failed != 1 || f.TPS != 500 || len(f.Rounds) != 2 {
		t.Errorf("linuxfp: %+v", f)
	}
	if inter.TPSRatio != 2.5 || inter.AvgRatio != 0.7 || inter.CeilingTPSRatio != 0 || inter.GainShare != 0 {
		t.Errorf("ratios %+v", inter)
	}
	// The ceiling gains 400 trans/s over Linux, linuxfp 240 of them; the tc ceiling 300.
	if intra := r.Rows[0]; intra.CeilingTPSRatio != 3 || intra.CeilingAvgRatio != 0.5 || intra.GainShare != 0.6 ||
		intra.CeilingTCTPSRatio != 2.5 || intra.CeilingTCAvgRatio != 0.6 || intra.GainShareTC != 0.8 {
		t.Errorf("ceiling ratios %+v", intra)
	}
	if inter := r.Rows[1]; inter.CeilingTCTPSRatio != 0 || inter.GainShareTC != 0 {
		t.Errorf("inter: tc ceiling ratios without a tc ceiling: %+v", inter)
	}
	want := []Target{
		{Workload: WorkloadIntra, PaperTPSRatio: 2.20, PaperAvgCut: 0.18, MinTPSRatio: 2.2, MaxTPSRatio: 2.2,
			MinAvgCut: 1 - 0.83, MaxAvgCut: 1 - 0.83, TPSMet: true, AvgMet: false,
			MinCeilingTPSRatio: 3, MaxCeilingTPSRatio: 3, MinGainShare: 0.6, MaxGainShare: 0.6,
			MinCeilingTCTPSRatio: 2.5, MaxCeilingTCTPSRatio: 2.5, MinGainShareTC: 0.8, MaxGainShareTC: 0.8},
		{Workload: WorkloadInter, PaperTPSRatio: 2.16, PaperAvgCut: 0.14, MinTPSRatio: 2.5, MaxTPSRatio: 2.5,
			MinAvgCut: 1 - 0.7, MaxAvgCut: 1 - 0.7, TPSMet: true, AvgMet: true},
	}
	if len(r.Targets) != 2 {
		t.Fatalf("targets %+v", r.Targets)
	}
	for i, tg := range r.Targets {
		w := want[i]
		near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
		if tg.Workload != w.Workload || tg.TPSMet != w.TPSMet || tg.AvgMet != w.AvgMet || !near(tg.MinTPSRatio, w.MinTPSRatio) ||
			!near(tg.MinAvgCut, w.MinAvgCut) || !near(tg.MaxAvgCut, w.MaxAvgCut) ||
			!near(tg.MaxCeilingTPSRatio, w.MaxCeilingTPSRatio) || !near(tg.MinGainShare, w.MinGainShare) ||
			!near(tg.MinCeilingTCTPSRatio, w.MinCeilingTCTPSRatio) || !near(tg.MaxGainShareTC, w.MaxGainShareTC) {
			t.Errorf("target %+v, want %+v", tg, w)
		}
	}
	if !r.Measured() || (*Result)(nil).Measured() {
		t.Error("Measured")
	}
	var out bytes.Buffer
	r.WriteTable(&out)
	for _, s := range []string{"inter      2     linuxfp", "2.50x", "-30.0%", "intra      1     ceiling", "3.00x", "-50.0%",
		"a round failed: connection reset", "intra: trans/s 2.20x Linux (paper 2.20x): met; average latency 17% lower (paper 18%): not met",
		"linuxfp got 60% of that gain", "intra      1  ceiling-tc", "2.50x", "-40.0%", "linuxfp got 80% of that gain",
		"Median of 3 rounds x 0s",
		"! linuxfp, inter, 2 pairs, node1: 33.3% of its program runs handed the packet to Linux (vxlan_rx 100)",
		"eth0's packets handed to Linux (inter) are the VXLAN packets"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
	// node2 handed one ARP or multicast frame to Linux while node1 bridged 1000: no flag.
	if strings.Contains(out.String(), "! linuxfp, intra") {
		t.Errorf("intra flagged:\n%s", out.String())
	}
}

// The tc ceiling carries the intra-node pairs' transactions (ARP through cni0, IPv4 straight
// into the other pod) and leaves no program behind.
func TestRunPodsCeilingTC(t *testing.T) {
	benchtest.NeedRoot(t)
	prefix := benchtest.Prefix("lfp-podsc")
	before := benchtest.Namespaces(t, prefix)
	res, err := Run(context.Background(), Config{Pairs: []int{1, 2}, Prefix: prefix, Workloads: []Workload{WorkloadIntra},
		Run: harness.Run{Modes: []harness.Mode{harness.ModeLinux, harness.ModeCeilingTC}, Duration: 100 * time.Millisecond, Warmup: 50 * time.Millisecond, Rounds: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 {
		t.Fatalf("rows %d, want 2", len(res.Rows))
	}
	for _, row := range res.Rows {
		c := row.Modes[harness.ModeCeilingTC]
		if c == nil || c.Failed > 0 || c.TPS <= 0 || row.CeilingTCTPSRatio <= 0 {
			t.Errorf("ceiling-tc, %d pairs: %+v", row.Pairs, c)
		}
	}
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			break
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		if info, err := p.Info(); err == nil && info.Name == "bench_ceil_pods" {
			t.Errorf("program %d (%s) left loaded", id, info.Name)
		}
		p.Close()
	}
	for _, ns := range benchtest.Namespaces(t, prefix) {
		if !slices.Contains(before, ns) {
			t.Errorf("namespace %s left behind", ns)
		}
	}
}

// The benchmark runs end to end in Linux and ceiling mode, measures every workload and pair count, and
// removes every namespace it created.
func TestRunPodsLinux(t *testing.T) {
	benchtest.NeedRoot(t)
	// A prefix of its own: other tests (e2e's pods tests), and other runs of this one, may run at
	// the same time.
	prefix := benchtest.Prefix("lfp-podsb")
	before := benchtest.Namespaces(t, prefix)
	res, err := Run(context.Background(), Config{Pairs: []int{1, 2}, Prefix: prefix,
		Run: harness.Run{Modes: []harness.Mode{harness.ModeLinux, harness.ModeCeiling}, Duration: 100 * time.Millisecond, Warmup: 50 * time.Millisecond, Rounds: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Pods != [2]int{4, 2} || len(res.Rows) != 4 {
		t.Fatalf("pods %v, rows %d", res.Config.Pods, len(res.Rows))
	}
	for _, row := range res.Rows {
		for _, m := range []harness.Mode{harness.ModeLinux, harness.ModeCeiling} {
			l := row.Modes[m]
			if l == nil || l.Failed > 0 || l.TPS <= 0 || l.Rounds[0].Transactions == 0 || len(l.Rounds[0].Nodes) != 0 {
				t.Errorf("%s, %s, %d pairs: %+v", m, row.Workload, row.Pairs, l)
			}
		}
	}
	for _, ns := range benchtest.Namespaces(t, prefix) {
		if !slices.Contains(before, ns) {
			t.Errorf("namespace %s left behind", ns)
		}
	}
}
