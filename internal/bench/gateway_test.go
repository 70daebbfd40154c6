package bench

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/nsutil"
)

func TestBlacklist(t *testing.T) {
	want := "*filter\n:FORWARD ACCEPT [0:0]\n" +
		"-A FORWARD -d 198.19.0.0/32 -j DROP\n-A FORWARD -d 198.19.0.1/32 -j DROP\n-A FORWARD -d 198.19.0.2/32 -j DROP\nCOMMIT\n"
	if got := blacklist(3); got != want {
		t.Errorf("blacklist(3):\n%s\nwant\n%s", got, want)
	}
	lines := strings.Split(strings.TrimSpace(blacklist(10000)), "\n")
	if n := len(lines) - 3; n != 10000 {
		t.Errorf("blacklist(10000) has %d rules", n)
	}
	if last := lines[len(lines)-2]; last != "-A FORWARD -d "+blacklistLast+"/32 -j DROP" {
		t.Errorf("blacklist(10000)'s last rule is %q, want one for %s", last, blacklistLast)
	}
	if a := blacklistAddr(maxBlacklist - 1); a != netip.MustParseAddr("198.19.39.255") {
		t.Errorf("the last possible blacklisted address is %s, want 198.19.39.255", a)
	}
}

func TestRulesets(t *testing.T) {
	rs := gatewayRulesets([]int{1, 100, 10000})
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
	}
	if want := []string{"100 rules", "ipset (100 addresses)", "1 rule", "10000 rules"}; !slices.Equal(names, want) {
		t.Errorf("rulesets %q, want %q (100 rules once)", names, want)
	}
	set := rs[1]
	if !set.IPSet || set.Blacklisted != 100 || set.rules() != 1 || rs[0].rules() != 100 {
		t.Errorf("rulesets %+v", rs[:2])
	}
	if got, want := set.iptables(), "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -m set --match-set lfpgw dst -j DROP\nCOMMIT\n"; got != want {
		t.Errorf("ipset ruleset's iptables input:\n%s\nwant\n%s", got, want)
	}
	lines := strings.Split(strings.TrimSpace(set.ipset()), "\n")
	if lines[0] != "create lfpgw hash:ip maxelem 65536" || len(lines) != 101 || lines[100] != "add lfpgw 198.19.0.99" {
		t.Errorf("ipset input: %d lines, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
	if rs[0].ipset() != "" || rs[0].iptables() != blacklist(100) {
		t.Error("the 100-rule ruleset is not blacklist(100) without a set")
	}
}

// The destination lists: miss traffic never goes to a blacklisted address; hit traffic
// alternates permitted and blacklisted ones, every blacklisted address equally often, and every
// destination is routed by the testbed (198.19.0-49.0/24).
func TestGatewayDsts(t *testing.T) {
	blacklisted := func(a netip.Addr) bool { return a.As4()[2] < 40 }
	routed := func(a netip.Addr) bool {
		b := a.As4()
		return b[0] == 198 && b[1] == 19 && b[2] < 50
	}
	miss, p := gatewayDsts(TrafficMiss, 10000)
	if p != 0 || len(miss) != permittedHosts {
		t.Fatalf("miss: %d destinations, permitted %v; want %d, 0 (all)", len(miss), p, permittedHosts)
	}
	seen := map[netip.Addr]bool{}
	for _, a := range miss {
		if blacklisted(a) || !routed(a) || seen[a] || a.As4()[3] == 0 || a.As4()[3] == 255 {
			t.Fatalf("miss destination %s: blacklisted, unrouted, repeated or not a host", a)
		}
		seen[a] = true
	}
	for _, n := range []int{1, 10, 100, 1000, 2539, 10000, maxBlacklist} {
		dsts, p := gatewayDsts(TrafficHit, n)
		if p != 0.5 || len(dsts)%2 != 0 || len(dsts) > genMaxDsts {
			t.Fatalf("hit, %d rules: %d destinations, permitted %v", n, len(dsts), p)
		}
		count := map[netip.Addr]int{}
		permitted := map[netip.Addr]bool{}
		for i, a := range dsts {
			if !routed(a) {
				t.Fatalf("hit, %d rules: destination %s is not routed", n, a)
			}
			if i%2 == 0 {
				if blacklisted(a) {
					t.Fatalf("hit, %d rules: destination %d (%s) should be permitted", n, i, a)
				}
				permitted[a] = true
				continue
			}
			count[a]++
		}
		if len(permitted) != permittedHosts {
			t.Errorf("hit, %d rules: %d permitted destinations used, want all %d", n, len(permitted), permittedHosts)
		}
		if len(count) != n {
			t.Errorf("hit, %d rules: %d blacklisted destinations, want %d", n, len(count), n)
		}
		each := len(dsts) / 2 / n
		for i := range n {
			if c := count[blacklistAddr(i)]; c != each {
				t.Fatalf("hit, %d rules: %s comes up %d times, want %d like every other", n, blacklistAddr(i), c, each)
			}
		}
	}
}

// The DUT's rate follows from what the sink received and the fraction the rules let through;
// "lost before the sink" compares with what should have arrived.
func TestMixArithmetic(t *testing.T) {
	for _, tc := range []struct {
		rd   Round
		dut  float64
		lost bool
	}{
		{Round{Offered: 1000, Received: 1000, Mpps: 2}, 2, false},
		{Round{Offered: 1000, Received: 990, Mpps: 2}, 2, false},
		{Round{Offered: 1000, Received: 989, Mpps: 2}, 2, true},
		{Round{Offered: 1000, Received: 500, Mpps: 1, Permitted: 0.5}, 2, false},
		{Round{Offered: 1000, Received: 495, Mpps: 1, Permitted: 0.5}, 2, false},
		{Round{Offered: 1000, Received: 494, Mpps: 1, Permitted: 0.5}, 2, true},
	} {
		if d, l := tc.rd.dutMpps(), tc.rd.lostBeforeSink(); d != tc.dut || l != tc.lost {
			t.Errorf("%+v: DUT rate %v, lost %v; want %v, %v", tc.rd, d, l, tc.dut, tc.lost)
		}
	}
	// Ratios compare DUT rates: the ceiling forwards everything (its rounds have no Permitted).
	res := newResult(Config{}, routerTopology)
	res.addRound(1, 64, ModeLinux, Round{Mpps: 0.5, Permitted: 0.5})
	res.addRound(1, 64, ModeLinuxfp, Round{Mpps: 2, Permitted: 0.5})
	res.addRound(1, 64, ModeCeiling, Round{Mpps: 8})
	row := res.Throughput[0]
	if f := row.Modes[ModeLinuxfp]; f.DUTMpps != 4 || f.Mpps != 2 || row.Modes[ModeCeiling].DUTMpps != 0 {
		t.Errorf("linuxfp %+v, ceiling %+v", f, row.Modes[ModeCeiling])
	}
	if row.LinuxfpOverLinux != 4 || row.LinuxfpOverCeiling != 0.5 {
		t.Errorf("linuxfp/Linux %v, linuxfp/ceiling %v; want 4, 0.5", row.LinuxfpOverLinux, row.LinuxfpOverCeiling)
	}
}

func TestFilterProblem(t *testing.T) {
	note := func(rules, linux int) string {
		return fmt.Sprintf("ipv4 filter module: %d netfilter rules compiled into %d (%d hand the packets that reach them to Linux)", rules, rules, linux)
	}
	for _, tc := range []struct {
		program bool
		notes   []string
		want    string // substring; "" for no problem
	}{
		{true, []string{note(100, 0)}, ""},
		{true, []string{"ipv6 something else", note(1, 0)}, ""},
		{false, []string{note(100, 0)}, "no program"},
		{true, []string{note(99, 0)}, "has 99 rules, want 100"},
		{true, []string{note(100, 2)}, "reach 2 of its rules"},
		{true, []string{"ipv4 netfilter sees forwarded packets: legacy iptables"}, "legacy iptables"},
		{true, nil, "say nothing"},
	} {
		want := 100
		if tc.want == "" && len(tc.notes) == 2 {
			want = 1
		}
		got := filterProblem(tc.program, tc.notes, want)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("program %v, notes %q: problem %q, want %q", tc.program, tc.notes, got, tc.want)
		}
	}
}

// The targets and the report come from the variants' DUT rates.
func TestGatewayReport(t *testing.T) {
	g := &gatewayRun{cfg: GatewayConfig{
		Config: Config{Run: harness.Run{Modes: DefaultModes, Rounds: 1}, Sizes: []int{64}, Cores: []int{1}},
		Sweep:  []int{1, 1000, 10000}, Traffic: []Traffic{TrafficHit}}}
	rate := map[string]map[Mode]float64{ // DUT Mpps; 1000 rules not measured (interrupted)
		"100 rules":             {ModeLinux: 1, ModeLinuxfp: 6, ModeCeiling: 12},
		"ipset (100 addresses)": {ModeLinux: 2, ModeLinuxfp: 6, ModeCeiling: 12},
		"1 rule":                {ModeLinux: 3, ModeLinuxfp: 8, ModeCeiling: 12},
		"10000 rules":           {ModeLinux: 0.02, ModeLinuxfp: 6, ModeCeiling: 12},
	}
	for _, rs := range gatewayRulesets(g.cfg.Sweep) {
		v := &GatewayVariant{Ruleset: rs, Traffic: TrafficHit, Permitted: 0.5, res: newResult(g.cfg.Config, routerTopology),
			Linuxfp: &LinuxfpFilter{Hooks: []string{"xdp"}}}
		for m, x := range rate[rs.Name] {
			rd := Round{Offered: 1000, Received: 500, Mpps: x / 2, Permitted: 0.5}
			if m == ModeCeiling {
				rd = Round{Offered: 1000, Received: 1000, Mpps: x}
			}
			if m == ModeLinuxfp {
				rd.FastPath = &fastPath{Forwarded: 500, Dropped: 490, Passed: map[string]uint64{"filter": 10}}
				if rs.Name == "1 rule" {
					rd.FastPath = &fastPath{Forwarded: 500, Dropped: 400, Passed: map[string]uint64{"filter": 100}}
				}
			}
			v.res.addRound(1, 64, m, rd)
		}
		g.variants = append(g.variants, v)
	}
	res := g.result(newResult(g.cfg.Config, routerTopology))
	if len(res.Targets) != 1 {
		t.Fatalf("targets %+v", res.Targets)
	}
	if tg := res.Targets[0]; tg.Over100IPSet != 3 || tg.Retained != 0.75 || tg.Most != 10000 || tg.Fewest != 1 {
		t.Errorf("targets %+v, want 3x over Linux with ipset, 0.75 of 1 rule at 10000", tg)
	}
	out := reportHas(t, res,
		"1 64 100 rules hit 1.000 6.000 12.000 6.00x 3.00x 0.50",
		"1 64 hit 10000 0.020 6.000 12.000 300.00x 0.50 0.75",
		"! 1 rule, hit: linuxfp, 1 cores, 64 bytes: in0 handed 100 of 1000 packets to Linux map[filter:100]",
		"linuxfp's program on in0: xdp",
		"linuxfp with 100 rules / Linux with ipset 3.00x (want >= 2x: met); linuxfp at 10000 rules / at 1 0.75 (want >= 0.80: not met)",
	)
	if strings.Contains(out, "hit 1000 ") {
		t.Errorf("a ruleset not measured has a row:\n%s", out)
	}
	if strings.Contains(out, "! 100 rules") {
		t.Errorf("1%% handed to Linux is flagged:\n%s", out)
	}
}

// The rulesets load with the real tools, replace each other, and take the set away with them.
func TestGatewayApply(t *testing.T) {
	needRoot(t)
	ns, err := nsutil.New("lfp-gwtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Close(); err != nil {
			t.Error(err)
		}
	})
	g := &gatewayRun{}
	rules := func() int {
		t.Helper()
		out, err := ns.Run("iptables", "-S", "FORWARD")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(out, "-A FORWARD")
	}
	hasSet := func() bool {
		_, err := ns.Run("ipset", "list", "-n", gatewaySet)
		return err == nil
	}
	for _, rs := range gatewayRulesets([]int{1000}) {
		if err := g.apply(ns, rs); err != nil {
			t.Fatal(err)
		}
		if n := rules(); n != rs.rules() || hasSet() != rs.IPSet {
			t.Errorf("%s: %d rules in FORWARD, set %v; want %d, %v", rs.Name, n, hasSet(), rs.rules(), rs.IPSet)
		}
		if rs.IPSet {
			out, err := ns.Run("ipset", "list", gatewaySet)
			if err != nil || !strings.Contains(out, "Number of entries: 100") {
				t.Errorf("set: %v\n%s", err, out)
			}
		}
	}
}
