// Package harness is what linuxfp's benchmarks share: the modes they compare, the configuration
// every one of them takes (Run) and how it is reported (Timing), the machine the numbers come
// from, the pipeline gen -> DUT -> sink with its XDP generator, sink and ceilings, the latency
// and CPU tests, what linuxfp's status says it fast-pathed, and the helpers their reports are
// written with. Each benchmark is a package of its own beside it (internal/bench/<name>); they
// build their own namespaces (internal/testbed) and always compare linuxfp against Linux in the
// same run.
package harness

import (
	"fmt"
	"slices"
	"strings"
)

// Mode is what forwards in a benchmark's namespaces.
type Mode string

const (
	ModeLinux   Mode = "linux"   // Linux's own forwarding, nothing attached to the DUT
	ModeLinuxfp Mode = "linuxfp" // `linuxfp run` in the DUT (--hook auto: native XDP here)
	// ModeLinuxfpTC is `linuxfp run --hook tc` in the DUT: the same modules built for tc
	// (tcx) ingress, for the paper's Table VII (each module at XDP vs tc).
	ModeLinuxfpTC Mode = "linuxfp-tc"
	ModeCeiling   Mode = "ceiling" // the hand-written minimal forwarder on in0
	// ModeCeilingTC is the same minimal forwarder at tcx ingress on in0: what no tc program can
	// beat in the topology.
	ModeCeilingTC Mode = "ceiling-tc"
	// ModeLinuxfpMonitor is ModeLinuxfp with `linuxfp monitor -j` connected (its output read and
	// discarded): what reporting the packets it hands to Linux or drops costs while a monitor
	// runs.
	ModeLinuxfpMonitor Mode = "linuxfp-monitor"
	// ModeLinuxfpMetrics is ModeLinuxfp with --metrics-addr, /metrics scraped every second.
	ModeLinuxfpMetrics Mode = "linuxfp-metrics"
	// ModeBaseline is only for the CPU measurement: the generator's frames are dropped by XDP
	// on in0, so what remains is the generator's own cost.
	ModeBaseline Mode = "baseline"
)

// Modes lists the forwarding modes in report order.
var Modes = []Mode{ModeLinux, ModeLinuxfp, ModeLinuxfpTC, ModeLinuxfpMonitor, ModeLinuxfpMetrics, ModeCeiling, ModeCeilingTC}

// DefaultModes are the modes a forwarding benchmark runs unless told otherwise: linuxfp as a
// user runs it (--hook auto) against Linux and the ceiling. linuxfp-tc and ceiling-tc are asked
// for by name (--modes, or bench modules): they add two thirds to every run's time, and what they
// measure (the tc build where auto picks XDP) is a comparison of hooks, not what a user of these
// topologies gets.
var DefaultModes = []Mode{ModeLinux, ModeLinuxfp, ModeCeiling}

// ParseMode checks a mode name.
func ParseMode(s string) (Mode, error) {
	return ParseName(Modes, "mode", s)
}

// RunsLinuxfp: the mode runs `linuxfp run` in the DUT.
func (m Mode) RunsLinuxfp() bool {
	return m == ModeLinuxfp || m == ModeLinuxfpTC || m == ModeLinuxfpMonitor || m == ModeLinuxfpMetrics
}

// MetricsAddr is where linuxfp serves metrics in ModeLinuxfpMetrics (the DUT's loopback).
const MetricsAddr = "127.0.0.1:9650"

// Ceiling: the mode is a hand-written forwarder that evaluates no rules and forwards one way only.
func (m Mode) Ceiling() bool { return m == ModeCeiling || m == ModeCeilingTC }

// RunArgs are the mode's arguments to `linuxfp run`.
func (m Mode) RunArgs() []string {
	switch m {
	case ModeLinuxfpTC:
		return []string{"--hook", "tc"}
	case ModeLinuxfpMetrics:
		return []string{"--metrics-addr", MetricsAddr}
	}
	return nil
}

// WantHook is where linuxfp's programs should run in mode m ("" for a mode without linuxfp).
// With --hook auto linuxfp picks native XDP on the benchmarks' veths, whose hosts compute their
// checksums (the testbed turns tx checksum offload off), or generic XDP when the latency test
// turns that offload back on (txCsumOffload).
func (m Mode) WantHook(txCsumOffload bool) string {
	switch {
	case m == ModeLinuxfpTC:
		return "tc"
	case m.RunsLinuxfp() && txCsumOffload:
		return "xdp-generic"
	case m.RunsLinuxfp():
		return "xdp"
	}
	return ""
}

// Title is the mode's name in a report.
func (m Mode) Title() string {
	if m == ModeLinux {
		return "Linux"
	}
	return string(m)
}

// ParseName checks that s names one of all (what: "mode", "workload", ... for the error).
func ParseName[T ~string](all []T, what, s string) (T, error) {
	if v := T(s); slices.Contains(all, v) {
		return v, nil
	}
	return "", fmt.Errorf("%s %q: want %s", what, s, orList(all))
}

// orList is "a, b or c".
func orList[T ~string](all []T) string {
	return joinList(all, " or ")
}

// joinList is "a, b<last>c".
func joinList[T ~string](all []T, last string) string {
	s := make([]string, len(all))
	for i, v := range all {
		s[i] = string(v)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + last + s[len(s)-1]
}
