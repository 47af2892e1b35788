package vllm

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Profile is what one vLLM version does wherever kvscope's numbers depend
// on it. Build one with For; the zero value is not a profile.
type Profile struct {
	Version Version `json:"-"`
	Name    string  `json:"name"`  // "0.28.0", "main" or "pr58207"
	Label   string  `json:"label"` // one line for headers

	// Selector is the group-size rule: SelectorMin (g = min L_j),
	// SelectorMinOrMax (g = max L_j when max < Threshold * min, else min),
	// or SelectorPaddingBytes (#58207).
	Selector  string  `json:"selector"`
	Threshold float64 `json:"selector_threshold,omitempty"`
	// LooseMerge buckets attention layers that agree on kind, block size,
	// page bytes and window whatever their head layout (inferred for the
	// branch).
	LooseMerge bool `json:"loose_bucket_merge"`
	// MergeBuckets lets specs that vLLM's merge accepts (full attention
	// differing only in a recorded window or chunk) share a bucket; before
	// it, buckets hold equal specs only.
	MergeBuckets bool `json:"merge_buckets"`

	// InFlightBatches: the sliding-window and chunked-local worst case
	// reserves max_num_batched_tokens times the batches in flight (#47728)
	// instead of max_num_batched_tokens once.
	InFlightBatches bool `json:"in_flight_batches"`
	// AsyncDefault is whether async scheduling is on by default, and
	// AsyncWithPP whether that default holds with pipeline parallelism.
	AsyncDefault bool `json:"async_scheduling_default"`
	AsyncWithPP  bool `json:"async_scheduling_with_pp"`
	// AsyncOffWithMambaPC: Mamba prefix caching (a cache mode other than
	// none) turns the async default off (vLLM 0.16 only).
	AsyncOffWithMambaPC bool `json:"async_off_with_mamba_prefix_caching"`

	// SingleStateDType: the Mamba state takes the KV cache dtype, one
	// dtype for conv and SSM (before --mamba-ssm-cache-dtype existed).
	SingleStateDType bool `json:"single_state_dtype"`
	// SSMHooks names the model families whose config hook resolves
	// --mamba-ssm-cache-dtype auto, and how (see SSMDType).
	SSMHooks map[string]string `json:"ssm_dtype_hooks"`

	// HybridPrefixCaching is prefix caching for attention + state models:
	// "forced-off", "opt-in" or "on" (the default).
	HybridPrefixCaching string `json:"hybrid_prefix_caching"`
	// PrefixMambaMode is the state cache mode prefix caching implies when
	// the user names none: "per-block" (one state per block, before the
	// mode flag existed), "all-or-align" (all for models that support Mamba
	// prefix caching, align otherwise) or "align".
	PrefixMambaMode string `json:"prefix_mamba_mode"`
	// SpecAlignsAll: prefix caching with speculative decoding picks align
	// even for models that support all (#40454, reverted by #41233).
	SpecAlignsAll bool `json:"spec_decode_aligns_all"`
	// MambaModeFlag is whether --mamba-cache-mode exists.
	MambaModeFlag bool `json:"mamba_cache_mode_flag"`
	// StateSpecBlocks: a state layer's worst case counts one block per
	// speculative token in modes none and align; AllSpecBlocks in mode all.
	StateSpecBlocks bool `json:"state_spec_blocks"`
	AllSpecBlocks   bool `json:"all_spec_blocks"`
	// GDNSpecRows and Mamba2SpecRows: speculative tokens add conv rows.
	GDNSpecRows    bool `json:"gdn_spec_conv_rows"`
	Mamba2SpecRows bool `json:"mamba2_spec_conv_rows"`

	// Align is the hybrid attention block-size alignment: Align16 (16
	// always), AlignBackend (the backend's kernel block: 16, 64 MLA, 128
	// CUTLASS MLA) or AlignBackendUser (max of that and --block-size).
	Align string `json:"hybrid_block_alignment"`
	// MLAHybridAlign128: an MLA + state hybrid aligns to at least 128.
	MLAHybridAlign128 bool `json:"mla_hybrid_align_128"`
	// PadPages: attention pages that do not divide the largest page are
	// padded (otherwise vLLM raises NotImplementedError).
	PadPages bool `json:"pad_non_dividing_pages"`
	// ExtraRetained: multi-layer MTP keeps num_speculative_tokens-1 extra
	// tokens in sliding windows.
	ExtraRetained bool `json:"extra_retained_tokens"`

	// KVSizeLine is how "GPU KV cache size: N tokens" is computed:
	// SizePerGroup (num_blocks // groups * smallest block size) or
	// SizeConcurrency (int(max concurrency * max_model_len)).
	KVSizeLine string `json:"kv_cache_size_line"`
	// Refusal is how the start-up check sizes one request of
	// max_model_len: RefusalLayers (the sum over layers, no padding),
	// RefusalGroup0 (the first group times the slots) or RefusalGroups
	// (every group, padding included).
	Refusal string `json:"refusal_needed"`
	// RefusalPerWorker: with pipeline parallelism each worker checks its
	// own stage; before, the whole model's groups against the smallest
	// worker's memory.
	RefusalPerWorker bool `json:"refusal_per_worker"`
	// RefusalOverride: a --num-gpu-blocks-override replaces the memory in
	// the check. NullBlock: the check holds back one block (the null block).
	RefusalOverride bool `json:"refusal_uses_override"`
	NullBlock       bool `json:"refusal_null_block"`
	// RefusalDocs adds the conserving-memory link; RefusalModelsTypo keeps
	// "models's" (fixed by #42479); RefusalRoundGiB prints GiB as Python's
	// round(x, 2) ("16.0") instead of "%.2f".
	RefusalDocs       bool `json:"refusal_docs_link"`
	RefusalModelsTypo bool `json:"refusal_models_typo"`
	RefusalRoundGiB   bool `json:"refusal_round_gib"`

	// GroupPairs: the NixlConnector and NixlPushConnector move layers per
	// pair of P and D cache groups, so P and D may plan differently
	// (except MLA, and pipeline-parallel push producers). Without it both
	// connectors need the same plan on P and D.
	GroupPairs bool `json:"group_pair_transfers"`
	// HMAWithConnector: the hybrid KV cache manager stays on with a KV
	// connector (before, --kv-transfer-config turned it off, so sliding
	// layers plan as full attention). StateConnector: the NixlConnector
	// moves Mamba/GDN state. PushConnector: NixlPushConnector exists.
	// BlockSizeRatio: the NixlConnector accepts a D block size that is a
	// whole multiple of P's (#26759).
	HMAWithConnector bool `json:"hma_with_connector"`
	StateConnector   bool `json:"nixl_state_layers"`
	PushConnector    bool `json:"nixl_push_connector"`
	BlockSizeRatio   bool `json:"nixl_block_size_ratio"`
	// TPInvariant: the branch plans P and D with one TP-invariant layout
	// when the connector needs matching groups (inferred).
	TPInvariant bool `json:"tp_invariant_plans"`

	// The NixlConnector's rules per model kind and setting (rules.go in
	// core/xfer applies them). PGreaterTP: P TP > D TP (#27274).
	// Mamba2HeteroTP: Mamba2 state between different TP sizes (#37635).
	// GDNConnector: gated-delta-net state moves, at any TP ratio (#41869).
	// Mamba1Connector: Mamba1 state moves (#45019). HybridMLAPGreaterTP:
	// an MLA + state hybrid with P TP > D TP (#49297). PushPP: a
	// pipeline-parallel push producer for models without the hybrid
	// manager (#45880); PushPPHybrid: also with attention groups of the
	// hybrid manager (#50494).
	PGreaterTP          bool `json:"nixl_p_tp_greater"`
	Mamba2HeteroTP      bool `json:"nixl_mamba2_hetero_tp"`
	GDNConnector        bool `json:"nixl_gdn"`
	Mamba1Connector     bool `json:"nixl_mamba1"`
	HybridMLAPGreaterTP bool `json:"nixl_hybrid_mla_p_tp_greater"`
	PushPP              bool `json:"nixl_push_pp"`
	// HybridMLA: an MLA + state hybrid moves at all (#49762).
	// NixlMambaPrefix: state moves with Mamba prefix caching (#42554).
	// HybridBlockSizes: a hybrid's P and D may differ in block size
	// (#49612), without Mamba prefix caching.
	HybridMLA        bool `json:"nixl_hybrid_mla"`
	NixlMambaPrefix  bool `json:"nixl_mamba_prefix_caching"`
	HybridBlockSizes bool `json:"nixl_hybrid_block_sizes"`
	// PushPrefixTail: with a D prefix hit, push moves the tail of P's
	// blocks (#48758); before, it trimmed the head.
	PushPrefixTail bool `json:"nixl_push_prefix_tail"`
	PushPPHybrid   bool `json:"nixl_push_pp_hybrid"`

	// NixlVersion is the NixlConnector's handshake metadata version
	// (NIXL_CONNECTOR_VERSION; 0 before it existed, 15 for kvscope's
	// group-pair protocol): see Handshake.
	NixlVersion int `json:"nixl_connector_version"`

	// Rules is the table row in force for each behaviour.
	Rules []Change `json:"rules"`

	handshake *Handshake // built by For
}

// Selector rules.
const (
	SelectorMin          = "min"
	SelectorMinOrMax     = "min-or-max"
	SelectorPaddingBytes = "padding-bytes"
)

// Alignment rules.
const (
	Align16          = "16"
	AlignBackend     = "backend"
	AlignBackendUser = "backend-or-block-size"
)

// Capacity line rules.
const (
	SizePerGroup    = "blocks-per-group"
	SizeConcurrency = "concurrency"
)

// Refusal rules.
const (
	RefusalLayers = "layers"
	RefusalGroup0 = "first-group"
	RefusalGroups = "all-groups"
)

// For builds the profile of a version: the base behaviour of 0.10.0 with
// every change of the table up to v applied in order.
func For(v Version) Profile {
	p := Profile{
		Version: v, Name: v.Name(),
		SSMHooks:            map[string]string{},
		HybridPrefixCaching: "forced-off",
	}
	// The newest row of a behaviour (and family) is the one in force:
	// rows come in version order, so a later row replaces an earlier one.
	in := make([]int, 0, 32) // table indices of the rules in force
	for i := range table {
		c := &table[i]
		if !c.holdsIn(v) {
			continue
		}
		c.apply(&p)
		replaced := false
		for k, j := range in {
			if table[j].Behaviour == c.Behaviour && table[j].Family == c.Family {
				in[k], replaced = i, true
				break
			}
		}
		if !replaced {
			in = append(in, i)
		}
	}
	slices.Sort(in)
	p.Rules = make([]Change, len(in))
	for k, i := range in {
		p.Rules[k] = table[i]
	}
	p.Label = label(v)
	h := buildHandshake(p)
	p.handshake = &h
	return p
}

// Inferred lists the rules of this profile whose release boundary kvscope
// inferred rather than read in vLLM's code at that version.
func (p Profile) Inferred() []string {
	out := []string{}
	if p.Version.Newer {
		out = append(out, NewerNote(p.Version))
	}
	if !p.Version.known() && !p.Version.Dev {
		out = append(out, fmt.Sprintf("vLLM %s is not a release kvscope has read: planned with the rules of the releases before it; inferred", p.Version.Name()))
	}
	for _, r := range p.Rules {
		if r.Evidence == Inferred {
			out = append(out, r.What()+" from "+r.From+" ("+r.Source+"): inferred")
		}
	}
	return out
}

// NewerNote is what kvscope says of a version newer than every release
// it has read: it plans it with the newest release's rules, which may not
// be that version's.
func NewerNote(v Version) string {
	return fmt.Sprintf("vLLM %s is newer than the newest release kvscope has read (%s): planned with %s's rules; inferred", v.Text, Newest().Name(), Newest().Name())
}

// Lookup parses a version and builds its profile.
func Lookup(s string) (Profile, error) {
	v, err := ParseVersion(s)
	if err != nil {
		return Profile{}, err
	}
	return For(v), nil
}

func label(v Version) string {
	switch {
	case v.Line == Main:
		return "vLLM main (as far as kvscope has read it)"
	case v.Line == Branch:
		return "vLLM PR #58207's planner with group-pair NixlConnector transfers (RFC #58638)"
	case v.Newer:
		return fmt.Sprintf("vLLM %s (newer than the newest release kvscope has read, %s: planned with its rules, inferred)", v.Name(), Newest().Name())
	case v.Dev:
		return fmt.Sprintf("vLLM %s (development build %s, planned as that release)", v.Name(), v.Text)
	case !v.known():
		return fmt.Sprintf("vLLM %s (not a release kvscope has read: planned with the rules of the releases before it, inferred)", v.Name())
	}
	return "vLLM " + v.Name()
}

// known reports whether v is a release of the release table (or not a
// numbered release at all).
func (v Version) known() bool {
	if !v.IsRelease() || v.Newer {
		return true
	}
	_, ok := ReleaseOf(v.Name())
	return ok
}

// Rule returns the table row in force for a behaviour (and family), or
// false when the base behaviour holds.
func (p Profile) Rule(behaviour, family string) (Change, bool) {
	for _, r := range p.Rules {
		if r.Behaviour == behaviour && r.Family == family {
			return r, true
		}
	}
	return Change{}, false
}

// SSMFlagIgnored reports whether the version ignores an explicit
// --mamba-ssm-cache-dtype for the family (Qwen3-Next before 0.17).
func (p Profile) SSMFlagIgnored(modelType string) bool {
	return strings.HasPrefix(p.SSMHooks[FamilyOf(modelType)], "conv")
}

// SSMDType resolves --mamba-ssm-cache-dtype auto for a model: the model
// family's config hook where this version has one, else the model dtype.
// modelType is the text config's model_type; hfDType is the dtype the
// checkpoint declares for it ("" when none); modelDType is the model's
// dtype. It returns the dtype and, when a hook decided, a note saying so.
func (p Profile) SSMDType(modelType, hfDType, modelDType string) (string, string) {
	family := FamilyOf(modelType)
	hook, ok := p.SSMHooks[family]
	if !ok {
		return modelDType, ""
	}
	kind, def, _ := strings.Cut(hook, ":")
	switch kind {
	case "conv":
		return modelDType, fmt.Sprintf("vLLM %s keeps both %s states in the conv dtype %s", p.Name, family, modelDType)
	case "checkpoint":
		if hfDType != "" {
			return hfDType, fmt.Sprintf("vLLM %s's %s config hook takes the checkpoint's SSM dtype %s for --mamba-ssm-cache-dtype auto", p.Name, family, hfDType)
		}
		if def != "" {
			return def, fmt.Sprintf("vLLM %s's %s config hook defaults the SSM cache dtype to %s for --mamba-ssm-cache-dtype auto", p.Name, family, def)
		}
	}
	return modelDType, ""
}

// FamilyOf maps a text model_type to the family name the hooks use.
func FamilyOf(modelType string) string {
	switch modelType {
	case "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text":
		return "qwen3.5"
	case "nemotron_h":
		return "nemotron-h"
	case "qwen3_next":
		return "qwen3-next"
	}
	return modelType
}

// AsyncScheduling says whether async scheduling is on for an engine that
// did not set it: the version's default, which pipeline parallelism turns
// off in some versions.
func (p Profile) AsyncScheduling(pp int) bool {
	if !p.AsyncDefault {
		return false
	}
	return pp <= 1 || p.AsyncWithPP
}

// ConcurrentBatches is how many scheduler batches are in flight: the PP
// size, or 2 with async scheduling at PP 1.
func ConcurrentBatches(async bool, pp int) int {
	pp = max(1, pp)
	if async && pp == 1 {
		return 2
	}
	return pp
}

// InFlightTokens is the token count a sliding window or a chunk reserves
// beyond itself: max_num_batched_tokens, times the batches in flight from
// the versions that count them.
func (p Profile) InFlightTokens(mnbt int, async bool, pp int) int {
	if !p.InFlightBatches {
		return mnbt
	}
	return ConcurrentBatches(async, pp) * mnbt
}

// RefusalMessage is vLLM's start-up error when one request of
// max_model_len does not fit, worded as this version words it.
func (p Profile) RefusalMessage(maxLen int, neededGiB, availGiB float64, estimate int) string {
	models := "model's"
	if p.RefusalModelsTypo {
		models = "models's"
	}
	gb := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	if p.RefusalRoundGiB {
		gb = pyRound2
	}
	msg := fmt.Sprintf("To serve at least one request with the %s max seq len (%d), (%s GiB KV cache is needed, which is larger than the available KV cache memory (%s GiB). Based on the available memory, the estimated maximum model length is %d. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
		models, maxLen, gb(neededGiB), gb(availGiB), estimate)
	if p.RefusalDocs {
		msg += " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
	}
	return msg
}

// pyRound2 prints x as Python prints round(x, 2): at most two decimals,
// trailing zeros dropped but one ("16.0").
func pyRound2(x float64) string {
	s := strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// BlockSizeRefusal is why this version's vLLM refuses --block-size n at
// its command line, or "" when it takes it (0: not given). Releases and
// main take the CLI's choices, vLLM's BlockSize literal: 1, 8, 16, 32, 64,
// 128, and 256 in later releases (kvscope accepts 256 for every release:
// inferred, the release that added it is not pinned). The branch profile
// takes any size up to 2^20, since its TP-invariant plans set sizes the
// choices do not list.
func (p Profile) BlockSizeRefusal(n int) string {
	if p.Name == Branch {
		if n < 0 || n > 1<<20 {
			return "must be between 1 and 1048576"
		}
		return ""
	}
	switch n {
	case 0, 1, 8, 16, 32, 64, 128, 256:
		return ""
	}
	return "vLLM " + p.Name + " refuses it (argparse: invalid choice; choose from 1, 8, 16, 32, 64, 128, 256)"
}
