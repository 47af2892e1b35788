// Package kubernetes ships kvscope's Kubernetes manifests (kustomize-ready:
// kvscope serve, the watcher as a vLLM pod's sidecar and as a DaemonSet,
// Prometheus-operator monitors and a plain scrape_configs block) and the
// Dockerfile of both binaries. Its test decodes every manifest strictly
// into the Kubernetes API types and holds their flags, ports and env
// against the binaries' own. It holds no Go code the binaries use.
package kubernetes
