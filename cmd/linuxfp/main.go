// Command linuxfp accelerates Linux networking with eBPF fast paths derived from the
// configuration Linux already has. See README.md.
package main

import (
	"os"

	"github.com/linuxfp/linuxfp/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
