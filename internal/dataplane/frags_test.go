package dataplane

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/linuxfp/linuxfp/internal/packet"
)

// The XDP programs are frags-aware (see ctx_multi_buffer in bpf/lib/ctx.h). BPF_PROG_TEST_RUN
// gives a frags-aware XDP program what does not fit in a page (~3.5 KB) as a multi-buffer
// frame, as veth does with a jumbo frame: it goes to Linux untouched, counted as multi_buffer
// with all its bytes. A frame that fits arrives linear and meets the usual checks (out0's MTU
// is 1400, the smallest route MTU 1450), as does every skb at tc, whose bytes beyond the linear
// part ctx_pull() reaches.
func TestMultiBuffer(t *testing.T) {
	env := newBridgeEnv(t)
	env.sync(t, nil)
	sized := func(s packet.Spec, size int) []byte { s.Size = size; return s.Bytes() }
	good4 := v4("198.18.0.2", "198.19.0.9")
	good6 := v6("2001:2::2", "2001:2:0:f100::9")
	bridged := packet.Spec{SrcMAC: macA, DstMAC: macB, Src: netip.MustParseAddr("198.18.4.10"), Dst: netip.MustParseAddr("198.18.4.11"),
		SrcPort: 1000, DstPort: 2000}
	cases := []struct {
		name    string
		port    bool // run on bridge port bp1 (else routed on in0)
		pkt     []byte
		wantXDP Reason
		wantTC  Reason // Forwarded for a case only XDP can run
	}{
		{name: "ipv4 8000 bytes", pkt: sized(good4, 8014), wantXDP: PassMultiBuffer},
		{name: "ipv6 8000 bytes", pkt: sized(good6, 8014), wantXDP: PassMultiBuffer},
		{name: "ipv4 3000 bytes arrives linear", pkt: sized(good4, 3014), wantXDP: PassFIBFragNeeded, wantTC: PassFIBFragNeeded},
		{name: "ipv4 1400 bytes forwarded", pkt: sized(good4, 1414), wantXDP: Forwarded, wantTC: Forwarded},
		// bp2's MTU is 1500.
		{name: "bridged 8000 bytes", port: true, pkt: sized(bridged, 8014), wantXDP: PassMultiBuffer},
		{name: "bridged 1500 bytes", port: true, pkt: sized(bridged, 1514), wantXDP: Bridged, wantTC: Bridged},
	}
	for _, hook := range hooks {
		env.hook = hook
		routed := env.prog(t, true, true)
		port := env.portProg(t, true)
		for _, c := range cases {
			t.Run(string(hook)+"/"+c.name, func(t *testing.T) {
				want, prog, ifindex := c.wantXDP, routed, env.in
				if hook == HookTC {
					if c.wantXDP == PassMultiBuffer {
						t.Skip("BPF_PROG_TEST_RUN takes no skb longer than a page")
					}
					want = c.wantTC
				}
				if c.port {
					prog, ifindex = port, env.bp1
					// Loading the programs may have taken longer than the refresh interval.
					env.refreshed(t)
				}
				if want == PassMultiBuffer {
					env.checkMultiBuffer(t, prog, c.pkt, ifindex)
					return
				}
				ret, out, reason := env.runOn(t, prog, c.pkt, ifindex)
				switch {
				case reason != want:
					t.Fatalf("reason %v, want %v", reason, want)
				case want.FastPathed() && ret != xdpRedirect:
					t.Fatalf("verdict %d, want XDP_REDIRECT", ret)
				case !want.FastPathed() && (ret != xdpPass || !bytes.Equal(out, c.pkt)):
					t.Fatalf("verdict %d, modified %v: not handed to Linux untouched", ret, !bytes.Equal(out, c.pkt))
				}
			})
		}
	}
}

// checkMultiBuffer runs pkt and checks it went to Linux untouched, counted as multi_buffer with
// all its bytes.
func (env *testEnv) checkMultiBuffer(t *testing.T, prog *ebpf.Program, pkt []byte, ifindex int) {
	t.Helper()
	before, err := env.dp.Counters(0)
	if err != nil {
		t.Fatal(err)
	}
	ret, out, reason := env.runOn(t, prog, pkt, ifindex)
	after, err := env.dp.Counters(0)
	if err != nil {
		t.Fatal(err)
	}
	if reason != PassMultiBuffer || ret != xdpPass {
		t.Fatalf("reason %v verdict %d, want multi_buffer, XDP_PASS", reason, ret)
	}
	if !bytes.Equal(out[:len(pkt)], pkt) {
		t.Fatal("multi-buffer frame handed to Linux was modified")
	}
	if got := after[PassMultiBuffer].Bytes - before[PassMultiBuffer].Bytes; got != uint64(len(pkt)) {
		t.Fatalf("counted %d bytes, want %d", got, len(pkt))
	}
}
