package harness

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The tc ceiling (mode ceiling-tc) is bpf/bench/ceiling.c at the tc hook: on the DUT's in0, at
// tcx ingress, every IPv4 frame, and IPv6 one with UDP after its header, gets the sink's and
// out0's MACs (router) or stays as it is (bridge, l2) and is redirected to out0 with
// bpf_redirect(), as linuxfp's tc build transmits (bpf/lib/tx.h); anything else goes on to Linux
// (TCX_NEXT). What no tc program can beat here:
// the frames arrive at in0 as XDP frames from the generator, so the tc hook costs an skb per
// frame (built by veth's NAPI, through GRO and the stack's receive path up to tcx) and a transmit
// through out0's dev_queue_xmit(); the ceiling adds to that only its few instructions.
//
// It is written here with cilium/ebpf's asm package rather than as C in bpf/bench: a score of
// instructions, the same as the C ceiling's, built at run time with out0's ifindex and the MACs
// as immediates.

// tcxNext is TCX_NEXT: hand the packet on (to Linux).
const tcxNext = -1

// __sk_buff offsets (include/uapi/linux/bpf.h).
const (
	skbData    = 76
	skbDataEnd = 80
)

// tcEthInsns begin a tc ceiling: r2 = data, r3 = data_end, r4 = the EtherType, to "pass" where
// the Ethernet header is not in the linear part. h_proto is big-endian: ETH_P_IP loads as 0x0008
// on this little-endian CPU, ETH_P_IPV6 as 0xdd86.
func tcEthInsns() asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, skbData, asm.Word),
		asm.LoadMem(asm.R3, asm.R1, skbDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R4, asm.R2, 12, asm.Half),
	}
}

// tcCeilingInsns is the tc ceiling's program: redirect to ifindex every IPv4 frame and IPv6 UDP
// one, rewriting its MACs to eth (destination, source) unless l2.
func tcCeilingInsns(l2 bool, eth [12]byte, ifindex int) asm.Instructions {
	insns := append(tcEthInsns(),
		// The one check, as in the XDP ceiling: ARP, IPv6 neighbour discovery (and the bridge's
		// learning frames) stay with Linux; IPv4 and IPv6 with UDP right after the header go.
		asm.JEq.Imm(asm.R4, 0x0008, "go"),
		asm.JNE.Imm(asm.R4, 0xdd86, "pass"),
		// The IPv6 header's next header (byte 6) must be in the linear part too.
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14+40),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R4, asm.R2, 14+6, asm.Byte),
		asm.JNE.Imm(asm.R4, 17, "pass"), // IPPROTO_UDP
		asm.Mov.Imm(asm.R0, 0).WithSymbol("go"),
	)
	if !l2 {
		for i := 0; i < 3; i++ {
			v := int32(binary.NativeEndian.Uint32(eth[4*i:]))
			insns = append(insns, asm.StoreImm(asm.R2, int16(4*i), int64(v), asm.Word))
		}
	}
	return append(insns, tcRedirectInsns(asm.FnRedirect, ifindex)...)
}

// tcRedirectInsns end a tc ceiling: redirect with fn (flags 0) to ifindex, and at "pass" hand the
// packet on to Linux.
func tcRedirectInsns(fn asm.BuiltinFunc, ifindex int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Imm(asm.R1, int32(ifindex)),
		asm.Mov.Imm(asm.R2, 0),
		fn.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("pass"),
		asm.Return(),
	}
}

// loadTCCeiling loads the tc ceiling for redirects to ifindex.
func loadTCCeiling(l2 bool, eth [12]byte, ifindex int) (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "bench_ceil_tc",
		Type:         ebpf.SchedCLS,
		AttachType:   ebpf.AttachTCXIngress,
		License:      "GPL",
		Instructions: tcCeilingInsns(l2, eth, ifindex),
	})
	if err != nil {
		return nil, fmt.Errorf("load the tc ceiling: %w", err)
	}
	return p, nil
}

// LoadTCPeerCeiling loads the pods benchmark's tc ceiling for one host veth (tcx ingress): every
// IPv4 frame goes straight to ifindex's veth peer with bpf_redirect_peer() (as linuxfp delivers
// into a pod, bpf/lib/tx.h), anything else on to Linux.
func LoadTCPeerCeiling(ifindex int) (*ebpf.Program, error) {
	insns := append(tcEthInsns(), asm.JNE.Imm(asm.R4, 0x0008, "pass"))
	insns = append(insns, tcRedirectInsns(asm.FnRedirectPeer, ifindex)...)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "bench_ceil_pods", Type: ebpf.SchedCLS,
		AttachType: ebpf.AttachTCXIngress, License: "GPL", Instructions: insns})
	if err != nil {
		return nil, fmt.Errorf("load the tc ceiling: %w", err)
	}
	return p, nil
}

// attachTCCeiling attaches the tc ceiling to the DUT's in0 at tcx ingress, redirecting into out0.
func attachTCCeiling(tb *testbed.Testbed, l2 bool) (*tcCeilingRun, error) {
	p, err := loadTCCeiling(l2, ceilingEth(tb), tb.OutIfindex)
	if err != nil {
		return nil, err
	}
	c := &tcCeilingRun{prog: p}
	err = tb.DUT.Do(func() error {
		c.link, err = link.AttachTCX(link.TCXOptions{Interface: tb.InIfindex, Program: p, Attach: ebpf.AttachTCXIngress})
		return err
	})
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("attach the tc ceiling to in0: %w", err)
	}
	return c, nil
}

type tcCeilingRun struct {
	prog *ebpf.Program
	link link.Link
}

func (c *tcCeilingRun) Close() error {
	err := c.link.Close()
	c.prog.Close()
	return err
}
