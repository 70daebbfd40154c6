package pods

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The tc ceiling of the pods benchmark (mode ceiling-tc, intra-node pairs only): the same pods,
// node and cni0 as in the other modes, and on each intra pair's two host-side veths a program at
// tcx ingress that hands every IPv4 frame straight to the other pod with bpf_redirect_peer(),
// as linuxfp delivers into a pod (bpf/lib/tx.h); anything else (ARP) goes on to Linux's bridge.
// No filter, no conntrack, no FDB: what a tc data path in this topology adds to the pods' own
// stacks at the least (the host veth's receive round, the program run, the redirect). The
// ceiling mode's direct veth pairs have no host hop at all. Across nodes a program would also
// have to encapsulate: no such ceiling is measured there.

// tcxNext is TCX_NEXT: hand the packet on (to Linux).
const tcxNext = -1

// __sk_buff offsets (include/uapi/linux/bpf.h).
const (
	skbData    = 76
	skbDataEnd = 80
)

// ceilingTCInsns redirects every IPv4 frame into ifindex's peer.
func ceilingTCInsns(ifindex int) asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, skbData, asm.Word),
		asm.LoadMem(asm.R3, asm.R1, skbDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		// h_proto, big-endian: ETH_P_IP loads as 0x0008 on this little-endian CPU.
		asm.LoadMem(asm.R4, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R4, 0x0008, "pass"),
		asm.Mov.Imm(asm.R1, int32(ifindex)),
		asm.Mov.Imm(asm.R2, 0),
		asm.FnRedirectPeer.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("pass"),
		asm.Return(),
	}
}

// ceilingTC is the tc ceiling attached in node1: its programs and links.
type ceilingTC struct {
	progs []*ebpf.Program
	links []link.Link
}

// attachCeilingTC attaches the tc ceiling to the host veths of the first n intra-node pairs of
// layout l in node1, each one redirecting into the other.
func attachCeilingTC(p *testbed.Pods, l podsLayout, n int) (c *ceilingTC, err error) {
	c = &ceilingTC{}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	node := p.Nodes[0]
	return c, node.NS.Do(func() error {
		for k := range n {
			client, server := l.pair(p, WorkloadIntra, k)
			for _, d := range [][2]string{{client.HostVeth, server.HostVeth}, {server.HostVeth, client.HostVeth}} {
				from, err := net.InterfaceByName(d[0])
				if err != nil {
					return err
				}
				to, err := net.InterfaceByName(d[1])
				if err != nil {
					return err
				}
				prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
					Name: "bench_ceil_pods", Type: ebpf.SchedCLS, AttachType: ebpf.AttachTCXIngress,
					License: "GPL", Instructions: ceilingTCInsns(to.Index),
				})
				if err != nil {
					return fmt.Errorf("load the tc ceiling for %s: %w", d[0], err)
				}
				c.progs = append(c.progs, prog)
				lk, err := link.AttachTCX(link.TCXOptions{Interface: from.Index, Program: prog, Attach: ebpf.AttachTCXIngress})
				if err != nil {
					return fmt.Errorf("attach the tc ceiling to %s: %w", d[0], err)
				}
				c.links = append(c.links, lk)
			}
		}
		return nil
	})
}

// Close detaches and unloads the programs.
func (c *ceilingTC) Close() error {
	var err error
	for _, lk := range c.links {
		err = errors.Join(err, lk.Close())
	}
	for _, p := range c.progs {
		p.Close()
	}
	return err
}
