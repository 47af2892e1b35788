package kubernetes_test

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// docs splits a manifest file into its YAML documents.
func docs(t *testing.T, file string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(d, "")) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

// strict decodes a document into v; an unknown field is an error.
func strict(t *testing.T, file string, doc []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// flagsOf runs a binary's help and lists the flags it prints.
func flagsOf(t *testing.T, pkg string, args ...string) map[string]bool {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	out, _ := exec.Command(bin, args...).CombinedOutput()
	got := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+--?([a-z][a-z0-9-]*)`).FindAllSubmatch(out, -1) {
		got[string(m[1])] = true
	}
	if len(got) < 5 {
		t.Fatalf("%s %v printed no flags:\n%s", pkg, args, out)
	}
	return got
}

// flagValue is a flag's value in a container's args ("" when absent).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// TestManifestsDecodeStrictly: every manifest decodes into the Kubernetes
// API types with no unknown field; each kvscope container's flags are the
// binary's own (from its help), its listen port is its named container
// port, the Service and monitors name ports the pods have, and the rings'
// directory is shared on both sides of the sidecar.
func TestManifestsDecodeStrictly(t *testing.T) {
	serveFlags := flagsOf(t, "github.com/kvscope/kvscope/server", "help", "serve")
	watchFlags := flagsOf(t, "github.com/kvscope/kvscope/agent", "watch", "-h")
	ports := map[string]bool{} // container port names of kvscope's pods
	var kz struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Namespace  string   `json:"namespace"`
		Resources  []string `json:"resources"`
	}
	strict(t, "kustomization.yaml", docs(t, "kustomization.yaml")[0], &kz)
	for _, file := range kz.Resources {
		for _, doc := range docs(t, file) {
			var head struct {
				Kind string `json:"kind"`
			}
			yaml.Unmarshal(doc, &head)
			var spec *corev1.PodSpec
			switch head.Kind {
			case "Deployment":
				var d appsv1.Deployment
				strict(t, file, doc, &d)
				spec = &d.Spec.Template.Spec
			case "DaemonSet":
				var d appsv1.DaemonSet
				strict(t, file, doc, &d)
				spec = &d.Spec.Template.Spec
			case "Service":
				var s corev1.Service
				strict(t, file, doc, &s)
				for _, p := range s.Spec.Ports {
					if !ports[p.TargetPort.StrVal] {
						t.Errorf("%s: Service %s targets port %q no container names", file, s.Name, p.TargetPort.StrVal)
					}
				}
			default:
				t.Errorf("%s: kind %q", file, head.Kind)
			}
			if spec != nil {
				checkPod(t, file, spec, serveFlags, watchFlags, ports)
			}
		}
	}
	for _, doc := range docs(t, "monitors.yaml") {
		var m struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				PodMetricsEndpoints []endpoint `json:"podMetricsEndpoints"`
				Endpoints           []endpoint `json:"endpoints"`
			} `json:"spec"`
		}
		strict(t, "monitors.yaml", doc, &m)
		for _, e := range append(m.Spec.PodMetricsEndpoints, m.Spec.Endpoints...) {
			if !ports[e.Port] || e.Path != "/metrics" {
				t.Errorf("monitors.yaml: %s %s scrapes port %q path %q", m.Kind, m.Metadata.Name, e.Port, e.Path)
			}
		}
	}
	var sc struct {
		ScrapeConfigs []struct {
			JobName             string           `json:"job_name"`
			KubernetesSDConfigs []map[string]any `json:"kubernetes_sd_configs"`
			RelabelConfigs      []map[string]any `json:"relabel_configs"`
			MetricsPath         string           `json:"metrics_path"`
		} `json:"scrape_configs"`
	}
	strict(t, "scrape-configs.yaml", docs(t, "scrape-configs.yaml")[0], &sc)
	if len(sc.ScrapeConfigs) != 2 || sc.ScrapeConfigs[0].JobName != "kvscope-watch" {
		t.Errorf("scrape configs: %+v (the rules' KvscopeWatcherDown wants job kvscope-watch)", sc.ScrapeConfigs)
	}
}

type endpoint struct {
	Port     string `json:"port"`
	Path     string `json:"path"`
	Interval string `json:"interval"`
}

func checkPod(t *testing.T, file string, spec *corev1.PodSpec, serveFlags, watchFlags, ports map[string]bool) {
	t.Helper()
	mounts := map[string]string{} // volume -> mount path, per kvscope-watch and NIXL env
	for _, c := range spec.Containers {
		var flags map[string]bool
		var listen, portName string
		switch {
		case len(c.Command) == 1 && c.Command[0] == "/usr/local/bin/kvscope":
			flags, listen, portName = serveFlags, flagValue(c.Args, "addr"), "http"
			if c.Args[0] != "serve" {
				t.Errorf("%s: %s runs %q", file, c.Name, c.Args[0])
			}
		case len(c.Command) == 1 && c.Command[0] == "/usr/local/bin/kvscope-agent":
			flags, listen, portName = watchFlags, flagValue(c.Args, "metrics-addr"), "metrics"
			if c.Args[0] != "watch" {
				t.Errorf("%s: %s runs %q", file, c.Name, c.Args[0])
			}
		}
		for _, e := range c.Env {
			if e.Name == "NIXL_TELEMETRY_DIR" {
				for _, m := range c.VolumeMounts {
					if m.MountPath == e.Value {
						if prev, ok := mounts[m.Name]; ok && prev != e.Value {
							t.Errorf("%s: %s mounts %s at %s, another container at %s", file, c.Name, m.Name, e.Value, prev)
						}
						mounts[m.Name] = e.Value
					}
				}
				if mounts == nil || !hasMount(c, e.Value) {
					t.Errorf("%s: %s sets NIXL_TELEMETRY_DIR=%s but mounts nothing there", file, c.Name, e.Value)
				}
			}
		}
		if flags == nil {
			continue
		}
		for _, a := range c.Args[1:] {
			if name, ok := strings.CutPrefix(a, "--"); ok && !flags[name] {
				t.Errorf("%s: %s passes --%s, which the binary does not have", file, c.Name, name)
			}
		}
		_, port, err := net.SplitHostPort(listen)
		if err != nil {
			t.Errorf("%s: %s listens on %q: %v", file, c.Name, listen, err)
			continue
		}
		found := false
		for _, p := range c.Ports {
			ports[p.Name] = true
			if p.Name == portName && bytes.Equal([]byte(port), []byte(itoa(p.ContainerPort))) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: %s listens on port %s, not its container port %q", file, c.Name, port, portName)
		}
	}
}

func hasMount(c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return true
		}
	}
	return false
}

func itoa(n int32) string {
	b, _ := yaml.Marshal(n)
	return strings.TrimSpace(string(b))
}
