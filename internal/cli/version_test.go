package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The version names every BPF object of the daemon's packages with the hash of its bytes.
func TestVersionHashesEveryEmbeddedObject(t *testing.T) {
	text := versionText()
	var files []string
	for _, pkg := range []string{"dataplane", "observe"} {
		m, err := filepath.Glob(filepath.Join("..", pkg, "*_bpfel.o"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no BPF objects found")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		want := "bpf: sha256:" + hex.EncodeToString(sum[:]) + "  internal/" + filepath.Base(filepath.Dir(f)) + "/" + filepath.Base(f) + "\n"
		if !strings.Contains(text, want) {
			t.Errorf("version lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "\nbpf: "); n != len(files) {
		t.Errorf("version lists %d objects, the packages hold %d:\n%s", n, len(files), text)
	}
	if !strings.HasPrefix(text, "linuxfp dev\n") {
		t.Errorf("a test binary has no version set at build time, want dev:\n%s", text)
	}
}

func TestMissingCaps(t *testing.T) {
	var all uint64
	for _, c := range RunCapabilities {
		all |= 1 << c.Bit
	}
	if req, opt := missingCaps(all); len(req)+len(opt) != 0 {
		t.Errorf("all held: missing %v %v", req, opt)
	}
	req, opt := missingCaps(all &^ (1 << unix.CAP_NET_BROADCAST) &^ (1 << unix.CAP_SYS_ADMIN))
	if capNames(req) != "CAP_NET_BROADCAST" || capNames(opt) != "CAP_SYS_ADMIN" {
		t.Errorf("missing required %q optional %q, want CAP_NET_BROADCAST and CAP_SYS_ADMIN", capNames(req), capNames(opt))
	}
}
