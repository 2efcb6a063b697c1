package validate

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/limitproxy/limitproxy/policy/config"
)

const dir = ".."

// kustomization is the part of a kustomization.yaml these manifests use,
// decoded strictly, so that a key this test does not know is an error
// rather than silently unchecked.
type kustomization struct {
	APIVersion         string   `json:"apiVersion"`
	Kind               string   `json:"kind"`
	Resources          []string `json:"resources"`
	ConfigMapGenerator []struct {
		Name    string   `json:"name"`
		Files   []string `json:"files"`
		Options struct {
			DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
		} `json:"options"`
	} `json:"configMapGenerator"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

// decodeStrict decodes YAML as the API server does a manifest, strictly:
// a duplicate key, or a field unknown to the type, is an error, and field
// names are matched case-sensitively (sigs.k8s.io/yaml's UnmarshalStrict
// goes through encoding/json, which would take readOnlyRootFileSystem for
// readOnlyRootFilesystem).
func decodeStrict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strictErrs, err := kjson.UnmarshalStrict(j, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strictErrs...)
}

// manifests is every object of the kustomization, decoded strictly.
type manifests struct {
	kust       kustomization
	configMaps map[string]map[string][]byte // generated ConfigMaps: name → key → file
	deployment *appsv1.Deployment
	services   []*corev1.Service
	monitors   []*monitoringv1.ServiceMonitor
	budgets    []*policyv1.PodDisruptionBudget
}

// splitDocs splits a multi-document YAML file.
func splitDocs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), b...), []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			out = append(out, d)
		}
	}
	return out
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// load decodes the kustomization and every resource it lists, each strictly
// into its API type by apiVersion and kind.
func load(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{configMaps: map[string]map[string][]byte{}}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(b, &m.kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if m.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || m.kust.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: %s %s", m.kust.APIVersion, m.kust.Kind)
	}
	for _, g := range m.kust.ConfigMapGenerator {
		files := map[string][]byte{}
		for _, f := range g.Files {
			src, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatalf("configMapGenerator %s: %v", g.Name, err)
			}
			files[filepath.Base(f)] = src
		}
		m.configMaps[g.Name] = files
		if !g.Options.DisableNameSuffixHash {
			// A hashed name changes with every edit: the pods would be
			// rolled instead of the file reloaded live.
			t.Errorf("configMapGenerator %s: disableNameSuffixHash must be true for a live reload", g.Name)
		}
	}
	listed := map[string]bool{"kustomization.yaml": true}
	for _, r := range m.kust.Resources {
		listed[r] = true
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocs(b) {
			if err := m.decode(doc); err != nil {
				t.Fatalf("%s, document %d: %v", r, i, err)
			}
		}
	}
	// Every manifest in the directory is one kubectl apply -k applies.
	all, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range all {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s is not in kustomization.yaml's resources", filepath.Base(f))
		}
	}
	if m.deployment == nil {
		t.Fatal("no Deployment")
	}
	return m
}

func (m *manifests) decode(doc []byte) error {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	strict := func(v any) error { return decodeStrict(doc, v) }
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		if m.deployment != nil {
			return fmt.Errorf("a second Deployment")
		}
		m.deployment = &appsv1.Deployment{}
		return strict(m.deployment)
	case "v1 Service":
		s := &corev1.Service{}
		m.services = append(m.services, s)
		return strict(s)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		s := &monitoringv1.ServiceMonitor{}
		m.monitors = append(m.monitors, s)
		return strict(s)
	case "policy/v1 PodDisruptionBudget":
		p := &policyv1.PodDisruptionBudget{}
		m.budgets = append(m.budgets, p)
		return strict(p)
	}
	return fmt.Errorf("%s %s: not a kind this test knows", tm.APIVersion, tm.Kind)
}

// container returns the limitproxy container.
func (m *manifests) container(t *testing.T) *corev1.Container {
	t.Helper()
	cs := m.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	return &cs[0]
}

// TestManifestsDecode: every manifest decodes strictly into its API type.
func TestManifestsDecode(t *testing.T) {
	m := load(t)
	if len(m.services) == 0 || len(m.monitors) == 0 || len(m.budgets) == 0 {
		t.Errorf("services %d, service monitors %d, disruption budgets %d: want each", len(m.services), len(m.monitors), len(m.budgets))
	}
}

// TestStrictDecodingRefuses: the decoding above catches a misspelt field,
// one in the wrong case, an unknown one and a duplicate key, in a built-in
// type and in the ServiceMonitor (the test cannot pass by accident).
func TestStrictDecodingRefuses(t *testing.T) {
	for _, c := range []struct{ file, old, new string }{
		{"deployment.yaml", "readOnlyRootFilesystem:", "readOnlyRootFileSystem:"},
		{"deployment.yaml", "readOnlyRootFilesystem:", "readOnlyRootFilesytem:"},
		{"deployment.yaml", "      automountServiceAccountToken: false\n", "      automountServiceAccountToken: false\n      automountServiceAccountToken: false\n"},
		{"servicemonitor.yaml", "scrapeTimeout:", "scrape_timeout:"},
		{"pdb.yaml", "maxUnavailable:", "maxUnavailible:"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		old, repl := c.old, c.new
		bad := bytes.Replace(b, []byte(old), []byte(repl), 1)
		if bytes.Equal(bad, b) {
			t.Fatalf("%s has no %q", c.file, c.old)
		}
		if err := (&manifests{}).decode(bad); err == nil {
			t.Errorf("%s with %q for %q: accepted", c.file, c.new, c.old)
		}
	}
}

// configFile finds the configuration the container runs: its -config
// argument, which must be a file of a ConfigMap mounted as a directory.
func (m *manifests) configFile(t *testing.T) []byte {
	t.Helper()
	c := m.container(t)
	i := slices.Index(c.Args, "-config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("args %q: no -config FILE", c.Args)
	}
	file := c.Args[i+1]
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != path.Dir(file) {
			continue
		}
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			t.Fatalf("volume %s is mounted with a subPath, which the kubelet never updates: no live reload", vm.Name)
		}
		for _, v := range m.deployment.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			if v.ConfigMap == nil {
				t.Fatalf("volume %s mounted at %s is no ConfigMap", v.Name, vm.MountPath)
			}
			if len(v.ConfigMap.Items) > 0 {
				t.Errorf("volume %s: items would rename the ConfigMap's keys", v.Name)
			}
			files, ok := m.configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("ConfigMap %q is not generated by kustomization.yaml", v.ConfigMap.Name)
			}
			src, ok := files[path.Base(file)]
			if !ok {
				t.Fatalf("ConfigMap %q has no key %q", v.ConfigMap.Name, path.Base(file))
			}
			return src
		}
	}
	t.Fatalf("-config %s: no volume is mounted at %s", file, path.Dir(file))
	return nil
}

// TestConfigMapConfiguration: the configuration the pods run passes
// limitproxy's own checks (limitproxy check), and its listeners are where
// the probes, the Services and Prometheus look.
func TestConfigMapConfiguration(t *testing.T) {
	m := load(t)
	src := m.configFile(t)
	cfg, err := config.Parse("limitproxy.toml", src)
	if err != nil {
		t.Fatalf("limitproxy check: %v", err)
	}
	c := m.container(t)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	listenPort := func(what, addr string) (int32, net.IP) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%s %q: %v", what, addr, err)
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			t.Fatalf("%s %q: port %v", what, addr, err)
		}
		return int32(n), net.ParseIP(host)
	}
	if p, _ := listenPort("server.listen", cfg.Server.Listen); p != ports["http"] {
		t.Errorf("server.listen %s, container port http %d", cfg.Server.Listen, ports["http"])
	}
	// The admin listener must be on the pod's address: the kubelet and
	// Prometheus reach it by the pod IP, never by loopback.
	p, ip := listenPort("admin.listen", cfg.Admin.Listen)
	if p != ports["admin"] {
		t.Errorf("admin.listen %s, container port admin %d", cfg.Admin.Listen, ports["admin"])
	}
	if ip != nil && !ip.IsUnspecified() || strings.EqualFold(strings.TrimSuffix(cfg.Admin.Listen, ":"+strconv.Itoa(int(p))), "localhost") {
		t.Errorf("admin.listen %s: the probes and Prometheus reach the pod by its IP; listen on every address", cfg.Admin.Listen)
	}
	// Reachable from other pods: /api/ needs the token, from a Secret.
	if cfg.Admin.TokenEnv == "" {
		t.Fatal("admin.token_env is not set: the admin API would be open to the cluster")
	}
	// The key hash's secret too: without one each replica draws its own
	// at every start, and a client shows a different hash on each.
	if cfg.Admin.KeyHashSecretEnv == "" {
		t.Error("admin.key_hash_secret_env is not set: a client's key hash would differ between replicas and restarts")
	}
	for _, name := range []string{cfg.Admin.TokenEnv, cfg.Admin.KeyHashSecretEnv} {
		var env *corev1.EnvVar
		for i := range c.Env {
			if c.Env[i].Name == name {
				env = &c.Env[i]
			}
		}
		if env == nil || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s is not set from a Secret", name)
		}
	}
	// The drain fits in the grace period, after the preStop pause.
	grace := m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds
	pause := int64(0)
	if ps := c.Lifecycle; ps != nil && ps.PreStop != nil && ps.PreStop.Sleep != nil {
		pause = ps.PreStop.Sleep.Seconds
	}
	if grace == nil || *grace < pause+int64(cfg.Server.ShutdownTimeout.Seconds())+1 {
		t.Errorf("terminationGracePeriodSeconds %v: below preStop %ds + shutdown_timeout %v", grace, pause, cfg.Server.ShutdownTimeout)
	}
}

// TestProbes: liveness on /healthz and readiness on /readyz, on the admin
// port.
func TestProbes(t *testing.T) {
	m := load(t)
	c := m.container(t)
	check := func(name string, p *corev1.Probe, wantPath string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no HTTP probe", name)
			return
		}
		if p.HTTPGet.Path != wantPath || p.HTTPGet.Port != intstr.FromString("admin") {
			t.Errorf("%s: %s on port %v, want %s on admin", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), wantPath)
		}
		if p.HTTPGet.Host != "" {
			t.Errorf("%s: host %q: the kubelet must ask the pod IP", name, p.HTTPGet.Host)
		}
	}
	check("livenessProbe", c.LivenessProbe, "/healthz")
	check("readinessProbe", c.ReadinessProbe, "/readyz")
	check("startupProbe", c.StartupProbe, "/healthz")
}

// TestHardening: what deploy/limitproxy.service's sandbox gives, in
// Kubernetes' terms: an unprivileged user, no new privileges, no
// capabilities (the ports are above 1024), the runtime's seccomp filter,
// nothing writable but /tmp (bodies buffered to temporary files), no
// service-account token, and resource requests.
func TestHardening(t *testing.T) {
	m := load(t)
	ps := m.deployment.Spec.Template.Spec
	c := m.container(t)
	sc, psc := c.SecurityContext, ps.SecurityContext
	switch {
	case sc == nil || psc == nil:
		t.Fatal("no securityContext")
	case psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0:
		t.Error("the pod may run as root")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false (NoNewPrivileges)")
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("privileged")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("the root filesystem is writable (ProtectSystem=strict)")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Error("capabilities are not all dropped")
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("no RuntimeDefault seccomp profile (SystemCallFilter)")
	case ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken:
		t.Error("the service-account token is mounted")
	}
	for _, p := range c.Ports {
		if p.ContainerPort < 1024 {
			t.Errorf("port %s %d needs a capability", p.Name, p.ContainerPort)
		}
	}
	tmp := false
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == "/tmp" {
			for _, v := range ps.Volumes {
				tmp = tmp || v.Name == vm.Name && v.EmptyDir != nil
			}
		} else if !vm.ReadOnly {
			t.Errorf("%s is mounted writable", vm.MountPath)
		}
	}
	if !tmp {
		t.Error("no emptyDir at /tmp for buffered request bodies")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("cpu and memory requests and a memory limit are needed")
	}
}

// TestSelectors: the Services, the ServiceMonitor and the budget select
// the Deployment's pods, through ports that exist.
func TestSelectors(t *testing.T) {
	m := load(t)
	podLabels := m.deployment.Spec.Template.Labels
	sel := m.deployment.Spec.Selector
	if sel == nil || !subset(sel.MatchLabels, podLabels) {
		t.Fatalf("the Deployment's selector %v does not select its pods %v", sel, podLabels)
	}
	ports := map[string]bool{}
	for _, p := range m.container(t).Ports {
		ports[p.Name] = true
	}
	for _, s := range m.services {
		if !subset(s.Spec.Selector, podLabels) || len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s selects %v, not the pods %v", s.Name, s.Spec.Selector, podLabels)
		}
		for _, p := range s.Spec.Ports {
			if !ports[p.TargetPort.String()] {
				t.Errorf("Service %s: targetPort %s is no container port", s.Name, p.TargetPort.String())
			}
		}
	}
	for _, sm := range m.monitors {
		var found bool
		for _, s := range m.services {
			if !subset(sm.Spec.Selector.MatchLabels, s.Labels) {
				continue
			}
			for _, e := range sm.Spec.Endpoints {
				for _, p := range s.Spec.Ports {
					if e.Port != "" && p.Name == e.Port && p.TargetPort.String() == "admin" && e.Path == "/metrics" {
						found = true
					}
				}
			}
		}
		if !found {
			t.Errorf("ServiceMonitor %s: no endpoint scrapes /metrics on a Service's admin port", sm.Name)
		}
	}
	for _, b := range m.budgets {
		if b.Spec.Selector == nil || !subset(b.Spec.Selector.MatchLabels, podLabels) {
			t.Errorf("PodDisruptionBudget %s does not select the pods", b.Name)
		}
		if r := m.deployment.Spec.Replicas; r == nil || *r < 2 {
			t.Errorf("a disruption budget with %v replicas blocks every node drain", r)
		}
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
