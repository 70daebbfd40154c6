package harness

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// Sink counts and drops the generator's frames with XDP where they arrive: at the Sink's eth0
// for the measurements, at the DUT's in0 for the CPU baseline. Counting in XDP keeps the
// receiving side far cheaper than any forwarding path under test.
type Sink struct {
	objs sinkObjects
	link link.Link
}

// Count is what a sink has counted.
type Count struct {
	Packets uint64
	Bytes   uint64
}

// AttachSink loads a sink with counters of its own and attaches it to ifname in ns.
func AttachSink(ns *nsutil.NS, ifname string) (*Sink, error) {
	s := &Sink{}
	if err := loadSinkObjects(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("load sink: %w", err)
	}
	l, err := AttachXDP(ns, ifname, s.objs.BenchSink)
	if err != nil {
		s.objs.Close()
		return nil, err
	}
	s.link = l
	return s, nil
}

// Read sums the per-CPU counters.
func (s *Sink) Read() (Count, error) {
	var per []sinkSinkCounter
	if err := s.objs.SinkCount.Lookup(uint32(0), &per); err != nil {
		return Count{}, fmt.Errorf("read sink counters: %w", err)
	}
	var c Count
	for _, p := range per {
		c.Packets += p.Packets
		c.Bytes += p.Bytes
	}
	return c, nil
}

func (s *Sink) Close() error {
	err := s.link.Close()
	s.objs.Close()
	return err
}

// AttachXDP attaches prog to ifname in ns in driver mode (veth has native XDP). The attach
// resolves the ifindex in the calling thread's netns, hence inside ns.
func AttachXDP(ns *nsutil.NS, ifname string, prog *ebpf.Program) (link.Link, error) {
	var l link.Link
	err := ns.Do(func() error {
		lk, err := netlink.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", ifname, ns.Name, err)
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: lk.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attach xdp to %s in %s: %w", ifname, ns.Name, err)
		}
		return nil
	})
	return l, err
}

// attachedProgram is the program attached to ifname in ns at XDP ("xdp") or, failing that, the
// first at tcx ingress ("tc"): id 0 and hook "" when there is none.
func attachedProgram(ns *nsutil.NS, ifname string) (id ebpf.ProgramID, hook string, err error) {
	err = ns.Do(func() error {
		lk, err := netlink.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", ifname, ns.Name, err)
		}
		if x := lk.Attrs().Xdp; x != nil && x.Attached {
			id, hook = ebpf.ProgramID(x.ProgId), "xdp"
			return nil
		}
		q, err := link.QueryPrograms(link.QueryOptions{Target: lk.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return fmt.Errorf("query %s's tcx ingress programs in %s: %w", ifname, ns.Name, err)
		}
		if len(q.Programs) > 0 {
			id, hook = q.Programs[0].ID, "tc"
		}
		return nil
	})
	return id, hook, err
}

// Attached says what is Attached to ifname in ns at XDP or tcx ingress ("" if nothing).
func Attached(ns *nsutil.NS, ifname string) (string, error) {
	id, hook, err := attachedProgram(ns, ifname)
	if err != nil || id == 0 {
		return "", err
	}
	return fmt.Sprintf("%s program %d", hook, id), nil
}

// Detached checks that nothing is attached to any of ifnames in ns at XDP or tcx ingress (where:
// "the DUT", "the node", for the error).
func Detached(ns *nsutil.NS, where string, ifnames ...string) error {
	for _, ifname := range ifnames {
		on, err := Attached(ns, ifname)
		if err != nil {
			return err
		}
		if on != "" {
			return fmt.Errorf("%s is still attached to %s's %s", on, where, ifname)
		}
	}
	return nil
}
