package dataplane

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/packet"
)

// The fast path's own cost per packet, for trimming it step by step: BPF_PROG_TEST_RUN of the
// XDP program on one forwarded packet, repeated in the kernel (cache-hot, one destination: less
// disturbed by other work on the machine than the benchmarks' pipelines, but not the same
// traffic). Run with `go test -run '^$' -bench Forward -benchtime 2000x ./internal/dataplane/`;
// ns/pkt is the median of the calls, min-ns/pkt the fastest call.
//
// A non-live test run gives the program the same buffer every time, so the program would see
// its own output after the first run. The routed packet's next hop has in0's own MAC, so the
// rewritten frame is again one for in0; its TTL goes down by one per run, so a call repeats it
// fewer times than the TTL allows. The bridge does not rewrite a bridged frame.

const forwardBenchRepeat = 200

// forwardBench runs pkt through prog b.N times forwardBenchRepeat times and reports the time
// per run. want is the reason the packet must be counted under.
func forwardBench(b *testing.B, env *testEnv, prog *ebpf.Program, pkt []byte, ifindex int, want Reason) {
	b.Helper()
	md := xdpMD{DataEnd: uint32(len(pkt)), IngressIfindex: uint32(ifindex)}
	if _, _, reason := env.runSkb(b, prog, pkt, skbMD{Ifindex: uint32(ifindex)}); reason != want {
		b.Fatalf("reason %v, want %v", reason, want)
	}
	per := make([]float64, 0, b.N)
	b.ResetTimer()
	// All calls in one entry into the namespace (an entry costs milliseconds).
	err := env.ns.Do(func() error {
		for range b.N {
			d, err := testRunDuration(prog, pkt, md, forwardBenchRepeat)
			if err != nil {
				return err
			}
			per = append(per, float64(d.Nanoseconds()))
		}
		return nil
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(per)
	b.ReportMetric(per[len(per)/2], "ns/pkt")
	b.ReportMetric(per[0], "min-ns/pkt")
}

func BenchmarkForward(b *testing.B) {
	requireRoot(b)
	env := newBridgeEnv(b)
	// Some neighbour is STALE nearly always on a router (a host not talked to lately), kept by
	// the neighbour tracepoints: the set is not empty, though the nexthop is not in it.
	env.sync(b, func(d *Data) {
		d.NeighData = NeighData{StaleByEvents: true, StaleNeighbours: []NeighKey{{env.out, netip.MustParseAddr("198.18.1.99")}}}
	})
	// A route whose next hop has in0's MAC (see above).
	if err := env.ns.Script(`
ip neigh replace 198.18.1.7 lladdr 02:00:00:00:00:01 dev out0 nud permanent
ip -6 neigh replace 2001:2:0:1::7 lladdr 02:00:00:00:00:01 dev out0 nud permanent
ip route add 198.19.99.0/24 via 198.18.1.7
ip -6 route add 2001:2:0:fe99::/64 via 2001:2:0:1::7
`); err != nil {
		b.Fatal(err)
	}
	ttl := func(s packet.Spec) []byte { s.TTL = 255; return s.Bytes() }
	b.Run("router-ipv4", func(b *testing.B) {
		forwardBench(b, env.testEnv, env.prog(b, true, true), ttl(v4("198.18.0.2", "198.19.99.9")), env.in, Forwarded)
	})
	b.Run("router-ipv6", func(b *testing.B) {
		forwardBench(b, env.testEnv, env.prog(b, true, true), ttl(v6("2001:2::2", "2001:2:0:fe99::9")), env.in, Forwarded)
	})
	// A destination on a connected subnet (its own neighbour entry, with in0's MAC too).
	if err := env.ns.Script("ip neigh replace 198.18.1.8 lladdr 02:00:00:00:00:01 dev out0 nud permanent"); err != nil {
		b.Fatal(err)
	}
	b.Run("router-ipv4-connected", func(b *testing.B) {
		forwardBench(b, env.testEnv, env.prog(b, true, true), ttl(v4("198.18.0.2", "198.18.1.8")), env.in, Forwarded)
	})
	// The same with the FIB cache on (lib/fibcache.h): a routed block's answer, and a connected
	// destination's (the block marked per destination, then the destination's own entry).
	env.sync(b, func(d *Data) { d.FibCache4, d.FibCache6 = true, true })
	b.Run("router-ipv4-cached", func(b *testing.B) {
		forwardBench(b, env.testEnv, env.prog(b, true, true), ttl(v4("198.18.0.2", "198.19.99.9")), env.in, Forwarded)
	})
	b.Run("router-ipv6-cached", func(b *testing.B) {
		forwardBench(b, env.testEnv, env.prog(b, true, true), ttl(v6("2001:2::2", "2001:2:0:fe99::9")), env.in, Forwarded)
	})
	b.Run("router-ipv4-connected-cached", func(b *testing.B) {
		forwardBench(b, env.testEnv, env.prog(b, true, true), ttl(v4("198.18.0.2", "198.18.1.8")), env.in, Forwarded)
	})
	env.sync(b, func(d *Data) { d.FibCache4, d.FibCache6 = false, false })
	// The gateway bench's rulesets (internal/bench/gateway), with a packet no rule matches (its
	// miss traffic): N DROP rules for /32s, or one DROP rule matching a hash:ip set of N.
	for _, c := range []struct {
		name string
		n    int
		set  bool
	}{{"gateway-1rule", 1, false}, {"gateway-10000rules", 10000, false}, {"gateway-ipset100", 100, true}} {
		b.Run(c.name, func(b *testing.B) {
			var addrs []netip.Addr
			for i := range c.n {
				addrs = append(addrs, netip.AddrFrom4([4]byte{198, 19, byte(i / 256), byte(i % 256)}))
			}
			p := blacklistProgram(b, model.IPv4, addrs, c.set)
			env.sync(b, func(d *Data) { d.Filter.Prog4 = p })
			forwardBench(b, env.testEnv, env.prog(b, true, true), ttl(v4("198.18.0.2", "198.19.99.9")), env.in, Forwarded)
			env.sync(b, nil)
		})
	}
	b.Run("bridge-ipv4", func(b *testing.B) {
		// Loaded first: a load that took longer than FDBRefreshInterval on busy cores would make
		// the first frame the source's refresh.
		prog := env.portProg(b, true)
		env.refreshed(b)
		pkt := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: netip.MustParseAddr("198.18.4.10"), Dst: netip.MustParseAddr("198.18.4.11"),
			SrcPort: 1000, DstPort: 2000, Size: 60}
		forwardBench(b, env.testEnv, prog, pkt.Bytes(), env.bp1, Bridged)
	})
}
