package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/linuxfp/linuxfp/internal/cli"
)

// kustomization is the part of kustomize's Kustomization these manifests use.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// manifests decodes every document of deploy/kubernetes strictly (an unknown or misspelt field
// is an error, not ignored) into its Kubernetes type.
func manifests(t *testing.T) (ds *appsv1.DaemonSet, sa *corev1.ServiceAccount, k *kustomization) {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(b), "\n---\n") {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var obj any
			switch meta.Kind {
			case "DaemonSet":
				ds = &appsv1.DaemonSet{}
				obj = ds
			case "ServiceAccount":
				sa = &corev1.ServiceAccount{}
				obj = sa
			case "Kustomization":
				k = &kustomization{}
				obj = k
			default:
				t.Fatalf("%s document %d: kind %q not checked by this test", f, i, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s document %d (%s): %v", f, i, meta.Kind, err)
			}
		}
	}
	if ds == nil || sa == nil || k == nil {
		t.Fatalf("want a DaemonSet, a ServiceAccount and a Kustomization")
	}
	return ds, sa, k
}

func TestKubernetesManifests(t *testing.T) {
	ds, sa, k := manifests(t)

	var res []string
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			res = append(res, filepath.Base(f))
		}
	}
	if got := slices.Sorted(slices.Values(k.Resources)); !slices.Equal(got, res) {
		t.Errorf("kustomization resources %v, want every manifest %v", got, res)
	}

	if sa.Namespace != ds.Namespace || ds.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("DaemonSet %s/%s runs as service account %q, the manifest makes %s/%s",
			ds.Namespace, ds.Name, ds.Spec.Template.Spec.ServiceAccountName, sa.Namespace, sa.Name)
	}
	for key, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[key] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels %v", key, v, ds.Spec.Template.Labels)
		}
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("not hostNetwork: linuxfp would accelerate the pod's own namespace")
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", pod.PriorityClassName)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(t corev1.Toleration) bool {
		return t.Key == "" && t.Operator == corev1.TolerationOpExists && t.Effect == ""
	}) {
		t.Errorf("tolerations %v: want one tolerating every taint (control plane included)", pod.Tolerations)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil {
		t.Fatalf("securityContext %+v: want privileged: false and capabilities", sc)
	}
	if got := sc.Capabilities.Drop; !slices.Equal(got, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities dropped %v, want ALL", got)
	}
	// The pod holds exactly the capabilities linuxfp run refuses to start without; not the
	// optional ones (see the manifest: CAP_SYS_ADMIN would let linuxfp watch its own cgroup
	// only, and the /proc ones see no host process without hostPID).
	var want, got []string
	for _, c := range cli.RunCapabilities {
		if c.Required {
			want = append(want, c.Name)
		}
	}
	for _, c := range sc.Capabilities.Add {
		got = append(got, "CAP_"+string(c))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("capabilities added %v, want those linuxfp run requires %v", got, want)
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		t.Error("no cpu request")
	}
	if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
		t.Error("no memory request")
	}
	// The probes ask the metrics address linuxfp is told to serve.
	if !slices.Contains(c.Args, "--metrics-addr=127.0.0.1:9650") {
		t.Errorf("args %v: want --metrics-addr=127.0.0.1:9650 (the probes' address)", c.Args)
	}
	for name, want := range map[string]string{"readiness": "/readyz", "liveness": "/healthz"} {
		p := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "127.0.0.1" || p.HTTPGet.Port.IntValue() != 9650 || p.HTTPGet.Path != want {
			t.Errorf("%s probe %+v: want GET http://127.0.0.1:9650%s", name, p, want)
		}
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/sys/fs/cgroup" }) {
		t.Error("the runtime's mount of the pod's own cgroup is not hidden (linuxfp would watch only the pod's sysctl writes)")
	}
}
