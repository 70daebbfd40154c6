package compose

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/bench/harness/benchtest"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/packet"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// composeMAC is module i's MAC for the test's routes (role 0xd: destination, 0x5: source).
func composeMAC(role, i int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0, 0, byte(role), 0, byte(i)}
}

// The inline chain (linuxfp's composition) and the tail-call chains must do the same thing to
// every packet, for every chain length and both lookups: the same verdict, the same bytes out,
// the same counters; and so must their BPF_PROG_TEST_RUN variants, but for the TTL they leave
// alone. The expected outcome is written down, so chains that are all equally wrong fail too.
func TestComposeSameBehaviour(t *testing.T) {
	benchtest.NeedRoot(t)
	benchtest.PinThread(t)
	ns, err := nsutil.New("lfp-composetest")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if _, err := ns.Run("ip", "link", "add", "a0", "type", "veth", "peer", "name", "b0"); err != nil {
		t.Fatal(err)
	}
	var ifA, ifB int
	err = ns.Do(func() error {
		for name, idx := range map[string]*int{"a0": &ifA, "b0": &ifB} {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			*idx = l.Attrs().Index
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	const ifNotReady = 999 // an egress not in lfp_tx_devs

	lengths := []int{1, 2, 3, 4, 5, 10, MaxModules}
	for _, lpm := range []bool{false, true} {
		c, err := newComposer(Compositions, lengths, lpm)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := ns.Do(func() error { return errors.Join(c.addTx(ifA), c.addTx(ifB)) }); err != nil {
			t.Fatal(err)
		}
		pfx := func(i int) netip.Prefix { return netip.PrefixFrom(testbed.Prefix4(i, 0), 24) }
		var routes []composeRoute
		for m := range MaxModules {
			egress := []int{ifA, ifB}[m%2]
			route := func(p int) composeRoute {
				return composeRoute{module: m, pfx: pfx(p), ifindex: egress, dst: composeMAC(0xd, m), src: composeMAC(0x5, m)}
			}
			// 198.19.0.0/24: every module chooses an egress; the last one's wins.
			routes = append(routes, route(0))
			// 198.19.1.0/24: module 3 drops (a filter).
			r := route(1)
			r.drop = m == 3
			routes = append(routes, r)
			// 198.19.2.0/24: modules 0 and 1 only; module 2 has no entry (to Linux).
			if m < 2 {
				routes = append(routes, route(2))
			}
			// 198.19.3.0/24: an egress the transmit step may not use.
			r = route(3)
			r.ifindex = ifNotReady
			routes = append(routes, r)
			// 198.19.4.0/24: only module 0 chooses; the others keep its choice.
			r = route(4)
			if m > 0 {
				r.ifindex = 0
			}
			routes = append(routes, r)
		}
		for _, r := range routes {
			if err := c.addRoute(r); err != nil {
				t.Fatal(err)
			}
		}

		udp := func(dst netip.Addr) packet.Spec {
			return packet.Spec{SrcMAC: composeMAC(0xa, 0), DstMAC: composeMAC(0xb, 0), Src: testbed.GenAddr, Dst: dst, SrcPort: 1024, DstPort: 9, Size: 60}
		}
		withTTL := func(s packet.Spec, ttl uint8) packet.Spec { s.TTL = ttl; return s }
		withOpts := func(s packet.Spec) packet.Spec { s.Options = []byte{1, 1, 1, 0}; return s }
		arp := udp(testbed.Prefix4(0, 1)).Bytes()
		arp[12], arp[13] = 0x08, 0x06

		type want struct {
			verdict uint32
			modules int    // modules 0..modules-1 counted the packet
			reason  string // lfp_stats
			via     int    // forwarded with module via's egress and MACs (-1: the frame unchanged)
		}
		fwd := func(m int) want { return want{xdpVerdictRedirect, -1, "forwarded", m} }
		for _, n := range lengths {
			cases := []struct {
				name string
				in   []byte
				want want
			}{
				{"every module chooses, the last wins", udp(testbed.Prefix4(0, 7)).Bytes(), want{}},
				{"a module drops", udp(testbed.Prefix4(1, 7)).Bytes(), want{}},
				{"a module has no entry", udp(testbed.Prefix4(2, 7)).Bytes(), want{}},
				{"egress not ready", udp(testbed.Prefix4(3, 7)).Bytes(), want{xdpVerdictPass, n, "egress_not_ready", -1}},
				{"the first module's choice kept", udp(testbed.Prefix4(4, 7)).Bytes(), want{}},
				{"no module has an entry", udp(testbed.Prefix4(5, 7)).Bytes(), want{xdpVerdictPass, 0, "fib_not_forwarded", -1}},
				{"TTL 1", withTTL(udp(testbed.Prefix4(0, 7)), 1).Bytes(), want{xdpVerdictPass, n, "ttl_exceeded", -1}},
				{"IPv4 options", withOpts(udp(testbed.Prefix4(0, 7))).Bytes(), want{xdpVerdictPass, 0, "ip_options", -1}},
				{"ARP", arp, want{xdpVerdictPass, 0, "not_ip", -1}},
				{"truncated", udp(testbed.Prefix4(0, 7)).Bytes()[:30], want{xdpVerdictPass, 0, "malformed", -1}},
			}
			cases[0].want = fwd(n - 1)
			if n <= 3 {
				cases[1].want = fwd(n - 1)
			} else {
				cases[1].want = want{xdpVerdictDrop, 4, "filter_dropped", -1}
			}
			if n <= 2 {
				cases[2].want = fwd(n - 1)
			} else {
				cases[2].want = want{xdpVerdictPass, 2, "fib_not_forwarded", -1}
			}
			cases[4].want = fwd(0)
			for _, tc := range cases {
				if tc.want.modules < 0 {
					tc.want.modules = n
				}
				wantModules := make([]uint64, MaxModules)
				for i := range tc.want.modules {
					wantModules[i] = 1
				}
				for _, v := range composeVariants {
					// As forwarded: the router's rewrite. For BPF_PROG_TEST_RUN: the same but the TTL.
					wantOut := tc.in
					if m := tc.want.via; m >= 0 && v.testRun {
						wantOut = slices.Clone(tc.in)
						copy(wantOut[0:6], composeMAC(0xd, m))
						copy(wantOut[6:12], composeMAC(0x5, m))
					} else if m >= 0 {
						wantOut = packet.Forwarded(tc.in, composeMAC(0x5, m), composeMAC(0xd, m))
					}
					name := fmt.Sprintf("lpm=%v/%d modules/%s/%s", lpm, n, v, tc.name)
					verdict, out, got := runCompose(t, c, v.comp, n, v.testRun, tc.in)
					if verdict != tc.want.verdict {
						t.Errorf("%s: verdict %d, want %d", name, verdict, tc.want.verdict)
					}
					if !bytes.Equal(out, wantOut) {
						t.Errorf("%s: frame out\n got %x\nwant %x", name, out, wantOut)
					}
					if !slices.Equal(got.Modules, wantModules) {
						t.Errorf("%s: modules counted %v, want %v", name, got.Modules, wantModules)
					}
					if want := map[string]uint64{tc.want.reason: 1}; !maps.Equal(got.Reasons, want) {
						t.Errorf("%s: lfp_stats %v, want %v", name, got.Reasons, want)
					}
				}
			}
		}
	}
}

// composeVariants are every composition, as forwarded with and as test-run.
var composeVariants = func() (out []composeVariant) {
	for _, testRun := range []bool{false, true} {
		for _, comp := range Compositions {
			out = append(out, composeVariant{comp, testRun})
		}
	}
	return out
}()

type composeVariant struct {
	comp    Composition
	testRun bool
}

func (v composeVariant) String() string {
	if v.testRun {
		return string(v.comp) + " (test run)"
	}
	return string(v.comp)
}

// runCompose runs comp's chain of n modules once on in: the verdict, the frame out and what the
// counters counted.
func runCompose(t *testing.T, c *composer, comp Composition, n int, testRun bool, in []byte) (uint32, []byte, composeCounters) {
	t.Helper()
	prog, err := c.program(comp, n, testRun)
	if err != nil {
		t.Fatal(err)
	}
	c0, err := c.counters()
	if err != nil {
		t.Fatal(err)
	}
	opts := &ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+256)}
	ret, err := prog.Run(opts)
	if err != nil {
		t.Fatalf("%s, %d modules: %v", comp, n, err)
	}
	c1, err := c.counters()
	if err != nil {
		t.Fatal(err)
	}
	return ret, opts.DataOut, c1.since(c0)
}
