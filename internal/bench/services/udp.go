package services

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The udp workload: the established-flow packet rate through the NAT. The XDP generator sends UDP
// from port 1024 to port 9: from the client to every service's cluster IP in turn (one flow per
// service), or in the masquerade case from pod 0 to the outside host (one flow). Each flow's first
// packet goes through Linux, which creates its conntrack entry (kube-proxy's DNAT to a random
// endpoint and masquerade to cni0's address; Flannel's masquerade to out0's); the flows stay
// one-way (the sinks answer nothing), so their entries stay unreplied, which the conntrack module
// handles in the original direction. What reaches the endpoints is counted by XDP sinks on the
// pods' eth0 (the outside host's), attached only for this workload: a program on a veth's receive
// side changes how the node's Linux and linuxfp deliver into it (XDP redirects become possible),
// which the TCP workloads must not see.

// prepareUDP attaches the sinks for case c, gives the generator's receiving peer NAPI where it
// has none (pod 0's cni0 port in the masquerade case: a veth drops XDP frames otherwise, see
// KERNEL-NOTES; in0 has GRO on from the start), loads the generator, and waits for linuxfp to
// settle on the changes. restore undoes it all.
func (r *svcRun) prepareUDP(c Case) (restore func() error, err error) {
	var undo []func() error
	r.sinks = map[string]*harness.Sink{}
	// A failure returns a nil restore: undoAll, not restore, undoes what was done.
	undoAll := func() error {
		var errs []error
		for _, u := range slices.Backward(undo) {
			errs = append(errs, u())
		}
		r.sinks = nil
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			undoAll()
		}
	}()
	sinkAt := func(name string, ns *nsutil.NS) error {
		s, err := harness.AttachSink(ns, "eth0")
		if err != nil {
			return err
		}
		r.sinks[name] = s
		undo = append(undo, s.Close)
		return nil
	}
	if c.Masquerade {
		if err := sinkAt("outside", r.topo.Outside); err != nil {
			return nil, err
		}
	} else {
		for _, p := range r.topo.Pods {
			if err := sinkAt(podAddr(c, p).String(), p.NS); err != nil {
				return nil, err
			}
		}
	}
	if c.podClients() {
		// The generator's XDP frames leave pod 0's eth0: its host end must take them (NAPI).
		hv := r.topo.Pods[0].HostVeth
		if _, err := r.topo.Node.Run("ethtool", "-K", hv, "gro", "on"); err != nil {
			return nil, err
		}
		undo = append(undo, func() error {
			_, err := r.topo.Node.Run("ethtool", "-K", hv, "gro", "off")
			return err
		})
	}
	if _, err := r.generator(c); err != nil {
		return nil, err
	}
	if err := r.settle(); err != nil {
		return nil, err
	}
	return undoAll, nil
}

// generator is case c's generator, loaded on first use.
func (r *svcRun) generator(c Case) (*harness.Generator, error) {
	if g := r.gens[c.genKey()]; g != nil {
		return g, nil
	}
	// Pod 0 holds one IPv4 generator at a time (its parking veth has a fixed name; the IPv6
	// one parks on a veth of its own): the other IPv4 pod case's goes first.
	if c.podClients() && !c.IPv6 {
		for _, k := range []string{"masquerade", "pods"} {
			if g := r.gens[k]; g != nil && k != c.genKey() {
				err := g.Close()
				delete(r.gens, k)
				if _, derr := r.topo.Pods[0].NS.Run("ip", "link", "del", harness.ParkDev); derr != nil || err != nil {
					return nil, fmt.Errorf("remove pod 0's other generator: %w", errors.Join(err, derr))
				}
			}
		}
	}
	var ns *nsutil.NS
	var f harness.Flow
	switch {
	case c.Masquerade:
		pod := r.topo.Pods[0]
		ns = pod.NS
		f = harness.Flow{Src: r.podMAC, Dst: r.topo.BridgeMAC, SrcIP: pod.IP, DstIP: testbed.ServicesOutsideIP, Ifindex: r.podIdx}
	case c.FromPods:
		pod := r.topo.Pods[0]
		ns = pod.NS
		f = harness.Flow{Src: r.podMAC, Dst: r.topo.BridgeMAC, SrcIP: pod.IP, DstIP: netip.IPv4Unspecified(), List: true, Ifindex: r.podIdx}
		if c.IPv6 {
			f.SrcIP, f.DstIP = testbed.PodIP6(pod.IP), netip.IPv6Unspecified()
		}
	case c.IPv6:
		ns = r.topo.Client
		f = harness.Flow{Src: r.topo.ClientMAC, Dst: r.topo.InMAC, SrcIP: testbed.ServicesClientIP6, DstIP: netip.IPv6Unspecified(),
			List: true, Ifindex: r.topo.ClientIfindex}
	default:
		ns = r.topo.Client
		f = harness.Flow{Src: r.topo.ClientMAC, Dst: r.topo.InMAC, SrcIP: testbed.ServicesClientIP, DstIP: netip.IPv4Unspecified(),
			List: true, Ifindex: r.topo.ClientIfindex}
	}
	g, err := harness.NewGenerator(&testbed.Testbed{Gen: ns}, f)
	if err != nil {
		return nil, err
	}
	// 64-byte frames are IPv4's smallest; IPv6's is 66.
	if err := g.SetSize(max(r.cfg.FrameSize, harness.MinFrame(f.IPv6()))); err != nil {
		g.Close()
		return nil, err
	}
	r.gens[c.genKey()] = g
	return g, nil
}

// udp runs the generator at full speed on cfg.GenCores CPUs: the warm-up creates the flows'
// conntrack entries, then the window counts what the sinks received.
func (r *svcRun) udp(c Case, rd *Round) error {
	g := r.gens[c.genKey()]
	src := testbed.ServicesClientIP
	switch {
	case c.podClients():
		src = podAddr(c, r.topo.Pods[0])
	case c.IPv6:
		src = testbed.ServicesClientIP6
	}
	if !c.Masquerade {
		dsts := make([]netip.Addr, c.Services)
		for i := range dsts {
			dsts[i] = serviceIP(c, i)
		}
		if err := g.SetDsts(dsts); err != nil {
			return err
		}
	}
	cpus, err := harness.UsableCPUs()
	if err != nil {
		return err
	}
	stop := g.Start(r.ctx, cpus[:r.cfg.GenCores], 0)
	type snap struct {
		t          time.Time
		sent, recv uint64
	}
	take := func() (s snap, err error) {
		for _, k := range slices.Sorted(maps.Keys(r.sinks)) {
			n, err := r.sinks[k].Read()
			if err != nil {
				return s, err
			}
			s.recv += n.Packets
		}
		if s.sent, err = g.Sent(); err != nil {
			return s, err
		}
		s.t = time.Now()
		return s, nil
	}
	var s0, s1 snap
	err = func() error {
		if err := harness.SleepCtx(r.ctx, r.cfg.Warmup); err != nil {
			return err
		}
		if rd.Flows, err = r.flows(src); err != nil {
			return err
		}
		if s0, err = take(); err != nil {
			return err
		}
		if err := harness.SleepCtx(r.ctx, r.cfg.Duration); err != nil {
			return err
		}
		s1, err = take()
		return err
	}()
	if serr := stop(); serr != nil {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return err
	}
	rd.Seconds = s1.t.Sub(s0.t).Seconds()
	rd.Offered, rd.Count = s1.sent-s0.sent, s1.recv-s0.recv
	rd.OfferedMpps = float64(rd.Offered) / rd.Seconds / 1e6
	rd.Value = float64(rd.Count) / rd.Seconds / 1e6
	if rd.Count == 0 {
		return fmt.Errorf("no frame reached the sinks (%d offered, %d flows in conntrack)", rd.Offered, rd.Flows)
	}
	return nil
}

// flows counts the node's conntrack entries of the generator's flows (UDP from src port 1024 to
// port 9), in src's family.
func (r *svcRun) flows(src netip.Addr) (int, error) {
	family := netlink.InetFamily(netlink.FAMILY_V4)
	if src.Is6() {
		family = netlink.FAMILY_V6
	}
	flows, err := r.ct.ConntrackTableList(netlink.ConntrackTable, family)
	if err != nil {
		return 0, fmt.Errorf("list the node's conntrack table: %w", err)
	}
	n := 0
	for _, f := range flows {
		t := f.Forward
		if t.Protocol == 17 && t.SrcPort == 1024 && t.DstPort == 9 && t.SrcIP.Equal(net.IP(src.AsSlice())) {
			n++
		}
	}
	return n, nil
}
