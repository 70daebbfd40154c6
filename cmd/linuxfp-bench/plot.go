package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/linuxfp/linuxfp/internal/bench/compose"
	"github.com/linuxfp/linuxfp/internal/bench/gateway"
	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/modules"
	"github.com/linuxfp/linuxfp/internal/bench/plot"
	"github.com/linuxfp/linuxfp/internal/bench/pods"
	"github.com/linuxfp/linuxfp/internal/bench/response"
	"github.com/linuxfp/linuxfp/internal/bench/services"
)

// addPlotFlag adds --plot: the figure of the same run, drawn after its tables.
func addPlotFlag(cmd *cobra.Command, file *string) {
	cmd.Flags().StringVar(file, "plot", "",
		"also draw the result's figure into this file (.svg or .png); `linuxfp-bench plot` draws one from a saved --json result")
}

// checkPlotFile checks --plot before a benchmark runs, so a wrong name does not cost the run.
func checkPlotFile(file string) error {
	if file == "" {
		return nil
	}
	if _, err := plot.Format(file); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}

// writePlot draws res's figure into file ("" : none).
func writePlot(file string, res any) error {
	if file == "" {
		return nil
	}
	p, ok := res.(harness.Plotted)
	if !ok {
		return fmt.Errorf("--plot: this benchmark draws no figure")
	}
	return plot.WriteFile(file, p.Figure())
}

// plotResults are the results `linuxfp-bench plot` reads, by the benchmark that wrote them.
var plotResults = map[string]func() harness.Plotted{
	"router":   func() harness.Plotted { return new(harness.PipelineResult) },
	"bridge":   func() harness.Plotted { return new(harness.PipelineResult) },
	"gateway":  func() harness.Plotted { return new(gateway.Result) },
	"modules":  func() harness.Plotted { return new(modules.Result) },
	"pods":     func() harness.Plotted { return new(pods.Result) },
	"services": func() harness.Plotted { return new(services.Result) },
	"response": func() harness.Plotted { return new(response.Results) },
	"compose":  func() harness.Plotted { return new(compose.Result) },
}

func plotCmd() *cobra.Command {
	var out string
	names := slices.Sorted(maps.Keys(plotResults))
	cmd := &cobra.Command{
		Use:   "plot BENCHMARK RESULT.json",
		Short: "Draw a benchmark's figure from its saved --json result, without running it again",
		Long: `Reads what ` + "`linuxfp-bench BENCHMARK --json`" + ` wrote and draws the figure --plot would have drawn
from the same run, into -o (.svg or .png). BENCHMARK is the benchmark that wrote it: ` + strings.Join(names, ", ") + `.

Example: linuxfp-bench router -j > router.json; linuxfp-bench plot router router.json -o router.svg`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			newResult, ok := plotResults[args[0]]
			if !ok {
				return fmt.Errorf("benchmark %q: want one of %s", args[0], strings.Join(names, ", "))
			}
			if err := checkPlotFile(out); err != nil {
				return err
			}
			if out == "" {
				return fmt.Errorf("-o: the file to draw into (.svg or .png)")
			}
			data, err := os.ReadFile(args[1])
			if err != nil {
				return err
			}
			res := newResult()
			if err := json.Unmarshal(data, res); err != nil {
				return fmt.Errorf("read %s as the %s benchmark's result: %w", args[1], args[0], err)
			}
			return plot.WriteFile(out, res.Figure())
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the file to draw into (.svg or .png)")
	return cmd
}
