package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/model"
)

// A configuration the data plane cannot take must not leave the old data deciding: the
// families it governs go to Linux (apply_failed) until a Sync succeeds.

// dropAll is a ruleset of n rules whose last drops everything (the others match nothing the
// tests send).
func dropAll(n int) *compile.Program {
	p := &compile.Program{Family: model.IPv4, Cut: compile.CutDst}
	var idx []int
	for i := 0; i < n-1; i++ {
		p.Rules = append(p.Rules, compile.Rule{Tests: []compile.Test{{Kind: compile.TestDst, Prefix: pfx("198.19.200.0/24")}}, Action: compile.ActDrop})
		idx = append(idx, i)
	}
	p.Rules = append(p.Rules, compile.Rule{Action: compile.ActDrop})
	p.Leaves = []compile.Leaf{{Rules: append(idx, n-1)}}
	p.Prefixes = []compile.LeafPrefix{{Prefix: pfx("0.0.0.0/0"), Leaf: 0}}
	return p
}

func TestGateFilterOverCapacity(t *testing.T) {
	env := newTestEnv(t)
	// A test-only capacity, which may not grow: the same check and the same path as a ruleset
	// larger than --filter-rules.
	env.dp.fwCap, env.dp.fwMax = 8, 8
	ifs := []FilterIface{{Ifindex: env.in, Bits: [2]uint64{1, 1}}, {Ifindex: env.out, Bits: [2]uint64{2, 2}}}
	data := func(p *compile.Program) Data {
		return Data{TxData: txTo(env.out, env.in),
			Filter: FilterData{Prog4: p, Ifaces: ifs}}
	}
	sync := func(p *compile.Program) error {
		return env.ns.Do(func() error { return env.dp.Sync(data(p)) })
	}
	pkt4 := v4("198.18.0.2", "198.19.0.9").Bytes()
	pkt6 := v6("2001:2::2", "2001:2:0:f100::9").Bytes()
	for _, hook := range hooks {
		env.hook = hook
		prog := env.prog(t, true, true)
		check := func(step string, pkt []byte, wantRet uint32, want Reason) {
			t.Helper()
			ret, _, reason := env.run(t, prog, pkt)
			if ret != wantRet || reason != want {
				t.Fatalf("%s %s: verdict %d reason %v, want %d %v", hook, step, ret, reason, wantRet, want)
			}
		}
		// Linux drops everything: so does the fast path.
		if err := sync(dropAll(3)); err != nil {
			t.Fatal(err)
		}
		check("3-rule drop", pkt4, xdpDrop, FilterDropped)
		// Linux now has 9 rules, more than the data plane holds, and the last accepts: the
		// old ruleset (which drops) must not decide, nor may IPv4 be forwarded unfiltered.
		bigger := dropAll(9)
		bigger.Rules[8].Action = compile.ActSkip
		bigger.Rules[8].SkipTo = 9
		err := sync(bigger)
		if !errors.Is(err, ErrFilterCapacity) {
			t.Fatalf("sync of 9 rules: %v, want ErrFilterCapacity", err)
		}
		if f := env.dp.Failed(); f != IPv4 {
			t.Fatalf("failed families %v, want ipv4", f)
		}
		check("over capacity", pkt4, xdpPass, PassApplyFailed)
		// IPv6's configuration was applied: its packets stay fast.
		check("over capacity, ipv6", pkt6, xdpRedirect, Forwarded)
		// A ruleset that fits again: the gate opens, the new ruleset decides.
		if err := sync(dropAll(2)); err != nil {
			t.Fatal(err)
		}
		if f := env.dp.Failed(); f != 0 {
			t.Fatalf("failed families %v after a good sync", f)
		}
		check("fits again", pkt4, xdpDrop, FilterDropped)
		if err := sync(nil); err != nil {
			t.Fatal(err)
		}
		check("no rules", pkt4, xdpRedirect, Forwarded)
	}
}

func TestGateFailedUpdate(t *testing.T) {
	env := newTestEnv(t)
	// More local addresses than lfp_local4 holds: a map update fails. Those addresses decide
	// which sources are martian, for either family's packets as far as the gate knows.
	var hosts []netip.Addr
	for i := 0; i < 16385; i++ {
		hosts = append(hosts, netip.AddrFrom4([4]byte{198, 18, byte(128 + i>>8), byte(i)}))
	}
	data := Data{TxData: txTo(env.out, env.in)}
	pkt4 := v4("198.18.0.2", "198.19.0.9").Bytes()
	pkt6 := v6("2001:2::2", "2001:2:0:f100::9").Bytes()
	for _, hook := range hooks {
		env.hook = hook
		prog := env.prog(t, true, true)
		bad := data
		bad.LocalHosts = hosts
		if err := env.ns.Do(func() error { return env.dp.Sync(bad) }); err == nil {
			t.Fatal("sync of 16385 local addresses succeeded; the test needs a failing update")
		}
		if f := env.dp.Failed(); f != BothFamilies {
			t.Fatalf("failed families %v, want both", f)
		}
		for _, pkt := range [][]byte{pkt4, pkt6} {
			if ret, _, reason := env.run(t, prog, pkt); ret != xdpPass || reason != PassApplyFailed {
				t.Fatalf("%s after a failed update: verdict %d reason %v, want pass apply_failed", hook, ret, reason)
			}
		}
		if err := env.ns.Do(func() error { return env.dp.Sync(data) }); err != nil {
			t.Fatal(err)
		}
		for _, pkt := range [][]byte{pkt4, pkt6} {
			if ret, _, reason := env.run(t, prog, pkt); ret != xdpRedirect || reason != Forwarded {
				t.Fatalf("%s after a good sync: verdict %d reason %v, want forwarded", hook, ret, reason)
			}
		}
	}
}

// A ruleset larger than the filter maps gets larger maps (and programs that use them) instead
// of Linux: the fast path decides it.
func TestFilterMapsGrow(t *testing.T) {
	env := newTestEnv(t)
	// Test-only: the maps count as made for 8 rules, with room to grow.
	env.dp.fwCap = 8
	ifs := []FilterIface{{Ifindex: env.in, Bits: [2]uint64{1, 1}}, {Ifindex: env.out, Bits: [2]uint64{2, 2}}}
	sync := func(p *compile.Program) error {
		return env.ns.Do(func() error {
			return env.dp.Sync(Data{TxData: txTo(env.out, env.in),
				Filter: FilterData{Prog4: p, Ifaces: ifs}})
		})
	}
	pkt4 := v4("198.18.0.2", "198.19.0.9").Bytes()
	if err := sync(dropAll(3)); err != nil {
		t.Fatal(err)
	}
	gen := env.dp.mapsGen
	if err := sync(dropAll(40)); err != nil {
		t.Fatalf("a 40-rule ruleset: %v", err)
	}
	if env.dp.fwCap < 40 || env.dp.mapsGen == gen || env.dp.Failed() != 0 {
		t.Fatalf("capacity %d, maps generation %d (was %d), failed %v: not grown", env.dp.fwCap, env.dp.mapsGen, gen, env.dp.Failed())
	}
	if m := env.dp.maps.LfpFwRules.MaxEntries(); m != uint32(2*env.dp.fwCap) {
		t.Fatalf("lfp_fw_rules holds %d, want two banks of %d", m, env.dp.fwCap)
	}
	for _, hook := range hooks {
		env.hook = hook
		// Programs loaded now use the new maps (the old ones are gone with their programs).
		prog, err := env.dp.LoadProgram(Spec{Ifindex: env.in, Name: "in0", MAC: MACOf(macIn), Hook: hook, Router4: true, Router6: true}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer prog.Close()
		if ret, _, reason := env.run(t, prog, pkt4); ret != xdpDrop || reason != FilterDropped {
			t.Fatalf("%s: verdict %d reason %v, want the grown ruleset's drop", hook, ret, reason)
		}
	}
}

// The link unit of the fence (include/fence.h) holds the packets of a device whose change the
// data plane does not follow yet: arriving on it (the gate's check) or routed out of it (the
// check after the route lookup, with the gate's maps looked up once for the packet), with the
// FIB cache on and off; a packet between two other devices goes on.
func TestGateLinkFence(t *testing.T) {
	env := newTestEnv(t)
	toOut := v4("198.18.0.2", "198.19.0.9").Bytes() // out0
	toBig := v4("198.18.0.2", "198.19.8.9").Bytes() // big0
	check := func(t *testing.T, prog *ebpf.Program, pkt []byte, want Reason) {
		t.Helper()
		ret, _, reason := env.run(t, prog, pkt)
		if reason != want || (want == Forwarded) != (ret == xdpRedirect) {
			t.Fatalf("reason %v verdict %d, want %v", reason, ret, want)
		}
	}
	for _, cache := range []bool{false, true} {
		if err := env.ns.Do(func() error {
			big, err := netlink.LinkByName("big0")
			if err != nil {
				return err
			}
			return env.dp.Sync(Data{TxData: txTo(env.out, env.in, big.Attrs().Index), FibCacheData: FibCacheData{FibCache4: cache}})
		}); err != nil {
			t.Fatal(err)
		}
		for _, hook := range hooks {
			env.hook = hook
			t.Run(fmt.Sprintf("%s/cache=%v", hook, cache), func(t *testing.T) {
				prog := env.prog(t, true, true)
				// Both answers kept first, where the cache is on.
				check(t, prog, toOut, Forwarded)
				check(t, prog, toBig, Forwarded)
				env.fenceLink(t, env.out)
				check(t, prog, toOut, PassFenced)
				check(t, prog, toBig, Forwarded)
				env.fenceLink(t, env.in)
				check(t, prog, toBig, PassFenced)
				if err := env.dp.maps.LfpIfFence.Delete(uint32(env.in)); err != nil {
					t.Fatal(err)
				}
				if err := env.dp.maps.LfpIfFence.Delete(uint32(env.out)); err != nil {
					t.Fatal(err)
				}
				check(t, prog, toOut, Forwarded)
			})
		}
	}
}

// fenceLink makes the fence say that a change of device ifindex waits for the controller (as
// the netlink watcher does when it sees one), against the gate's current count; the next Sync,
// or deleting the device's lfp_if_fence entry, lets it through again.
func (e *testEnv) fenceLink(t *testing.T, ifindex int) {
	t.Helper()
	var g linuxfpLfpGate
	if err := e.dp.maps.LfpGateMap.Lookup(uint32(0), &g); err != nil {
		t.Fatal(err)
	}
	f := linuxfpLfpFence{}
	if err := e.dp.maps.LfpFenceMap.Lookup(uint32(0), &f); err != nil {
		t.Fatal(err)
	}
	f.Seq[FenceLink] = g.Done[FenceLink] + 1
	if err := e.dp.maps.LfpFenceMap.Put(uint32(0), f); err != nil {
		t.Fatal(err)
	}
	if err := e.dp.maps.LfpIfFence.Put(uint32(ifindex), g.Done[FenceLink]+1); err != nil {
		t.Fatal(err)
	}
}
