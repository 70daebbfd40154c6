package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/observe"
)

// Set at build time (make build, make release, make image):
// -ldflags "-X github.com/linuxfp/linuxfp/internal/cli.version=$(git describe --tags --always --dirty)
// -X github.com/linuxfp/linuxfp/internal/cli.commit=$(git rev-parse HEAD)".
var (
	version = "dev"
	commit  = ""
)

// Version is linuxfp's version: git describe at build time, "dev" for a plain go build.
func Version() string { return version }

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version and the sha256 of the embedded BPF objects",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprint(cmd.OutOrStdout(), versionText())
			return nil
		},
	}
}

// versionText says which build this is, and which BPF objects it carries: two binaries with
// the same objects load the same data plane, whatever their version strings say.
func versionText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "linuxfp %s\n", version)
	fmt.Fprintf(&b, "commit: %s\n", buildCommit())
	fmt.Fprintf(&b, "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	objs := map[string]string{}
	for name, sum := range dataplane.ObjectHashes() {
		objs["internal/dataplane/"+name] = sum
	}
	for name, sum := range observe.ObjectHashes() {
		objs["internal/observe/"+name] = sum
	}
	names := make([]string, 0, len(objs))
	for name := range objs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "bpf: sha256:%s  %s\n", objs[name], name)
	}
	return b.String()
}

// buildCommit: the commit given at build time, else the one Go stamps into binaries built in a
// git checkout (not with -buildvcs=false, nor in tests), else "unknown".
func buildCommit() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	return "unknown"
}
