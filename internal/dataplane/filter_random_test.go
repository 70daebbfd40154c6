package dataplane

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/filter/compile"
	"github.com/linuxfp/linuxfp/internal/filter/compile/compiletest"
	"github.com/linuxfp/linuxfp/internal/filter/eval"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/packet"
)

// The last link of the filter's chain of evidence (kernel == eval: internal/filter/eval;
// eval ~ Classify: internal/filter/compile): the BPF classifier gives exactly Classify's verdict,
// on random rulesets (both families, sets, interfaces, jumps ...) and random packets.

const filterTopology = `
ip link add in0 type veth peer name in0p
ip link add out0 type veth peer name out0p
ip link set in0 up
ip link set in0p up
ip link set out0 up
ip link set out0p up
ip addr add 198.18.0.1/24 dev in0
ip addr add 198.18.255.1/24 dev out0
ip -6 addr add 2001:2::1/64 dev in0 nodad
ip -6 addr add 2001:2:0:ffff::1/64 dev out0 nodad
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.ipv6.conf.all.forwarding=1
ip neigh replace 198.18.255.2 lladdr 02:00:00:00:00:03 dev out0 nud permanent
ip -6 neigh replace 2001:2:0:ffff::2 lladdr 02:00:00:00:00:03 dev out0 nud permanent
ip route add 198.19.0.0/16 via 198.18.255.2
ip -6 route add 2001:2:0:f100::/56 via 2001:2:0:ffff::2
ip -6 route add 2001:2:0:f200::/56 via 2001:2:0:ffff::2
`

func TestFilterRandomMatchesClassify(t *testing.T) {
	requireRoot(t)
	ns, err := nsutil.New("lfp-fwtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	if err := ns.Script(filterTopology); err != nil {
		t.Fatal(err)
	}
	env := &testEnv{ns: ns, progs: map[progKey]*ebpf.Program{}, hook: HookXDP}
	var inMAC []byte
	if err := ns.Do(func() error {
		dp, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), Options{})
		if err != nil {
			return err
		}
		env.dp = dp
		in, _ := netlink.LinkByName("in0")
		out, _ := netlink.LinkByName("out0")
		env.in, env.out = in.Attrs().Index, out.Attrs().Index
		inMAC = in.Attrs().HardwareAddr
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.dp.Close() })
	prog, err := env.dp.LoadProgram(Spec{Ifindex: env.in, Name: "in0", MAC: MACOf(inMAC), Hook: HookXDP, Router4: true, Router6: true, Conntrack4: true, Conntrack6: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })

	r := rand.New(rand.NewPCG(7, 11))
	compared, skipped, fib := map[compile.Verdict]int{}, 0, 0
	for round := range 60 {
		fam := model.IPv4
		if round%2 == 1 {
			fam = model.IPv6
		}
		g := &compiletest.Gen{R: r, Family: fam}
		rs, sets := g.Ruleset()
		p, err := compile.Compile(rs, sets)
		if err != nil {
			continue // too large: the graph keeps the family on Linux
		}
		data := Data{TxData: TxData{TxDevs: []int{env.out}}}
		// The local routes fib matches are folded against (lfp_local4/6, lfp_local_pfx4/6).
		for _, l := range compiletest.Local {
			if l.IsSingleIP() {
				data.LocalHosts = append(data.LocalHosts, l.Addr())
			} else {
				data.LocalPrefixes = append(data.LocalPrefixes, l)
			}
		}
		if fam == model.IPv4 {
			data.Filter.Prog4 = p
		} else {
			data.Filter.Prog6 = p
		}
		for range 40 {
			pk := g.Packet()
			if pk.Mark != 0 || pk.Proto == 0 {
				// The data plane assumes mark 0 where it holds (see MarkUnsafe); packet.Spec
				// cannot build protocol 0 (IPv6 hop-by-hop: the router's case).
				continue
			}
			in := compile.Input{Src: pk.Src, Dst: pk.Dst, Proto: pk.Proto, SrcPort: pk.SrcPort, DstPort: pk.DstPort,
				ICMPType: pk.ICMPType, ICMPCode: pk.ICMPCode, SrcMaybeLocal: pk.SrcMaybeLocal, DstMaybeLocal: pk.DstMaybeLocal}
			var inBits, outBits [2]uint64
			for i, pat := range p.Patterns {
				if pat.Matches(pk.In) {
					in.IifBits |= 1 << i
				}
				if pat.Matches(pk.Out) {
					in.OifBits |= 1 << i
				}
			}
			inBits[fam/6], outBits[fam/6] = in.IifBits, in.OifBits
			data.Filter.Ifaces = []FilterIface{{Ifindex: env.in, Bits: inBits}, {Ifindex: env.out, Bits: outBits}}
			if err := ns.Do(func() error { return env.dp.Sync(data) }); err != nil {
				t.Fatal(err)
			}
			want := p.Classify(in)
			ret, _, reason := env.run(t, prog, frame(pk, inMAC))
			var got compile.Verdict
			switch {
			case ret == 1 && reason == FilterDropped:
				got = compile.Drop
			case ret == xdpRedirect && reason == Forwarded:
				got = compile.Accept
			case ret == xdpPass && reason == PassFilter:
				got = compile.Linux
			default:
				skipped++ // not classified: the router gave it to Linux first (martian, ...)
				continue
			}
			if got != want.Verdict {
				t.Fatalf("%s: BPF %v, Classify %v (rule %d %s)\n%s", pk, got, want.Verdict, want.Rule, want.Why, p)
			}
			compared[got]++
			if p.FibLocalDst && in.DstMaybeLocal || p.FibLocalSrc && in.SrcMaybeLocal {
				fib++
			}
		}
	}
	t.Logf("compared %v (%d with an address that may be local and a folded fib match), skipped %d (not classified: handed to Linux by the router first)", compared, fib, skipped)
	if compared[compile.Accept] == 0 || compared[compile.Drop] == 0 || compared[compile.Linux] == 0 || fib == 0 {
		t.Fatalf("every verdict must be exercised, and folded fib matches: %v, %d", compared, fib)
	}
}

// frame builds pk as a frame for in0; transports other than UDP, TCP and ICMP carry their ports
// in the payload.
func frame(pk eval.Packet, dstMAC []byte) []byte {
	s := packet.Spec{SrcMAC: macPeer, DstMAC: dstMAC, Src: pk.Src, Dst: pk.Dst, Proto: layers.IPProtocol(pk.Proto),
		SrcPort: pk.SrcPort, DstPort: pk.DstPort, ICMPType: pk.ICMPType, ICMPCode: pk.ICMPCode, Size: 100}
	switch pk.Proto {
	case model.ProtoUDP, model.ProtoTCP, model.ProtoICMP, model.ProtoICMPv6:
	default:
		s.Payload = []byte{byte(pk.SrcPort >> 8), byte(pk.SrcPort), byte(pk.DstPort >> 8), byte(pk.DstPort), 0, 0, 0, 0, 0, 0, 0, 0}
	}
	return s.Bytes()
}
