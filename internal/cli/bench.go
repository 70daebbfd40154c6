package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// benchCmd keeps `linuxfp bench ...` working: the benchmarks are a command of their own,
// linuxfp-bench (make build puts it beside linuxfp), so that this binary carries none of their
// code; this only runs it.
func benchCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "bench",
		Short:              "Benchmarks: runs linuxfp-bench, installed beside linuxfp (linuxfp bench --help lists them)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			bin := filepath.Join(filepath.Dir(self), "linuxfp-bench")
			if _, err := exec.LookPath(bin); err != nil {
				return fmt.Errorf("the benchmarks are linuxfp-bench, not found beside linuxfp (make build builds both): %w", err)
			}
			// linuxfp-bench finds this binary beside it, or is told where it is.
			argv := append([]string{bin, "--linuxfp", self}, args...)
			return syscall.Exec(bin, argv, os.Environ())
		},
	}
}
