package dataplane

import (
	"maps"
	"net"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
)

// Interfaces of one kind share one verified program; what differs between them (MAC, counter
// slot) is data: each interface's packets are judged by its own MAC and counted in its own slot.
func TestProgramsSharedByKind(t *testing.T) {
	const none = Reason(1 << 30) // counted nowhere
	env := newTestEnv(t)
	do := func(f func() error) {
		t.Helper()
		if err := env.ns.Do(f); err != nil {
			t.Fatal(err)
		}
	}
	install := func(s Spec) Installed { return env.install(t, s) }
	// reason runs pkt through program id as received on ifindex and returns the verdict and the
	// reason counted in slot (-1: none).
	reason := func(id ebpf.ProgramID, pkt []byte, ifindex, slot int) (uint32, Reason) {
		t.Helper()
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		defer prog.Close()
		before, _ := env.dp.Counters(slot)
		out := make([]byte, len(pkt)+256)
		var ret uint32
		do(func() (err error) {
			ret, err = prog.Run(&ebpf.RunOptions{Data: pkt, DataOut: out,
				Context: xdpMD{DataEnd: uint32(len(pkt)), IngressIfindex: uint32(ifindex)}})
			return err
		})
		after, _ := env.dp.Counters(slot)
		r := Reason(none)
		for i := range after {
			if after[i].Packets != before[i].Packets {
				r = Reason(i)
			}
		}
		return ret, r
	}
	good4 := v4("198.18.0.2", "198.19.0.9")
	to := func(mac net.HardwareAddr) []byte {
		s := good4
		s.DstMAC = mac
		return s.Bytes()
	}

	in := install(Spec{Ifindex: env.in, Name: "in0", MAC: MACOf(macIn), Hook: HookXDP, Router4: true, Router6: true})
	out := install(Spec{Ifindex: env.out, Name: "out0", MAC: MACOf(macOut), Hook: HookXDP, Router4: true, Router6: true})
	if in.ProgramID != out.ProgramID || in.Slot == out.Slot || env.dp.Kinds() != 1 || env.dp.Verified() != 1 {
		t.Fatalf("same kind: programs %d and %d, slots %d and %d, %d kinds, %d verified: want one program, two slots",
			in.ProgramID, out.ProgramID, in.Slot, out.Slot, env.dp.Kinds(), env.dp.Verified())
	}
	if _, r := reason(out.ProgramID, to(macIn), env.out, out.Slot); r != PassNotForUs {
		t.Fatalf("in0's MAC received on out0: %v, want %v", r, PassNotForUs)
	}
	if _, r := reason(out.ProgramID, to(macOut), env.out, out.Slot); r == PassNotForUs || r == none {
		t.Fatalf("out0's MAC received on out0: %v", r)
	}
	if _, r := reason(out.ProgramID, to(macOut), env.in, in.Slot); r != PassNotForUs {
		t.Fatalf("out0's MAC received on in0: %v, want %v", r, PassNotForUs)
	}

	// A new MAC is data: the same program, judging by the new MAC.
	macNew := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x42}
	moved := install(Spec{Ifindex: env.out, Name: "out0", MAC: MACOf(macNew), Hook: HookXDP, Router4: true, Router6: true})
	if moved.ProgramID != out.ProgramID || moved.Slot != out.Slot {
		t.Fatalf("MAC changed: program %d slot %d, want %d %d", moved.ProgramID, moved.Slot, out.ProgramID, out.Slot)
	}
	if _, r := reason(out.ProgramID, to(macOut), env.out, out.Slot); r != PassNotForUs {
		t.Fatalf("out0's old MAC: %v, want %v", r, PassNotForUs)
	}
	if _, r := reason(out.ProgramID, to(macNew), env.out, out.Slot); r == PassNotForUs || r == none {
		t.Fatalf("out0's new MAC: %v", r)
	}

	// Another kind: another program; in0's is untouched.
	v4 := install(Spec{Ifindex: env.out, Name: "out0", MAC: MACOf(macNew), Hook: HookXDP, Router4: true})
	if v4.ProgramID == out.ProgramID || env.dp.Kinds() != 2 || env.dp.Verified() != 2 {
		t.Fatalf("IPv4 only: program %d (was %d), %d kinds, %d verified", v4.ProgramID, out.ProgramID, env.dp.Kinds(), env.dp.Verified())
	}
	if cur := env.dp.Installed()[env.in]; cur.ProgramID != in.ProgramID {
		t.Fatalf("in0's program changed with out0's kind: %d, was %d", cur.ProgramID, in.ProgramID)
	}

	// Removed, out0 has no data: its packets go to Linux untouched, counted nowhere.
	do(func() error { return env.dp.Remove(env.out) })
	pkt := to(macNew)
	before, _ := env.dp.Counters(v4.Slot)
	if ret, r := reason(v4.ProgramID, pkt, env.out, v4.Slot); ret != xdpPass || r != none {
		t.Fatalf("after removal: verdict %d, reason %v: want XDP_PASS, uncounted", ret, r)
	}
	if after, _ := env.dp.Counters(v4.Slot); !slices.Equal(before, after) {
		t.Fatal("after removal: counted")
	}
	// The program of a kind no interface runs is kept (not verified again when one comes back).
	back := install(Spec{Ifindex: env.out, Name: "out0", MAC: MACOf(macNew), Hook: HookXDP, Router4: true})
	if back.ProgramID != v4.ProgramID || env.dp.Verified() != 2 {
		t.Fatalf("same kind again: program %d, want the kept %d; %d verified", back.ProgramID, v4.ProgramID, env.dp.Verified())
	}
}

// An interface whose ifindex is beyond the lfp_ifs array (a host that has created many) has its
// data in lfp_ifs_hi, and is judged by it as any other.
func TestProgramsLargeIfindex(t *testing.T) {
	env := newTestEnv(t)
	const big = 70000
	if err := env.ns.Script("ip link add huge0 index 70000 type veth peer name huge1\nip link set huge0 up\nip link set huge1 up"); err != nil {
		t.Fatal(err)
	}
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x70}
	prog, err := env.dp.LoadProgram(Spec{Ifindex: big, Name: "huge0", MAC: MACOf(mac), Hook: HookXDP, Router4: true, Router6: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	s := v4("198.18.0.2", "198.19.0.9")
	if _, _, r := env.runOn(t, prog, s.Bytes(), big); r != PassNotForUs {
		t.Fatalf("in0's MAC received on ifindex %d: %v, want %v", big, r, PassNotForUs)
	}
	s.DstMAC = mac
	if _, _, r := env.runOn(t, prog, s.Bytes(), big); r == PassNotForUs || r == Reason(1<<30) {
		t.Fatalf("its own MAC received on ifindex %d: %v", big, r)
	}
	env.dp.clearIface(big)
	if _, _, r := env.runOn(t, prog, s.Bytes(), big); r != Reason(1<<30) {
		t.Fatalf("ifindex %d without data: %v, want uncounted", big, r)
	}
}

// Programs of kinds no interface runs are kept up to maxIdlePrograms (least recently used go
// first); a kind an interface runs is never dropped.
func TestProgramsIdleBound(t *testing.T) {
	env := newTestEnv(t)
	inst := env.install(t, Spec{Ifindex: env.in, Name: "in0", MAC: MACOf(macIn), Hook: HookXDP, Router4: true, Router6: true})
	// Ten other kinds, loaded and dropped (the tc build, by families, conntrack and bridge).
	n := 0
	for _, r6 := range []bool{false, true} {
		for _, ct := range []bool{false, true} {
			for _, br := range []bool{false, true} {
				for _, sk := range []bool{false, true} {
					if n == 10 {
						break
					}
					s := Spec{Ifindex: env.out, Name: "out0", MAC: MACOf(macOut), Hook: HookTC, Router4: true, Router6: r6,
						Conntrack4: ct, Bridge: br, SkbSender: sk}
					p, err := env.dp.LoadProgram(s, 1)
					if err != nil {
						t.Fatal(err)
					}
					p.Close()
					n++
				}
			}
		}
	}
	if got := env.dp.Kinds(); got != 1+maxIdlePrograms {
		t.Fatalf("%d kinds held, want in0's and %d idle", got, maxIdlePrograms)
	}
	verified := env.dp.Verified()
	again := env.install(t, Spec{Ifindex: env.out, Name: "out0", MAC: MACOf(macOut), Hook: HookXDP, Router4: true, Router6: true})
	if again.ProgramID != inst.ProgramID || env.dp.Verified() != verified {
		t.Fatalf("in0's kind on out0: program %d (in0 %d), %d verified (was %d): want in0's, none verified",
			again.ProgramID, inst.ProgramID, env.dp.Verified(), verified)
	}
}

// install attaches s's program in the test namespace.
func (e *testEnv) install(t *testing.T, s Spec) Installed {
	t.Helper()
	var inst Installed
	if err := e.ns.Do(func() (err error) { inst, err = e.dp.Install(s); return err }); err != nil {
		t.Fatal(err)
	}
	return inst
}

// Every setting of both objects is one the Go side sets (settings_gen.go, generated from the
// LFP_SETTING declarations), and the other way round: a variable declared without the macro,
// or an object not regenerated, would load with its default.
func TestSettingsAreTheObjectsVariables(t *testing.T) {
	var want []string
	for _, v := range (&settings{}).variables() {
		want = append(want, v.name)
	}
	slices.Sort(want)
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){"xdp": loadLinuxfp, "tc": loadLinuxfpTc} {
		cs, err := load()
		if err != nil {
			t.Fatal(err)
		}
		got := slices.Sorted(maps.Keys(cs.Variables))
		if !slices.Equal(got, want) {
			t.Errorf("%s object's variables %v, settings %v", name, got, want)
		}
	}
}

// A program kind follows from the modules' settings: the tc program after XDP is another kind
// (the tc object, marked packets only, no skb offload state after native XDP), and the XDP
// program marks packets for it only when asked to.
func TestKindSettings(t *testing.T) {
	s := Spec{Ifindex: 7, Name: "eth0", Hook: HookXDP, Router4: true, SkbSender: true, TCAfterXDP: true, Conntrack6: true}
	x, c := keyOf(s, false), keyOf(s, true)
	want := progKind{settings: settings{Router4: 1, SkbSender: 1, TcAfter: 1, Ct6: 1, CtJiffyMs: jiffyMs(), FdbRefreshJiffies: fdbRefreshJiffies()}}
	if x != want {
		t.Errorf("xdp kind %+v, want %+v", x, want)
	}
	want = progKind{tc: true, settings: settings{Router4: 1, TcCompanion: 1, Ct6: 1, CtJiffyMs: jiffyMs(), FdbRefreshJiffies: fdbRefreshJiffies()}}
	if c != want {
		t.Errorf("tc-after-xdp kind %+v, want %+v", c, want)
	}
	other := s
	other.Ifindex, other.Name, other.MAC = 8, "eth1", MAC{2, 0, 0, 0, 0, 9}
	if keyOf(other, false) != x {
		t.Error("two interfaces that differ only in their data are of different kinds")
	}
}
