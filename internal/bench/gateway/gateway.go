package gateway

// The gateway benchmark: the paper's virtual gateway (its router with a blacklist of 100
// addresses in iptables' FORWARD chain, then the same blacklist as one ipset rule) and its
// Figure 8 (throughput against the number of rules).
//
// Topology: the router's (testbed.New: 50 routed /24 prefixes), with the rulesets applied in the
// DUT by the real tools (iptables-restore, ipset restore, through ip netns exec) before the modes
// of a ruleset are measured. The DUT keeps a ruleset while the modes alternate: linuxfp, started
// for each of its rounds, must pick it up by itself; the benchmark waits until linuxfp's status
// says in0's filter module holds it, and records what it said.
//
// Addresses: blacklistAddr(i) = 198.19.(i/256).(i%256), in the first 40 routed prefixes, so a
// blacklist holds at most 10,240 addresses traffic can reach. A larger blacklist (100,000 rules,
// a set of 1,000,000) holds them spread evenly among addresses in 10.0.0.0/8 (unsentAddr) that
// are configuration only: the testbed routes none of them and no generator list holds them, so
// no packet goes there (Ruleset.addr). Traffic the blacklist lets through goes to the hosts of
// the other ten prefixes, 198.19.40-49.1-254 (2,540 addresses), which no blacklist contains.
// The generator cycles through an explicit destination list (its list mode):
//   - miss: only those 2,540: no rule matches, so Linux walks every rule for every packet (the
//     worst case of a linear walk); all of it reaches the sink;
//   - hit: every other packet to a blacklisted address, in turn over all of them that traffic can
//     reach (each the same number of times), the others to the 2,540: half of what the DUT
//     handles is dropped by a rule, half reaches the sink.
// The sink counts only what is forwarded. With the mix known exactly (every other frame, per
// generator CPU), the DUT's packet rate is twice what the sink receives; that is the rate the
// report gives and compares. The ceiling evaluates no rules: it forwards all of it, and its rate
// is what the sink receives.

import (
	"context"
	"fmt"
	"math/bits"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Config configures Run.
type Config struct {
	harness.PipelineConfig
	// Sweep is the blacklist sizes of the throughput-vs-rules sweep (the paper's Figure 8), one
	// DROP rule per address; empty: no sweep. The paper's gateway (100 rules, ipset) is always
	// measured.
	Sweep []int
	// Traffic is measured on every ruleset (default: miss and hit).
	Traffic []Traffic
	// NoIPSet: measure the paper's 100 DROP rules (and the sweep), not the same addresses as one
	// ipset rule.
	NoIPSet bool
	// NoRouter: do not measure the router alone first (noRules: FORWARD empty, traffic no rule
	// would match), the rate the rulesets' are held against in the same run.
	NoRouter bool
	// LargeSet: a second ipset ruleset, this many addresses in the one set (0: none).
	LargeSet int
	// Idle: with the large set in the DUT, linuxfp's CPU time over this long with no traffic
	// and no change (0: not measured).
	Idle time.Duration
	// SetAdds: then this many `ipset add`s of a destination traffic streams to, each timed to
	// the first packet the fast path drops (0: none).
	SetAdds int
}

// Traffic is where the generator sends, relative to the blacklist.
type Traffic string

const (
	// TrafficMiss: destinations no rule matches; everything is forwarded.
	TrafficMiss Traffic = "miss"
	// TrafficHit: every other packet to a blacklisted address, over all of them in turn.
	TrafficHit Traffic = "hit"
)

// Traffics lists the traffic patterns in report order.
var Traffics = []Traffic{TrafficMiss, TrafficHit}

// ParseTraffic checks a traffic pattern's name.
func ParseTraffic(s string) (Traffic, error) { return harness.ParseName(Traffics, "traffic", s) }

// Ruleset is a blacklist in the DUT's filter table.
type Ruleset struct {
	Name string `json:"name"`
	// Blacklisted addresses: blacklistAddr(0 .. Blacklisted-1).
	Blacklisted int `json:"blacklisted"`
	// IPSet: the addresses are in one hash:ip set, matched by one rule; otherwise one
	// `-A FORWARD -d <addr>/32 -j DROP` each.
	IPSet bool `json:"ipset"`
}

const (
	// maxBlacklist: blacklisted addresses traffic can reach fill 198.19.0-39.x at most.
	maxBlacklist = 40 * 256
	// maxEntries: a blacklist's addresses (rules or set entries), mostly unsentAddr's, which
	// fill 10.0.0.0/8 at most.
	maxEntries = 1 << 24
	// maxRules: a DROP ruleset's rules at most, linuxfp run's default --filter-rules (it hands a
	// larger ruleset to Linux, as documented).
	maxRules = 1 << 20
	// gatewaySet is the ipset of the ipset ruleset.
	gatewaySet = "lfpgw"
	// gatewayRules is the size of the paper's blacklist.
	gatewayRules = 100
)

// blacklistAddr is the i-th blacklisted address: 198.19.(i/256).(i%256).
func blacklistAddr(i int) netip.Addr { return testbed.Prefix4(i/256, i%256) }

// unsentAddr is the i-th address of 10.0.0.0/8 (i < maxEntries): a blacklist entry no packet
// is sent to.
func unsentAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

// stride: every stride-th of the ruleset's addresses is one traffic can reach (1 up to
// maxBlacklist addresses: all of them).
func (r Ruleset) stride() int { return max(1, (r.Blacklisted+maxBlacklist-1)/maxBlacklist) }

// addr is the ruleset's i-th address: blacklistAddr(i/stride) every stride-th, unsentAddr(i)
// otherwise. Spread evenly, the reachable ones keep the walk of a DROP ruleset what it is with
// all of them reachable: a hit packet passes, on average, half the rules.
func (r Ruleset) addr(i int) netip.Addr {
	if s := r.stride(); i%s != 0 {
		return unsentAddr(i)
	}
	return blacklistAddr(i / r.stride())
}

// reachable is how many of the ruleset's addresses traffic can reach: blacklistAddr(0 ..
// reachable-1).
func (r Ruleset) reachable() int { return (r.Blacklisted + r.stride() - 1) / r.stride() }

// blacklist is an iptables-restore input with n DROP rules in FORWARD, for blacklistAddr(0 ..
// n-1) in that order (n <= maxBlacklist).
func blacklist(n int) string { return Ruleset{Blacklisted: n}.iptables() }

// iptables is the ruleset as iptables-restore input: it replaces the whole filter table.
func (r Ruleset) iptables() string {
	if r.IPSet {
		return "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -m set --match-set " + gatewaySet + " dst -j DROP\nCOMMIT\n"
	}
	return harness.DropRules(r.Blacklisted, r.addr)
}

// ipset is the ruleset's set as `ipset restore` input ("" without a set). With replace, the DUT
// has gatewaySet already (another ruleset's, referenced by its rule): the new set is built
// aside and swapped in, which keeps the name the rule uses.
func (r Ruleset) ipset(replace bool) string {
	if !r.IPSet {
		return ""
	}
	name := gatewaySet
	if replace {
		name = gatewaySet + "-new"
	}
	var b strings.Builder
	// Room for as many again: the idle test adds addresses to the large set.
	fmt.Fprintf(&b, "create %s hash:ip maxelem %d", name, max(65536, 2*r.Blacklisted))
	if r.Blacklisted > 65536 {
		// Sized for the set from the start: grown from ipset's default 1,024 buckets, it is
		// rehashed at every doubling.
		fmt.Fprintf(&b, " hashsize %d", 1<<bits.Len(uint(r.Blacklisted/4)))
	}
	b.WriteString("\n")
	for i := range r.Blacklisted {
		fmt.Fprintf(&b, "add %s %s\n", name, r.addr(i))
	}
	if replace {
		fmt.Fprintf(&b, "swap %s %s\ndestroy %s\n", name, gatewaySet, name)
	}
	return b.String()
}

// rules is how many rules the ruleset puts into FORWARD.
func (r Ruleset) rules() int {
	if r.IPSet {
		return 1
	}
	return r.Blacklisted
}

// noRules is the router alone: the filter table's FORWARD chain empty. Measured first (unless
// Config.NoRouter), with miss traffic only (nothing to hit): the router's own rate in the same
// run and testbed as the rulesets', which the blacklists should cost little of.
var noRules = Ruleset{Name: "no rules"}

// gatewayRulesets are the paper's two rulesets, the sweep's (100 rules is measured once), then
// the large set's (none for 0; a set of 100 is the paper's).
func gatewayRulesets(sweep []int, largeSet int) []Ruleset {
	rs := []Ruleset{
		{Name: harness.Plural(gatewayRules, "rule"), Blacklisted: gatewayRules},
		ipsetRuleset(gatewayRules),
	}
	for _, n := range sweep {
		if n != gatewayRules {
			rs = append(rs, Ruleset{Name: harness.Plural(n, "rule"), Blacklisted: n})
		}
	}
	if largeSet > 0 && largeSet != gatewayRules {
		rs = append(rs, ipsetRuleset(largeSet))
	}
	return rs
}

// ipsetRuleset is n addresses in one set, matched by one rule.
func ipsetRuleset(n int) Ruleset {
	return Ruleset{Name: fmt.Sprintf("ipset (%d addresses)", n), Blacklisted: n, IPSet: true}
}

// permittedHosts is how many destinations the blacklists let through: 198.19.40-49.1-254.
const permittedHosts = 10 * 254

// permittedAddr is the i-th destination no blacklist holds, prefix after prefix (as the router
// benchmark's generator cycles), then the next host.
func permittedAddr(i int) netip.Addr { return testbed.Prefix4(40+i%10, 1+i/10) }

// gatewayDsts is the generator's destination list for traffic t through ruleset rs, and the
// fraction of it the blacklist lets through (0: all of it).
func gatewayDsts(t Traffic, rs Ruleset) (dsts []netip.Addr, permitted float64) {
	if t == TrafficMiss {
		for i := range permittedHosts {
			dsts = append(dsts, permittedAddr(i))
		}
		return dsts, 0
	}
	// Pairs (permitted, blacklisted): as many as it takes to use every permitted address, and
	// a multiple of the reachable blacklisted addresses, so that each comes up equally often
	// and Linux walks, on average, half the rules for a blacklisted packet.
	n := rs.reachable()
	pairs := (permittedHosts + n - 1) / n * n
	for i := range pairs {
		dsts = append(dsts, permittedAddr(i%permittedHosts), blacklistAddr(i%n))
	}
	return dsts, 0.5
}

// Variant is one ruleset measured with one traffic pattern.
type Variant struct {
	Ruleset Ruleset `json:"ruleset"`
	Traffic Traffic `json:"traffic"`
	// Destinations: the generator's list; Permitted: the fraction of it the ruleset lets through
	// (1: all). Linux's and linuxfp's DUT rate is what the sink received / Permitted.
	Destinations int     `json:"destinations"`
	Permitted    float64 `json:"permitted"`
	// Linuxfp is what linuxfp said about the ruleset when it started.
	Linuxfp    *LinuxfpFilter          `json:"linuxfp,omitempty"`
	Throughput []harness.ThroughputRow `json:"throughput"`

	res       *harness.PipelineResult
	dsts      []netip.Addr
	permitted float64 // as a cell wants it: 0 for all
}

// LinuxfpFilter is what linuxfp's status said about in0's filter module at its starts.
type LinuxfpFilter struct {
	// Notes: the distinct filter notes of in0 ("ipv4 filter module: N netfilter rules compiled
	// into ...", or why the filter is off).
	Notes []string `json:"in0_notes"`
	// Hooks: where its program on in0 was attached ("xdp", "xdp-generic", "tc"), distinct.
	Hooks []string `json:"in0_hooks"`
	// Problem: why the benchmark thinks linuxfp did not take the whole ruleset into its fast
	// path at some start ("" if it did every time).
	Problem string `json:"problem,omitempty"`
	// Ready: per start that took the whole ruleset, seconds from the start to the status
	// showing it.
	Ready []float64 `json:"ready_seconds,omitempty"`
}

// gatewayRun is the state of one Run.
type gatewayRun struct {
	cfg      Config
	rulesets []Ruleset
	variants []*Variant
	filters  map[string]*LinuxfpFilter // by ruleset name
	current  Ruleset                   // in the DUT now
	set      string                    // the ruleset whose gatewaySet the DUT has ("": none)
	sending  *Variant                  // whose destinations the generator has
	idle     *Idle                     // measured with the large set
}

// Run runs the gateway benchmark: the paper's gateway (100 blacklisted addresses as 100
// DROP rules, then as one ipset rule) and the sweep of cfg.Sweep rules, each with every traffic
// pattern, Linux vs linuxfp vs the router ceiling, modes alternating round by round. It returns
// what it measured even when ctx is cancelled half-way (with ctx's error); every namespace it
// created is gone when it returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = []int{64}
	}
	if len(cfg.Cores) == 0 {
		cfg.Cores = []int{1}
	}
	var traffic []Traffic
	for _, t := range Traffics {
		if len(cfg.Traffic) == 0 || slices.Contains(cfg.Traffic, t) {
			traffic = append(traffic, t)
		}
	}
	cfg.Traffic = traffic
	sweep := slices.Sorted(slices.Values(cfg.Sweep))
	cfg.Sweep = slices.Compact(sweep)
	for _, n := range cfg.Sweep {
		if n < 1 || n > maxRules {
			return nil, fmt.Errorf("--rules %d: want 1 to %d", n, maxRules)
		}
	}
	if cfg.LargeSet < 0 || cfg.LargeSet > maxEntries {
		return nil, fmt.Errorf("--large-set %d: want 0 to %d (the addresses no packet goes to fill 10.0.0.0/8)", cfg.LargeSet, maxEntries)
	}
	cfg.Throughput = true
	if err := cfg.PipelineConfig.Defaults(); err != nil {
		return nil, err
	}
	g := &gatewayRun{cfg: cfg, rulesets: gatewayRulesets(cfg.Sweep, cfg.LargeSet), filters: map[string]*LinuxfpFilter{}}
	if cfg.NoIPSet {
		g.rulesets = slices.DeleteFunc(g.rulesets, func(rs Ruleset) bool { return rs.IPSet })
	}
	if !cfg.NoRouter {
		g.rulesets = append([]Ruleset{noRules}, g.rulesets...)
	}
	t := harness.RoutedTopology("gateway", "lfp-bench")
	t.Module, t.StartLinuxfp, t.Throughput = "filter", g.startLinuxfp, g.measure
	// To the DUT's in0, destinations from the generator's list (gatewayDsts).
	t.Flow = func(tb *testbed.Testbed) harness.Flow {
		return harness.Flow{Src: tb.GenMAC, Dst: tb.InMAC, SrcIP: tb.GenIP, DstIP: netip.IPv4Unspecified(),
			List: true, Ifindex: tb.GenIfindex}
	}
	for _, rs := range g.rulesets {
		f := &LinuxfpFilter{}
		g.filters[rs.Name] = f
		for _, tr := range cfg.Traffic {
			if rs.Blacklisted == 0 && tr != TrafficMiss {
				continue
			}
			dsts, permitted := gatewayDsts(tr, rs)
			v := &Variant{Ruleset: rs, Traffic: tr, Destinations: len(dsts), Permitted: 1, res: harness.NewPipelineResult(cfg.PipelineConfig, t),
				dsts: dsts, permitted: permitted}
			if permitted > 0 {
				v.Permitted = permitted
			}
			if slices.ContainsFunc(cfg.Modes, harness.Mode.RunsLinuxfp) {
				v.Linuxfp = f
			}
			g.variants = append(g.variants, v)
		}
	}
	res, err := harness.RunPipeline(ctx, cfg.PipelineConfig, t)
	return g.result(res), err
}

// measure is the gateway's throughput test on one topology: for each ruleset, apply it in the
// DUT, then measure every traffic pattern and frame size in every mode, round by round.
func (g *gatewayRun) measure(b *harness.Pipeline, cores int) error {
	g.set, g.sending = "", nil
	for _, rs := range g.rulesets {
		t0 := time.Now()
		if err := g.apply(b.TB.DUT, rs); err != nil {
			return err
		}
		b.Log.Info("ruleset applied in the DUT", "ruleset", rs.Name, "took", time.Since(t0).Round(time.Millisecond))
		var cells []harness.Cell
		for _, v := range g.variants {
			if v.Ruleset != rs {
				continue
			}
			for _, size := range b.Cfg.Sizes {
				cells = append(cells, harness.Cell{Size: size, Res: v.res, Permitted: v.permitted,
					Before: func() error {
						if err := g.send(b.Gen, v); err != nil {
							return err
						}
						if rs.large() {
							return genFlowing(b, cores)
						}
						return nil
					},
					What: []any{"ruleset", rs.Name, "traffic", v.Traffic}})
			}
		}
		if err := b.MeasureCells(cores, cells); err != nil {
			return fmt.Errorf("%s: %w", rs.Name, err)
		}
		if rs.IPSet && rs.Blacklisted == g.cfg.LargeSet && g.idle == nil {
			if err := g.measureIdle(b); err != nil {
				return fmt.Errorf("%s: linuxfp idle: %w", rs.Name, err)
			}
		}
	}
	if b.Cfg.Latency || b.Cfg.CPU {
		return g.beforeLatency(b)
	}
	return nil
}

// beforeLatency leaves the DUT with the paper's 100 DROP rules for the latency and CPU tests,
// which come after the throughput test (run), and the generator with traffic no rule matches;
// the CPU test's default load is half of what Linux handled with them.
func (g *gatewayRun) beforeLatency(b *harness.Pipeline) error {
	if err := g.apply(b.TB.DUT, rules100); err != nil {
		return err
	}
	dsts, _ := gatewayDsts(TrafficMiss, rules100)
	if err := b.Gen.SetDsts(dsts); err != nil {
		return err
	}
	g.sending = nil
	if b.Cfg.CPURate == 0 {
		for _, v := range g.variants {
			if v.Ruleset == rules100 && v.Traffic == TrafficMiss {
				b.Cfg.CPURate = v.rateOf(1, 64, harness.ModeLinux) * 1e6 / 2
			}
		}
	}
	b.Log.Info("the DUT keeps the 100 rules for the latency and CPU tests; traffic no rule matches")
	return nil
}

// apply makes rs the DUT's ruleset: its set first (the rule needs it; another ruleset's set is
// swapped for it), then the filter table, whose restore replaces the previous ruleset's; a set
// no longer used goes last.
func (g *gatewayRun) apply(dut *nsutil.NS, rs Ruleset) error {
	if rs.IPSet && g.set != rs.Name {
		if err := harness.Restore(dut, rs.ipset(g.set != ""), "ipset", "restore"); err != nil {
			return err
		}
		g.set = rs.Name
	}
	if err := harness.Restore(dut, rs.iptables(), "iptables-restore"); err != nil {
		return err
	}
	if !rs.IPSet && g.set != "" {
		if _, err := dut.Run("ipset", "destroy", gatewaySet); err != nil {
			return err
		}
		g.set = ""
	}
	g.current = rs
	return nil
}

// send gives the generator v's destinations, unless it has them already.
func (g *gatewayRun) send(gen *harness.Generator, v *Variant) error {
	if g.sending == v {
		return nil
	}
	if err := gen.SetDsts(v.dsts); err != nil {
		return err
	}
	g.sending = v
	return nil
}

// genStallWait bounds genFlowing's wait.
const genStallWait = 30 * time.Second

// genFlowing runs the generator until it has sent a frame, for up to genStallWait. Right after
// linuxfp stopped with the set of 1,000,000, a window of the next mode (the ceiling) twice saw
// the generator send nothing at all: the kernel tears down what linuxfp held, and until it has,
// the generator does not get to run. It sends at a low rate, in bursts of a batch: at Linux's
// rate with 100,000 rules a full-speed call of the generator takes seconds to return.
func genFlowing(b *harness.Pipeline, cores int) error {
	cpus, err := harness.UsableCPUs()
	if err != nil {
		return err
	}
	sent0, err := b.Gen.Sent()
	if err != nil {
		return err
	}
	t0 := time.Now()
	stop := b.Gen.Start(b.Ctx, cpus[:cores], harness.GenBatch/harness.PacedBurst.Seconds())
	for time.Since(t0) < genStallWait {
		if sent, err := b.Gen.Sent(); err != nil || sent > sent0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if d := time.Since(t0); d > 100*time.Millisecond {
		b.Log.Info("the generator sent nothing for a while before this measurement", "for", d.Round(time.Millisecond))
	}
	return stop()
}

// filterNote is in0's note when the filter module classifies IPv4 (internal/graph).
var filterNote = regexp.MustCompile(`^ipv4 filter module: (\d+) netfilter rules compiled into \d+ \((\d+) hand`)

// startLinuxfp starts linuxfp in the DUT, waits until its status shows programs on in0 and out0
// and in0's filter module holding the DUT's ruleset (the number of rules it compiled), and records
// what in0's notes say and how long that took. linuxfp not taking the ruleset is no error: it is
// what the benchmark is there to show, and the report flags it.
func (g *gatewayRun) startLinuxfp(tb *testbed.Testbed, bin string, args ...string) (*testbed.Linuxfp, error) {
	t0 := time.Now()
	// Started once its status answers: the wait below has the timeout a large ruleset needs.
	l, err := tb.StartLinuxfpUntil(bin, func(*status.Status) bool { return true }, args...)
	if err != nil {
		return nil, err
	}
	want := g.current.rules()
	var notes []string
	var problem, hook string
	programs := false
	err = l.WaitFor(g.current.startTimeout(), func(st *status.Status) bool {
		notes, problem = nil, ""
		programs = harness.HookOf(st, "in0") != "" && harness.HookOf(st, "out0") != ""
		for _, it := range st.Interfaces {
			if it.Name != "in0" {
				continue
			}
			if it.Program != nil {
				hook = it.Program.Hook
			}
			for _, n := range it.Notes {
				if strings.Contains(n, "filter") {
					notes = append(notes, n)
				}
			}
			problem = filterProblem(it.Program != nil, notes, want)
		}
		return programs && problem == ""
	})
	ready := time.Since(t0)
	f := g.filters[g.current.Name]
	for _, n := range notes {
		if !slices.Contains(f.Notes, n) {
			f.Notes = append(f.Notes, n)
		}
	}
	if hook != "" && !slices.Contains(f.Hooks, hook) {
		f.Hooks = append(f.Hooks, hook)
	}
	if err == nil {
		f.Ready = append(f.Ready, ready.Seconds())
		g.cfg.Log.Info("linuxfp holds the ruleset", "ruleset", g.current.Name, "after", ready.Round(time.Millisecond))
		return l, nil
	}
	if _, serr := l.Client.Status(); serr != nil || !programs {
		l.Kill()
		if serr == nil {
			serr = fmt.Errorf("no programs on in0 and out0: %w", err)
		}
		return nil, fmt.Errorf("linuxfp in the DUT: %w; log:\n%s", serr, l.Log.String())
	}
	if problem == "" {
		problem = err.Error()
	}
	g.cfg.Log.Warn("linuxfp has not taken the whole ruleset into its fast path; measuring anyway",
		"ruleset", g.current.Name, "problem", problem)
	f.Problem = problem
	return l, nil
}

// startTimeout is how long linuxfp may take from its start to holding the ruleset: reading and
// compiling 100,000 rules, or reading a set of 1,000,000 addresses into its maps, takes seconds.
func (r Ruleset) startTimeout() time.Duration {
	return 10*time.Second + time.Duration(r.Blacklisted/10000)*time.Second
}

// filterProblem says why in0's state does not show the filter module classifying all of a
// ruleset of want rules in the fast path ("" if it does). With want 0 (noRules), a program and no
// filter note of a rule are what is expected: the router alone.
func filterProblem(program bool, notes []string, want int) string {
	if !program {
		return "no program on in0"
	}
	if want == 0 {
		for _, n := range notes {
			if m := filterNote.FindStringSubmatch(n); m == nil || m[1] != "0" {
				return "in0 with no rules: " + n
			}
		}
		return ""
	}
	for _, n := range notes {
		m := filterNote.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		rules, _ := strconv.Atoi(m[1])
		linux, _ := strconv.Atoi(m[2])
		switch {
		case rules != want:
			return fmt.Sprintf("in0's filter module has %d rules, want %d", rules, want)
		case linux > 0:
			return fmt.Sprintf("in0's filter module hands the packets that reach %d of its rules to Linux", linux)
		}
		return ""
	}
	if len(notes) > 0 {
		return "in0: " + strings.Join(notes, "; ")
	}
	return "in0's notes say nothing of the filter module"
}
