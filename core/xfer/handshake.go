package xfer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// HandshakeVersion is the metadata version kvscope's own agents speak
// (and the group-pair profile's): vLLM's version 12 members plus, per
// region member, its KV cache group, global head range and tokens per
// page. A release's handshake is the one its profile names
// (vllm.Profile.Handshake).
const HandshakeVersion = 15

// Metadata is what one rank advertises in the handshake.
type Metadata struct {
	Version       int      `json:"version"`
	EngineID      string   `json:"engine_id"`
	TPSize        int      `json:"tp_size"`
	TPRank        int      `json:"tp_rank"`
	BlockSize     int      `json:"block_size"`
	KVCacheLayout string   `json:"kv_cache_layout"` // always HND
	BlocksFirst   bool     `json:"blocks_first"`
	BaseAddrs     []uint64 `json:"kv_caches_base_addr"`
	BlockLens     []int64  `json:"block_lens"`
	NumBlocks     int64    `json:"num_blocks"`
	SSMSizes      [2]int64 `json:"ssm_sizes"` // conv bytes, SSM bytes of one state layer
	CompatHash    string   `json:"compatibility_hash,omitempty"`
	// Members is kvscope's version-15 region membership, per region;
	// MemberNames vLLM's version-12 region_members (layer names per
	// region). A handshake older than 12 has neither.
	Members     [][]Member `json:"region_members,omitempty"`
	MemberNames [][]string `json:"region_member_names,omitempty"`
}

// Member is one layer that uses a region, as version 15 advertises it.
type Member struct {
	Layer         string `json:"layer"`
	Group         int    `json:"group"`
	HeadLo        int    `json:"head_lo"` // global KV head (or channel) range on this rank
	HeadHi        int    `json:"head_hi"`
	TokensPerPage int    `json:"tokens_per_page"`
}

// Check is one handshake check and its outcome.
type Check struct {
	Rule   string `json:"rule"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Rejection says why a pair of engines cannot transfer: the rule, the side
// it concerns, what differs and what to change.
//
// A rule of a release's NixlConnector also says where it comes from:
// Since is the release whose connector accepts the pair (with Source, its
// pull request, and the evidence for that boundary), or Source alone
// names what keeps it refused in every release kvscope has read;
// VLLMError is vLLM's own error text where it is known.
type Rejection struct {
	Rule      string `json:"rule"`
	Side      string `json:"side"` // P, D or P/D
	Detail    string `json:"detail"`
	Fix       string `json:"fix"`
	Since     string `json:"accepted_from,omitempty"`
	Source    string `json:"source,omitempty"`
	Evidence  string `json:"evidence,omitempty"`
	VLLMError string `json:"vllm_error,omitempty"`
	// When says when vLLM raises it: WhenRefused for the handshake's
	// checks.
	When string `json:"when"`
}

func (r *Rejection) Error() string {
	s := fmt.Sprintf("rejected (%s, %s): %s; %s", r.Rule, r.Side, r.Detail, r.Fix)
	if r.VLLMError != "" {
		s += fmt.Sprintf(" (vLLM: %q)", r.VLLMError)
	}
	return s
}

// Handshake is both sides' metadata, the checks run on it, and whether the
// transfer can take vLLM's own (matched-plan) path. Protocol is the
// handshake of the engines' vLLM version: its NIXL_CONNECTOR_VERSION,
// members and hash inputs.
type Handshake struct {
	Protocol     vllm.Handshake `json:"protocol"`
	P            []Metadata     `json:"p"`
	D            []Metadata     `json:"d"`
	Checks       []Check        `json:"checks"`
	Rejection    *Rejection     `json:"rejection,omitempty"`
	Matched      bool           `json:"matched"`
	MatchReason  string         `json:"match_reason"`
	VLLMInferred []string       `json:"-"`
}

// MetadataOf is the version-15 metadata a rank advertises to kvscope's
// agents.
func MetadataOf(r *Registration) Metadata {
	hash := ""
	if r.plan != nil && r.model != nil {
		hash = compatHash(r.model, r.plan, kvscopeHandshake(), Pull)
	}
	return metadataOf(r, hash, HandshakeVersion)
}

// kvscopeHandshake is the protocol of kvscope's own agents.
func kvscopeHandshake() vllm.Handshake { return ownHandshake }

// ownHandshake is built once when the package loads and never modified
// (read-only data, like vllm's table).
var ownHandshake = vllm.For(vllm.Version{Line: vllm.Branch, Text: vllm.Branch}).Handshake()

// metadataOf is MetadataOf with the compatibility hash computed already
// (every rank of a side shares it), for a handshake of the given version:
// version 15 lists each region's members with their groups and heads,
// version 12 their names, older versions neither.
func metadataOf(r *Registration, hash string, version int) Metadata {
	engineID := "prefill"
	if r.Side == D {
		engineID = "decode"
	}
	md := Metadata{
		Version: version, EngineID: engineID, TPSize: r.TP, TPRank: r.Rank,
		KVCacheLayout: "HND", BlocksFirst: r.Layout == BlocksFirst, NumBlocks: r.NumBlocks,
	}
	if r.plan != nil && r.model != nil { // nil for a registration built by hand (benchmarks)
		md.BlockSize, md.CompatHash = r.plan.BlockSize, hash
	}
	md.BaseAddrs = make([]uint64, 0, len(r.Regions))
	md.BlockLens = make([]int64, 0, len(r.Regions))
	for _, reg := range r.Regions {
		md.BaseAddrs = append(md.BaseAddrs, reg.Base)
		md.BlockLens = append(md.BlockLens, reg.BlockLen)
	}
	seen := make([]bool, len(r.Regions)) // the regions a layer has listed itself in
	members, names := version >= HandshakeVersion, version >= 12 && version < HandshakeVersion
	if members {
		md.Members = make([][]Member, len(r.Regions))
	}
	if names {
		md.MemberNames = make([][]string, len(r.Regions))
	}
	for _, l := range r.Layers {
		clear(seen)
		for _, s := range l.Segments {
			if seen[s.Region] {
				continue
			}
			seen[s.Region] = true
			if names {
				md.MemberNames[s.Region] = append(md.MemberNames[s.Region], l.Name)
			}
			if members {
				md.Members[s.Region] = append(md.Members[s.Region], Member{Layer: l.Name, Group: l.Group, HeadLo: s.Lo, HeadHi: s.Hi, TokensPerPage: l.BlockSize})
			}
		}
		if l.Kind.IsState() && md.SSMSizes == [2]int64{} {
			var conv int64
			for _, s := range l.Segments {
				if s.Name != SegSSM {
					conv += s.Bytes()
				} else {
					md.SSMSizes = [2]int64{conv, s.Bytes()}
				}
			}
		}
	}
	return md
}

// compatHash stands for the compatibility hash of a handshake: a digest
// of the values of the inputs the engines' vLLM version hashes (model,
// dtypes, backend, KV cache dtype, vLLM version, and from version 7 the
// transfer mode), so that P and D disagree on it exactly where that
// version's hashes would. It is "" for a handshake without a hash (before
// version 1). kvscope's own protocol leaves out whether the hybrid
// manager is on: the group-pair profile transfers between different group
// plans.
func compatHash(m *model.Model, p *plan.Plan, h vllm.Handshake, mode Mode) string {
	if !h.Wrapped {
		return ""
	}
	b := make([]byte, 0, 256)
	for _, in := range h.HashInputs {
		b = append(b, in...)
		b = append(b, '=')
		switch in {
		case "vllm_version":
			b = append(b, p.VLLMVersion...)
		case "nixl_connector_version":
			b = strconv.AppendInt(b, int64(h.Version), 10)
		case "model":
			b = append(b, m.Name...)
		case "dtype":
			b = append(b, m.DType...)
		case "num_kv_heads", "head_size":
			if l, ok := m.TargetAttention(); ok {
				b = strconv.AppendInt(b, int64(l.KVHeads), 10)
				b = append(b, ' ')
				b = strconv.AppendInt(b, int64(l.HeadDim), 10)
			}
		case "num_hidden_layers":
			b = strconv.AppendInt(b, int64(m.HiddenLayers), 10)
		case "attn_backend_name":
			b = append(b, p.Backend...)
		case "cache_dtype":
			b = append(b, p.Engine.KVCacheDType...)
		case "is_hma_enabled":
			if !h.KvscopeOwn {
				b = strconv.AppendBool(b, !p.Engine.DisableHybrid)
			}
		case "speculative_config":
			drafts := 0 // the method and draft model; not num_speculative_tokens
			for _, l := range m.Layers {
				if l.Role != model.Target {
					drafts++
				}
			}
			b = strconv.AppendInt(b, int64(drafts), 10)
		case "transfer_mode":
			b = append(b, mode...)
		}
		b = append(b, '|')
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// newHandshake builds both sides' metadata and runs the checks. brief
// keeps of each rank's metadata only what the checks read (its identity,
// block size and compatibility hash): a count-only transfer's.
func newHandshake(m *model.Model, pRegs, dRegs []*Registration, c Connector, mode Mode, brief bool) *Handshake {
	proto := pRegs[0].plan.Profile.Handshake()
	hs := &Handshake{Protocol: proto, P: make([]Metadata, 0, len(pRegs)), D: make([]Metadata, 0, len(dRegs))}
	for _, side := range []struct {
		regs []*Registration
		md   *[]Metadata
	}{{pRegs, &hs.P}, {dRegs, &hs.D}} {
		hash := ""
		if r := side.regs[0]; r.plan != nil && r.model != nil {
			hash = compatHash(r.model, r.plan, proto, mode)
		}
		for _, r := range side.regs {
			if brief {
				md := Metadata{Version: proto.Version, TPSize: r.TP, TPRank: r.Rank, NumBlocks: r.NumBlocks, CompatHash: hash}
				if r.plan != nil {
					md.BlockSize = r.plan.BlockSize
				}
				*side.md = append(*side.md, md)
				continue
			}
			*side.md = append(*side.md, metadataOf(r, hash, proto.Version))
		}
	}
	pp, dp := pRegs[0].plan, dRegs[0].plan
	pTP, dTP := len(pRegs), len(dRegs)
	add := func(rule string, ok bool, detail string) { hs.Checks = append(hs.Checks, Check{rule, ok, detail}) }
	reject := func(rule, side, detail, fix string) *Rejection {
		add(rule, false, detail)
		if hs.Rejection != nil {
			return nil
		}
		hs.Rejection = &Rejection{Rule: rule, Side: side, Detail: detail, Fix: fix, When: WhenRefused}
		return hs.Rejection
	}

	prof := pp.Profile
	if pp.VLLMVersion != dp.VLLMVersion {
		reject("vllm-version", "P/D", fmt.Sprintf("P runs vLLM %s, D %s: the compatibility hash includes the version", pp.VLLMVersion, dp.VLLMVersion), "run P and D on one vLLM version")
	} else if !proto.Wrapped {
		add("compatibility-hash", true, fmt.Sprintf("%s's handshake has no compatibility hash (it came with NIXL_CONNECTOR_VERSION 1, #29503): nothing checked before the metadata", prof.Label))
	} else if hs.P[0].CompatHash == hs.D[0].CompatHash {
		add("compatibility-hash", true, fmt.Sprintf("version %d hash of %s agrees", proto.Version, strings.Join(proto.HashInputs, ", ")))
	} else {
		reject("compatibility-hash", "P/D", fmt.Sprintf("P hashes %s (backend %s, kv_cache_dtype %s), D %s (backend %s, kv_cache_dtype %s)",
			hs.P[0].CompatHash, pp.Backend, pp.Engine.KVCacheDType, hs.D[0].CompatHash, dp.Backend, dp.Engine.KVCacheDType),
			"run P and D with the same --kv-cache-dtype and attention backend")
	}
	if TPRatio(pTP, dTP) == 0 {
		reject("tp-ratio", "P/D", fmt.Sprintf("P TP %d and D TP %d: neither divides the other", pTP, dTP), "choose TP sizes where one divides the other")
	} else {
		add("tp-ratio", true, fmt.Sprintf("tp_ratio %d", TPRatio(pTP, dTP)))
	}
	rc := &ruleCase{m: m, pp: pp, dp: dp, pTP: pTP, dTP: dTP, mode: mode, hybrid: hybridManager(m, pp)}
	inferred := checkConnectorRules(hs, rc, reject, add)
	changes := plan.CountChanges(pp, dp)
	same := changes.SameLayout && changes.SameBlockSizes
	if prof.GroupPairs && m.HasKind(model.MLA) && !same {
		reject("mla-plan", "P/D", fmt.Sprintf("MLA layers move one whole replicated block from one P rank, so P and D need the same plan; %d layers differ (block %d vs %d)",
			changes.Changed, pp.BlockSize, dp.BlockSize), "give P and D the same --block-size and group plan")
	}
	if mode == Push && pp.Engine.PipelineParallelSize > 1 && !same {
		reject("pp-push-plan", "P", fmt.Sprintf("a pipeline-parallel push producer (P PP %d) routes layers by name into D's regions and cannot follow a different plan", pp.Engine.PipelineParallelSize),
			"use the TP-invariant plan on both engines, or pull")
	}
	hybridRatio := rc.hybrid && prof.HybridBlockSizes && pp.BlockSize != dp.BlockSize
	if !prof.GroupPairs && !same && changes.SameLayout && hybridRatio {
		reject("block-size-ratio", "P/D", fmt.Sprintf("%s's %s accepts a hybrid's D blocks of %d tokens against P's %d through its remote-granularity path (#49612); kvscope does not model that path's descriptors", prof.Label, connectorName(mode), dp.BlockSize, pp.BlockSize),
			"give P and D one --block-size, or plan with --vllm-version "+vllm.Branch+" to see the bytes per group pair")
	} else if !prof.GroupPairs && !same && changes.SameLayout && prof.BlockSizeRatio && mode == Pull && pp.BlockSize > 0 && dp.BlockSize%pp.BlockSize == 0 && dp.BlockSize > pp.BlockSize {
		reject("block-size-ratio", "P/D", fmt.Sprintf("%s's NixlConnector accepts D blocks of %d tokens against P's %d through its block_size_ratio path (#26759); kvscope does not model that path's descriptors", prof.Label, dp.BlockSize, pp.BlockSize),
			"give P and D one --block-size, or plan with --vllm-version "+vllm.Branch+" to see the bytes per group pair")
	} else if !prof.GroupPairs && !same {
		what := fmt.Sprintf("%s's %s needs P and D to use one KV cache group plan", prof.Label, connectorName(mode))
		if mode == Push {
			what = fmt.Sprintf("%s's NixlPushConnector raises on different producer and consumer cache-group layouts", prof.Label)
		}
		reject("matching-groups", "P/D", fmt.Sprintf("%s; P plans %d groups (block %d), D %d (block %d), %d layers change group, slot or block size",
			what, pp.NumGroups, pp.BlockSize, dp.NumGroups, dp.BlockSize, changes.Changed),
			"give P and D settings that plan alike (the same --block-size, --max-num-batched-tokens and TP-dependent sizes), or plan with --vllm-version "+vllm.Branch+" to move layers per group pair")
	}
	if why := layersCompatible(pRegs[0], dRegs[0]); why != "" {
		reject("layer-shapes", "P/D", why, "run P and D with the same model, draft, dtypes and --num-speculative-tokens")
	} else {
		add("layer-shapes", true, "every D layer exists on P with the same head size, dtype and state shape")
	}
	if hs.Rejection != nil {
		return hs
	}
	hs.Matched, hs.MatchReason, hs.VLLMInferred = matchedPath(m, pRegs, dRegs, changes)
	hs.VLLMInferred = append(inferred, hs.VLLMInferred...)
	if !hs.Matched && !prof.GroupPairs {
		reject("vllm-path", "P/D", fmt.Sprintf("%s moves KV only on its own path, which does not fit: %s", prof.Label, hs.MatchReason),
			"plan with --vllm-version "+vllm.Branch+" to move layers per group pair")
		return hs
	}
	add("vllm-path", true, hs.MatchReason)
	return hs
}

// hybridManager reports whether the hybrid KV cache manager plans the
// model's layers as more than one kind of group (what vLLM calls HMA
// being required).
func hybridManager(m *model.Model, p *plan.Plan) bool {
	if p.Engine.DisableHybrid {
		return false
	}
	kinds := map[string]bool{}
	for _, l := range m.Layers {
		if l.OwnsKV() {
			kinds[string(l.Kind)] = true
		}
	}
	return len(kinds) > 1
}

func connectorName(mode Mode) string {
	if mode == Push {
		return "NixlPushConnector"
	}
	return "NixlConnector"
}

// layersCompatible reports why P cannot supply D's layers, or "".
func layersCompatible(p, d *Registration) string {
	for _, dl := range d.Layers {
		pl, ok := p.Layer(dl.Name)
		if !ok {
			return fmt.Sprintf("layer %s has a KV cache on D but not on P", dl.Name)
		}
		if pl.Kind.IsState() != dl.Kind.IsState() || (pl.Kind == model.MLA) != (dl.Kind == model.MLA) {
			return fmt.Sprintf("layer %s is %s on P but %s on D", dl.Name, pl.Kind, dl.Kind)
		}
		if len(pl.Segments) != len(dl.Segments) {
			return fmt.Sprintf("layer %s has %d segments on P, %d on D", dl.Name, len(pl.Segments), len(dl.Segments))
		}
		for i, ds := range dl.Segments {
			ps := pl.Segments[i]
			if ds.Name != ps.Name || ds.RowBytes != ps.RowBytes && ds.IsAttention() || !ds.IsAttention() && ds.IndexBytes != ps.IndexBytes {
				return fmt.Sprintf("layer %s %s: P rows of %d B, D rows of %d B (dtype, head size or conv rows differ)", dl.Name, ds.Name, ps.RowBytes, ds.RowBytes)
			}
		}
	}
	return ""
}

// matchedPath decides whether vLLM's own path applies: the same groups,
// slots and block sizes on both sides, the same layout, no chunked local
// attention (kvscope does not model vLLM's chunked clipping), and vLLM's
// model-wide head mapping right for every layer on every D rank.
func matchedPath(m *model.Model, pRegs, dRegs []*Registration, changes plan.Changes) (bool, string, []string) {
	p0, d0 := pRegs[0], dRegs[0]
	switch {
	case !changes.SameLayout:
		return false, fmt.Sprintf("the plans differ: %d layers change group or slot", changes.Moved), nil
	case !changes.SameBlockSizes:
		return false, "the plans' pages hold different token counts", nil
	case p0.Layout != d0.Layout:
		return false, fmt.Sprintf("P is %s, D is %s", p0.Layout, d0.Layout), nil
	case len(p0.Regions) != len(d0.Regions):
		return false, "P and D register different region counts", nil
	}
	for _, l := range d0.Layers {
		if l.Kind == model.ChunkedLocal {
			return false, "chunked local attention moves per group pair (vLLM's clipping of chunked groups is not modelled)", nil
		}
	}
	kv, ok := modelKVHeads(m)
	if !ok {
		kv = 1
	}
	pTP, dTP := len(pRegs), len(dRegs)
	mla := m.HasKind(model.MLA)
	if pTP > dTP && pTP > kv && !mla {
		return false, fmt.Sprintf("vLLM refuses P TP %d > D TP %d with %d replicated KV heads", pTP, dTP, kv), nil
	}
	var inferred []string
	for j := range dRegs {
		for _, dl := range dRegs[j].Layers {
			for si, ds := range dl.Segments {
				pSeg := func(r int) Segment {
					pl, _ := pRegs[r].Layer(dl.Name)
					return pl.Segments[si]
				}
				mp := newVLLMMapping(kv, pTP, dTP, j, mla)
				if !ds.IsAttention() {
					mp = stateMapping(pTP, dTP, j)
					if pTP != dTP && len(inferred) == 0 {
						inferred = append(inferred, "state descriptors across TP sizes follow kvscope's reading of vLLM PR #36957 (position-based split of each conv sub-projection and the SSM state)")
					}
				}
				want, err := truePieces(ds, pSeg, pTP, dTP, j)
				if err != nil {
					return false, err.Error(), nil
				}
				if !slices.Equal(vllmPieces(mp, ds), want) {
					return false, fmt.Sprintf("vLLM's model-wide head mapping (%d KV heads) does not fit layer %s (%d KV heads) on D rank %d", kv, dl.Name, headsOf(dl), j), nil
				}
			}
		}
	}
	return true, "matched plans that vLLM's model-wide head mapping fits: vLLM's own descriptor lists", inferred
}

func headsOf(l LayerReg) int { return l.kvHeads }

// Summary is a one-line description of the handshake for logs.
func (h *Handshake) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d (%s): P %d ranks x %d regions, D %d ranks x %d regions", h.Protocol.Version, h.Protocol.Describe(), len(h.P), len(h.P[0].BaseAddrs), len(h.D), len(h.D[0].BaseAddrs))
	if h.Rejection != nil {
		fmt.Fprintf(&b, "; rejected: %s", h.Rejection.Rule)
	} else if h.Matched {
		b.WriteString("; vLLM path")
	} else {
		b.WriteString("; group-pair path")
	}
	return b.String()
}
