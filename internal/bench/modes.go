package bench

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

// Mode is what forwards on the DUT.
type Mode string

const (
	ModeLinux   Mode = "linux"   // Linux's own forwarding, nothing attached to the DUT
	ModeLinuxfp Mode = "linuxfp" // `linuxfp run` in the DUT
	ModeCeiling Mode = "ceiling" // the hand-written minimal forwarder on in0
	// modeBaseline is only for the CPU measurement: the generator's frames are dropped by XDP
	// on in0, so what remains is the generator's own cost.
	modeBaseline Mode = "baseline"
)

// Modes lists the forwarding modes in report order.
var Modes = []Mode{ModeLinux, ModeLinuxfp, ModeCeiling}

// ParseMode checks a mode name.
func ParseMode(s string) (Mode, error) {
	if m := Mode(s); slices.Contains(Modes, m) {
		return m, nil
	}
	return "", fmt.Errorf("mode %q: want linux, linuxfp or ceiling", s)
}

// dut puts the DUT into one mode at a time. Modes never overlap: enter checks that nothing else
// is attached to in0 or out0 before it attaches its own.
type dut struct {
	tb       *testbed.Testbed
	topo     *topology
	bin      string // linuxfp binary
	mode     Mode
	lfp      *testbed.Linuxfp
	baseline *sink // the CPU baseline's drop-and-count program on in0
	closers  []func() error
}

func (d *dut) enter(m Mode) error {
	if d.mode != "" {
		return fmt.Errorf("enter %s: the DUT is still in mode %s", m, d.mode)
	}
	for _, ifname := range []string{"in0", "out0"} {
		on, err := xdpAttached(d.tb.DUT, ifname)
		if err != nil {
			return err
		}
		if on {
			return fmt.Errorf("enter %s: an XDP program is still attached to the DUT's %s", m, ifname)
		}
	}
	switch m {
	case ModeLinux:
	case ModeLinuxfp:
		l, err := d.topo.startLinuxfp(d.tb, d.bin)
		if err != nil {
			return fmt.Errorf("start linuxfp in the DUT: %w", err)
		}
		d.lfp = l
		d.closers = append(d.closers, func() error {
			if err := l.Stop(); err != nil {
				return fmt.Errorf("stop linuxfp: %w; log:\n%s", err, l.Log.String())
			}
			return nil
		})
	case ModeCeiling:
		c, err := attachCeiling(d.tb, d.topo.l2)
		if err != nil {
			return err
		}
		d.closers = append(d.closers, c.Close)
	case modeBaseline:
		s, err := attachSink(d.tb.DUT, "in0")
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
func (d *dut) leave() error {
	var errs []error
	for _, c := range slices.Backward(d.closers) {
		errs = append(errs, c())
	}
	d.closers, d.lfp, d.baseline, d.mode = nil, nil, nil, ""
	return errors.Join(errs...)
}

// fastPath is what linuxfp's program on in0 did: packets routed or switched, and handed to Linux
// by reason.
type fastPath struct {
	Forwarded uint64 `json:"forwarded"`
	Bridged   uint64 `json:"bridged,omitempty"`
	// Dropped: packets its filter module dropped (a netfilter rule would have).
	Dropped uint64            `json:"filter_dropped,omitempty"`
	Passed  map[string]uint64 `json:"passed_to_linux,omitempty"`
	// NoProgram says why linuxfp has no program on in0 (its notes), if it has none.
	NoProgram string `json:"no_program,omitempty"`
}

// fastPathed is what the program sent on itself, routed or switched.
func (fp *fastPath) fastPathed() uint64 { return fp.Forwarded + fp.Bridged }

// passed is what the program handed to Linux, for any reason.
func (fp *fastPath) passed() uint64 {
	var n uint64
	for _, v := range fp.Passed {
		n += v
	}
	return n
}

// lfpCounters reads in0's counters from the running linuxfp (nil outside linuxfp mode).
func (d *dut) lfpCounters() (*status.Interface, error) {
	if d.lfp == nil {
		return nil, nil
	}
	return d.lfp.Interface("in0")
}

func fastPathDelta(a, b *status.Interface) *fastPath {
	if a == nil || b == nil {
		return nil
	}
	fp := &fastPath{Forwarded: b.Forwarded.Packets - a.Forwarded.Packets, Bridged: b.Bridged.Packets - a.Bridged.Packets,
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
	var eth [12]byte
	copy(eth[:6], tb.SinkMAC)
	copy(eth[6:], tb.OutMAC)
	for name, v := range map[string]any{ceilingVarCfgEth: eth, ceilingVarCfgL2: boolU32(l2)} {
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
	if c.link, err = attachXDP(tb.DUT, "in0", c.objs.BenchCeiling); err != nil {
		c.objs.Close()
		return nil, err
	}
	return c, nil
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

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
