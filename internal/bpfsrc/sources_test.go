// Package bpfsrc checks that the committed BPF objects are built from bpf/ as it is: the objects
// are committed beside the Go packages that load them (bpf2go), so that `go build` needs no
// clang, and nothing else would notice a source edited after them.
package bpfsrc

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed objects are only as current as the last `make generate`, which records every
// source's SHA-256 in generated-from.sha256 (sha256sum's format). A source edited, added or
// removed since then fails here: some object may be stale (running `go generate` in one
// package leaves the others' objects behind, and a shared header feeds several).
func TestObjectsGeneratedFromTheseSources(t *testing.T) {
	const dir, sums = "../../bpf", "generated-from.sha256"
	f, err := os.Open(filepath.Join(dir, sums))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recorded := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, path, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("%s: %q is not a sha256sum line", sums, sc.Text())
		}
		recorded[filepath.Clean(path)] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err = fs.WalkDir(os.DirFS(dir), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path == sums {
			return err
		}
		seen[path] = true
		b, err := os.ReadFile(filepath.Join(dir, path))
		if err != nil {
			return err
		}
		h := sha256.Sum256(b)
		switch want, ok := recorded[path]; {
		case !ok:
			t.Errorf("bpf/%s is new since the objects were generated: run `make generate`", path)
		case want != hex.EncodeToString(h[:]):
			t.Errorf("bpf/%s changed since the objects were generated: run `make generate`", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path := range recorded {
		if !seen[path] {
			t.Errorf("bpf/%s is gone since the objects were generated: run `make generate`", path)
		}
	}
}
