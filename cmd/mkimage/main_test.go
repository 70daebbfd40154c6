package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// The same binary gives the same archive, byte for byte; another binary another digest; and the
// archive is an OCI layout whose image runs /linuxfp run.
func TestArchiveReproducible(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "linuxfp")
	if err := os.WriteFile(bin, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := options{binaryPath: bin, arch: "arm64", ref: "linuxfp:test", version: "test", created: time.Unix(1700000000, 0).UTC()}
	build := func(name string) ([]byte, string) {
		out := filepath.Join(dir, name)
		d, err := writeArchive(out, o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b, d.String()
	}
	a, da := build("a.tar")
	time.Sleep(1100 * time.Millisecond) // a timestamp taken from the clock would now differ
	b, db := build("b.tar")
	if da != db || !bytes.Equal(a, b) {
		t.Fatalf("two builds differ: %s %s, archives equal %v", da, db, bytes.Equal(a, b))
	}
	if err := os.WriteFile(bin, []byte("\x7fELF another"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, dc := build("c.tar"); dc == da {
		t.Errorf("another binary gave the same digest %s", dc)
	}

	// Read it back as an OCI layout.
	lay := filepath.Join(dir, "layout")
	untar(t, a, lay)
	idx, err := layout.ImageIndexFromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest.String() != da || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "linuxfp:test" {
		t.Fatalf("index %+v", im)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != "arm64" || cfg.OS != "linux" || !slices.Equal(cfg.Config.Entrypoint, []string{"/linuxfp"}) || !slices.Equal(cfg.Config.Cmd, []string{"run"}) || !cfg.Created.Time.Equal(o.created) {
		t.Errorf("config %+v", cfg)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers: %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	content, _ := io.ReadAll(tr)
	if h.Name != "linuxfp" || h.Mode != 0o755 || string(content) != "\x7fELF not really" {
		t.Errorf("layer holds %s mode %o %q", h.Name, h.Mode, content)
	}
}

func untar(t *testing.T, b []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, c, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
