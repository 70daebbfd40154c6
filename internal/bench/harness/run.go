package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Run is the configuration every benchmark takes; each embeds it in its own.
type Run struct {
	Binary   string        // the linuxfp binary run in the namespaces (`linuxfp run`, `linuxfp status -j`)
	Modes    []Mode        // default: the benchmark's
	Duration time.Duration // measured time per round and per whatever the benchmark varies
	Warmup   time.Duration // traffic before each measurement, not counted
	Rounds   int           // rounds per mode; the report gives the median
	Log      *slog.Logger
}

// RunDefaults are a benchmark's defaults and limits for its Run.
type RunDefaults struct {
	Name string // "pods": in errors, "the pods benchmark"
	// Modes are the modes the benchmark can run, in report order (nil: it has no modes);
	// Default those it runs unless told (nil: Modes).
	Modes, Default   []Mode
	Duration, Warmup time.Duration
	Where            string // where linuxfp runs, for the error without a binary: "the DUT"
}

// Defaults fills in what r leaves unset (3 rounds; modes in report order, each once) and checks
// the modes and that a mode running linuxfp has a binary to run.
func (r *Run) Defaults(d RunDefaults) error {
	if r.Duration <= 0 {
		r.Duration = d.Duration
	}
	if r.Warmup <= 0 {
		r.Warmup = d.Warmup
	}
	if r.Rounds <= 0 {
		r.Rounds = 3
	}
	if r.Log == nil {
		r.Log = slog.Default()
	}
	if d.Modes == nil {
		return nil
	}
	if len(r.Modes) == 0 {
		r.Modes = d.Default
		if r.Modes == nil {
			r.Modes = d.Modes
		}
	}
	for _, m := range r.Modes {
		if !slices.Contains(d.Modes, m) {
			return fmt.Errorf("mode %s: the %s benchmark runs %s", m, d.Name, joinList(d.Modes, " and "))
		}
	}
	// Report order, whatever the order on the command line; duplicates would be measured twice.
	r.Modes = InOrder(d.Modes, r.Modes)
	if r.Binary == "" && slices.ContainsFunc(r.Modes, Mode.RunsLinuxfp) {
		return errors.New("no linuxfp binary to run in " + d.Where)
	}
	return nil
}

// Timing is how a Run measured, as its result gives it.
type Timing struct {
	Duration string `json:"duration,omitempty"`
	Warmup   string `json:"warmup,omitempty"`
	Rounds   int    `json:"rounds"`
}

// Timing is the run's Timing.
func (r *Run) Timing() Timing {
	return Timing{Duration: r.Duration.String(), Warmup: r.Warmup.String(), Rounds: r.Rounds}
}

// InOrder is want in the order of all, each once.
func InOrder[T comparable](all, want []T) []T {
	var out []T
	for _, v := range all {
		if slices.Contains(want, v) {
			out = append(out, v)
		}
	}
	return out
}

// Rotated returns modes starting at round r's turn: no mode always runs first (right after the
// topology was built) or always after another particular one.
func Rotated[T any](modes []T, r int) []T {
	k := r % len(modes)
	return append(slices.Clone(modes[k:]), modes[:k]...)
}

// SleepCtx sleeps for d, or until ctx is done (then its error).
func SleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// UsableCPUs lists the CPUs this process may run on, lowest first.
func UsableCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("get cpu affinity: %w", err)
	}
	var cpus []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// OnCPU runs fn on the calling thread, locked to it and pinned to cpu, and gives the thread its
// CPUs back afterwards.
func OnCPU(cpu int, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("get cpu affinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to cpu %d: %w", cpu, err)
	}
	defer unix.SchedSetaffinity(0, &old)
	return fn()
}

// EachRound runs fn for rounds rounds and every mode, modes rotated round by round (Rotated),
// until fn fails.
func EachRound(rounds int, modes []Mode, fn func(round int, m Mode) error) error {
	for r := 0; r < rounds; r++ {
		for _, m := range Rotated(modes, r) {
			if err := fn(r, m); err != nil {
				return err
			}
		}
	}
	return nil
}
