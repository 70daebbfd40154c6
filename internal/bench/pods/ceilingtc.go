package pods

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The tc ceiling of the pods benchmark (mode ceiling-tc, intra-node pairs only): the same pods,
// node and cni0 as in the other modes, and on each intra pair's two host-side veths a program at
// tcx ingress that hands every IPv4 frame straight to the other pod
// (harness.LoadTCPeerCeiling); anything else (ARP) goes on to Linux's bridge.
// No filter, no conntrack, no FDB: what a tc data path in this topology adds to the pods' own
// stacks at the least (the host veth's receive round, the program run, the redirect). The
// ceiling mode's direct veth pairs have no host hop at all. Across nodes a program would also
// have to encapsulate: no such ceiling is measured there.

// ceilingTC is the tc ceiling attached in node1: its programs and links.
type ceilingTC struct {
	progs []*ebpf.Program
	links []link.Link
}

// attachCeilingTC attaches the tc ceiling to the host veths of every intra-node pair of layout l
// in node1, each one redirecting into the other.
func attachCeilingTC(p *testbed.Pods, l podsLayout) (c *ceilingTC, err error) {
	c = &ceilingTC{}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	node := p.Nodes[0]
	return c, node.NS.Do(func() error {
		for k := range l.max {
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
				prog, err := harness.LoadTCPeerCeiling(to.Index)
				if err != nil {
					return fmt.Errorf("%s: %w", d[0], err)
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
