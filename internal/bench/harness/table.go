package harness

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// What every benchmark's result is made of, so that none declares it again: the frame around
// its own rows (Report, Took), one mode's rounds with their medians (ModeRounds), the tables a
// person reads (Table), and the checks of its configuration (Counts, Choose). WriteJSON writes
// any of them for scripts.

// Report begins every benchmark's result: the machine the numbers come from and the settings S
// (the benchmark's own) they were taken with. Took ends it. They are two so that a result's JSON
// keeps its own rows between them.
type Report[S any] struct {
	Machine Machine `json:"machine"`
	Config  S       `json:"config"`
}

// NewReport is a result's beginning on this machine, now.
func NewReport[S any](settings S) Report[S] {
	return Report[S]{Machine: ThisMachine(), Config: settings}
}

// Took ends every benchmark's result: how long it took.
type Took struct {
	Elapsed string `json:"elapsed"`
}

// Took records that the benchmark took d.
func (t *Took) Took(d time.Duration) { t.Elapsed = Elapsed(d) }

// Failing is a round of a measurement that can fail: Failure says why it did ("" if it did not).
type Failing interface{ Failure() string }

// ModeRounds are one mode's rounds of a measurement that can fail, and how many failed.
type ModeRounds[R Failing] struct {
	Failed int `json:"failed_rounds,omitempty"`
	Rounds []R `json:"rounds"`
}

// Add adds a round.
func (r *ModeRounds[R]) Add(rd R) {
	r.Rounds = append(r.Rounds, rd)
	if rd.Failure() != "" {
		r.Failed++
	}
}

// AllFailed: no round completed (false for none at all).
func (r *ModeRounds[R]) AllFailed() bool { return len(r.Rounds) > 0 && r.Failed == len(r.Rounds) }

// Median is the median of f over the rounds that completed (0 for none).
func (r *ModeRounds[R]) Median(f func(R) float64) float64 {
	var v []float64
	for _, rd := range r.Rounds {
		if rd.Failure() == "" {
			v = append(v, f(rd))
		}
	}
	return Median(v)
}

// Table writes a table a person reads: columns two spaces apart, cells aligned right (or left),
// every row, the header's too, ending with a tab.
type Table struct {
	tw *tabwriter.Writer
}

// NewTable starts a table of right-aligned cells on w with its header.
func NewTable(w io.Writer, header ...string) *Table {
	return newTable(w, tabwriter.AlignRight, header)
}

// NewLeftTable starts a table of left-aligned cells on w with its header.
func NewLeftTable(w io.Writer, header ...string) *Table { return newTable(w, 0, header) }

func newTable(w io.Writer, flags uint, header []string) *Table {
	t := &Table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', flags)}
	t.Row(header...)
	return t
}

// Row adds a row of cells.
func (t *Table) Row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")+"\t") }

// Rowf adds a row whose cells format gives, separated by tabs.
func (t *Table) Rowf(format string, a ...any) { fmt.Fprintf(t.tw, format+"\t\n", a...) }

// Flush writes the table out.
func (t *Table) Flush() { t.tw.Flush() }

// Lines writes lines, one a line (a report's flags), and a blank line after them if blank and
// there were any.
func Lines(w io.Writer, lines []string, blank bool) {
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if blank && len(lines) > 0 {
		fmt.Fprintln(w)
	}
}

// Num is v in format, "-" for 0 (not measured).
func Num(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// Counts checks a list of counts given by flag (--pairs, --services ...): def when it is empty
// (def nil: it may stay empty), each lo to hi, sorted, each once.
func Counts(v *[]int, def []int, lo, hi int, flag string) error {
	if len(*v) == 0 && def != nil {
		*v = def
	}
	for _, n := range *v {
		if n < lo || n > hi {
			return fmt.Errorf("--%s %d: want %d to %d", flag, n, lo, hi)
		}
	}
	*v = slices.Compact(slices.Sorted(slices.Values(*v)))
	return nil
}

// Choose is want in the order of all, each once; all when want is empty.
func Choose[T comparable](all, want []T) []T {
	if len(want) == 0 {
		return all
	}
	return InOrder(all, want)
}

// FindOrAdd is the element of *list that match picks, made by add and appended if there is
// none: a result's row for what it varies, in the order first measured.
func FindOrAdd[T any](list *[]*T, match func(*T) bool, add func() *T) *T {
	if i := slices.IndexFunc(*list, match); i >= 0 {
		return (*list)[i]
	}
	v := add()
	*list = append(*list, v)
	return v
}

// Entry is m[k], a new V put there first if m has none.
func Entry[K comparable, V any](m map[K]*V, k K) *V {
	v := m[k]
	if v == nil {
		v = new(V)
		m[k] = v
	}
	return v
}

// Setup begins the settings of a benchmark of workloads (pods, services): the topology, the
// modes it ran and its workloads W.
type Setup[W any] struct {
	Topology  string `json:"topology"`
	Modes     []Mode `json:"modes"`
	Workloads []W    `json:"workloads"`
}

// Results is a benchmark's result made of rows R (one per case it varies, every mode in each)
// and targets T (what a row should reach), between its Report and Took: pods', services'.
type Results[S, R, T any] struct {
	Report[S]
	Rows    []*R `json:"results"`
	Targets []T  `json:"targets,omitempty"`
	Took
}

// Measured: there is a row (a row is made with its first round).
func (r *Results[S, R, T]) Measured() bool { return len(r.Rows) > 0 }
