package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Machine describes where the numbers come from.
type Machine struct {
	Kernel string `json:"kernel"`
	CPUs   int    `json:"cpus"`
	Model  string `json:"cpu_model,omitempty"`
	Go     string `json:"go"`
	Date   string `json:"date"`
}

// ThisMachine describes this machine, now.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Date: time.Now().UTC().Format(time.RFC3339)}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// String is the machine as a report's "Machine:" line gives it.
func (m Machine) String() string {
	return fmt.Sprintf("Machine: Linux %s, %d CPUs (%s); %s", m.Kernel, m.CPUs, m.Model, m.Date)
}

// Elapsed is how long a benchmark took, as its result gives it.
func Elapsed(d time.Duration) string { return d.Round(time.Second).String() }

// Result is what every benchmark's result can do: say whether it measured anything, and write
// the tables a person reads. Its JSON form (WriteJSON) is for scripts.
type Result interface {
	Measured() bool
	WriteTable(io.Writer)
}

// WriteJSON writes a result for scripts.
func WriteJSON(w io.Writer, r any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// MedianLine is a report's "Median of 3 rounds x 2s per mode (after 500ms of warm-up; ...)"
// line, with the blank line after it.
func (t Timing) MedianLine(elapsed string) string {
	return fmt.Sprintf("Median of %s x %s per mode (after %s of warm-up; modes alternate round by round); took %s\n\n",
		Plural(t.Rounds, "round"), t.Duration, t.Warmup, elapsed)
}

// Median is the median of v (0 for none).
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Div is a / b, 0 when either is 0 (not measured).
func Div(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}

// Ratio is "1.50x" for 1.5 and suffix "x"; "-" for 0 (not measured).
func Ratio(v float64, suffix string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%s", v, suffix)
}

// PercentChange is "-17.5%" for a ratio of 0.825.
func PercentChange(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*(v-1))
}

// Span is lo and hi in format: "2.20x", or "2.20x to 2.50x" when they differ so.
func Span(lo, hi float64, format string) string {
	if fmt.Sprintf(format, lo) == fmt.Sprintf(format, hi) {
		return fmt.Sprintf(format, lo)
	}
	return fmt.Sprintf(format+" to "+format, lo, hi)
}

// Plural is "1 round", "3 rounds".
func Plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Met is a target's verdict.
func Met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// Distribution summarises samples in milliseconds, and keeps them (sorted) for a figure.
type Distribution struct {
	P50     float64   `json:"p50"`
	P99     float64   `json:"p99"`
	Max     float64   `json:"max"`
	Samples []float64 `json:"samples,omitempty"`
}

func DistributionOf(d []time.Duration) Distribution {
	if len(d) == 0 {
		return Distribution{}
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	all := make([]float64, len(s))
	for i, x := range s {
		all[i] = ms(x)
	}
	return Distribution{P50: ms(q(0.50)), P99: ms(q(0.99)), Max: ms(s[len(s)-1]), Samples: all}
}
