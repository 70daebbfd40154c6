package e2e

import (
	"archive/tar"
	"bufio"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	v1mutate "github.com/google/go-containerregistry/pkg/v1/mutate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The image `make image` builds, run by runc as the DaemonSet's container would be (its
// capabilities, no new privileges, read-only root, the pod cgroup hidden, the node's network
// namespace: here the testbed's DUT): linuxfp starts, fast-paths the testbed's traffic, answers
// the probe run inside the container, and leaves nothing attached when stopped; with any one of
// the capabilities it requires taken away it exits 1 naming it.
//
// Not reproduced: the runtime's default seccomp profile (seccompProfile: RuntimeDefault belongs
// to containerd or CRI-O, not to runc) and the kubelet's cgroups.
func TestImageUnderRunc(t *testing.T) {
	requireTool(t, "runc")
	tb := newTestbed(t, testbed.Options{})
	dir := t.TempDir()
	img := imageConfig(t, buildImage(t, dir), filepath.Join(dir, "rootfs"))
	ctr := daemonSetContainer(t)
	base := runcSpec(t, dir, img, ctr, tb.DUT.Name)

	for _, c := range requiredCaps() {
		spec := withoutCap(t, base, c.Name)
		out, code := runcRun(t, dir, spec)
		if code != 1 || !strings.Contains(out, "run needs "+c.Name+",") {
			t.Errorf("without %s: exit %d, want 1 and the capability named:\n%s", c.Name, code, out)
		}
	}

	id := containerID(t)
	writeSpec(t, dir, base)
	log := &testbed.SyncBuffer{}
	run := exec.Command("runc", "run", "--bundle", dir, id)
	run.Stdout, run.Stderr = log, log
	// The container holds the output pipe: do not wait for it once runc itself has gone.
	run.WaitDelay = time.Second
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	t.Cleanup(func() {
		// Whatever happened: the container killed and deleted, runc reaped.
		exec.Command("runc", "kill", id, "KILL").Run()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			run.Process.Kill()
		}
		exec.Command("runc", "delete", "--force", id).Run()
		if t.Failed() {
			t.Logf("container output:\n%s", log.String())
		}
	})

	l := &testbed.Linuxfp{Client: testbed.StatusClientIn(tb.DUT), Log: log}
	var st *status.Status
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		st, err = l.Client.Status()
		if err == nil && programsOn(st) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no programs on in0 and out0 within 10s (last error %v)", err)
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("runc run exited: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	waitFastPath(t, tb, l, "198.19.3.1")
	// The manifest's claims about what linuxfp does in the pod: the tp_btf netlink watcher loads
	// with the four capabilities; the sysctl watcher polls, the pod's cgroup being hidden.
	if !strings.HasPrefix(st.IPSetWatch, "event:") {
		t.Errorf("ipset watch %q: the tp_btf netlink watcher should load in the container", st.IPSetWatch)
	}
	if !strings.HasPrefix(st.SysctlWatch, "poll:") {
		t.Errorf("sysctl watch %q: with /sys/fs/cgroup hidden and no CAP_SYS_ADMIN linuxfp should poll", st.SysctlWatch)
	}

	// The probes, as the kubelet asks them: HTTP to the node's loopback (the container is in
	// the DUT's network namespace); and the status command inside the container.
	for _, p := range []*corev1.Probe{ctr.ReadinessProbe, ctr.LivenessProbe} {
		url := fmt.Sprintf("http://%s:%d%s", p.HTTPGet.Host, p.HTTPGet.Port.IntValue(), p.HTTPGet.Path)
		var code int
		// Dialled on this thread, in the DUT's namespace (http.Get would dial on another).
		err := tb.DUT.Do(func() error {
			c, err := net.Dial("tcp", net.JoinHostPort(p.HTTPGet.Host, fmt.Sprint(p.HTTPGet.Port.IntValue())))
			if err != nil {
				return err
			}
			defer c.Close()
			fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", p.HTTPGet.Path, p.HTTPGet.Host)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return err
			}
			resp.Body.Close()
			code = resp.StatusCode
			return nil
		})
		if err != nil || code != http.StatusOK {
			t.Errorf("probe %s: %d %v, want 200", url, code, err)
		}
	}
	if out, err := exec.Command("runc", "exec", id, "/linuxfp", "status").CombinedOutput(); err != nil || !strings.Contains(string(out), "in0") {
		t.Errorf("linuxfp status in the container: %v, want exit 0 and the status:\n%s", err, out)
	}

	// What the kubelet sends first on a rolling update or a delete.
	if out, err := exec.Command("runc", "kill", id, "TERM").CombinedOutput(); err != nil {
		t.Fatalf("runc kill: %v: %s", err, out)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("linuxfp did not exit within 10s of SIGTERM")
	}
	for _, dev := range []string{"in0", "out0"} {
		if progAttached(t, tb.DUT, dev) {
			t.Errorf("%s still has a program after the container exited", dev)
		}
	}
}

// buildImage packs the binary under test (static: TestMain) into an image archive as `make image`
// does, and returns the archive's path.
func buildImage(t *testing.T, dir string) string {
	t.Helper()
	archive := filepath.Join(dir, "linuxfp-image.tar")
	mk := exec.Command("go", "run", "../cmd/mkimage", "-binary", linuxfpBin, "-arch", runtime.GOARCH, "-out", archive)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("mkimage: %v\n%s", err, out)
	}
	return archive
}

// imageConfig reads the archive as an OCI image layout, unpacks its one image's file system
// into rootfs and returns the image's configuration.
func imageConfig(t *testing.T, archive, rootfs string) *v1.ConfigFile {
	t.Helper()
	lay := filepath.Join(filepath.Dir(archive), "layout")
	if err := untar(archive, lay); err != nil {
		t.Fatalf("image archive: %v", err)
	}
	idx, err := layout.ImageIndexFromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%d images in the archive, want 1", len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Fatalf("image for %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	fs := v1mutate.Extract(img)
	defer fs.Close()
	if err := untarStream(fs, rootfs); err != nil {
		t.Fatalf("image file system: %v", err)
	}
	return cfg
}

func untar(path, dst string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return untarStream(f, dst)
}

// untarStream writes the directories and regular files of a tar stream under dst; anything else
// (links, devices) is an error: neither the archive nor the image has any.
func untarStream(r io.Reader, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dst, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, h.FileInfo().Mode().Perm()); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, h.FileInfo().Mode().Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: tar entry type %q not expected", h.Name, h.Typeflag)
		}
	}
}

// daemonSetContainer is the container of deploy/kubernetes/daemonset.yaml.
func daemonSetContainer(t *testing.T) corev1.Container {
	t.Helper()
	b, err := os.ReadFile("../deploy/kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 || !pod.HostNetwork {
		t.Fatalf("want one container in the node's network namespace (hostNetwork)")
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil || sc.RunAsUser == nil || sc.AllowPrivilegeEscalation == nil ||
		sc.ReadOnlyRootFilesystem == nil || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil ||
		c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil {
		t.Fatalf("container %s: securityContext (capabilities, runAsUser, allowPrivilegeEscalation, "+
			"readOnlyRootFilesystem) and HTTP probes are what this test reproduces", c.Name)
	}
	// The volumes the runtime would mount, kept for runcSpec: only emptyDirs are reproduced.
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || pod.Volumes[i].EmptyDir == nil {
			t.Fatalf("volume %s: only emptyDir volumes are reproduced here", m.Name)
		}
	}
	return c
}

// runcSpec is runc's template (`runc spec`) changed into what a CRI runtime would make of the
// DaemonSet's container: process, user, capabilities, no new privileges, read-only root, the
// network namespace of the node (the DUT), the container's volume mounts.
func runcSpec(t *testing.T, dir string, img *v1.ConfigFile, c corev1.Container, netns string) map[string]any {
	t.Helper()
	os.Remove(filepath.Join(dir, "config.json"))
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	sc := c.SecurityContext

	// Kubernetes: command replaces the image's entrypoint, args its cmd.
	args := slices.Clone(img.Config.Entrypoint)
	if len(c.Command) > 0 {
		args = slices.Clone(c.Command)
	}
	if len(c.Args) > 0 {
		args = append(args, c.Args...)
	} else {
		args = append(args, img.Config.Cmd...)
	}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = args
	proc["user"] = map[string]any{"uid": *sc.RunAsUser, "gid": 0}
	proc["noNewPrivileges"] = !*sc.AllowPrivilegeEscalation
	// The template's 1024 open files is runc's example, not what a node's runtime passes on.
	delete(proc, "rlimits")
	// As containerd and CRI-O give them to root: what is added (after dropping ALL) is bounding,
	// effective and permitted; inheritable and ambient stay empty. A non-root user would get
	// them in the bounding set only, which linuxfp cannot use.
	if *sc.RunAsUser != 0 {
		t.Fatalf("runAsUser %d: this test reproduces the capabilities of a root container only", *sc.RunAsUser)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Fatalf("capabilities drop %v: this test reproduces drop: [ALL] only", sc.Capabilities.Drop)
	}
	var caps []string
	for _, c := range sc.Capabilities.Add {
		caps = append(caps, "CAP_"+string(c))
	}
	proc["capabilities"] = map[string]any{"bounding": caps, "effective": caps, "permitted": caps}

	root := spec["root"].(map[string]any)
	root["path"] = "rootfs"
	root["readonly"] = *sc.ReadOnlyRootFilesystem

	lin := spec["linux"].(map[string]any)
	var nss []any
	for _, ns := range lin["namespaces"].([]any) {
		ns := ns.(map[string]any)
		if ns["type"] == "network" {
			ns["path"] = "/run/netns/" + netns
		}
		nss = append(nss, ns)
	}
	lin["namespaces"] = nss

	// The template mounts the container's cgroup at /sys/fs/cgroup; the volume mounts (emptyDirs,
	// see daemonSetContainer) go over whatever the runtime mounts.
	var mounts []any
	for _, m := range spec["mounts"].([]any) {
		dst := m.(map[string]any)["destination"].(string)
		if !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == dst }) {
			mounts = append(mounts, m)
		}
	}
	for _, v := range c.VolumeMounts {
		src := filepath.Join(dir, "volumes", v.Name)
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		opts := []string{"rbind", "nosuid", "nodev", "noexec"}
		if v.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, map[string]any{"destination": v.MountPath, "type": "bind", "source": src, "options": opts})
	}
	spec["mounts"] = mounts
	return spec
}

// withoutCap is spec (shared maps not changed) with capability name in none of the sets.
func withoutCap(t *testing.T, spec map[string]any, name string) map[string]any {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	sets := out["process"].(map[string]any)["capabilities"].(map[string]any)
	for k, v := range sets {
		var keep []string
		for _, c := range v.([]any) {
			if c != name {
				keep = append(keep, c.(string))
			}
		}
		sets[k] = keep
	}
	return out
}

func writeSpec(t *testing.T, dir string, spec map[string]any) {
	t.Helper()
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// containerID is unique to this run, so a leftover is easy to find (`runc list`).
func containerID(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("lfp-e2e-%x", b)
}

// runcRun runs the container in the foreground until it exits and returns its output and exit
// code; the container is deleted whatever happened.
func runcRun(t *testing.T, dir string, spec map[string]any) (string, int) {
	t.Helper()
	writeSpec(t, dir, spec)
	id := containerID(t)
	defer exec.Command("runc", "delete", "--force", id).Run()
	cmd := exec.Command("runc", "run", "--bundle", dir, id)
	out, err := runWithTimeout(cmd, 10*time.Second)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, 0
	case errors.As(err, &ee):
		return out, ee.ExitCode()
	default:
		t.Fatalf("runc run: %v\n%s", err, out)
		return "", -1
	}
}

// runWithTimeout runs cmd, killing runc (and with --force delete, its container) after d.
func runWithTimeout(cmd *exec.Cmd, d time.Duration) (string, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("did not exit within %s", d)
	}
}
