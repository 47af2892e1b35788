package hub

import (
	"context"
	"fmt"

	"github.com/kvscope/kvscope/core/model"
)

// Models resolves a model name as --model and the API's "model" take it:
// a bundled name through the catalog, exactly as before, and anything
// else of the form org/name[@revision] through the Hub resolver. Bundled
// names never reach the cache or the network.
type Models struct {
	Catalog model.Catalog
	// Hub resolves ids that are not bundled; nil resolves bundled names
	// only.
	Hub *Resolver
}

// Lookup returns the config of ref, the name to show it under, and where
// it came from: nil for a bundled config.
func (m Models) Lookup(ctx context.Context, ref string) (name string, data []byte, src *Source, err error) {
	name, data, berr := m.Catalog.Lookup(ref)
	if berr == nil {
		return name, data, nil, nil
	}
	if m.Hub == nil || !LooksLikeID(ref) {
		return "", nil, nil, berr
	}
	data, s, err := m.Hub.Config(ctx, ref)
	if err != nil {
		return "", nil, nil, fmt.Errorf("%q is not bundled (see kvscope models), and from the Hub: %w", ref, err)
	}
	name = s.ID
	if s.Revision != "main" {
		name += "@" + s.Revision
	}
	return name, data, &s, nil
}
