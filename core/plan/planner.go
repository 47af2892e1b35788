package plan

import (
	"errors"
	"sync"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/vllm"
)

// Planner plans one model for many engines. It does once what does not
// change between engines: it looks each vLLM version's profile up once,
// and computes the per-rank specs, the page unification and the buckets
// once for each combination of the settings that shape them (tensor
// parallel size, block size, KV cache and SSM dtypes, mamba cache mode,
// speculative tokens, attention backend, hybrid manager and bucket merge;
// and max model len for a model with state layers in mamba cache mode
// none). What is left for each engine (the limits, the group size, the
// strided split, the memory pool and the start-up check) is a few integer
// operations per distinct layer spec, which Summary runs without
// allocating.
//
// A Planner is safe for concurrent use. Its cache grows with each
// distinct combination of the settings above, which a search over one
// model's engines keeps small; past 4096 prepared ranks (256 version
// strings, 64 group sizes of one rank) it starts over.
type Planner struct {
	m        *model.Model
	state    bool // the model has state layers (prefix caching and the mamba cache mode depend on it)
	mambaAll bool // the model supports Mamba prefix caching
	drafts   bool // the model carries draft or MTP layers

	// What WithLayout and FromSpecs change in the one path (unexported:
	// their Planners plan once and are never handed out).
	fixed     *Layout            // a grouping imposed instead of the buckets and the selector's split
	fromSpecs bool               // plan specs as given, not the model's (FromSpecs)
	specs     []kvspec.LayerSpec // those specs

	// The cache's bounds: a Planner fed arbitrary engines (a long-lived
	// server) empties a map that reaches its bound before adding to it.
	// Entries already handed out stay valid: they are never modified.
	maxRanks, maxProfiles, maxSplits int

	mu       sync.RWMutex
	profiles map[string]*profileEntry
	ranks    map[rankKey]*rankEntry
	stages   map[int][]int // pipeline size -> stage of each KV layer
}

// profileEntry is one --vllm-version as given: its profile, or why there
// is none.
type profileEntry struct {
	prof      vllm.Profile
	refused   string // the VersionError's reason when the version has no profile
	paddingBy string // the inferred reason of the padding-bytes selector in this profile
}

// rankKey is what shapes a rank's specs, unification and buckets.
type rankKey struct {
	prof                                                          *profileEntry
	tensorParallelSize, blockSize, specTokens                     int
	kvCacheDType, ssmCacheDType, mambaCacheMode, attentionBackend string
	maxModelLen                                                   int // only where it sizes state blocks (mode none)
	disableHybrid                                                 bool
	merge                                                         BucketMerge
}

// NewPlanner prepares m for planning. m must already carry any draft or
// MTP layers, and must not change while the Planner is in use.
func NewPlanner(m *model.Model) (*Planner, error) {
	if m == nil {
		return nil, errors.New("plan: no model")
	}
	return newPlanner(m), nil
}

// newPlanner is NewPlanner for a model known to be there (New's,
// WithLayout's and FromSpecs' Planners, used once).
func newPlanner(m *model.Model) *Planner {
	return &Planner{
		m:        m,
		state:    hasState(m),
		mambaAll: m.MambaAll == "supported",
		drafts:   hasRole(m, model.Draft, model.MTP),
		profiles: map[string]*profileEntry{},
		ranks:    map[rankKey]*rankEntry{},
		stages:   map[int][]int{},

		maxRanks:    4096,
		maxProfiles: 256,
		maxSplits:   64,
	}
}

// ForgetRanks empties the Planner's cache of prepared ranks (what it keeps
// per TP size, block size and dtype), keeping what it keeps per model and
// version: a search that moves from block size to block size drops the
// ranks it will not meet again and keeps its heap small. Plans already
// handed out stay valid.
func (pl *Planner) ForgetRanks() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	clear(pl.ranks)
}

// Model returns the model the Planner plans.
func (pl *Planner) Model() *model.Model { return pl.m }

// Plan plans the model for one engine, exactly as New does: the same plan
// and the same error (a *RefusalError comes with its plan, as from New).
// The plan is the caller's own: later calls never change it. It shares
// read-only parts with the Planner, which callers must not modify: the
// state shapes inside its layer and group specs, and its profile's rule
// table and hook map. An error about the engine's rank (a tensor-parallel
// size or dtype the model refuses) is one value for every call.
func (pl *Planner) Plan(e Engine) (*Plan, error) {
	var c call
	if err := pl.run(&c, e); err != nil {
		return nil, err
	}
	p := new(Plan)
	c.plan(p)
	return p, c.refusal
}

// PlanInto plans e into dst, as Plan does, reusing the arrays of the plan
// dst held (its layers, groups, stages and strings) where they are large
// enough: planning engine after engine into one Plan allocates only its
// two capacity log lines. What dst held before is overwritten, so nothing
// may keep its slices. On an error other than a *RefusalError dst is left
// as it was; a *RefusalError comes with the refused plan in dst.
func (pl *Planner) PlanInto(e Engine, dst *Plan) error {
	var c call
	if err := pl.run(&c, e); err != nil {
		return err
	}
	c.plan(dst)
	return c.refusal
}

// Summary computes the figures Plan would give for one engine without
// building the plan: no layers, groups or log lines. Once the Planner's
// cache holds the engine's rank it allocates nothing, unless it returns
// an error. It returns the same errors as Plan; a *RefusalError comes
// with the summary of the refused plan. Plan.Summary gives the same
// figures from a plan.
func (pl *Planner) Summary(e Engine) (Summary, error) {
	var c call
	if err := pl.run(&c, e); err != nil {
		return Summary{}, err
	}
	return c.sum, c.refusal
}

// Summary is what a search over engines ranks them by: a plan's figures,
// named and computed as in Plan, without its layers, groups, stages and
// log lines.
type Summary struct {
	Engine                 Engine      `json:"engine"` // with defaults filled in
	BlockSize              int         `json:"block_size"`
	PageBytes              int64       `json:"page_size_bytes"`
	BytesPerBlock          int64       `json:"bytes_per_block"`
	NumGroups              int         `json:"num_groups"`
	GroupSize              int         `json:"group_size"`
	Slots                  int         `json:"slots"`
	PaddingSlots           int         `json:"padding_slots"`
	PaddingBytesPerRequest int64       `json:"padding_bytes_per_request"`
	NumBlocks              int64       `json:"num_blocks"`
	BlocksPerRequest       int64       `json:"blocks_per_request"`
	MaxConcurrency         float64     `json:"max_concurrency"`
	KVCacheTokens          int64       `json:"kv_cache_tokens"`
	CapacityTokens         int64       `json:"capacity_tokens"`
	Selector               Selector    `json:"selector"`
	Merge                  BucketMerge `json:"bucket_merge"`
	Dispatch               string      `json:"dispatch"`
	Inferred               bool        `json:"inferred"` // the plan follows an inferred rule (Plan.InferredReasons says which)
}

// Summary returns the plan's figures, as Planner.Summary computes them.
func (p *Plan) Summary() Summary {
	return Summary{
		Engine: p.Engine, BlockSize: p.BlockSize, PageBytes: p.PageBytes, BytesPerBlock: p.BytesPerBlock,
		NumGroups: p.NumGroups, GroupSize: p.GroupSize, Slots: p.Slots, PaddingSlots: p.PaddingSlots,
		PaddingBytesPerRequest: p.PaddingBytesPerRequest, NumBlocks: p.NumBlocks, BlocksPerRequest: p.BlocksPerRequest,
		MaxConcurrency: p.MaxConcurrency, KVCacheTokens: p.KVCacheTokens, CapacityTokens: p.CapacityTokens,
		Selector: p.Selector, Merge: p.Merge, Dispatch: p.Dispatch, Inferred: p.Inferred,
	}
}

// profile returns the entry of a --vllm-version, looking it up once.
func (pl *Planner) profile(version string) *profileEntry {
	pl.mu.RLock()
	pe := pl.profiles[version]
	pl.mu.RUnlock()
	if pe != nil {
		return pe
	}
	pe = &profileEntry{}
	prof, err := vllm.Lookup(version)
	if err != nil {
		pe.refused = err.(*vllm.VersionError).Reason
	} else {
		pe.prof = prof
		pe.paddingBy = paddingBytesReason(prof.Label)
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if old := pl.profiles[version]; old != nil {
		return old
	}
	if len(pl.profiles) >= pl.maxProfiles {
		clear(pl.profiles)
	}
	pl.profiles[version] = pe
	return pe
}

// rank returns the prepared rank of a resolved engine, preparing it once.
func (pl *Planner) rank(e *Engine, pe *profileEntry) *rankEntry {
	k := rankKey{
		prof: pe, tensorParallelSize: e.TensorParallelSize, blockSize: e.BlockSize, specTokens: e.NumSpeculativeTokens,
		kvCacheDType: e.KVCacheDType, ssmCacheDType: e.MambaSSMCacheDType, mambaCacheMode: e.MambaCacheMode, attentionBackend: e.AttentionBackend,
		disableHybrid: e.DisableHybrid, merge: e.merge(pe.prof),
	}
	if pl.state && e.MambaCacheMode == "none" {
		k.maxModelLen = e.MaxModelLen
	}
	pl.mu.RLock()
	r := pl.ranks[k]
	pl.mu.RUnlock()
	if r != nil {
		return r
	}
	r = pl.prepare(*e, &pe.prof, k.merge)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if old := pl.ranks[k]; old != nil {
		return old
	}
	if len(pl.ranks) >= pl.maxRanks {
		clear(pl.ranks)
	}
	pl.ranks[k] = r
	return r
}

// stagesOf returns the pipeline stage of each KV layer (in the order of
// the rank's specs), computing it once per pipeline size; nil at pipeline
// size 1 and for specs planned as given (one stage).
func (pl *Planner) stagesOf(pp int) []int {
	if pp <= 1 || pl.fromSpecs {
		return nil
	}
	pl.mu.RLock()
	st, ok := pl.stages[pp]
	pl.mu.RUnlock()
	if ok {
		return st
	}
	st = stagesOf(pl.m, pp)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.stages[pp] = st
	return st
}

// split returns what a plan materialises from a rank's buckets split by
// group size g, computing it once.
func (pl *Planner) split(r *rankEntry, g int) *split {
	pl.mu.RLock()
	sp := r.splits[g]
	pl.mu.RUnlock()
	if sp != nil {
		return sp
	}
	sp = r.newSplit(g)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if old := r.splits[g]; old != nil {
		return old
	}
	if len(r.splits) >= pl.maxSplits {
		clear(r.splits)
	}
	r.splits[g] = sp
	return sp
}
