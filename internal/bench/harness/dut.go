package harness

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cilium/ebpf/link"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// DUT puts the DUT into one mode at a time. Modes never overlap: enter checks that nothing else
// is attached to in0 or out0 before it attaches its own.
type DUT struct {
	tb       *testbed.Testbed
	topo     *Topology
	bin      string // linuxfp binary
	mode     Mode
	Lfp      *testbed.Linuxfp
	baseline *Sink // the CPU baseline's drop-and-count program on in0
	closers  []func() error
}

func (d *DUT) enter(m Mode) error {
	if d.mode != "" {
		return fmt.Errorf("enter %s: the DUT is still in mode %s", m, d.mode)
	}
	if err := Detached(d.tb.DUT, "the DUT", "in0", "out0"); err != nil {
		return fmt.Errorf("enter %s: %w", m, err)
	}
	switch m {
	case ModeLinux:
	case ModeLinuxfp, ModeLinuxfpTC, ModeLinuxfpMonitor, ModeLinuxfpMetrics:
		l, err := d.topo.StartLinuxfp(d.tb, d.bin, m.RunArgs()...)
		if err != nil {
			return fmt.Errorf("start linuxfp in the DUT: %w", err)
		}
		d.Lfp = l
		d.closers = append(d.closers, func() error {
			if err := l.Stop(); err != nil {
				return fmt.Errorf("stop linuxfp: %w; log:\n%s", err, l.Log.String())
			}
			return nil
		})
		var stop func() error
		switch m {
		case ModeLinuxfpMonitor:
			stop, err = startMonitor(d.tb.DUT, d.bin, l)
		case ModeLinuxfpMetrics:
			stop, err = startScraper(d.tb.DUT, MetricsAddr)
		}
		if err != nil {
			d.leave()
			return err
		}
		if stop != nil {
			d.closers = append(d.closers, stop)
		}
	case ModeCeiling:
		c, err := attachCeiling(d.tb, d.topo.L2)
		if err != nil {
			return err
		}
		d.closers = append(d.closers, c.Close)
	case ModeCeilingTC:
		c, err := attachTCCeiling(d.tb, d.topo.L2)
		if err != nil {
			return err
		}
		d.closers = append(d.closers, c.Close)
	case ModeBaseline:
		s, err := AttachSink(d.tb.DUT, "in0")
		if err != nil {
			return err
		}
		d.baseline = s
		d.closers = append(d.closers, s.Close)
	default:
		return fmt.Errorf("unknown mode %q", m)
	}
	d.mode = m
	return nil
}

// leave detaches whatever the current mode attached (stops linuxfp: it detaches on exit).
func (d *DUT) leave() error {
	var errs []error
	for _, c := range slices.Backward(d.closers) {
		errs = append(errs, c())
	}
	d.closers, d.Lfp, d.baseline, d.mode = nil, nil, nil, ""
	return errors.Join(errs...)
}

// FastPath is what linuxfp's program on in0 did: packets routed or switched, and handed to Linux
// by reason.
type FastPath struct {
	Forwarded uint64 `json:"forwarded"`
	Bridged   uint64 `json:"bridged,omitempty"`
	// Dropped: packets its filter module dropped (a netfilter rule would have).
	Dropped uint64            `json:"filter_dropped,omitempty"`
	Passed  map[string]uint64 `json:"passed_to_linux,omitempty"`
	// NoProgram says why linuxfp has no program on in0 (its notes), if it has none.
	NoProgram string `json:"no_program,omitempty"`
	// Hook and OutHook: where linuxfp's programs on in0 and out0 ran at the end of the
	// measurement ("xdp", "xdp-generic", "tc"; "" for none), from its status.
	Hook    string `json:"hook,omitempty"`
	OutHook string `json:"out0_hook,omitempty"`
}

// FastPathed is what the program sent on itself, routed or switched.
func (fp *FastPath) FastPathed() uint64 { return fp.Forwarded + fp.Bridged }

// PassedTotal is what the program handed to Linux, for any reason.
func (fp *FastPath) PassedTotal() uint64 {
	var n uint64
	for _, v := range fp.Passed {
		n += v
	}
	return n
}

// lfpStatus reads the running linuxfp's status (nil outside the linuxfp modes).
func (d *DUT) lfpStatus() (*status.Status, error) {
	if d.Lfp == nil {
		return nil, nil
	}
	return d.Lfp.Client.Status()
}

// statusOf is interface name's status in st (nil if st is nil or has no such interface).
func statusOf(st *status.Status, name string) *status.Interface {
	if st == nil {
		return nil
	}
	for i := range st.Interfaces {
		if st.Interfaces[i].Name == name {
			return &st.Interfaces[i]
		}
	}
	return nil
}

// HookOf is where the program on interface name runs in st ("" for none).
func HookOf(st *status.Status, name string) string {
	if it := statusOf(st, name); it != nil && it.Program != nil {
		return it.Program.Hook
	}
	return ""
}

// fastPathDelta is what linuxfp's program on in0 did between two of its statuses, and where its
// programs on in0 and out0 ran at the second (nil outside the linuxfp modes).
func fastPathDelta(s0, s1 *status.Status) *FastPath {
	a, b := statusOf(s0, "in0"), statusOf(s1, "in0")
	if a == nil || b == nil {
		return nil
	}
	fp := &FastPath{Hook: HookOf(s1, "in0"), OutHook: HookOf(s1, "out0"), Forwarded: b.Forwarded.Packets - a.Forwarded.Packets, Bridged: b.Bridged.Packets - a.Bridged.Packets,
		Dropped: b.Dropped.Packets - a.Dropped.Packets}
	if b.Program == nil {
		fp.NoProgram = strings.Join(b.Notes, "; ")
		if fp.NoProgram == "" {
			fp.NoProgram = "no reason given"
		}
	}
	for _, r := range slices.Sorted(maps.Keys(b.Passed)) {
		if n := b.Passed[r].Packets - a.Passed[r].Packets; n > 0 {
			if fp.Passed == nil {
				fp.Passed = map[string]uint64{}
			}
			fp.Passed[r] = n
		}
	}
	return fp
}

// attachCeiling attaches the minimal forwarder to the DUT's in0, redirecting into out0: with
// the MACs rewritten for the sink (a router), or with l2 as the frames are (a switch).
func attachCeiling(tb *testbed.Testbed, l2 bool) (*ceilingRun, error) {
	spec, err := loadCeiling()
	if err != nil {
		return nil, err
	}
	for name, v := range map[string]any{ceilingVarCfgEth: ceilingEth(tb), ceilingVarCfgL2: BoolU32(l2)} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	c := &ceilingRun{}
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		return nil, fmt.Errorf("load ceiling: %w", err)
	}
	// A devmap resolves the ifindex in the netns of the thread that updates it.
	err = tb.DUT.Do(func() error {
		return c.objs.CeilingTx.Put(uint32(0), ceilingBpfDevmapVal{Ifindex: uint32(tb.OutIfindex)})
	})
	if err != nil {
		c.objs.Close()
		return nil, fmt.Errorf("put out0 into the ceiling's devmap: %w", err)
	}
	if c.link, err = AttachXDP(tb.DUT, "in0", c.objs.BenchCeiling); err != nil {
		c.objs.Close()
		return nil, err
	}
	return c, nil
}

// ceilingEth is the Ethernet addresses a routing ceiling writes: the sink's, then out0's.
func ceilingEth(tb *testbed.Testbed) [12]byte {
	var eth [12]byte
	copy(eth[:6], tb.SinkMAC)
	copy(eth[6:], tb.OutMAC)
	return eth
}

type ceilingRun struct {
	objs ceilingObjects
	link link.Link
}

func (c *ceilingRun) Close() error {
	err := c.link.Close()
	c.objs.Close()
	return err
}

func BoolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
