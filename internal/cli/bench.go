package cli

import "github.com/spf13/cobra"

func benchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Benchmarks: Linux vs linuxfp in the same run"}
}

func helperCmd() *cobra.Command {
	return &cobra.Command{Use: "helper", Hidden: true, Short: "internal helpers used by benchmarks"}
}
