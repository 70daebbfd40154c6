package e2e

import (
	"cmp"
	"encoding/binary"
	"flag"
	"fmt"
	"maps"
	"math/rand"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/difftest"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/packet"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The differential test: the same corpus of frames goes from gen into the DUT once with Linux
// alone and once with `linuxfp run` in the DUT; what the sink receives and what comes back to
// gen (ICMP errors, echo replies, redirects, hairpinned packets) must be the same multisets of
// frames (see difftest.Policy for what is compared and what is normalised). In the first phase
// a third run, with Linux alone again, is the control: if Linux does not agree with itself, a
// difference with linuxfp proves nothing, so that is reported as a harness problem.

var diffCases = flag.Bool("diff.cases", false, "log what Linux alone did with each case of the differential corpus")

const (
	diffSeed = 20240501
	// out0's MTU during the test: smaller than in0's 1500, so frames at and above the egress MTU
	// can be sent.
	diffMTU = 1400
)

// Routes the corpus needs besides the testbed's 198.19.0-49.0/24 and 2001:2:0:f100-f131::/64.
const diffDUTSetup = `
ip link set out0 mtu 1400
ip route add blackhole 198.19.200.0/24
ip route add unreachable 198.19.201.0/24
ip route add prohibit 198.19.202.0/24
ip route add throw 198.19.203.0/24
ip -6 route add blackhole 2001:2:0:f1c8::/64
ip -6 route add unreachable 2001:2:0:f1c9::/64
ip -6 route add prohibit 2001:2:0:f1ca::/64
ip -6 route add throw 2001:2:0:f1cb::/64
ip route add 198.19.210.0/24 via 198.18.1.99
ip -6 route add 2001:2:0:f1d2::/64 via 2001:2:0:1::99
ip route add 198.19.220.0/24 via 198.18.0.2
ip -6 route add 2001:2:0:f1dc::/64 via 2001:2::2
`

// ICMP rate limits make Linux's answers depend on timing; with them off, two runs of Linux
// answer the same packets the same way. The sink answers echo requests, so it gets them too.
// IPv4 needs icmp_ratemask=0, not only icmp_ratelimit=0: a rate-limited type still goes through
// the per-destination inet_peer, and each ICMP error to a host then empties the token bucket
// that ip_error() (errors for unreachable, prohibit and missing routes) and redirects keep in the
// same inet_peer, which makes those depend on what was sent to that host a moment before.
const diffNoRateLimits = `
sysctl -qw net.ipv4.icmp_ratemask=0
sysctl -qw net.ipv4.icmp_ratelimit=0
sysctl -qw net.ipv4.icmp_msgs_per_sec=100000000
sysctl -qw net.ipv4.icmp_msgs_burst=100000000
sysctl -qw net.ipv6.icmp.ratelimit=0
`

// The second phase: route MTU metrics, unlocked, locked, below and above out0's MTU. An unlocked
// IPv4 one makes the fast path hand every IPv4 packet above the smallest to Linux, so they have a
// phase of their own, which keeps the first phase's packets up to out0's MTU on the fast path.
const diffRouteMTUSetup = `
ip route add 198.19.230.0/24 via 198.18.1.2 mtu 1300
ip route add 198.19.231.0/24 via 198.18.1.2 mtu lock 1350
ip route add 198.19.232.0/24 via 198.18.1.2 mtu 1480
ip -6 route add 2001:2:0:f1e6::/64 via 2001:2:0:1::2 mtu 1300
ip -6 route add 2001:2:0:f1e7::/64 via 2001:2:0:1::2 mtu lock 1350
ip -6 route add 2001:2:0:f1e8::/64 via 2001:2:0:1::2 mtu 1480
`

// The corpus runs against both hooks linuxfp picks for a veth: native XDP when the hosts'
// stacks compute their checksums (as behind a physical NIC), generic XDP when they leave them to
// offload (veth's default, as in containers).
// diffHooks are the hooks the differential tests run linuxfp at: native XDP where gen's and the
// sink's stacks compute their checksums (as behind a NIC), tc where they leave them to offload
// (as containers do: --hook auto picks tc there), and generic XDP by choice.
var diffHooks = []diffHook{
	{"xdp", testbed.Options{TxChecksumOff: true}, nil},
	{"tc", testbed.Options{}, nil},
	{"xdp-generic", testbed.Options{}, []string{"--hook", "xdp-generic"}},
}

type diffHook struct {
	name string
	opts testbed.Options
	args []string
}

// diffHookGroups are diffHooks grouped by testbed: the hooks of a group run linuxfp in testbeds
// built alike (tc and generic XDP), so they share one, and one run of Linux alone (and its
// control) that each hook's run is compared with. A group is named after its hooks ("tc+xdp-generic").
func diffHookGroups() (names []string, groups [][]diffHook) {
	for _, h := range diffHooks {
		i := slices.IndexFunc(groups, func(g []diffHook) bool { return g[0].opts == h.opts })
		if i < 0 {
			names, groups = append(names, h.name), append(groups, []diffHook{h})
			continue
		}
		names[i] += "+" + h.name
		groups[i] = append(groups[i], h)
	}
	return names, groups
}

func TestDifferentialRouter(t *testing.T) {
	names, groups := diffHookGroups()
	for i, hooks := range groups {
		t.Run(names[i], func(t *testing.T) {
			tb := newTestbed(t, hooks[0].opts)
			d := newDiffEnv(t, tb, diffDUTSetup)
			t.Run("device-mtu", func(t *testing.T) {
				d.differentialHooks(t, d.mainCorpus(), 4*time.Second, true, hooks)
			})
			t.Run("route-mtu", func(t *testing.T) {
				if err := tb.DUT.Script(diffRouteMTUSetup); err != nil {
					t.Fatal(err)
				}
				d.differentialHooks(t, d.routeMTUCorpus(), time.Second, false, hooks)
			})
		})
	}
}

// Gen owns genSources more IPv4 addresses (198.18.0.100 and up), each used by one frame whose
// answer comes from ip_error() (unreachable, prohibit and missing routes) or is a redirect. Both
// are rate-limited per source address by a token bucket that no namespace sysctl turns off
// (net.ipv4.route.error_cost/error_burst are global: 1 s a token, 5 at most), so with one source
// the number of answers would depend on how long ago the previous run was.
const genSources = 40

func genSource(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(100 + i)}) }

type diffEnv struct {
	tb    *testbed.Testbed
	genLL netip.Addr // gen's link-local address
	hook  string     // the hook linuxfp must pick on in0
	args  []string   // linuxfp run's arguments
	// bridged: in0 is a bridge port; the fast path's count is its bridged one. reset, if set,
	// replaces resetNeighbours.
	bridged bool
	reset   func(t *testing.T)
	// originated replaces originated (the sources whose IPv4 ID is not compared); preRun, if
	// set, runs before every run, after the neighbour reset.
	originated func(netip.Addr) bool
	preRun     func(t *testing.T)
	// started, if set, runs once linuxfp is running, before its run.
	started func(t *testing.T, l *testbed.Linuxfp)
	// via are further hosts that capture what reaches them; frames may be sent from any
	// capture point (difftest.Frame.Via: "sink", "gen" or one of these). fastAt is the DUT interface whose fast-path count is checked
	// ("in0" when empty), fastTo the capture point the corpus's fast frames reach ("sink").
	via            []difftest.Endpoint
	fastAt, fastTo string
}

func newDiffEnv(t *testing.T, tb *testbed.Testbed, dutSetup string) *diffEnv {
	t.Helper()
	if err := tb.DUT.Script(dutSetup + diffNoRateLimits); err != nil {
		t.Fatal(err)
	}
	if err := tb.Sink.Script(diffNoRateLimits); err != nil {
		t.Fatal(err)
	}
	var addrs strings.Builder
	for i := range genSources {
		fmt.Fprintf(&addrs, "ip addr add %s/24 dev eth0\n", genSource(i))
	}
	if err := tb.Gen.Script(addrs.String()); err != nil {
		t.Fatal(err)
	}
	d := &diffEnv{tb: tb}
	// Link-local addresses go through DAD; until it completes Linux cannot send ICMPv6 errors
	// or redirects from them, so the first run would differ from the second.
	deadline := time.Now().Add(10 * time.Second)
	for _, ns := range []*nsutil.NS{tb.Gen, tb.DUT, tb.Sink} {
		for {
			out, err := ns.Run("ip", "-6", "addr", "show", "tentative")
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(out) == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("IPv6 addresses still tentative after 10s:\n%s", out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	err := tb.Gen.Do(func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.IsLinkLocalUnicast() {
				d.genLL = ip
			}
		}
		return nil
	})
	if err != nil || !d.genLL.IsValid() {
		t.Fatalf("gen's link-local address: %v", err)
	}
	return d
}

// resetNeighbours puts the DUT's neighbour table in the same state before every run: gen and
// the sink REACHABLE (as right after resolving them), nothing else. Otherwise the first run
// would resolve addresses (ARP, ND) that the next one finds FAILED or cached, and a neighbour
// gone STALE would send everything to Linux in the linuxfp run.
func (d *diffEnv) resetNeighbours(t *testing.T) {
	t.Helper()
	if d.preRun != nil {
		defer d.preRun(t)
	}
	if d.reset != nil {
		d.reset(t)
		return
	}
	gen, sink := d.tb.GenMAC.String(), d.tb.SinkMAC.String()
	script := fmt.Sprintf(`
ip -4 neigh flush dev in0
ip -6 neigh flush dev in0
ip -4 neigh flush dev out0
ip -6 neigh flush dev out0
ip neigh replace 198.18.0.2 lladdr %[1]s dev in0 nud reachable
ip -6 neigh replace 2001:2::2 lladdr %[1]s dev in0 nud reachable
ip -6 neigh replace %[3]s lladdr %[1]s dev in0 nud reachable
ip neigh replace 198.18.1.2 lladdr %[2]s dev out0 nud reachable
ip -6 neigh replace 2001:2:0:1::2 lladdr %[2]s dev out0 nud reachable
`, gen, sink, d.genLL)
	if err := d.tb.DUT.Script(script); err != nil {
		t.Fatal(err)
	}
}

func (d *diffEnv) run(t *testing.T, c *diffCorpus, settle time.Duration) *difftest.Capture {
	t.Helper()
	points := append([]difftest.Endpoint{
		{Name: "sink", NS: d.tb.Sink, Device: "eth0"}, // what the DUT forwarded
		{Name: "gen", NS: d.tb.Gen, Device: "eth0"},   // what came back
	}, d.via...)
	capt, err := difftest.Run(difftest.Options{
		Inject:  points[1],
		Via:     points,
		Capture: points,
		Gap:     500 * time.Microsecond,
		Settle:  settle,
	}, c.frames)
	if err != nil {
		t.Fatal(err)
	}
	return capt
}

// originated: IPv4 sources whose packets a stack of the testbed generates (see difftest.Policy).
func originated(a netip.Addr) bool {
	return a == testbed.InAddr || a == testbed.OutAddr || a == testbed.SinkAddr || a == netip.MustParseAddr(sinkL2)
}

// differential runs the corpus with Linux alone (and, with control, a second time), then with
// linuxfp, and compares.
func (d *diffEnv) differential(t *testing.T, c *diffCorpus, settle time.Duration, control bool) {
	d.differentialHooks(t, c, settle, control, []diffHook{{name: d.hook, args: d.args}})
}

// differentialHooks is differential with a linuxfp run at each of hooks, one after another in the
// same testbed, each compared with the same run of Linux alone: hooks whose testbeds would be
// alike share one. With more than one hook, each hook's run and checks are a subtest named after
// it, and its linuxfp stops at the subtest's end.
func (d *diffEnv) differentialHooks(t *testing.T, c *diffCorpus, settle time.Duration, control bool, hooks []diffHook) {
	orig := originated
	if d.originated != nil {
		orig = d.originated
	}
	classify := difftest.Policy{Originated: orig}.Classify
	start := time.Now()

	d.resetNeighbours(t)
	linux := d.run(t, c, settle)
	var ctl *difftest.Capture
	if control {
		d.resetNeighbours(t)
		ctl = d.run(t, c, settle)
	}
	runs := 1
	if control {
		runs = 2
	}
	t.Logf("%d frames (%d cases, %d the fast path should forward), Linux alone ran them %d times in %s",
		len(c.frames), len(c.cases), c.fast, runs, time.Since(start).Round(time.Millisecond))
	if *diffCases {
		var b strings.Builder
		outcomes := difftest.Outcomes(linux, c.frames)
		slices.SortFunc(outcomes, func(a, b difftest.CaseOutcome) int { return strings.Compare(a.Name, b.Name) })
		for _, o := range outcomes {
			fmt.Fprintf(&b, "%5d sent, %5d at sink, %5d at gen: %s\n", o.Sent, o.At["sink"], o.At["gen"], o.Name)
		}
		t.Logf("what Linux alone did with each case (frames carrying the case's marker):\n%s", b.String())
	}
	fastAt, fastTo := cmp.Or(d.fastAt, "in0"), cmp.Or(d.fastTo, "sink")
	// A capture that saw nothing would compare equal to another one that saw nothing.
	if n := difftest.Count(linux, fastTo, classify); n < c.fast {
		t.Fatalf("%s received %d frames with Linux alone, fewer than the %d valid ones sent: the capture is broken", fastTo, n, c.fast)
	}
	if ctl != nil {
		if ms := difftest.Compare(linux, ctl, classify); len(ms) > 0 {
			t.Errorf("control: two runs of Linux alone differ in %d ways; the harness is not deterministic "+
				"and a difference with linuxfp would prove nothing:\n%s", len(ms), difftest.Report(ms, c.frames, "linux", "linux again"))
		}
	}
	points := []string{"sink", "gen"}
	for _, ep := range d.via {
		points = append(points, ep.Name)
	}

	withLinuxfp := func(t *testing.T, h diffHook) {
		start := time.Now()
		d.resetNeighbours(t)
		l := startLinuxfp(t, d.tb, h.args...)
		if d.started != nil {
			d.started(t, l)
		}
		fp := d.run(t, c, settle)
		in0, err := l.Interface("in0")
		if err != nil {
			t.Fatal(err)
		}
		if in0.Program == nil || in0.Program.Hook != h.name {
			t.Fatalf("in0 runs %+v, want hook %s", in0.Program, h.name)
		}
		t.Logf("linuxfp at %s: run in %s", h.name, time.Since(start).Round(time.Millisecond))
		for _, p := range points {
			t.Logf("at %s: Linux %d frames (%d compared), linuxfp %d frames (%d compared)", p,
				len(linux.Packets[p]), difftest.Count(linux, p, classify),
				len(fp.Packets[p]), difftest.Count(fp, p, classify))
		}
		at, err := l.Interface(fastAt)
		if err != nil {
			t.Fatal(err)
		}
		fast := at.Forwarded.Packets
		if d.bridged {
			fast = at.Bridged.Packets
		}
		t.Logf("%s fast path: forwarded %d, bridged %d, passed to Linux %s", fastAt, at.Forwarded.Packets, at.Bridged.Packets, passed(at.Passed))

		if ms := difftest.Compare(linux, fp, classify); len(ms) > 0 {
			t.Errorf("linuxfp is not transparent: %d differences with Linux alone:\n%s", len(ms), difftest.Report(ms, c.frames, "linux", "linuxfp"))
		}

		// Without packets on the fast path the comparison would only show that XDP_PASS is harmless.
		if got, want := fast, uint64(c.fast)*9/10; got < want {
			t.Errorf("%s fast-pathed %d packets, want at least %d of the %d valid ones", fastAt, got, want, c.fast)
		}

		// The comparison must be able to fail on these very captures: without one answer gen got
		// back (an ICMP error, a reply) and with one byte (the TTL) of one frame the sink got
		// changed, a run must differ in exactly three ways (one frame missing at gen, one missing and
		// one extra at the sink).
		mutated := mutate(fp)
		if mutated == nil {
			t.Fatal("no answer at gen or forwarded frame at the sink to mutate: the corpus does not exercise what it should")
		}
		if ms := difftest.Compare(fp, mutated, classify); len(ms) != 3 {
			t.Errorf("harness check: a run with one answer missing and one forwarded frame changed differs in %d ways, want 3:\n%s",
				len(ms), difftest.Report(ms, c.frames, "linuxfp", "mutated"))
		}
	}
	if len(hooks) == 1 {
		withLinuxfp(t, hooks[0])
		return
	}
	for _, h := range hooks {
		t.Run(h.name, func(t *testing.T) { withLinuxfp(t, h) })
	}
}

// mutate copies c without its first marked frame at gen (an ICMP error or reply about a corpus
// frame) and with the TTL of its first marked IPv4 frame at the sink decremented.
func mutate(c *difftest.Capture) *difftest.Capture {
	out := &difftest.Capture{Packets: map[string][]difftest.Packet{}}
	for p, pkts := range c.Packets {
		if p != "gen" && p != "sink" {
			out.Packets[p] = pkts
		}
	}
	dropped, changed := false, false
	for _, pk := range c.Packets["gen"] {
		if _, marked := difftest.FindMarker(pk.Data); !dropped && marked {
			dropped = true
			continue
		}
		out.Packets["gen"] = append(out.Packets["gen"], pk)
	}
	for _, pk := range c.Packets["sink"] {
		f := pk.Data
		if _, marked := difftest.FindMarker(f); !changed && marked && binary.BigEndian.Uint16(f[12:]) == 0x0800 {
			f = slices.Clone(f)
			f[22]--
			changed = true
		}
		out.Packets["sink"] = append(out.Packets["sink"], difftest.Packet{Data: f, At: pk.At})
	}
	if !dropped || !changed {
		return nil
	}
	return out
}

func passed(m map[string]status.Counter) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, " %s=%d", k, m[k].Packets)
	}
	return strings.TrimSpace(b.String())
}

// diffCorpus is a deterministic corpus: cases of frames shuffled with a fixed seed, so that
// kinds interleave (what one case leaves in Linux meets the next), each frame carrying the
// marker that names its case in reports.
type diffCorpus struct {
	frames []difftest.Frame
	cases  map[string]bool
	fast   int // frames the fast path should forward: valid, routed, resolved, within the MTU
}

type corpusItem struct {
	name  string
	fast  bool
	via   string // difftest.Frame.Via
	build func(mark []byte) []byte
}

type corpusBuilder struct {
	tb      *testbed.Testbed
	genLL   netip.Addr
	r       *rand.Rand
	items   []corpusItem
	sources int // genSource addresses used
}

// ownSource is a gen address no other frame uses (see genSources).
func (b *corpusBuilder) ownSource() netip.Addr {
	if b.sources == genSources {
		panic("corpus uses more than genSources own sources")
	}
	b.sources++
	return genSource(b.sources - 1)
}

func (d *diffEnv) newBuilder(seed int64) *corpusBuilder {
	return &corpusBuilder{tb: d.tb, genLL: d.genLL, r: rand.New(rand.NewSource(seed))}
}

// add appends n frames of case name. spec gives frame i (it may draw from b.r: it runs now, in
// order, so the corpus depends on the seed only); the marker goes after the spec's payload,
// then post edits the serialised bytes (lengths, checksums, padding the Spec cannot express).
func (b *corpusBuilder) add(name string, n int, fast bool, spec func(i int) packet.Spec, post ...func([]byte) []byte) {
	for i := 0; i < n; i++ {
		s := spec(i)
		b.items = append(b.items, corpusItem{name: name, fast: fast, build: func(mark []byte) []byte {
			s.Payload = append(slices.Clone(s.Payload), mark...)
			f := s.Bytes()
			for _, p := range post {
				f = p(f)
			}
			return f
		}})
	}
}

func (b *corpusBuilder) done() *diffCorpus {
	b.r.Shuffle(len(b.items), func(i, j int) { b.items[i], b.items[j] = b.items[j], b.items[i] })
	return b.inOrder()
}

// inOrder is done without the shuffle: the frames go in the order they were added (a corpus
// whose cases are sequences, such as a MAC moving from port to port).
func (b *corpusBuilder) inOrder() *diffCorpus {
	c := &diffCorpus{cases: map[string]bool{}}
	for i, it := range b.items {
		c.frames = append(c.frames, difftest.Frame{Name: it.name, Via: it.via, Data: it.build(difftest.Marker(i))})
		c.cases[it.name] = true
		if it.fast {
			c.fast++
		}
	}
	return c
}

func (b *corpusBuilder) port() uint16 { return uint16(1024 + b.r.Intn(64000)) }

// v4 and v6 are UDP from gen to dst, addressed to in0's MAC, with random ports, ID, TOS, flow
// label and a small size.
func (b *corpusBuilder) v4(dst netip.Addr) packet.Spec {
	return packet.Spec{SrcMAC: b.tb.GenMAC, DstMAC: b.tb.InMAC, Src: testbed.GenAddr, Dst: dst,
		Proto: layers.IPProtocolUDP, SrcPort: b.port(), DstPort: b.port(), ID: uint16(b.r.Intn(1 << 16)),
		TOS: uint8(b.r.Intn(256)), Size: 64 + b.r.Intn(200)}
}

func (b *corpusBuilder) v6(dst netip.Addr) packet.Spec {
	return packet.Spec{SrcMAC: b.tb.GenMAC, DstMAC: b.tb.InMAC, Src: testbed.GenAddr6, Dst: dst,
		Proto: layers.IPProtocolUDP, SrcPort: b.port(), DstPort: b.port(), TOS: uint8(b.r.Intn(256)),
		FlowLabel: uint32(b.r.Intn(1 << 20)), Size: 80 + b.r.Intn(200)}
}

// route4 and route6 are hosts in the prefixes the DUT routes to the sink.
func (b *corpusBuilder) route4() netip.Addr {
	return testbed.Prefix4(b.r.Intn(b.tb.Prefixes), 1+b.r.Intn(254))
}

func (b *corpusBuilder) route6() netip.Addr {
	return testbed.Prefix6(b.r.Intn(b.tb.Prefixes), 1+b.r.Intn(0xfffe))
}

// in4 and in6 are hosts of special prefixes set up by diffDUTSetup (198.19.p.0/24, 2001:2:0:f1pp::/64).
func (b *corpusBuilder) in4(p int) netip.Addr { return testbed.Prefix4(p, 1+b.r.Intn(254)) }
func (b *corpusBuilder) in6(p int) netip.Addr { return testbed.Prefix6(p, 1+b.r.Intn(0xfffe)) }

type l4 struct {
	name string
	set  func(*packet.Spec)
}

func proto(p layers.IPProtocol, payload ...byte) func(*packet.Spec) {
	return func(s *packet.Spec) { s.Proto = p; s.Payload = payload }
}

func echo4(s *packet.Spec) { s.Proto, s.ICMPType = layers.IPProtocolICMPv4, 8 }
func echo6(s *packet.Spec) { s.Proto, s.ICMPType = layers.IPProtocolICMPv6, 128 }

var protos4 = []l4{
	{"udp", proto(layers.IPProtocolUDP)},
	{"tcp", proto(layers.IPProtocolTCP)},
	{"icmp echo", echo4},
	{"gre", proto(layers.IPProtocolGRE, 0, 0, 0x08, 0x00)},
	{"esp", proto(layers.IPProtocolESP, 0, 0, 1, 0, 0, 0, 0, 1)},
	{"sctp", proto(layers.IPProtocolSCTP, 0x13, 0x88, 0x13, 0x89, 0, 0, 0, 1, 0, 0, 0, 0)},
	{"ospf (89)", proto(89)},
	{"protocol 253", proto(253)},
}

var protos6 = []l4{
	{"udp", proto(layers.IPProtocolUDP)},
	{"tcp", proto(layers.IPProtocolTCP)},
	{"icmpv6 echo", echo6},
	{"gre", proto(layers.IPProtocolGRE, 0, 0, 0x86, 0xdd)},
	{"esp", proto(layers.IPProtocolESP, 0, 0, 1, 0, 0, 0, 0, 1)},
	{"sctp", proto(layers.IPProtocolSCTP, 0x13, 0x88, 0x13, 0x89, 0, 0, 0, 1, 0, 0, 0, 0)},
	{"no next header (59)", proto(layers.IPProtocolNoNextHeader)},
	{"protocol 253", proto(253)},
}

// Edits of serialised frames (Ethernet at 0, IP header at 14).

func fixCsum4(f []byte) []byte {
	binary.BigEndian.PutUint16(f[24:], packet.IPv4HeaderChecksum(f[14:]))
	return f
}

func totLen4(delta int) func([]byte) []byte {
	return func(f []byte) []byte {
		binary.BigEndian.PutUint16(f[16:], uint16(int(binary.BigEndian.Uint16(f[16:]))+delta))
		return fixCsum4(f)
	}
}

func payloadLen6(delta int) func([]byte) []byte {
	return func(f []byte) []byte {
		binary.BigEndian.PutUint16(f[18:], uint16(int(binary.BigEndian.Uint16(f[18:]))+delta))
		return f
	}
}

func setByte(off int, v byte) func([]byte) []byte {
	return func(f []byte) []byte { f[off] = v; return f }
}

func pad(n int) func([]byte) []byte {
	return func(f []byte) []byte {
		for range n {
			f = append(f, 0xee)
		}
		return f
	}
}

func truncate(n int) func([]byte) []byte { return func(f []byte) []byte { return f[:n] } }

func badCsum4(f []byte) []byte { f[24] ^= 0x5a; return f }

var (
	bcastMAC   = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	otherMAC   = net.HardwareAddr{0x02, 0x42, 0xac, 0x11, 0x00, 0x07} // nobody in the testbed
	mcast4MAC  = net.HardwareAddr{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}
	mcast6MAC  = net.HardwareAddr{0x33, 0x33, 0x00, 0x00, 0x00, 0x01}
	mcast4MAC2 = net.HardwareAddr{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}
	mcast6MAC2 = net.HardwareAddr{0x33, 0x33, 0x00, 0x00, 0x00, 0x02}
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// mainCorpus is the corpus of the first phase (out0 MTU 1400).
func (d *diffEnv) mainCorpus() *diffCorpus {
	b := d.newBuilder(diffSeed)
	r := b.r
	tb := d.tb

	// Valid traffic, which the fast path should forward: every protocol, sizes from the
	// smallest to exactly the egress MTU, TTL / hop limit 2 (leaves with 1), 255 and others.
	sizes := []int{60, 64, 65, 100, 128, 256, 512, 576, 1000, 1280, 1300, 1399, 1413, 14 + diffMTU}
	size := func() int {
		if r.Intn(3) == 0 {
			return 64 + r.Intn(14+diffMTU-64+1)
		}
		return sizes[r.Intn(len(sizes))]
	}
	ttl := func() uint8 {
		switch r.Intn(4) {
		case 0:
			return 2
		case 1:
			return 255
		}
		return uint8(3 + r.Intn(252))
	}
	for i := range 420 {
		p := protos4[i%len(protos4)]
		b.add("ipv4 "+p.name, 1, true, func(int) packet.Spec {
			s := b.v4(b.route4())
			p.set(&s)
			s.Size, s.TTL, s.DF = size(), ttl(), r.Intn(2) == 0
			return s
		})
	}
	for i := range 420 {
		p := protos6[i%len(protos6)]
		b.add("ipv6 "+p.name, 1, true, func(int) packet.Spec {
			s := b.v6(b.route6())
			p.set(&s)
			s.Size, s.TTL = size(), ttl()
			return s
		})
	}
	// Echo and UDP through to the sink: the replies and port unreachables come back through
	// out0's fast path (echo) or Linux (ICMP errors).
	b.add("ipv4 echo to the sink", 4, true, func(int) packet.Spec { s := b.v4(testbed.SinkAddr); echo4(&s); return s })
	b.add("ipv6 echo to the sink", 4, true, func(int) packet.Spec { s := b.v6(testbed.SinkAddr6); echo6(&s); return s })
	b.add("ipv4 udp to the sink", 2, true, func(int) packet.Spec { return b.v4(testbed.SinkAddr) })
	b.add("ipv6 udp to the sink", 2, true, func(int) packet.Spec { return b.v6(testbed.SinkAddr6) })
	b.add("ipv4 tcp to the sink", 2, true, func(int) packet.Spec {
		s := b.v4(testbed.SinkAddr)
		s.Proto = layers.IPProtocolTCP
		return s
	})

	// TTL / hop limit expiring: Linux sends time exceeded.
	// (A Spec's TTL 0 means the default, so TTL 0 is written into the bytes.)
	b.add("ipv4 ttl 1", 8, false, func(i int) packet.Spec {
		s := b.v4(b.route4())
		protos4[i%4].set(&s)
		s.TTL = 1
		return s
	})
	b.add("ipv6 hop limit 1", 8, false, func(i int) packet.Spec {
		s := b.v6(b.route6())
		protos6[i%4].set(&s)
		s.TTL = 1
		return s
	})
	b.add("ipv4 ttl 0", 2, false, func(int) packet.Spec { return b.v4(b.route4()) }, setByte(14+8, 0), fixCsum4)
	b.add("ipv6 hop limit 0", 2, false, func(int) packet.Spec { return b.v6(b.route6()) }, setByte(14+7, 0))

	// IPv4 options: Linux processes them when forwarding (record route gets out0's address) or
	// answers with parameter problem.
	opt := func(name string, n int, o []byte, post ...func([]byte) []byte) {
		b.add("ipv4 option "+name, n, false, func(int) packet.Spec {
			s := b.v4(b.route4())
			s.Options = o
			return s
		}, post...)
	}
	opt("nop", 2, []byte{1, 1, 1, 1}) // one NOP, then end-of-options padding (see packet.Spec)
	opt("record route", 3, []byte{7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0})
	opt("record route full", 2, []byte{7, 7, 8, 1, 2, 3, 4})
	opt("router alert", 2, []byte{148, 4, 0, 0})
	opt("timestamp full", 2, []byte{68, 12, 13, 0x10, 0, 0, 0, 1, 0, 0, 0, 2})
	opt("timestamp full, overflow counter full", 2, []byte{68, 12, 13, 0xf0, 0, 0, 0, 1, 0, 0, 0, 2})
	opt("loose source route", 2, []byte{131, 7, 4, 198, 19, 1, 1})
	opt("strict source route", 1, []byte{137, 7, 4, 198, 19, 1, 1})
	opt("length beyond the header", 2, []byte{7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0}, setByte(14+21, 40), fixCsum4)
	opt("length 1", 1, []byte{7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0}, setByte(14+21, 1), fixCsum4)
	opt("unknown type", 1, []byte{30, 4, 0, 0})
	b.add("ipv4 option record route, ttl 1", 2, false, func(int) packet.Spec {
		s := b.v4(b.route4())
		s.Options, s.TTL = []byte{7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0}, 1
		return s
	})

	// IPv4 fragments: Linux forwards them as they are (no conntrack, no reassembly), refragments
	// a too-big one and sends ICMP errors only about first fragments.
	frag4 := func(name string, n int, mf bool, off uint16, size int, t uint8, df bool) {
		b.add("ipv4 "+name, n, false, func(int) packet.Spec {
			s := b.v4(b.route4())
			s.MF, s.FragOffset, s.DF = mf, off, df
			if size > 0 {
				s.Size = size
			}
			if t > 0 {
				s.TTL = t
			}
			return s
		})
	}
	frag4("first fragment", 4, true, 0, 0, 0, false)
	frag4("middle fragment", 3, true, 100, 0, 0, false)
	frag4("last fragment", 3, false, 185, 0, 0, false)
	frag4("first fragment, ttl 1", 2, true, 0, 0, 1, false)
	frag4("later fragment, ttl 1", 2, false, 90, 0, 1, false)
	frag4("first fragment, too big", 2, true, 0, 1514, 0, false)
	frag4("later fragment, too big", 1, true, 50, 1514, 0, false)
	frag4("fragment with DF, too big", 1, true, 0, 1514, 0, true)
	frag4("fragment with DF", 1, false, 33, 0, 0, true)

	// IPv6 fragments (fragment header built by hand): forwarded as they are.
	frag6 := func(name string, n int, off uint16, more bool, size int, t uint8) {
		b.add("ipv6 "+name, n, false, func(int) packet.Spec {
			s := b.v6(b.route6())
			m := off << 3
			if more {
				m |= 1
			}
			hdr := []byte{17, 0, byte(m >> 8), byte(m), 0, 0, byte(r.Intn(256)), byte(r.Intn(256))}
			if off == 0 {
				hdr = append(hdr, 0x30, 0x39, 0x30, 0x3a, 0x05, 0xdc, 0, 0) // UDP header
			}
			s.Proto, s.Payload = layers.IPProtocolIPv6Fragment, hdr
			if size > 0 {
				s.Size = size
			}
			if t > 0 {
				s.TTL = t
			}
			return s
		})
	}
	frag6("first fragment", 3, 0, true, 0, 0)
	frag6("later fragment", 3, 100, false, 0, 0)
	frag6("fragment, hop limit 1", 2, 0, true, 0, 1)
	frag6("later fragment, hop limit 1", 1, 64, true, 0, 1)
	frag6("fragment, too big", 1, 0, true, 1514, 0)

	// Other IPv6 extension headers: Linux does not look at them when forwarding.
	b.add("ipv6 destination options header", 2, false, func(int) packet.Spec {
		s := b.v6(b.route6())
		s.Proto, s.Payload = layers.IPProtocolIPv6Destination, []byte{17, 0, 1, 4, 0, 0, 0, 0}
		return s
	})
	b.add("ipv6 routing header, segments left 1", 2, false, func(int) packet.Spec {
		s := b.v6(b.route6())
		// Segment routing header with one segment (type 4, hdr ext len 2).
		s.Proto, s.Payload = layers.IPProtocolIPv6Routing, append([]byte{17, 2, 4, 1, 0, 0, 0, 0}, b.route6().AsSlice()...)
		return s
	})

	// Bad IPv4 header checksum: Linux drops it before anything else, even at TTL 1.
	b.add("ipv4 bad header checksum", 4, false, func(i int) packet.Spec {
		s := b.v4(b.route4())
		protos4[i%4].set(&s)
		return s
	}, badCsum4)
	b.add("ipv4 bad header checksum, ttl 1", 2, false, func(int) packet.Spec {
		s := b.v4(b.route4())
		s.TTL = 1
		return s
	}, badCsum4)

	// Lengths that disagree with the frame.
	b.add("ipv4 total length beyond the frame", 3, false, func(int) packet.Spec { return b.v4(b.route4()) }, totLen4(+1))
	b.add("ipv4 total length far beyond the frame", 1, false, func(int) packet.Spec { return b.v4(b.route4()) }, totLen4(+1000))
	b.add("ipv4 total length short of the frame", 3, true, func(int) packet.Spec { return b.v4(b.route4()) }, totLen4(-9))
	b.add("ipv4 total length below the header", 2, false, func(int) packet.Spec { return b.v4(b.route4()) },
		func(f []byte) []byte { binary.BigEndian.PutUint16(f[16:], 19); return fixCsum4(f) })
	b.add("ipv4 ihl 4", 1, false, func(int) packet.Spec { return b.v4(b.route4()) }, setByte(14, 0x44), fixCsum4)
	b.add("ipv4 version 6 in an ipv4 frame", 1, false, func(int) packet.Spec { return b.v4(b.route4()) }, setByte(14, 0x65), fixCsum4)
	b.add("ipv4 truncated header", 2, false, func(int) packet.Spec { return b.v4(b.route4()) }, truncate(14+12))
	b.add("ipv6 payload length beyond the frame", 3, false, func(int) packet.Spec { return b.v6(b.route6()) }, payloadLen6(+1))
	b.add("ipv6 payload length short of the frame", 3, true, func(int) packet.Spec { return b.v6(b.route6()) }, payloadLen6(-9))
	b.add("ipv6 payload length 0", 2, true, func(int) packet.Spec { return b.v6(b.route6()) },
		func(f []byte) []byte { f[18], f[19] = 0, 0; return f })
	b.add("ipv6 version 4 in an ipv6 frame", 1, false, func(int) packet.Spec { return b.v6(b.route6()) }, setByte(14, 0x40))
	b.add("ipv6 truncated header", 2, false, func(int) packet.Spec { return b.v6(b.route6()) }, truncate(14+30))

	// Ethernet padding (the frame longer than the IP packet): Linux trims it.
	for i, n := range []int{1, 6, 17, 100, 300, 46} {
		b.add("ipv4 ethernet padding", 1, true, func(int) packet.Spec {
			s := b.v4(b.route4())
			protos4[i%4].set(&s)
			s.Size = 42 + 8 + r.Intn(40)
			return s
		}, pad(n))
		b.add("ipv6 ethernet padding", 1, true, func(int) packet.Spec {
			s := b.v6(b.route6())
			protos6[i%4].set(&s)
			return s
		}, pad(n))
	}
	b.add("ipv4 padded beyond the egress mtu", 2, true, func(int) packet.Spec {
		s := b.v4(b.route4())
		s.Size, s.DF = 14+diffMTU, true
		return s
	}, pad(100))
	b.add("ipv6 padded beyond the egress mtu", 2, true, func(int) packet.Spec {
		s := b.v6(b.route6())
		s.Size = 14 + diffMTU
		return s
	}, pad(100))
	b.add("ipv4 padded, ttl 1", 1, false, func(int) packet.Spec {
		s := b.v4(b.route4())
		s.TTL = 1
		return s
	}, pad(20))

	// Too big for out0: exactly the MTU is forwarded; one byte more is fragmented (IPv4 without
	// DF) or answered with frag needed / packet too big.
	big4 := func(name string, n int, size int, df, fast bool, t uint8) {
		b.add("ipv4 "+name, n, fast, func(i int) packet.Spec {
			s := b.v4(b.route4())
			protos4[i%3].set(&s)
			s.Size, s.DF = size, df
			if t > 0 {
				s.TTL = t
			}
			return s
		})
	}
	big4("egress mtu exactly, DF", 3, 14+diffMTU, true, true, 0)
	big4("egress mtu exactly, no DF", 3, 14+diffMTU, false, true, 0)
	big4("one byte over the egress mtu, DF", 3, 15+diffMTU, true, false, 0)
	big4("one byte over the egress mtu, no DF", 3, 15+diffMTU, false, false, 0)
	big4("1500 bytes, DF", 3, 1514, true, false, 0)
	big4("1500 bytes, no DF", 3, 1514, false, false, 0)
	big4("too big and ttl 1", 1, 1514, true, false, 1)
	big6 := func(name string, n int, size int, fast bool) {
		b.add("ipv6 "+name, n, fast, func(i int) packet.Spec {
			s := b.v6(b.route6())
			protos6[i%3].set(&s)
			s.Size = size
			return s
		})
	}
	big6("egress mtu exactly", 3, 14+diffMTU, true)
	big6("one byte over the egress mtu", 3, 15+diffMTU, false)
	big6("1500 bytes", 3, 1514, false)
	// IPv6 hop-by-hop options: Linux processes them before forwarding.
	b.add("ipv6 hop-by-hop header", 4, false, func(i int) packet.Spec {
		s := b.v6(b.route6())
		protos6[i%4].set(&s)
		s.HopByHop = true
		return s
	})
	b.add("ipv6 hop-by-hop header, hop limit 1", 2, false, func(int) packet.Spec {
		s := b.v6(b.route6())
		s.HopByHop, s.TTL = true, 1
		return s
	})
	b.add("ipv6 hop-by-hop header, too big", 1, false, func(int) packet.Spec {
		s := b.v6(b.route6())
		s.HopByHop, s.Size = true, 1514
		return s
	})

	// Destination MACs: Linux forwards only frames addressed to in0.
	for _, m := range []struct {
		name string
		mac  net.HardwareAddr
	}{{"another host's", otherMAC}, {"broadcast", bcastMAC}, {"ipv4 multicast", mcast4MAC2}, {"ipv6 multicast", mcast6MAC2}} {
		b.add("ipv4, "+m.name+" destination MAC", 2, false, func(int) packet.Spec {
			s := b.v4(b.route4())
			s.DstMAC = m.mac
			return s
		})
		b.add("ipv6, "+m.name+" destination MAC", 2, false, func(int) packet.Spec {
			s := b.v6(b.route6())
			s.DstMAC = m.mac
			return s
		})
	}
	b.add("ipv4, source MAC is in0's own", 1, false, func(int) packet.Spec {
		s := b.v4(b.route4())
		s.SrcMAC = tb.InMAC
		return s
	})
	b.add("ipv4 echo to the limited broadcast", 1, false, func(int) packet.Spec {
		s := b.v4(addr("255.255.255.255"))
		s.DstMAC = bcastMAC
		echo4(&s)
		return s
	})
	b.add("ipv4 echo to 224.0.0.1", 1, false, func(int) packet.Spec {
		s := b.v4(addr("224.0.0.1"))
		s.DstMAC, s.TTL = mcast4MAC, 1
		echo4(&s)
		return s
	})
	b.add("ipv4 udp to 239.1.2.3", 1, false, func(int) packet.Spec {
		s := b.v4(addr("239.1.2.3"))
		s.DstMAC = mcast4MAC2
		return s
	})
	b.add("ipv4 udp to 239.1.2.3, in0's MAC", 1, false, func(int) packet.Spec { return b.v4(addr("239.1.2.3")) })
	b.add("ipv6 echo to ff02::1", 2, false, func(int) packet.Spec {
		s := b.v6(addr("ff02::1"))
		s.DstMAC, s.TTL = mcast6MAC, 255
		echo6(&s)
		return s
	})
	b.add("ipv6 echo to ff02::1, in0's MAC", 1, false, func(int) packet.Spec {
		s := b.v6(addr("ff02::1"))
		echo6(&s)
		return s
	})
	b.add("ipv6 udp to ff05::2", 1, false, func(int) packet.Spec {
		s := b.v6(addr("ff05::2"))
		s.DstMAC = mcast6MAC2
		return s
	})

	// Routes that do not forward.
	b.add("ipv4 no route", 4, false, func(i int) packet.Spec {
		s := b.v4(netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + r.Intn(254))}))
		protos4[i%4].set(&s)
		s.Src = b.ownSource()
		return s
	})
	b.add("ipv6 no route", 4, false, func(i int) packet.Spec {
		s := b.v6(addr(fmt.Sprintf("2001:db8::%x", 1+r.Intn(0xfffe))))
		protos6[i%4].set(&s)
		return s
	})
	for _, rt := range []struct {
		name string
		p    int
		n    int
	}{{"blackhole", 200, 3}, {"unreachable", 201, 3}, {"prohibit", 202, 3}, {"throw", 203, 2}} {
		b.add("ipv4 "+rt.name+" route", rt.n, false, func(i int) packet.Spec {
			s := b.v4(b.in4(rt.p))
			protos4[i%3].set(&s)
			s.Src = b.ownSource()
			return s
		})
		b.add("ipv6 "+rt.name+" route", rt.n, false, func(i int) packet.Spec {
			s := b.v6(b.in6(rt.p))
			protos6[i%3].set(&s)
			return s
		})
	}

	// Unresolved neighbours: Linux queues the packets, asks 3 times, then sends host
	// unreachable (few packets: the queue is limited, 212 KB of skb truesize by default).
	b.add("ipv4 via an unresolved gateway", 6, false, func(i int) packet.Spec {
		s := b.v4(b.in4(210))
		protos4[i%3].set(&s)
		return s
	})
	b.add("ipv6 via an unresolved gateway", 6, false, func(i int) packet.Spec {
		s := b.v6(b.in6(210))
		protos6[i%3].set(&s)
		return s
	})
	b.add("ipv4 to an unresolved on-link host", 3, false, func(int) packet.Spec { return b.v4(addr("198.18.1.77")) })
	b.add("ipv6 to an unresolved on-link host", 3, false, func(int) packet.Spec { return b.v6(addr("2001:2:0:1::77")) })
	b.add("ipv4 to out0's network address", 2, false, func(int) packet.Spec { return b.v4(addr("198.18.1.0")) })

	// Local destinations: Linux answers (echo reply, port unreachable, reset) or drops.
	for _, a := range []netip.Addr{testbed.InAddr, testbed.OutAddr} {
		b.add("ipv4 echo to the DUT", 2, false, func(int) packet.Spec { s := b.v4(a); echo4(&s); return s })
		b.add("ipv4 udp to the DUT", 1, false, func(int) packet.Spec { return b.v4(a) })
		b.add("ipv4 tcp to the DUT", 1, false, func(int) packet.Spec {
			s := b.v4(a)
			s.Proto = layers.IPProtocolTCP
			return s
		})
	}
	for _, a := range []netip.Addr{testbed.InAddr6, testbed.OutAddr6} {
		b.add("ipv6 echo to the DUT", 2, false, func(int) packet.Spec { s := b.v6(a); echo6(&s); return s })
		b.add("ipv6 udp to the DUT", 1, false, func(int) packet.Spec { return b.v6(a) })
		b.add("ipv6 tcp to the DUT", 1, false, func(int) packet.Spec {
			s := b.v6(a)
			s.Proto = layers.IPProtocolTCP
			return s
		})
	}
	b.add("ipv4 echo to the DUT, ttl 1", 1, false, func(int) packet.Spec {
		s := b.v4(testbed.OutAddr)
		echo4(&s)
		s.TTL = 1
		return s
	})
	b.add("ipv6 echo to the DUT, hop limit 1", 1, false, func(int) packet.Spec {
		s := b.v6(testbed.OutAddr6)
		echo6(&s)
		s.TTL = 1
		return s
	})
	for _, a := range []string{"198.18.0.255", "198.18.1.255"} {
		b.add("ipv4 to a subnet broadcast", 1, false, func(int) packet.Spec { s := b.v4(addr(a)); echo4(&s); return s })
		b.add("ipv4 to a subnet broadcast", 1, false, func(int) packet.Spec { return b.v4(addr(a)) })
	}
	for _, a := range []string{"2001:2::", "2001:2:0:1::"} {
		b.add("ipv6 to a subnet-router anycast address", 1, false, func(int) packet.Spec { s := b.v6(addr(a)); echo6(&s); return s })
		b.add("ipv6 to a subnet-router anycast address", 1, false, func(int) packet.Spec { return b.v6(addr(a)) })
	}
	for _, a := range []string{"127.0.0.1", "0.0.0.7", "240.0.0.1", "0.0.0.0"} {
		b.add("ipv4 martian destination "+a, 1, false, func(int) packet.Spec {
			s := b.v4(addr(a))
			s.Src = b.ownSource()
			return s
		})
	}
	for _, a := range []string{"::1", "::", "::ffff:198.19.1.1", "fe80::1", "fe80::99"} {
		b.add("ipv6 special destination "+a, 1, false, func(int) packet.Spec { return b.v6(addr(a)) })
	}

	// Martian and special sources.
	for _, a := range []string{"0.0.0.0", "0.1.2.3", "127.0.0.1", "224.0.0.5", "239.1.1.1", "255.255.255.255",
		"240.0.0.1", "198.18.0.1", "198.18.1.1", "198.18.0.255", "198.18.1.255", "169.254.1.1",
		"198.18.1.2", "198.18.0.60", "203.0.113.9"} {
		b.add("ipv4 source "+a, 1, false, func(int) packet.Spec {
			s := b.v4(b.route4())
			s.Src = addr(a)
			return s
		})
	}
	for _, a := range []string{"0.0.0.0", "127.0.0.1", "198.18.1.1", "198.18.0.61"} {
		b.add("ipv4 source "+a+", ttl 1", 1, false, func(int) packet.Spec {
			s := b.v4(b.route4())
			s.Src, s.TTL = addr(a), 1
			return s
		})
	}
	for _, a := range []string{d.genLL.String(), "fe80::1234", "ff02::1", "ff0e::1", "::", "::1", "::ffff:198.18.0.2",
		"2001:2::1", "2001:2:0:1::1", "2001:2::", "fd00::1", "fec0::1", "2001:2::60", "2001:db8::9"} {
		b.add("ipv6 source "+a, 1, false, func(int) packet.Spec {
			s := b.v6(b.route6())
			s.Src = addr(a)
			return s
		})
	}
	for _, a := range []string{d.genLL.String(), "2001:2::61", "2001:2:0:1::1"} {
		b.add("ipv6 source "+a+", hop limit 1", 1, false, func(int) packet.Spec {
			s := b.v6(b.route6())
			s.Src, s.TTL = addr(a), 1
			return s
		})
	}
	b.add("ipv6 link-local source, too big", 1, false, func(int) packet.Spec {
		s := b.v6(b.route6())
		s.Src, s.Size = d.genLL, 1514
		return s
	})

	// ICMP errors and other ICMP being forwarded: Linux forwards errors like anything else
	// (and never answers an error with an error, even at TTL 1).
	quote4 := func() []byte {
		q := packet.Spec{SrcMAC: tb.InMAC, DstMAC: tb.GenMAC, Src: b.route4(), Dst: testbed.GenAddr, SrcPort: b.port(), DstPort: b.port(), Size: 42}
		return q.Bytes()[14:]
	}
	quote6 := func() []byte {
		q := packet.Spec{SrcMAC: tb.InMAC, DstMAC: tb.GenMAC, Src: b.route6(), Dst: testbed.GenAddr6, SrcPort: b.port(), DstPort: b.port(), Size: 62}
		return q.Bytes()[14:]
	}
	for _, e := range []struct {
		name         string
		typ, code    uint8
		word1, word2 uint16
		t            uint8
	}{
		{"host unreachable", 3, 1, 0, 0, 0}, {"port unreachable", 3, 3, 0, 0, 0}, {"frag needed", 3, 4, 0, 1280, 0},
		{"time exceeded", 11, 0, 0, 0, 0}, {"parameter problem", 12, 0, 0x1400, 0, 0}, {"redirect", 5, 1, 0xc612, 0x0105, 0},
		{"source quench", 4, 0, 0, 0, 0}, {"port unreachable, ttl 1", 3, 3, 0, 0, 1}, {"time exceeded, ttl 1", 11, 0, 0, 0, 1},
	} {
		b.add("ipv4 icmp "+e.name+" forwarded", 1, false, func(int) packet.Spec {
			s := b.v4(b.route4())
			s.Proto, s.ICMPType, s.ICMPCode, s.SrcPort, s.DstPort, s.Payload = layers.IPProtocolICMPv4, e.typ, e.code, e.word1, e.word2, quote4()
			if e.t > 0 {
				s.TTL = e.t
			}
			return s
		})
	}
	for _, e := range []struct {
		name         string
		typ, code    uint8
		word1, word2 uint16
		t            uint8
	}{
		{"port unreachable", 1, 4, 0, 0, 0}, {"packet too big", 2, 0, 0, 1280, 0}, {"time exceeded", 3, 0, 0, 0, 0},
		{"parameter problem", 4, 0, 0, 40, 0}, {"port unreachable, hop limit 1", 1, 4, 0, 0, 1},
	} {
		b.add("ipv6 icmp "+e.name+" forwarded", 1, false, func(int) packet.Spec {
			s := b.v6(b.route6())
			s.Proto, s.ICMPType, s.ICMPCode, s.SrcPort, s.DstPort, s.Payload = layers.IPProtocolICMPv6, e.typ, e.code, e.word1, e.word2, quote6()
			if e.t > 0 {
				s.TTL = e.t
			}
			return s
		})
	}
	for _, e := range []struct {
		name string
		typ  uint8
	}{{"echo reply", 0}, {"timestamp", 13}, {"unassigned type 42", 42}} {
		b.add("ipv4 icmp "+e.name+" forwarded", 2, true, func(int) packet.Spec {
			s := b.v4(b.route4())
			s.Proto, s.ICMPType = layers.IPProtocolICMPv4, e.typ
			return s
		})
	}
	for _, e := range []struct {
		name string
		typ  uint8
		t    uint8
	}{{"echo reply", 129, 64}, {"neighbour solicitation", 135, 255}, {"router advertisement", 134, 255}, {"unassigned type 200", 200, 64}} {
		b.add("ipv6 icmpv6 "+e.name+" forwarded", 2, true, func(int) packet.Spec {
			s := b.v6(b.route6())
			s.Proto, s.ICMPType, s.TTL = layers.IPProtocolICMPv6, e.typ, e.t
			return s
		})
	}

	// Out the interface it came in on: Linux forwards it back and sends a redirect. Few and to
	// distinct peers: redirects have rate limits of their own (per source for IPv4, per
	// destination for IPv6) that icmp_ratelimit does not turn off.
	b.add("ipv4 hairpin from gen", 1, false, func(int) packet.Spec {
		s := b.v4(b.in4(220))
		s.Src = b.ownSource()
		return s
	})
	b.add("ipv4 hairpin from another on-link host", 1, false, func(int) packet.Spec {
		s := b.v4(b.in4(220))
		s.Src = addr("198.18.0.62")
		return s
	})
	b.add("ipv6 hairpin", 1, false, func(int) packet.Spec { return b.v6(testbed.Prefix6(220, 1)) })
	b.add("ipv6 hairpin", 1, false, func(int) packet.Spec { return b.v6(testbed.Prefix6(220, 2)) })

	return b.done()
}

// routeMTUCorpus is the corpus of the second phase (route MTU metrics, diffRouteMTUSetup):
// packets around each route's MTU and out0's. The fast path should forward the small ones and
// those up to the smallest route MTU (1300) of either family.
func (d *diffEnv) routeMTUCorpus() *diffCorpus {
	b := d.newBuilder(diffSeed + 1)
	for i := range 40 {
		p4, p6 := protos4[i%len(protos4)], protos6[i%len(protos6)]
		b.add("ipv4 "+p4.name+", small", 1, true, func(int) packet.Spec {
			s := b.v4(b.route4())
			p4.set(&s)
			return s
		})
		b.add("ipv6 "+p6.name+", small", 1, true, func(int) packet.Spec {
			s := b.v6(b.route6())
			p6.set(&s)
			return s
		})
	}
	const fastUpTo = 1300
	for _, c := range []struct {
		name  string
		dst   func() netip.Addr
		sizes []int
	}{
		{"route mtu 1300", func() netip.Addr { return b.in4(230) }, []int{1200, 1300, 1301, 1400, 1500}},
		{"route mtu lock 1350", func() netip.Addr { return b.in4(231) }, []int{1300, 1350, 1351, 1400}},
		{"route mtu 1480, above out0's", func() netip.Addr { return b.in4(232) }, []int{1300, 1400, 1401, 1450, 1481}},
		{"no route mtu, other routes' 1300", b.route4, []int{1300, 1301, 1350, 1400, 1401}},
	} {
		for _, size := range c.sizes {
			for _, df := range []bool{true, false} {
				name := fmt.Sprintf("ipv4 %s, %d bytes, DF %v", c.name, size, df)
				b.add(name, 2, size <= fastUpTo, func(i int) packet.Spec {
					s := b.v4(c.dst())
					protos4[i%3].set(&s)
					s.Size, s.DF = 14+size, df
					return s
				})
			}
		}
	}
	// IPv6 forwarding on Linux 6.18 honours a route's MTU, locked or not (Packet Too Big with
	// the route's MTU), as far as out0's MTU; bpf_fib_lookup() honours only a locked one
	// (ip6_mtu_from_fib6()), so the fast path must make up for the unlocked ones.
	for _, c := range []struct {
		name  string
		dst   func() netip.Addr
		sizes []int
	}{
		{"route mtu 1300", func() netip.Addr { return b.in6(0xe6) }, []int{1200, 1300, 1301, 1350, 1400, 1401}},
		{"route mtu lock 1350", func() netip.Addr { return b.in6(0xe7) }, []int{1300, 1350, 1351, 1400}},
		{"route mtu 1480, above out0's", func() netip.Addr { return b.in6(0xe8) }, []int{1300, 1400, 1401, 1450, 1481}},
		{"no route mtu, other routes' 1300", b.route6, []int{1300, 1301, 1350, 1400, 1401}},
	} {
		for _, size := range c.sizes {
			name := fmt.Sprintf("ipv6 %s, %d bytes", c.name, size)
			b.add(name, 2, size <= fastUpTo, func(i int) packet.Spec {
				s := b.v6(c.dst())
				protos6[i%3].set(&s)
				s.Size = 14 + size
				return s
			})
		}
	}
	return b.done()
}

// XDP with a tc program after it: the sink's eth0 has neither GRO nor an XDP program, so out0
// takes no XDP frames (nor in0, from the sink's side); in0's XDP program marks what it would
// route there and the tc program after it forwards it as skb. The same bytes as Linux alone.
func TestDifferentialTCAfterXDP(t *testing.T) {
	tb := newTestbed(t, testbed.Options{TxChecksumOff: true, NoGRO: true})
	d := newDiffEnv(t, tb, diffDUTSetup)
	d.hook = "xdp"
	// The tc program is attached when the first packet for it arrives (until then such packets
	// go to Linux): a few datagrams through out0 (dropped by the sink, which forwards nothing)
	// before the corpus, then wait for it.
	d.started = func(t *testing.T, l *testbed.Linuxfp) {
		sendUDP(t, tb, "198.19.10.1", 3)
		waitStatus(t, l, "in0", "the tc program after in0's XDP program", func(it *status.Interface) bool {
			return it.Program != nil && it.Program.TCAfterXDP
		})
	}
	d.differential(t, d.mainCorpus(), 4*time.Second, false)
	in0, err := testbed.StatusClientIn(tb.DUT).Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range in0.Interfaces {
		if it.Name != "in0" {
			continue
		}
		if it.Program == nil || !it.Program.TCAfterXDP || it.ToTC.Packets == 0 {
			t.Fatalf("in0: program %+v, to tc %d: want XDP with a tc program after it, handed the routed packets", it.Program, it.ToTC.Packets)
		}
		t.Logf("in0: handed to tc %d, forwarded %d", it.ToTC.Packets, it.Forwarded.Packets)
	}
}
