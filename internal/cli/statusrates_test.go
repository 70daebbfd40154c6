package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/status"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// iface is an interface with a program (id prog) and the given packet counts.
func iface(idx int, name string, prog uint32, fwd, enc, br, drop uint64, passed map[string]uint64) status.Interface {
	it := status.Interface{Ifindex: idx, Name: name,
		Forwarded: status.Counter{Packets: fwd}, Encapsulated: status.Counter{Packets: enc},
		Bridged: status.Counter{Packets: br}, Dropped: status.Counter{Packets: drop}}
	if prog != 0 {
		it.Program = &status.Program{ID: prog, Hook: "xdp", Modules: []string{"router"}, Families: []string{"ipv4"}, InstalledAt: t0}
	}
	if passed != nil {
		it.Passed = map[string]status.Counter{}
		for r, n := range passed {
			it.Passed[r] = status.Counter{Packets: n}
		}
	}
	return it
}

func snap(pid int, its ...status.Interface) *status.Status {
	return &status.Status{PID: pid, StartedAt: t0, Interfaces: its}
}

func TestComputeRates(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prev, cur *status.Status
		dt        time.Duration
		want      map[int]rates
	}{
		{
			name: "every counter, over two seconds",
			prev: snap(1, iface(2, "in0", 7, 100, 10, 0, 4, map[string]uint64{"ttl": 1, "no_neigh": 1})),
			cur:  snap(1, iface(2, "in0", 7, 300, 30, 50, 6, map[string]uint64{"ttl": 5, "no_neigh": 3, "local": 2})),
			dt:   2 * time.Second,
			want: map[int]rates{2: {Routed: 110, Bridged: 25, Dropped: 1, ToLinux: 4}},
		},
		{
			name: "idle",
			prev: snap(1, iface(2, "in0", 7, 5, 0, 0, 0, nil)),
			cur:  snap(1, iface(2, "in0", 7, 5, 0, 0, 0, nil)),
			dt:   time.Second,
			want: map[int]rates{2: {}},
		},
		{
			name: "a fraction of a second",
			prev: snap(1, iface(2, "in0", 7, 0, 0, 0, 0, nil)),
			cur:  snap(1, iface(2, "in0", 7, 5, 0, 0, 0, nil)),
			dt:   500 * time.Millisecond,
			want: map[int]rates{2: {Routed: 10}},
		},
		{
			name: "program replaced: no rate",
			prev: snap(1, iface(2, "in0", 7, 100, 0, 0, 0, nil), iface(3, "out0", 8, 0, 0, 0, 0, nil)),
			cur:  snap(1, iface(2, "in0", 9, 150, 0, 0, 0, nil), iface(3, "out0", 8, 1, 0, 0, 0, nil)),
			dt:   time.Second,
			want: map[int]rates{3: {Routed: 1}},
		},
		{
			name: "counter went backwards: no rate",
			prev: snap(1, iface(2, "in0", 7, 100, 0, 0, 0, map[string]uint64{"ttl": 9})),
			cur:  snap(1, iface(2, "in0", 7, 150, 0, 0, 0, map[string]uint64{"ttl": 2})),
			dt:   time.Second,
			want: map[int]rates{},
		},
		{
			name: "new interface, interface without a program: no rate",
			prev: snap(1, iface(3, "out0", 0, 0, 0, 0, 0, nil)),
			cur:  snap(1, iface(2, "in0", 7, 10, 0, 0, 0, nil), iface(3, "out0", 0, 0, 0, 0, 0, nil)),
			dt:   time.Second,
			want: map[int]rates{},
		},
		{
			name: "another linuxfp process",
			prev: snap(1, iface(2, "in0", 7, 0, 0, 0, 0, nil)),
			cur:  snap(2, iface(2, "in0", 7, 10, 0, 0, 0, nil)),
			dt:   time.Second,
			want: map[int]rates{},
		},
		{
			name: "no interval",
			prev: snap(1, iface(2, "in0", 7, 0, 0, 0, 0, nil)),
			cur:  snap(1, iface(2, "in0", 7, 10, 0, 0, 0, nil)),
			want: map[int]rates{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := computeRates(tc.prev, tc.cur, tc.dt)
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for idx, w := range tc.want {
				if got[idx] != w {
					t.Errorf("ifindex %d: got %+v, want %+v", idx, got[idx], w)
				}
			}
		})
	}
}

func TestFormatRate(t *testing.T) {
	for _, tc := range []struct {
		r    float64
		want string
	}{
		{0, "0/s"},
		{0.5, "0.5/s"},
		{9.94, "9.9/s"},
		{10, "10/s"},
		{1234.4, "1234/s"},
		{9999, "9999/s"},
		{12_345, "12k/s"},
		{9_999_000, "9999k/s"},
		{14_200_000, "14M/s"},
	} {
		if got := formatRate(tc.r); got != tc.want {
			t.Errorf("formatRate(%v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

// The notes graphModules reads are the ones internal/graph writes.
func TestGraphNotesStillWritten(t *testing.T) {
	var src []byte
	for _, f := range []string{"graph.go", "filter.go"} {
		b, err := os.ReadFile(filepath.Join("..", "graph", f))
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	for _, n := range []string{noteFilter + "%d " + noteFilterOn, noteVXLANEncap, noteVXLANDecap} {
		if !bytes.Contains(src, []byte(n)) {
			t.Errorf("internal/graph no longer writes %q: graphModules must follow it", n)
		}
	}
}

func TestGraphModules(t *testing.T) {
	const (
		filter4   = "ipv4 filter module: 3 netfilter rules compiled into 4 (1 hand the packets that reach them to Linux)"
		filter6   = "ipv6 filter module: 3 netfilter rules compiled into 4 (0 hand the packets that reach them to Linux)"
		filterErr = "ipv4 filter module: the ruleset has 20000 rules"
		encap     = "vxlan: IPv4 routed into it is encapsulated in the fast path (tc), as its driver would"
		decap     = "vxlan: its IPv4 packets arriving on this host are decapsulated in the fast path (tc), as vxlan_rcv() would"
		viaDriver = "vxlan: packets routed into it take its driver's path: udp checksums"
	)
	prog := func(hook string, tcAfter bool, mods []string, fams ...string) *status.Program {
		return &status.Program{ID: 1, Hook: hook, TCAfterXDP: tcAfter, Modules: mods, Families: fams}
	}
	for _, tc := range []struct {
		name   string
		prog   *status.Program
		notes  []string
		others []string // the notes of another interface (a vxlan device)
		want   string
	}{
		{"no program", nil, nil, nil, ""},
		{"router only", prog("xdp", false, []string{"router"}, "ipv4"), nil, nil, "router"},
		{"conntrack as listed", prog("xdp", false, []string{"conntrack", "router"}, "ipv4"), nil, nil, "conntrack>router"},
		{"filter for ipv4", prog("xdp", false, []string{"conntrack", "router"}, "ipv4"), []string{filter4}, nil, "conntrack>router>filter"},
		{"filter for ipv6 only", prog("tc", false, []string{"router"}, "ipv4", "ipv6"), []string{filter6}, nil, "router>filter"},
		{"filter note for a family not routed", prog("xdp", false, []string{"router"}, "ipv6"), []string{filter4}, nil, "router"},
		{"filter module error: not running", prog("xdp", false, []string{"router"}, "ipv4"), []string{filterErr}, nil, "router"},
		{"bridge port with filter", prog("xdp", false, []string{"bridge", "router"}, "ipv4"), []string{filter4}, nil, "bridge>router>filter"},
		{"vxlan encap, tc", prog("tc", false, []string{"router"}, "ipv4"), nil, []string{encap}, "router>vxlan"},
		{"vxlan decap, tc after xdp", prog("xdp", true, []string{"router"}, "ipv4"), nil, []string{decap}, "router>vxlan"},
		{"vxlan, xdp without tc", prog("xdp", false, []string{"router"}, "ipv4"), nil, []string{encap}, "router"},
		{"vxlan, ipv6 only", prog("tc", false, []string{"router"}, "ipv6"), nil, []string{encap}, "router"},
		{"vxlan through its driver", prog("tc", false, []string{"router"}, "ipv4"), nil, []string{viaDriver}, "router"},
		{"everything", prog("tc", false, []string{"conntrack", "router"}, "ipv4"), []string{filter4}, []string{encap}, "conntrack>router>filter>vxlan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := status.Interface{Ifindex: 2, Name: "in0", Program: tc.prog, Notes: tc.notes}
			st := &status.Status{Interfaces: []status.Interface{it, {Ifindex: 5, Name: "vx0", Notes: tc.others}}}
			if got := strings.Join(graphModules(st, &it), ">"); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// tableRow returns the table row of interface name in a text report, split into columns.
func tableRow(t *testing.T, report, name string) []string {
	t.Helper()
	for _, l := range strings.Split(report, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return f
		}
	}
	t.Fatalf("no row for %s in:\n%s", name, report)
	return nil
}

func TestPrintStatusCounters(t *testing.T) {
	st := snap(1,
		iface(2, "in0", 7, 1000, 24, 5, 3, map[string]uint64{"ttl": 2, "local": 1}),
		iface(3, "out0", 8, 0, 0, 0, 0, nil),
		iface(4, "lo", 0, 0, 0, 0, 0, nil))
	for _, tc := range []struct {
		name      string
		rs        map[int]rates
		withRates bool
		in0       []string // ROUTED BRIDGED DROPPED TO LINUX, as fields
		out0      []string
	}{
		{"totals", nil, false, []string{"1024", "5", "3", "3"}, []string{"0", "0", "0", "0"}},
		{"with rates", map[int]rates{2: {Routed: 512, Bridged: 2.5, Dropped: 0, ToLinux: 1}, 3: {}}, true,
			[]string{"1024", "(512/s)", "5", "(2.5/s)", "3", "(0/s)", "3", "(1.0/s)"},
			[]string{"0", "(0/s)", "0", "(0/s)", "0", "(0/s)", "0", "(0/s)"}},
		{"rates unknown for one", map[int]rates{2: {Routed: 1}}, true,
			[]string{"1024", "(1.0/s)", "5", "(0/s)", "3", "(0/s)", "3", "(0/s)"},
			[]string{"0", "(?)", "0", "(?)", "0", "(?)", "0", "(?)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printStatus(&b, st, tc.rs, tc.withRates, time.Second)
			report := b.String()
			if got := strings.Contains(report, "rates: packets per second over the last 1s"); got != tc.withRates {
				t.Errorf("rates line present: %v, want %v:\n%s", got, tc.withRates, report)
			}
			// lo has no program: its counters have no rates.
			for name, want := range map[string][]string{"in0": tc.in0, "out0": tc.out0, "lo": {"0", "0", "0", "0"}} {
				row := tableRow(t, report, name)
				// INTERFACE MASTER HOOK PROGRAM GRAPH INSTALLED, the counters, EGRESS.
				got := row[6 : len(row)-1]
				if strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("%s counters: got %q, want %q\n%s", name, got, want, report)
				}
			}
		})
	}
}

// A watch run without a terminal prints one report per interval, separated by a blank line, and
// with -s rates over the interval; it stops, successfully, when interrupted.
func TestStatusWatchReports(t *testing.T) {
	readings := []*status.Status{
		snap(1, iface(2, "in0", 7, 0, 0, 0, 0, nil)),
		snap(1, iface(2, "in0", 7, 100, 0, 0, 0, nil)),
		snap(1, iface(2, "in0", 7, 300, 0, 0, 0, nil)),
	}
	for _, tc := range []struct {
		name     string
		stats    bool
		terminal bool
		json     bool
		reports  int
	}{
		{"plain", false, false, false, 3},
		{"stats", true, false, false, 2},
		{"stats on a terminal", true, true, false, 2},
		{"stats json", true, false, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out bytes.Buffer
			n := 0
			clock := t0
			r := &statusRun{
				fetch: func() (*status.Status, error) {
					if n == len(readings) {
						cancel()
						return readings[n-1], nil
					}
					n++
					return readings[n-1], nil
				},
				out: &out, json: tc.json, stats: tc.stats, watch: time.Millisecond, terminal: tc.terminal,
				now: func() time.Time { clock = clock.Add(2 * time.Second); return clock },
			}
			if err := r.run(ctx); err != nil {
				t.Fatal(err)
			}
			text := out.String()
			var reports []string
			if tc.terminal {
				reports = strings.Split(text, "\x1b[H\x1b[2J")[1:]
			} else {
				reports = strings.Split(text, "\n\n")
				if !tc.json {
					// The text report has one blank line of its own, before the table.
					var joined []string
					for i := 0; i+1 < len(reports); i += 2 {
						joined = append(joined, reports[i]+"\n\n"+reports[i+1])
					}
					reports = joined
				}
			}
			// The last reading repeats the one before it (fetched as the run is interrupted).
			if len(reports) < tc.reports || len(reports) > tc.reports+1 {
				t.Fatalf("%d reports, want %d:\n%s", len(reports), tc.reports, text)
			}
			if !tc.terminal && strings.Contains(text, "\x1b[") {
				t.Errorf("escape codes without a terminal:\n%q", text)
			}
			if !tc.stats {
				return
			}
			// Two seconds apart: 100 and then 200 packets routed.
			for i, want := range []float64{50, 100} {
				if tc.json {
					var got statusJSON
					if err := json.Unmarshal([]byte(reports[i]), &got); err != nil {
						t.Fatalf("report %d: %v\n%s", i, err, reports[i])
					}
					if got.RatesInterval != 2 || len(got.Interfaces) != 1 || got.Interfaces[0].Rates == nil || got.Interfaces[0].Rates.Routed != want {
						t.Errorf("report %d: %s", i, reports[i])
					}
					continue
				}
				row := tableRow(t, reports[i], "in0")
				if row[7] != "("+formatRate(want)+")" {
					t.Errorf("report %d: in0 %q, want %s/s", i, row, formatRate(want))
				}
			}
		})
	}
}
