package xfer

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// This file is the preflight of two running engines: what their NIXL side
// channels (and, where scraped, vllm:cache_config_info) advertise, judged
// on its own, and held against kvscope's plan of each side. Reading the
// side channel is the caller's (agent/watch); this file only compares.

// Advertised is what one TP rank of a running engine sends on its NIXL
// side channel, as far as the preflight reads it. A value the engine does
// not send is empty (or 0, or nil).
type Advertised struct {
	Rank       int    `json:"rank"`
	EngineID   string `json:"engine_id,omitempty"`
	CompatHash string `json:"compatibility_hash,omitempty"`
	// Handshake is the lowest NIXL_CONNECTOR_VERSION whose metadata has
	// every member the rank sent, a lower bound: versions that add no
	// member look like the one before (0: the bare metadata of a release
	// before version 1). HandshakeFrom is the member that decided it and
	// Releases the profiled vLLM releases whose handshake has it.
	Handshake     int      `json:"nixl_connector_version_at_least"`
	HandshakeFrom string   `json:"nixl_connector_version_from,omitempty"`
	Releases      []string `json:"releases,omitempty"`
	BlockSize     int      `json:"block_size"`
	NumBlocks     int64    `json:"num_blocks"`
	Regions       int      `json:"regions"`
	BlockLens     []int64  `json:"block_lens"`
	Layout        string   `json:"kv_cache_layout,omitempty"`
	Backend       string   `json:"attn_backend,omitempty"`
	// SSMSizes are one state layer's conv and SSM bytes on the rank
	// (version 4 on); nil when not sent.
	SSMSizes []int64 `json:"ssm_sizes,omitempty"`
	// Members are the layer names of each region (version 12 on); nil
	// when not sent.
	Members [][]string `json:"region_members,omitempty"`
}

// Observed is one running engine as read: where its side channel is, each
// rank's answer (rank 0 first) and, when scraped, its
// vllm:cache_config_info labels.
type Observed struct {
	Side  Side         `json:"side"`
	Addr  string       `json:"side_channel"`
	Ranks []Advertised `json:"ranks"`
	// CacheConfig is vllm:cache_config_info's labels (block_size,
	// num_gpu_blocks, cache_dtype, ...) read from CacheSource; nil when
	// not scraped.
	CacheConfig map[string]string `json:"cache_config_info,omitempty"`
	CacheSource string            `json:"cache_config_source,omitempty"`
}

// Difference is one value a running engine advertises that is not what
// was expected of it: kvscope's plan of the side, or (From "rank 0") the
// same engine's rank 0.
type Difference struct {
	Side     Side   `json:"side"`
	Field    string `json:"field"` // as vLLM names it: block_size, num_blocks, block_lens, ...
	Observed string `json:"observed"`
	Source   string `json:"source"` // where Observed was read
	Expected string `json:"expected"`
	From     string `json:"expected_from"` // "kvscope's plan" or "rank 0"
	// Rule is how vLLM treats the value (Hashed, Validated or Free): a
	// Free difference leaves kvscope's transfer as it is.
	Rule string `json:"rule"`
	Note string `json:"note,omitempty"`
}

// The sources a Difference expects from.
const (
	FromPlan  = "kvscope's plan"
	FromRank0 = "rank 0"
)

// ObservedPreflight is the preflight of two running engines.
type ObservedPreflight struct {
	// Verdict is "ok" (nothing advertised refuses the handshake and the
	// engines run kvscope's plans, whose preflight passes), "rejected"
	// (what they advertise refuses it, or they run kvscope's plans and
	// those are refused) or "unverified" (nothing advertised refuses it,
	// but the engines differ from kvscope's plans in values the transfer
	// depends on, so kvscope's transfer is not theirs).
	Verdict  string `json:"verdict"`
	Sentence string `json:"sentence"`
	// P and D are the facts as advertised, Facets them side by side.
	P      Facts   `json:"p"`
	D      Facts   `json:"d"`
	Facets []Facet `json:"facets"`
	// Rejection is the first refusal of what the engines advertise (or,
	// when they run kvscope's plans, the plans' refusal).
	Rejection *Rejection `json:"rejection,omitempty"`
	// Differences are each side against kvscope's plan of it, and each
	// rank against its engine's rank 0.
	Differences []Difference `json:"differences"`
	// AsPlanned: the engines advertise what kvscope plans for them, up to
	// Free values, so kvscope's preflight of the plans holds for them.
	AsPlanned bool `json:"as_planned"`
	// Inferred lists what the verdict infers rather than reads from vLLM.
	Inferred []string `json:"inferred,omitempty"`
}

// Facts folds an engine's observation into the handshake's values, as
// rank 0 advertises them (Observed set; TP is the number of ranks read).
func (o Observed) Facts() Facts {
	f := Facts{Side: o.Side, Observed: true, TP: len(o.Ranks)}
	if len(o.Ranks) > 0 {
		r := o.Ranks[0]
		f.Handshake, f.CompatHash, f.BlockSize, f.NumBlocks, f.Regions = r.Handshake, r.CompatHash, r.BlockSize, r.NumBlocks, r.Regions
		f.KVCacheLayout, f.Backend, f.Releases = r.Layout, r.Backend, r.Releases
		if len(r.SSMSizes) == 2 && (r.SSMSizes[0] != 0 || r.SSMSizes[1] != 0) {
			f.StateLayout = fmt.Sprintf("conv %s + ssm %s B/layer", plan.Commas(r.SSMSizes[0]), plan.Commas(r.SSMSizes[1]))
		}
	}
	f.KVCacheDType = o.CacheConfig["cache_dtype"]
	if v := o.CacheConfig["mamba_cache_mode"]; v != "" && f.StateLayout != "" {
		f.StateLayout += ", mamba_cache_mode " + v
	}
	return f
}

// handshakeText is a side's handshake version as CompareFacts prints it.
func handshakeText(f Facts) string {
	if !f.Observed {
		if f.Handshake == 0 {
			return ""
		}
		return strconv.Itoa(f.Handshake)
	}
	s := fmt.Sprintf("%d or later", f.Handshake)
	if f.Handshake == 0 {
		s = "none (the bare metadata of a release before version 1)"
	}
	switch n := len(f.Releases); {
	case n == 1:
		s += " (as vLLM " + f.Releases[0] + " sends it)"
	case n > 1:
		s += fmt.Sprintf(" (as vLLM %s to %s send it)", f.Releases[0], f.Releases[n-1])
	}
	return s
}

// rankValues are the values of one rank the preflight compares, by field.
func rankValues(a Advertised) [][2]string {
	v := [][2]string{
		{"engine_id", a.EngineID},
		{"compatibility_hash", a.CompatHash},
		{"nixl_connector_version", strconv.Itoa(a.Handshake)},
		{"block_size", strconv.Itoa(a.BlockSize)},
		{"num_blocks", strconv.FormatInt(a.NumBlocks, 10)},
		{"regions", strconv.Itoa(a.Regions)},
		{"kv_cache_layout", a.Layout},
		{"attn_backend_name", a.Backend},
	}
	if a.SSMSizes != nil {
		v = append(v, [2]string{"ssm_sizes", ListText(a.SSMSizes)})
	}
	return v
}

// Inconsistent lists where a rank of the engine advertises another value
// than its rank 0 (one engine's ranks share their identity, hash, version,
// block size, block count, region count, layout and backend).
func (o Observed) Inconsistent() []Difference {
	var out []Difference
	if len(o.Ranks) < 2 {
		return nil
	}
	base := rankValues(o.Ranks[0])
	for _, r := range o.Ranks[1:] {
		for i, v := range rankValues(r) {
			if i >= len(base) || base[i][0] != v[0] || base[i][1] == v[1] {
				continue
			}
			out = append(out, Difference{Side: o.Side, Field: v[0], Observed: orUnknown(v[1]), Source: fmt.Sprintf("side channel %s rank %d", o.Addr, r.Rank),
				Expected: orUnknown(base[i][1]), From: FromRank0, Rule: Validated, Note: "one engine's ranks advertise one value"})
		}
	}
	return out
}

// DiffObserved holds a running engine against kvscope's plan of its side:
// each rank's block size, block count, regions, block lengths, layout,
// state sizes and region members against the metadata kvscope builds for
// that rank, the handshake version its members imply against the
// profile's, and vllm:cache_config_info's block size, block count and KV
// cache dtype against the plan. Ranks that differ alike are one
// Difference. The compatibility hash is not compared: kvscope's is a
// stand-in digest, not vLLM's SHA-256. Region members are compared by
// layer number (kvscope names layers L<n>, vLLM by module path,
// model.layers.<n>.self_attn.attn).
func (r *PD) DiffObserved(o Observed) []Difference {
	pp, dp := r.UsedPlans()
	p, mds := pp, []Metadata(nil)
	if r.handshake != nil {
		mds = r.handshake.P
	}
	if o.Side == D {
		p = dp
		if r.handshake != nil {
			mds = r.handshake.D
		}
	}
	type key struct{ field, observed, expected, rule, note string }
	var order []key
	ranks := map[key][]int{}
	add := func(rank int, field, observed, expected, rule, note string) {
		if observed == expected {
			return
		}
		k := key{field, observed, expected, rule, note}
		if _, ok := ranks[k]; !ok {
			order = append(order, k)
		}
		ranks[k] = append(ranks[k], rank)
	}
	proto := p.Profile.Handshake()
	wantVersion, _ := vllm.VersionOfMembers(proto.Members, proto.Wrapped)
	for i, a := range o.Ranks {
		if i == 0 {
			observed := fmt.Sprintf("v%d or later", a.Handshake)
			if a.HandshakeFrom != "" {
				observed += " (from " + a.HandshakeFrom + ")"
			}
			expected := fmt.Sprintf("v%d or later (%s speaks v%d)", wantVersion, p.Profile.Label, proto.Version)
			if a.Handshake != wantVersion {
				add(a.Rank, "nixl_connector_version", observed, expected, Hashed, "the members sent imply the version; give --vllm-version for the engines' release")
			}
			if a.Backend != "" {
				add(a.Rank, "attn_backend_name", a.Backend, p.Backend, Hashed, "")
			}
		}
		add(a.Rank, "block_size", strconv.Itoa(a.BlockSize), strconv.Itoa(p.BlockSize), Validated, "")
		add(a.Rank, "num_blocks", strconv.FormatInt(a.NumBlocks, 10), strconv.FormatInt(p.NumBlocks, 10), Free,
			"capacity: kvscope plans it from the KV cache memory it is given (--kv-cache-memory-bytes)")
		if a.Rank < 0 || a.Rank >= len(mds) {
			continue
		}
		md := mds[a.Rank]
		add(a.Rank, "regions", strconv.Itoa(a.Regions), strconv.Itoa(len(md.BlockLens)), Validated, "")
		if len(a.BlockLens) != len(md.BlockLens) {
			add(a.Rank, "block_lens", ListText(a.BlockLens), ListText(md.BlockLens), Validated, "bytes per block of each region")
		} else if i := firstDiff(a.BlockLens, md.BlockLens); i >= 0 {
			add(a.Rank, fmt.Sprintf("block_lens[%d]", i), strconv.FormatInt(a.BlockLens[i], 10), strconv.FormatInt(md.BlockLens[i], 10), Validated,
				"bytes per block of the first region that differs")
		}
		if a.Layout != "" {
			add(a.Rank, "kv_cache_layout", a.Layout, md.KVCacheLayout, Validated, "")
		}
		if a.SSMSizes != nil {
			add(a.Rank, "ssm_sizes", ListText(a.SSMSizes), ListText(md.SSMSizes[:]), Validated, "one state layer's conv and SSM bytes on the rank")
		}
		if a.Members != nil {
			planned := md.MemberNames
			if planned == nil && md.Members != nil {
				for _, ms := range md.Members {
					var names []string
					for _, m := range ms {
						names = append(names, m.Layer)
					}
					planned = append(planned, names)
				}
			}
			if planned != nil {
				for i := range max(len(a.Members), len(planned)) {
					var got, want []string
					if i < len(a.Members) {
						got = a.Members[i]
					}
					if i < len(planned) {
						want = planned[i]
					}
					if !SameLayers(got, want) {
						add(a.Rank, fmt.Sprintf("region_members[%d]", i), ListText(got), ListText(want), Validated, "compared by layer number")
						break // one region says enough; the rest usually follow
					}
				}
			}
		}
	}
	var out []Difference
	for _, k := range order {
		out = append(out, Difference{Side: o.Side, Field: k.field, Observed: k.observed, Source: "side channel " + o.Addr + " " + rankList(ranks[k]),
			Expected: k.expected, From: FromPlan, Rule: k.rule, Note: k.note})
	}
	return append(out, r.diffCacheConfig(o, p)...)
}

// diffCacheConfig holds vllm:cache_config_info against the plan.
func (r *PD) diffCacheConfig(o Observed, p *plan.Plan) []Difference {
	if o.CacheConfig == nil {
		return nil
	}
	dtype := p.Engine.KVCacheDType
	if dtype == "" {
		dtype = "auto"
	}
	var out []Difference
	for _, c := range []struct{ field, expected, rule, note string }{
		{"block_size", strconv.Itoa(p.BlockSize), Validated, ""},
		{"num_gpu_blocks", strconv.FormatInt(p.NumBlocks, 10), Free, "capacity: kvscope plans it from the KV cache memory it is given (--kv-cache-memory-bytes)"},
		{"cache_dtype", dtype, Hashed, ""},
	} {
		if v, ok := o.CacheConfig[c.field]; ok && v != c.expected {
			out = append(out, Difference{Side: o.Side, Field: c.field, Observed: v, Source: "vllm:cache_config_info " + o.CacheSource,
				Expected: c.expected, From: FromPlan, Rule: c.rule, Note: c.note})
		}
	}
	return out
}

// PreflightObserved is the preflight of two running engines: a verdict on
// what they advertise alone (the rules of §7 of vLLM's NixlConnector that
// the advertised values decide: payload version, compatibility hash, TP
// ratio, block sizes, layouts, region counts, P's block counts, state
// sizes), their values side by side, and each side held against kvscope's
// plan. Where both engines advertise what kvscope plans (up to Free
// values), the plans' preflight (r.Preflight) holds for them and decides.
func (r *PD) PreflightObserved(p, d Observed) *ObservedPreflight {
	op := &ObservedPreflight{P: p.Facts(), D: d.Facts()}
	op.Facets = CompareFacts(op.P, op.D)
	op.Differences = append(append(append(p.Inconsistent(), d.Inconsistent()...), r.DiffObserved(p)...), r.DiffObserved(d)...)
	op.AsPlanned = true
	var off []string
	for _, df := range op.Differences {
		if df.From == FromPlan && df.Rule != Free {
			op.AsPlanned = false
			if !slices.Contains(off, string(df.Side)+" "+df.Field) {
				off = append(off, string(df.Side)+" "+df.Field)
			}
		}
	}
	who := func(f Facts) string {
		hs := fmt.Sprintf("handshake v%d or later", f.Handshake)
		if f.Handshake == 0 {
			hs = "bare metadata"
		}
		return fmt.Sprintf("%s (%s, TP %d, block %d)", f.Side, hs, f.TP, f.BlockSize)
	}
	pair := who(op.P) + " and " + who(op.D)
	rej, inferred := r.judgeObserved(p, d, op.P, op.D)
	op.Inferred = inferred
	planned := r.Preflight
	switch {
	case rej != nil:
		op.Verdict, op.Rejection = "rejected", rej
		op.Sentence = fmt.Sprintf("%s will not transfer: %s (rule %s, %s). vLLM refuses it %s. Fix: %s.", pair, rej.Detail, rej.Rule, rej.Side, rej.When, rej.Fix)
	case op.AsPlanned && planned != nil:
		op.Verdict, op.Rejection = planned.Verdict, planned.Rejection
		if op.Verdict == "no-transfer" {
			op.Verdict = "ok"
		}
		op.Sentence = fmt.Sprintf("%s advertise what kvscope plans for them, so kvscope's preflight holds: %s", pair, planned.Sentence)
	default:
		op.Verdict = "unverified"
		op.Sentence = fmt.Sprintf("%s advertise nothing that refuses the handshake (%s), but they differ from kvscope's plans in %s: kvscope's transfer is for the plans, not for these engines; plan with their flags (--vllm-version, --block-size, the model) to see theirs.",
			pair, r.agreements(op.P, op.D), strings.Join(off, ", "))
	}
	return op
}

// agreements says in a few words what the engines agree on.
func (r *PD) agreements(p, d Facts) string {
	var parts []string
	if p.CompatHash != "" && p.CompatHash == d.CompatHash {
		parts = append(parts, "the compatibility hashes agree")
	} else if p.CompatHash == "" && d.CompatHash == "" {
		parts = append(parts, "no compatibility hash (before version 1)")
	}
	parts = append(parts, fmt.Sprintf("tp_ratio %d", TPRatio(p.TP, d.TP)))
	if p.BlockSize == d.BlockSize {
		parts = append(parts, fmt.Sprintf("blocks of %d tokens on both", p.BlockSize))
	} else if p.BlockSize > 0 && d.BlockSize%p.BlockSize == 0 {
		parts = append(parts, fmt.Sprintf("D's blocks are %d of P's", d.BlockSize/p.BlockSize))
	}
	if p.KVCacheLayout != "" && p.KVCacheLayout == d.KVCacheLayout {
		parts = append(parts, p.KVCacheLayout+" on both")
	}
	return strings.Join(parts, ", ")
}

// judgeObserved is the first refusal of what the engines advertise, with
// the release's connector as the plans' profile names it (nil: none).
func (r *PD) judgeObserved(p, d Observed, pf, df Facts) (*Rejection, []string) {
	pp, _ := r.UsedPlans()
	prof, m := pp.Profile, r.setup.Model
	mode := modeOf(r.setup.Connector)
	reject := func(rule, side, detail, fix string) *Rejection {
		return &Rejection{Rule: rule, Side: side, Detail: detail, Fix: fix, When: WhenRefused}
	}
	for _, o := range []Observed{p, d} {
		ids := map[string]bool{}
		for _, a := range o.Ranks {
			ids[a.EngineID] = true
		}
		if len(ids) > 1 && o.Side == P {
			return reject("engine-id", "P", fmt.Sprintf("P's side channel %s answers for its ranks with %d engine ids; D checks each rank's engine_id against the one the request names", o.Addr, len(ids)),
				"point --p-side-channel at one engine's listener"), nil
		}
	}
	switch {
	case (pf.Handshake >= 1) != (df.Handshake >= 1):
		older := "P"
		if df.Handshake < 1 {
			older = "D"
		}
		return reject("handshake-payload", "P/D", fmt.Sprintf("%s sends the bare metadata of a release before NIXL_CONNECTOR_VERSION 1, the other side the wrapped payload of version %d or later: the decoder fails on it (a connector version mismatch)", older, max(pf.Handshake, df.Handshake)),
			"run P and D on one vLLM release"), nil
	case pf.CompatHash != "" && df.CompatHash != "" && pf.CompatHash != df.CompatHash:
		var why []string
		if pf.Handshake != df.Handshake {
			why = append(why, fmt.Sprintf("the handshake versions their members imply (v%d and v%d)", pf.Handshake, df.Handshake))
		}
		if pf.Backend != df.Backend && pf.Backend != "" && df.Backend != "" {
			why = append(why, fmt.Sprintf("the attention backends (%s and %s)", pf.Backend, df.Backend))
		}
		if pf.KVCacheDType != df.KVCacheDType && pf.KVCacheDType != "" && df.KVCacheDType != "" {
			why = append(why, fmt.Sprintf("the cache dtypes (%s and %s)", pf.KVCacheDType, df.KVCacheDType))
		}
		detail := fmt.Sprintf("P's compatibility hash %s differs from D's %s: the engines differ in what the hash covers (vLLM version, NIXL_CONNECTOR_VERSION, model, dtype, KV heads, head size, layers, attention backend, cache dtype, hybrid manager)", clip(pf.CompatHash), clip(df.CompatHash))
		if len(why) > 0 {
			detail += "; of what they advertise, " + strings.Join(why, ", ") + " differ"
		}
		return reject("compatibility-hash", "P/D", detail,
			"run P and D on one vLLM release with the same model, --dtype, --kv-cache-dtype and attention backend (vLLM's kv_connector_extra_config.enforce_handshake_compat=false skips the check)"), nil
	case TPRatio(pf.TP, df.TP) == 0:
		return reject("tp-ratio", "P/D", fmt.Sprintf("P TP %d and D TP %d: neither divides the other", pf.TP, df.TP), "choose TP sizes where one divides the other"), nil
	}
	if nb := p.Inconsistent(); len(nb) > 0 {
		for _, df := range nb {
			if df.Field == "num_blocks" {
				return reject("num-blocks", "P", fmt.Sprintf("P's %s advertises num_blocks %s, rank 0 %s: D requires one block count across a remote engine's ranks", df.Source, df.Observed, df.Expected),
					"restart P's ranks with one KV cache memory"), nil
			}
		}
	}
	if !prof.GroupPairs && pf.Regions != df.Regions && pf.Regions > 0 && df.Regions > 0 {
		return reject("region-count", "P/D", fmt.Sprintf("P registers %d regions per rank, D %d: D needs one remote base address per local region", pf.Regions, df.Regions),
			"run P and D with the same model, layout and hybrid manager setting"), nil
	}
	if pf.KVCacheLayout != "" && df.KVCacheLayout != "" && pf.KVCacheLayout != df.KVCacheLayout {
		return reject("kv-cache-layout", "P/D", fmt.Sprintf("P's KV cache layout is %s, D's %s", pf.KVCacheLayout, df.KVCacheLayout),
			"run both with one layout (NIXL asks for HND), or enable_permute_local_kv on D for P HND into D NHD"), nil
	}
	mla := m != nil && m.HasKind(model.MLA)
	if pf.TP != df.TP && !mla && pf.KVCacheLayout != "" && pf.KVCacheLayout != "HND" {
		return reject("kv-cache-layout", "P", fmt.Sprintf("P TP %d and D TP %d split heads, and P's layout is %s: head splitting needs contiguous heads", pf.TP, df.TP, pf.KVCacheLayout),
			"use HND on the prefill side"), nil
	}
	if pf.BlockSize != df.BlockSize && pf.BlockSize > 0 && df.BlockSize > 0 && !prof.GroupPairs {
		hybrid := m != nil && pp != nil && hybridManager(m, pp)
		fix := "give P and D one --block-size"
		switch {
		case df.BlockSize%pf.BlockSize != 0:
			return reject("block-size-ratio", "P/D", fmt.Sprintf("D's blocks of %d tokens are not a multiple of P's %d: vLLM requires D's block size divisible by P's", df.BlockSize, pf.BlockSize), fix), nil
		case !prof.BlockSizeRatio:
			return reject("block-size-ratio", "P/D", fmt.Sprintf("P's blocks of %d tokens and D's %d: %s's NixlConnector needs one block size (different block sizes came with #26759)", pf.BlockSize, df.BlockSize, prof.Label), fix), nil
		case mode == Push:
			return reject("block-size-ratio", "P/D", fmt.Sprintf("P's blocks of %d tokens and D's %d: the block_size_ratio path is the pulling NixlConnector's", pf.BlockSize, df.BlockSize), fix), nil
		case hybrid && !prof.HybridBlockSizes:
			return reject("block-size-ratio", "P/D", fmt.Sprintf("P's blocks of %d tokens and D's %d with the hybrid KV cache manager: %s does not support a different remote block size with it", pf.BlockSize, df.BlockSize, prof.Label), fix), nil
		case pf.TP > df.TP:
			return reject("block-size-ratio", "P/D", fmt.Sprintf("P's blocks of %d tokens and D's %d with P TP %d > D TP %d: different block sizes need P TP <= D TP", pf.BlockSize, df.BlockSize, pf.TP, df.TP), fix), nil
		case pf.StateLayout != "" || df.StateLayout != "":
			return reject("block-size-ratio", "P/D", fmt.Sprintf("P's blocks of %d tokens and D's %d with state layers: Mamba needs one block size", pf.BlockSize, df.BlockSize), fix), nil
		}
	}
	if len(p.Ranks) > 0 && len(d.Ranks) > 0 && len(p.Ranks[0].SSMSizes) == 2 && len(d.Ranks[0].SSMSizes) == 2 {
		ps, ds := p.Ranks[0].SSMSizes, d.Ranks[0].SSMSizes
		for i, what := range []string{"conv", "SSM"} {
			if ps[i]*int64(pf.TP) != ds[i]*int64(df.TP) {
				return reject("state-sizes", "P/D", fmt.Sprintf("P's state layer holds %s %s bytes per rank at TP %d, D's %s at TP %d: the model's state does not split alike (a different model or state dtype)",
						plan.Commas(ps[i]), what, pf.TP, plan.Commas(ds[i]), df.TP),
						"run P and D with the same model and --mamba-ssm-cache-dtype"),
					[]string{"state-sizes: kvscope expects one state layer's bytes per rank times TP to agree between P and D (inferred from the state being split over TP ranks)"}
			}
		}
	}
	return nil, nil
}

// firstDiff is the first index where a and b differ (-1: none).
func firstDiff(a, b []int64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// SameLayers reports whether two regions' members are the same layers,
// by layer number where both names carry one, else by name.
func SameLayers(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, okx := layerNumber(a[i])
		y, oky := layerNumber(b[i])
		if okx && oky {
			if x != y {
				return false
			}
		} else if a[i] != b[i] {
			return false
		}
	}
	return true
}

// layerNumber reads a layer's number from kvscope's name (L<n>) or vLLM's
// module path (…layers.<n>.…).
func layerNumber(name string) (int, bool) {
	if n, err := strconv.Atoi(strings.TrimPrefix(name, "L")); err == nil && strings.HasPrefix(name, "L") {
		return n, true
	}
	_, rest, ok := strings.Cut(name, "layers.")
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, ".")
	n, err := strconv.Atoi(digits)
	return n, err == nil
}

// ListText prints a list compactly: its first values and how many more.
func ListText[T any](v []T) string {
	const show = 6
	parts := make([]string, 0, show+1)
	for i, x := range v {
		if i == show {
			parts = append(parts, fmt.Sprintf("… %d more", len(v)-show))
			break
		}
		parts = append(parts, fmt.Sprint(x))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// rankList names ranks: "rank 0", "ranks 0, 1".
func rankList(ranks []int) string {
	if len(ranks) == 1 {
		return "rank " + strconv.Itoa(ranks[0])
	}
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	return "ranks " + strings.Join(s, ", ")
}

// clip shortens a hash for a sentence.
func clip(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}
