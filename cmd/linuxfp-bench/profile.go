package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/spf13/cobra"
)

// profileCmd samples the whole machine with perf while a benchmark runs and attributes the samples
// that fall in linuxfp's BPF programs to their source lines: perf sees a JIT image only as one
// symbol, the program's line table (bpf_prog_info's jited_line_info and BTF line info) says which
// source line each part of the image comes from. The programs must be loaded while it runs
// (start the benchmark first; a benchmark's programs go with its namespaces).
func profileCmd() *cobra.Command {
	var seconds, top int
	var prefix string
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Where linuxfp's programs spend their time, per source line (perf, while a benchmark runs)",
		Long: `Samples every CPU with perf (cpu-clock) for --seconds while a benchmark runs in another
terminal, and prints the share of samples in linuxfp's BPF programs, their source lines with the
most samples, and the kernel functions with the most samples outside them. Every loaded
program of that name counts, in any namespace: run one benchmark at a time. On a CPU that
mispredicts returns, samples gather on the first instructions after each call (helper, map
lookup, subprogram): read a line just after a call as that call's cost.

Example: linuxfp-bench bridge --sizes 64 --cores 1 --duration 20s --rounds 1 --modes linuxfp &
         sleep 10; linuxfp-bench profile --seconds 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return profile(time.Duration(seconds)*time.Second, prefix, top)
		},
	}
	cmd.Flags().IntVar(&seconds, "seconds", 5, "how long to sample")
	cmd.Flags().IntVar(&top, "top", 40, "lines (and kernel functions) to print")
	cmd.Flags().StringVar(&prefix, "programs", "linuxfp_", "profile the BPF programs whose name starts with this")
	return cmd
}

// progLine is where a part of a program's JIT image starts, and the source line it comes from.
type progLine struct {
	addr uint64
	line string // file:line  source
}

// progLines reads the line tables of the loaded programs named prefix*.
func progLines(prefix string) ([]progLine, error) {
	var out []progLine
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, err
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		info, err := p.Info()
		p.Close()
		if err != nil || !strings.HasPrefix(info.Name, prefix) {
			continue
		}
		jited, ok := info.JitedLineInfos()
		lines, err := info.LineInfos()
		if !ok || err != nil {
			continue
		}
		i := 0
		for _, lo := range lines {
			if i >= len(jited) {
				break
			}
			src := strings.Join(strings.Fields(lo.Line.Line()), " ")
			out = append(out, progLine{jited[i], fmt.Sprintf("%s:%d  %s", filepath.Base(lo.Line.FileName()), lo.Line.LineNumber(), src)})
			i++
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no loaded BPF program named %s* with a line table (is a benchmark running?)", prefix)
	}
	slices.SortFunc(out, func(a, b progLine) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	return out, nil
}

func profile(d time.Duration, prefix string, top int) error {
	lines, err := progLines(prefix)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "linuxfp-profile")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "perf.data")
	rec := exec.Command("perf", "record", "-q", "-e", "cpu-clock", "-a", "-o", data, "--", "sleep", strconv.Itoa(int(d.Seconds())))
	if out, err := rec.CombinedOutput(); err != nil {
		return fmt.Errorf("perf record: %v: %s", err, out)
	}
	script, err := exec.Command("perf", "script", "-i", data, "-F", "ip,sym").Output()
	if err != nil {
		return fmt.Errorf("perf script: %w", err)
	}
	byLine, bySym := map[string]int{}, map[string]int{}
	total, inProg := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(script))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		total++
		sym := "?"
		if len(f) > 1 {
			sym = f[1]
		}
		if !strings.HasPrefix(sym, "bpf_prog_") || !strings.Contains(sym, "_"+prefix) {
			bySym[sym]++
			continue
		}
		inProg++
		ip, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		i := sort.Search(len(lines), func(i int) bool { return lines[i].addr > ip }) - 1
		if i < 0 {
			continue
		}
		byLine[lines[i].line]++
	}
	if total == 0 {
		return errors.New("perf recorded no samples")
	}
	fmt.Printf("%d samples in %s; %d (%.1f%%) in the %s* programs\n", total, d, inProg, 100*float64(inProg)/float64(total), prefix)
	printTop := func(title string, m map[string]int, of int) {
		fmt.Println(title)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(a, b int) bool { return m[keys[a]] > m[keys[b]] || m[keys[a]] == m[keys[b]] && keys[a] < keys[b] })
		for _, k := range keys[:min(top, len(keys))] {
			fmt.Printf("  %6d %5.1f%%  %s\n", m[k], 100*float64(m[k])/float64(max(of, 1)), k)
		}
	}
	printTop("Program lines (share of the programs' samples):", byLine, inProg)
	printTop("Outside the programs (share of all samples):", bySym, total)
	return nil
}
