package xfer

import (
	"fmt"
	"strings"

	"github.com/kvscope/kvscope/core/model"
)

// Connector is a vLLM KV connector configuration: one connector kind, or a
// MultiConnector wrapping several ("multi:nixl+offloading").
type Connector struct {
	Kinds []ConnectorKind
}

// ConnectorKind is one vLLM KV connector.
type ConnectorKind string

// The connectors kvscope knows.
const (
	Nixl          ConnectorKind = "nixl"               // NixlConnector: D pulls (READ)
	NixlPush      ConnectorKind = "nixl-push"          // NixlPushConnector: P pushes (WRITE)
	Offloading    ConnectorKind = "offloading"         // OffloadingConnector with a CPU spec
	SimpleOffload ConnectorKind = "simple-cpu-offload" // SimpleCPUOffloadConnector
)

// ParseConnector reads "nixl", "nixl-push", "offloading",
// "simple-cpu-offload" or "multi:a+b".
func ParseConnector(s string) (Connector, error) {
	if s == "" {
		s = string(Nixl)
	}
	parts := []string{s}
	multi := false
	if rest, ok := strings.CutPrefix(s, "multi:"); ok {
		parts = strings.Split(rest, "+")
		multi = true
	}
	var c Connector
	for _, p := range parts {
		k := ConnectorKind(strings.TrimSpace(p))
		switch k {
		case Nixl, NixlPush, Offloading, SimpleOffload:
			c.Kinds = append(c.Kinds, k)
		default:
			return Connector{}, fmt.Errorf("xfer: --connector %q: unknown connector %q (want nixl, nixl-push, offloading, simple-cpu-offload or multi:a+b)", s, p)
		}
	}
	if multi && len(c.Kinds) < 1 {
		return Connector{}, fmt.Errorf("xfer: --connector %q: a MultiConnector wraps at least one connector", s)
	}
	return c, nil
}

func (c Connector) String() string {
	if len(c.Kinds) == 1 {
		return string(c.Kinds[0])
	}
	var s []string
	for _, k := range c.Kinds {
		s = append(s, string(k))
	}
	return "multi:" + strings.Join(s, "+")
}

// NeedsMatchingGroups reports whether a connector asks for one KV cache
// group plan on both sides, which the group-pair profile answers by
// planning TP-invariantly: NixlConnector only for MLA models (its MLA path
// reads one whole replicated block); NixlPushConnector always (a
// pipeline-parallel push producer routes layers by name); the CPU
// offloading connectors never (their KV does not leave the engine); a
// MultiConnector if any connector it wraps does. Whether a peer whose plan
// still differs is refused is the handshake's business: in the group-pair
// profile only MLA and pipeline-parallel push producers are; in a release
// or main, every NIXL transfer needs the same plan.
func (c Connector) NeedsMatchingGroups(m *model.Model) bool {
	for _, k := range c.Kinds {
		switch k {
		case Nixl:
			if m.HasKind(model.MLA) {
				return true
			}
		case NixlPush:
			return true
		}
	}
	return false
}

// Transport is the NIXL connector that moves KV between P and D, if any.
func (c Connector) Transport() (ConnectorKind, bool) {
	for _, k := range c.Kinds {
		if k == Nixl || k == NixlPush {
			return k, true
		}
	}
	return "", false
}
