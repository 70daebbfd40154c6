// mkimage packs a static linuxfp binary into an OCI image archive (an OCI image layout in a tar
// file, as `skopeo copy oci-archive:`, `ctr images import` and `podman load` read it) without a
// container daemon. The same inputs give the same bytes: every timestamp is SOURCE_DATE_EPOCH
// (0 without it), and nothing else varies.
//
//	go run ./cmd/mkimage -binary bin/image/linuxfp -arch amd64 -ref linuxfp:v1.2 -out bin/linuxfp-image.tar
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	var o options
	var out string
	flag.StringVar(&o.binaryPath, "binary", "", "the static linuxfp binary (CGO_ENABLED=0)")
	flag.StringVar(&o.arch, "arch", "amd64", "the binary's GOARCH")
	flag.StringVar(&o.ref, "ref", "linuxfp:dev", "the image name recorded in the archive")
	flag.StringVar(&o.version, "version", "dev", "the version label")
	flag.StringVar(&out, "out", "", "where to write the archive")
	flag.Parse()
	if o.binaryPath == "" || out == "" {
		fmt.Fprintln(os.Stderr, "mkimage: -binary and -out are required")
		os.Exit(2)
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	o.created = epoch
	digest, err := writeArchive(out, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s (%s/%s)\n", o.ref, digest, "linux", o.arch)
}

type options struct {
	binaryPath, arch, ref, version string
	created                        time.Time
}

// sourceDateEpoch: the reproducible-builds convention for the one timestamp a build records.
func sourceDateEpoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", v, err)
	}
	return time.Unix(s, 0).UTC(), nil
}

// image is the binary as /linuxfp in one layer, run as `linuxfp run` by default.
func image(o options) (v1.Image, error) {
	bin, err := os.ReadFile(o.binaryPath)
	if err != nil {
		return nil, err
	}
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: "linuxfp", Mode: 0o755, Size: int64(len(bin)),
		ModTime: o.created, Format: tar.FormatUSTAR,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: o.created}, CreatedBy: "mkimage: /linuxfp"},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", o.arch
	cfg.Created = v1.Time{Time: o.created}
	cfg.Config.Entrypoint = []string{"/linuxfp"}
	cfg.Config.Cmd = []string{"run"}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "linuxfp",
		"org.opencontainers.image.version": o.version,
	}
	return mutate.ConfigFile(img, cfg)
}

// writeArchive writes the image as an OCI image layout in a tar file and returns the manifest's
// digest. (go-containerregistry's layout package writes a directory, and its tarball package
// the `docker save` format; this tar has sorted entries with fixed owners and times.)
func writeArchive(path string, o options) (v1.Hash, error) {
	img, err := image(o)
	if err != nil {
		return v1.Hash{}, err
	}
	blobs := map[string][]byte{}
	manifest, err := img.RawManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	blobs[digest.Hex] = manifest
	config, err := img.RawConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return v1.Hash{}, err
	}
	blobs[cfgName.Hex] = config
	layers, err := img.Layers()
	if err != nil {
		return v1.Hash{}, err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return v1.Hash{}, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return v1.Hash{}, err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return v1.Hash{}, err
		}
		blobs[d.Hex] = b
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Digest:    digest,
			Size:      int64(len(manifest)),
			Platform:  &v1.Platform{OS: "linux", Architecture: o.arch},
			Annotations: map[string]string{
				// The name OCI tools give the image, and the one containerd's import uses.
				"org.opencontainers.image.ref.name": o.ref,
				"io.containerd.image.name":          o.ref,
			},
		}},
	})
	if err != nil {
		return v1.Hash{}, err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: o.created, Format: tar.FormatUSTAR})
	}
	file := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: o.created, Format: tar.FormatUSTAR}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	err = errors.Join(
		file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)),
		file("index.json", index),
		dir("blobs/"),
		dir("blobs/sha256/"),
	)
	if err != nil {
		return v1.Hash{}, err
	}
	names := make([]string, 0, len(blobs))
	for h := range blobs {
		names = append(names, h)
	}
	sort.Strings(names)
	for _, h := range names {
		if err := file("blobs/sha256/"+h, blobs[h]); err != nil {
			return v1.Hash{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return v1.Hash{}, err
	}
	return digest, os.WriteFile(path, buf.Bytes(), 0o644)
}
