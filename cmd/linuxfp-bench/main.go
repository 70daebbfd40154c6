// Command linuxfp-bench runs linuxfp's benchmarks: each builds its own namespaces and compares
// Linux with linuxfp (the linuxfp binary beside this one, or --linuxfp) in the same run. It is a
// command of its own so that the daemon, `linuxfp`, carries none of their code. See
// docs/benchmarks.md.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// linuxfpPath is --linuxfp: the linuxfp binary the benchmarks run (`linuxfp run`, `linuxfp
// status -j`) in their namespaces.
var linuxfpPath string

func run(args []string) int {
	root := &cobra.Command{
		Use:           "linuxfp-bench",
		Short:         "Benchmarks: Linux vs linuxfp in the same run",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&linuxfpPath, "linuxfp", "",
		"the linuxfp binary to run in the namespaces (default: linuxfp beside this command, else in $PATH)")
	root.AddCommand(benchCmds()...)
	root.AddCommand(plotCmd())
	root.AddCommand(profileCmd())
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "linuxfp-bench:", err)
		return 1
	}
	return 0
}

// linuxfpBinary is the linuxfp binary to run: --linuxfp, else linuxfp beside this command (make
// build puts both in bin/), else linuxfp in $PATH.
func linuxfpBinary() (string, error) {
	if linuxfpPath != "" {
		return exec.LookPath(linuxfpPath)
	}
	if self, err := os.Executable(); err == nil {
		if p, err := exec.LookPath(filepath.Join(filepath.Dir(self), "linuxfp")); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("linuxfp"); err == nil {
		return p, nil
	}
	return "", errors.New("no linuxfp binary beside linuxfp-bench nor in $PATH: run make build, or give --linuxfp")
}

func splitList(v []string) []string {
	var out []string
	for _, s := range v {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseList is a list flag's values (flag: "--modes", for the error), each checked by parse.
func parseList[T any](vals []string, flag string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, s := range splitList(vals) {
		v, err := parse(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// newLogger is the progress log on stderr.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
