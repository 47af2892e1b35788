package vllm

import (
	"slices"
	"strings"
)

// Evidence says how a release boundary is known.
type Evidence string

// The kinds of evidence.
const (
	// Read: the behaviour was read in vLLM's code at a commit that belongs
	// to that version.
	Read Evidence = "read"
	// Confirmed: a public thread ties the behaviour (or its pull request)
	// to that release.
	Confirmed Evidence = "confirmed"
	// Inferred: the pull request's merge date against the release's branch
	// cut, or real logs, place it; nobody said so in so many words.
	Inferred Evidence = "inferred"
)

// The behaviours the table tracks.
const (
	BSelector       = "group-size selector"
	BBucketMerge    = "bucket merge"
	BInFlight       = "sliding/chunked worst case"
	BAsync          = "async scheduling default"
	BStateDType     = "state dtype"
	BSSMHook        = "SSM dtype for auto"
	BPrefix         = "prefix caching for hybrids"
	BMambaMode      = "mamba cache mode"
	BStateSpec      = "state blocks per request"
	BSpecRows       = "spec-decode conv rows"
	BAlign          = "hybrid block-size alignment"
	BPadPages       = "page unification"
	BExtraRetained  = "MTP extra retained tokens"
	BKVSize         = "GPU KV cache size line"
	BRefusal        = "start-up refusal"
	BRefusalWording = "refusal message"
	BConnector      = "NixlConnector"
	BHandshake      = "NIXL handshake"
)

// Change is one row of the table: from version From on, Behaviour (for one
// model Family, where it is per family) follows Rule.
type Change struct {
	Behaviour string   `json:"behaviour"`
	Family    string   `json:"family,omitempty"`
	From      string   `json:"from"`   // the first version: "0.12.0", "main" or "pr58207"
	Rule      string   `json:"rule"`   // the behaviour in words
	Source    string   `json:"source"` // vLLM pull request(s) or commit
	Merged    string   `json:"merged,omitempty"`
	Evidence  Evidence `json:"evidence"`
	Note      string   `json:"note,omitempty"`

	apply func(*Profile)
	from  Version // From, parsed once
}

// What names the behaviour, with its family.
func (c Change) What() string {
	if c.Family != "" {
		return c.Behaviour + " (" + c.Family + ")"
	}
	return c.Behaviour
}

func (c *Change) holdsIn(v Version) bool { return !v.Less(c.from) }

// table is the table of behaviour changes, built once when the package
// loads and never modified: read-only data, like the standard library's
// Unicode tables.
var table = buildTable()

func buildTable() []Change {
	t := changes()
	for i := range t {
		t[i].from = mustVersion(t[i].From)
	}
	return t
}

// Changes is the table, in the order the changes land (a copy). A profile
// applies every row whose From is not after its version, so a later row of
// the same behaviour replaces an earlier one.
func Changes() []Change { return slices.Clone(table) }

// FirstChange is the earliest row of a behaviour and family whose source
// names source (a pull request), outside the branch: the release that
// brought it. It reads the table in place (no copy).
func FirstChange(behaviour, family, source string) (Change, bool) {
	for i := range table {
		c := &table[i]
		if c.Behaviour == behaviour && c.Family == family && strings.Contains(c.Source, source) && c.From != Branch {
			return *c, true
		}
	}
	return Change{}, false
}

// Sources: vLLM's code at release branches (v0.19.1, v0.23.0, v0.24.0 in a
// public fork) and at main commits near each release's branch cut, release
// notes, versioned docs, issue threads, and real startup logs
// (testdata/vllm-logs); the evidence column says which, the note why a
// boundary is not settled.
func changes() []Change {
	return []Change{
		// 0.10.0: the first profiled release, V1 with the hybrid KV cache manager.
		{Behaviour: BSelector, From: "0.10.0", Rule: "g = the smallest bucket", Source: "#17996 (hybrid allocator)", Merged: "2025-06-05", Evidence: Read,
			apply: func(p *Profile) { p.Selector, p.Threshold = SelectorMin, 0 }},
		{Behaviour: BBucketMerge, From: "0.10.0", Rule: "buckets hold layers with equal specs", Source: "#17996", Evidence: Read,
			apply: func(p *Profile) { p.MergeBuckets = false }},
		{Behaviour: BInFlight, From: "0.10.0", Rule: "sliding window: ceil(min(W-1+max_num_batched_tokens, max_model_len)/block)+1 blocks; chunked: ceil(min(C+max_num_batched_tokens, max_model_len)/block)", Source: "#19029, #19351", Merged: "2025-06-04", Evidence: Read,
			apply: func(p *Profile) { p.InFlightBatches = false }},
		{Behaviour: BAsync, From: "0.10.0", Rule: "off unless --async-scheduling", Source: "—", Evidence: Read,
			apply: func(p *Profile) { p.AsyncDefault, p.AsyncWithPP = false, false }},
		{Behaviour: BStateDType, From: "0.10.0", Rule: "one dtype for conv and SSM state: the KV cache dtype", Source: "#20016", Merged: "2025-07-04", Evidence: Read,
			apply: func(p *Profile) { p.SingleStateDType = true }},
		{Behaviour: BPrefix, From: "0.10.0", Rule: "no prefix caching for hybrids (they run V0 unless VLLM_USE_V1=1)", Source: "#20840", Evidence: Read,
			apply: func(p *Profile) { p.HybridPrefixCaching = "forced-off" }},
		{Behaviour: BStateSpec, From: "0.10.0", Rule: "a state layer holds 1 block per request", Source: "#20016", Evidence: Read,
			apply: func(p *Profile) { p.StateSpecBlocks, p.AllSpecBlocks = false, false }},
		{Behaviour: BAlign, From: "0.10.0", Rule: "attention block = 16 * ceil(state page / (16 * attention bytes per token))", Source: "#20840", Merged: "2025-07-15", Evidence: Read,
			apply: func(p *Profile) { p.Align = Align16 }},
		{Behaviour: BPadPages, From: "0.10.0", Rule: "a smaller page that divides the largest raises its block size; an attention page that does not divide raises NotImplementedError; state pages are padded", Source: "kv_cache_utils.unify_kv_cache_spec_page_size", Evidence: Read,
			Note:  "kvscope pads a smaller state page in every version; vLLM before 0.26 scaled its block size instead (#55da232), which only drafters with larger pages reach",
			apply: func(p *Profile) { p.PadPages = false }},
		{Behaviour: BKVSize, From: "0.10.0", Rule: "num_blocks // groups * smallest group block size", Source: "#17996", Evidence: Read,
			apply: func(p *Profile) { p.KVSizeLine = SizePerGroup }},
		{Behaviour: BRefusal, From: "0.10.0", Rule: "needed = the sum over a worker's layers of their worst case (no padding slots)", Source: "kv_cache_utils.check_enough_kv_cache_memory", Evidence: Read,
			apply: func(p *Profile) { p.Refusal, p.RefusalPerWorker = RefusalLayers, true }},
		{Behaviour: BRefusalWording, From: "0.10.0", Rule: `"...the models's max seq len...", GiB as %.2f`, Source: "—", Evidence: Read,
			apply: func(p *Profile) { p.RefusalModelsTypo, p.RefusalDocs, p.RefusalRoundGiB = true, false, false }},
		{Behaviour: BConnector, Family: "plans", From: "0.10.0", Rule: "P and D need the same KV cache group plan and block size; D TP a multiple of P TP (\"Decode TP cannot be smaller than prefill TP\"), heads split across D ranks (HND layout)", Source: "#18833", Merged: "2025-06", Evidence: Read,
			apply: func(p *Profile) {
				p.GroupPairs, p.TPInvariant, p.StateConnector, p.PushConnector, p.BlockSizeRatio = false, false, false, false, false
				p.PGreaterTP, p.Mamba2HeteroTP, p.GDNConnector, p.Mamba1Connector, p.HybridMLA, p.HybridMLAPGreaterTP = false, false, false, false, false, false
				p.PushPP, p.PushPPHybrid, p.PushPrefixTail, p.NixlMambaPrefix, p.HybridBlockSizes = false, false, false, false, false
			}},
		{Behaviour: BConnector, Family: "hybrid manager", From: "0.10.0", Rule: "a --kv-transfer-config turns the hybrid KV cache manager off, so sliding-window and chunked layers plan as full attention", Source: "—", Evidence: Read,
			apply: func(p *Profile) { p.HMAWithConnector = false }},
		{Behaviour: BConnector, Family: "pull pp", From: "0.10.0", Rule: "no pipeline-parallel P (\"NixlConnector received pp_rank > 0 handshake metadata but does not support PP-disaggregated KV transfer.\"); #53360 is open", Source: "#53360 (open)", Evidence: Confirmed,
			Note:  "the error is quoted in vllm#52913 (2026-08-19); no release seen lifts it",
			apply: func(p *Profile) {}},
		{Behaviour: BConnector, Family: "block size", From: "0.10.0", Rule: "different P and D block sizes are refused; with the hybrid manager in every release (\"HMA does not support different remote block size yet\"), and P block > D block too (#45443 is open)", Source: "#45443 (open), #51527 (open)", Evidence: Confirmed,
			Note:  "vLLM's NixlConnector compatibility page: different block sizes only without the hybrid manager and only P < D",
			apply: func(p *Profile) {}},
		{Behaviour: BConnector, Family: "prefix caching", From: "0.10.0", Rule: "prefix caching with different P and D logical block sizes is not supported (#51527 is open); a Mamba hybrid refuses prefix caching with a different physical_blocks_per_logical_kv_block", Source: "#51527 (open)", Evidence: Confirmed,
			Note:  "kvscope refuses different block sizes for every hybrid (hybrid-block-size), which covers it",
			apply: func(p *Profile) {}},
		{Behaviour: BHandshake, From: "0.10.0", Rule: "no NIXL_CONNECTOR_VERSION and no compatibility hash: P answers with NixlAgentMetadata itself", Source: "before #29503", Evidence: Inferred,
			Note:  "0.10.x sends one block_len for every region; block_lens came with #25902 (2025-09-23)",
			apply: func(p *Profile) { p.NixlVersion = 0 }},

		// 0.10.2
		{Behaviour: BStateDType, From: "0.10.2", Rule: "conv state: --mamba-cache-dtype (auto = model dtype); SSM state: --mamba-ssm-cache-dtype (auto = the conv dtype)", Source: "#22928", Merged: "2025-08-15", Evidence: Confirmed,
			Note:  "in the v0.10.2 docs; 0.10.1 (cut about a day later) is possible",
			apply: func(p *Profile) { p.SingleStateDType = false }},
		{Behaviour: BSSMHook, Family: "qwen3-next", From: "0.10.2", Rule: "both states take the conv dtype (model dtype); --mamba-ssm-cache-dtype is ignored", Source: "#24526", Merged: "2025-09-11", Evidence: Read,
			apply: func(p *Profile) { p.SSMHooks["qwen3-next"] = "conv" }},
		{Behaviour: BPrefix, From: "0.10.2", Rule: "V1 for hybrids; prefix caching forced off (\"Hybrid or mamba-based model detected: disabling prefix caching\")", Source: "#23650, #23716", Merged: "2025-08-27", Evidence: Read,
			apply: func(p *Profile) { p.HybridPrefixCaching = "forced-off" }},
		{Behaviour: BSpecRows, Family: "gdn", From: "0.10.2", Rule: "gated delta net conv state has K-1+num_speculative_tokens rows", Source: "#24526 (Qwen3-Next)", Merged: "2025-09-11", Evidence: Read,
			apply: func(p *Profile) { p.GDNSpecRows = true }},

		// 0.11.1
		{Behaviour: BPrefix, From: "0.11.1", Rule: "off by default for hybrids; --enable-prefix-caching opts in (Mamba2, then Mamba1): one state per block", Source: "#25752, #26377", Merged: "2025-10-04", Evidence: Read,
			apply: func(p *Profile) { p.HybridPrefixCaching, p.PrefixMambaMode = "opt-in", "per-block" }},
		{Behaviour: BAlign, From: "0.11.1", Rule: "alignment = the backend's kernel block (16; 64 FlashMLA; 128 CUTLASS MLA), --block-size not part of it", Source: "#24486", Merged: "2025-10-08", Evidence: Read,
			Note:  "#27994 (0.12-0.17) used 32 on SM100 for head size 256 with FlashInfer; kvscope does not model the GPU architecture",
			apply: func(p *Profile) { p.Align = AlignBackend }},
		{Behaviour: BConnector, Family: "block size", From: "0.11.1", Rule: "without the hybrid manager a D block size that is a whole multiple of P's is accepted (block_size_ratio); P block > D block, and any difference with the hybrid manager, refused", Source: "#26759", Merged: "2025-11-14", Evidence: Inferred,
			apply: func(p *Profile) { p.BlockSizeRatio = true }},

		// 0.12.0
		{Behaviour: BSelector, From: "0.12.0", Rule: "g = the smallest bucket, or the largest when largest < 1.25 x smallest", Source: "#29303", Merged: "2025-11-24", Evidence: Read,
			apply: func(p *Profile) { p.Selector, p.Threshold = SelectorMinOrMax, 1.25 }},

		// 0.12.0
		{Behaviour: BConnector, Family: "tp", From: "0.12.0", Rule: "P TP > D TP: each D rank reads from several P ranks (MLA: one read, the other P ranks notified); not with KV heads replicated on P", Source: "#27274", Evidence: Inferred,
			Note:  "confirmed merged in vllm#43523; its release is inferred from the PR number",
			apply: func(p *Profile) { p.PGreaterTP = true }},

		// 0.13.0
		{Behaviour: BHandshake, From: "0.13.0", Rule: "version 2: NixlHandshakePayload{compatibility_hash, agent_metadata_bytes}; a hash mismatch refuses the peer unless enforce_handshake_compat is false", Source: "#29503, #29665", Merged: "2025-11/12", Evidence: Inferred,
			Note:  "opened 2025-11-26 and 11-28, after the 0.12.0 cut: 0.12.0 may already carry version 1",
			apply: func(p *Profile) { p.NixlVersion = 2 }},
		{Behaviour: BSSMHook, Family: "nemotron-h", From: "0.13.0", Rule: "auto = the config's mamba_ssm_cache_dtype, else float16 (\"Updating mamba_ssm_cache_dtype to 'float16'\")", Source: "#29978", Merged: "2025-12-05", Evidence: Read,
			apply: func(p *Profile) { p.SSMHooks["nemotron-h"] = "checkpoint:float16" }},
		{Behaviour: BRefusalWording, From: "0.13.0", Rule: "adds \"See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.\"", Source: "#28051", Merged: "2025-12-10", Evidence: Inferred,
			apply: func(p *Profile) { p.RefusalDocs = true }},

		// 0.14.0
		{Behaviour: BAsync, From: "0.14.0", Rule: "on by default, except with PP > 1 or speculative decoding other than EAGLE/MTP", Source: "#27614, #31998", Merged: "2025-12-29", Evidence: Confirmed,
			apply: func(p *Profile) { p.AsyncDefault, p.AsyncWithPP = true, false }},
		{Behaviour: BRefusal, From: "0.14.0", Rule: "needed = slots * page * ceil(first group's worst case / page), the whole model's groups against the smallest worker's memory", Source: "#29431", Merged: "2025-12-23", Evidence: Read,
			apply: func(p *Profile) { p.Refusal, p.RefusalPerWorker = RefusalGroup0, false }},
		{Behaviour: BRefusalWording, From: "0.14.0", Rule: "GiB printed as round(x, 2) (\"16.0\")", Source: "#29431 (format_gib)", Evidence: Read,
			apply: func(p *Profile) { p.RefusalRoundGiB = true }},

		// 0.15.0
		{Behaviour: BAsync, From: "0.15.0", Rule: "on by default, also with PP > 1", Source: "#32359, #32618", Merged: "2026-01-15", Evidence: Read,
			apply: func(p *Profile) { p.AsyncWithPP = true }},
		{Behaviour: BMambaMode, From: "0.15.0", Rule: "--mamba-cache-mode none|align|all (default none); prefix caching picks all for models that support Mamba prefix caching, align otherwise", Source: "#30877", Merged: "2026-01-23", Evidence: Confirmed,
			Note:  "vLLM's v0.15.0 release notes list it (\"--mamba-cache-mode align\")",
			apply: func(p *Profile) { p.MambaModeFlag, p.PrefixMambaMode = true, "all-or-align" }},
		{Behaviour: BStateSpec, From: "0.15.0", Rule: "none: 1+num_spec blocks; align: 2+num_spec; all: ceil(max_model_len/block)", Source: "#30877", Merged: "2026-01-23", Evidence: Confirmed,
			apply: func(p *Profile) { p.StateSpecBlocks = true }},

		// 0.16.0
		{Behaviour: BHandshake, From: "0.16.0", Rule: "version 3: + physical_blocks_per_logical_kv_block; the hash takes cross_layers_blocks", Source: "vllm-gaudi#1087", Evidence: Inferred,
			Note:  "vllm-gaudi#1087 confirms the hash's third argument at the v0.16.0 baseline; the version bump's release is inferred",
			apply: func(p *Profile) { p.NixlVersion = 3 }},
		{Behaviour: BAsync, From: "0.16.0", Rule: "off by default when the mamba cache mode is not none", Source: "#33352", Merged: "2026-01-30", Evidence: Read,
			apply: func(p *Profile) { p.AsyncOffWithMambaPC = true }},

		// 0.17.0
		{Behaviour: BAsync, From: "0.17.0", Rule: "on by default with Mamba prefix caching again", Source: "#33997", Merged: "2026-02-14", Evidence: Read,
			apply: func(p *Profile) { p.AsyncOffWithMambaPC = false }},
		{Behaviour: BSSMHook, Family: "qwen3.5", From: "0.17.0", Rule: "auto = the checkpoint's text_config.mamba_ssm_dtype when it declares one (float32 in every Qwen3.5/3.6 checkpoint), else the model dtype", Source: "#34110, #34489", Merged: "2026-02-12", Evidence: Read,
			apply: func(p *Profile) { p.SSMHooks["qwen3.5"] = "checkpoint" }},
		{Behaviour: BSSMHook, Family: "qwen3-next", From: "0.17.0", Rule: "the SSM state honours --mamba-ssm-cache-dtype (auto = model dtype)", Source: "#34489", Merged: "2026-02-12", Evidence: Read,
			apply: func(p *Profile) { delete(p.SSMHooks, "qwen3-next") }},
		{Behaviour: BSpecRows, Family: "mamba2", From: "0.17.0", Rule: "Mamba2 conv state has K-1+num_speculative_tokens rows", Source: "#33726", Merged: "2026-02-24", Evidence: Read,
			apply: func(p *Profile) { p.Mamba2SpecRows = true }},
		{Behaviour: BRefusal, From: "0.17.0", Rule: "each pipeline stage's worker checks its own groups (still the first group only)", Source: "#33698", Merged: "2026-02-11", Evidence: Read,
			apply: func(p *Profile) { p.RefusalPerWorker = true }},

		// 0.18.0
		{Behaviour: BSelector, From: "0.18.0", Rule: "g = the smallest bucket, or the largest when largest < 1.5 x smallest", Source: "#36684", Merged: "2026-03-12", Evidence: Confirmed,
			apply: func(p *Profile) { p.Selector, p.Threshold = SelectorMinOrMax, 1.5 }},
		{Behaviour: BConnector, Family: "mamba2", From: "0.18.0", Rule: "Mamba2 state moves (SupportsHMA), P TP == D TP only (\"Hybrid SSM (Mamba) models require homogeneous TP\")", Source: "#35758, #36687", Merged: "2026-03-06", Evidence: Confirmed,
			Note:  "vLLM's v0.18.0 release notes list both (\"HMA + NIXL connector\", \"P/D for hybrid SSM-FA models via NIXL\")",
			apply: func(p *Profile) { p.StateConnector = true }},

		// 0.19.0
		{Behaviour: BRefusal, From: "0.19.0", Rule: "needed = slots * page * sum over groups of ceil(worst case / page): every group, padding included", Source: "#36030", Merged: "2026-03-17", Evidence: Confirmed,
			Note:  "in the v0.19.1 branch; merged inside the 0.18 cut window, so 0.18.0 is not settled",
			apply: func(p *Profile) { p.Refusal = RefusalGroups }},

		// 0.20.0
		{Behaviour: BConnector, Family: "mamba2", From: "0.20.0", Rule: "Mamba2 state between different TP sizes (3-read conv state transfer; the DS conv layout, #37416)", Source: "#37635", Merged: "2026-03-26", Evidence: Confirmed,
			Note:  "vLLM's v0.20.0 release notes: \"Full PD support for Mamba2-like models on Heterogeneous TP deployments\"; its compatibility page still said homogeneous TP",
			apply: func(p *Profile) { p.Mamba2HeteroTP = true }},
		{Behaviour: BAlign, From: "0.20.0", Rule: "alignment = max(the backend's smallest kernel block, --block-size), after the layers are built", Source: "#37467", Merged: "2026-03-30", Evidence: Read,
			Note:  "not in the v0.19.1 branch; also backported into 0.18.2",
			apply: func(p *Profile) { p.Align = AlignBackendUser }},
		{Behaviour: BSSMHook, Family: "nemotron-h", From: "0.20.0", Rule: "auto = the config's mamba_ssm_cache_dtype, else float32", Source: "#39032", Merged: "2026-04-06", Evidence: Read,
			apply: func(p *Profile) { p.SSMHooks["nemotron-h"] = "checkpoint:float32" }},
		{Behaviour: BMambaMode, From: "0.20.0", Rule: "prefix caching with speculative decoding picks align even where all is supported", Source: "#40454", Merged: "2026-04-21", Evidence: Confirmed,
			Note:  "vLLM's v0.20.0 release notes list it",
			apply: func(p *Profile) { p.SpecAlignsAll = true }},

		// 0.20.1
		{Behaviour: BKVSize, From: "0.20.1", Rule: "int(max concurrency * max_model_len)", Source: "#41069", Merged: "2026-04-28", Evidence: Confirmed,
			Note:  "real logs (testdata/vllm-logs): 0.20.0 prints num_blocks // groups * block size, 0.20.1rc1 and 0.20.2 the concurrency-based figure; vllm#43308 places it between 0.20.0 and 0.21.0",
			apply: func(p *Profile) { p.KVSizeLine = SizeConcurrency }},
		{Behaviour: BRefusal, From: "0.20.1", Rule: "a --num-gpu-blocks-override replaces the memory in the check (override * bytes per block)", Source: "#41069", Merged: "2026-04-28", Evidence: Confirmed,
			Note:  "vLLM's v0.20.1 release notes: \"Fixed num_gpu_blocks_override not accounted for in max_model_len checks\"",
			apply: func(p *Profile) { p.RefusalOverride = true }},

		// 0.21.0

		// 0.22.0
		{Behaviour: BMambaMode, From: "0.22.0", Rule: "the spec-decode rule reverted: prefix caching picks all where supported, align otherwise", Source: "#41233", Merged: "2026-05-18", Evidence: Read,
			apply: func(p *Profile) { p.SpecAlignsAll = false }},
		{Behaviour: BStateSpec, From: "0.22.0", Rule: "all: ceil(max_model_len/block)+num_spec blocks as well", Source: "#41233", Merged: "2026-05-18", Evidence: Read,
			apply: func(p *Profile) { p.AllSpecBlocks = true }},
		{Behaviour: BRefusalWording, From: "0.22.0", Rule: "\"the model's max seq len\"", Source: "#42479", Merged: "2026-05-15", Evidence: Inferred,
			apply: func(p *Profile) { p.RefusalModelsTypo = false }},
		{Behaviour: BHandshake, From: "0.22.0", Rule: "version 4: KV block leases renewed by heartbeats; ssm_sizes in the metadata", Source: "#41383", Evidence: Confirmed,
			Note:  "vLLM's v0.22.0 release notes list the lease-renewal TTL (#41383); the version number is the constant's comment",
			apply: func(p *Profile) { p.NixlVersion = 4 }},
		{Behaviour: BConnector, Family: "gdn", From: "0.22.0", Rule: "gated-delta-net state (Qwen3.5/3.6) moves, also between different TP sizes (DS conv layout; equal kernel block sizes)", Source: "#41869", Merged: "2026-05", Evidence: Confirmed,
			Note:  "vLLM's v0.22.0 release notes: \"GDN support for PD with NIXL\"; before it kvscope accepts equal TP (inferred) and refuses different TP",
			apply: func(p *Profile) { p.GDNConnector = true }},

		// 0.23.0
		{Behaviour: BConnector, Family: "hybrid manager", From: "0.23.0", Rule: "the hybrid manager stays on with the NixlConnector", Source: "#41847", Merged: "2026-05-26", Evidence: Confirmed,
			Note:  "vLLM's v0.23.0 release notes: \"HMA on by default for capable connectors\"; in the v0.23.0 and v0.24.0 branches",
			apply: func(p *Profile) { p.HMAWithConnector = true }},
		{Behaviour: BConnector, Family: "mamba prefix", From: "0.23.0", Rule: "state layers move with Mamba prefix caching (a mamba cache mode other than none)", Source: "#42554", Evidence: Confirmed,
			Note:  "vLLM's v0.23.0 release notes: \"Nixl Mamba prefix-caching mode\"",
			apply: func(p *Profile) { p.NixlMambaPrefix = true }},

		// 0.24.0
		{Behaviour: BConnector, Family: "push", From: "0.24.0", Rule: "NixlPushConnector (P writes); it needs P's plan on D (\"NixlPushConnector does not support different producer and consumer cache-group layouts\")", Source: "#35264", Merged: "2026-06-12", Evidence: Confirmed,
			Note:  "absent from the v0.23.0 branch, present in the v0.24.0 branch",
			apply: func(p *Profile) { p.PushConnector = true }},
		{Behaviour: BConnector, Family: "push pp", From: "0.24.0", Rule: "a pipeline-parallel push producer, without the hybrid manager's groups", Source: "#45880", Merged: "2026-06-17", Evidence: Inferred,
			apply: func(p *Profile) { p.PushPP = true }},
		{Behaviour: BPadPages, From: "0.24.0", Rule: "attention pages that do not divide the largest are padded", Source: "#45181", Evidence: Confirmed,
			apply: func(p *Profile) { p.PadPages = true }},

		// 0.25.0
		{Behaviour: BConnector, Family: "mamba1", From: "0.25.0", Rule: "Mamba1 state (Jamba) moves, also between different TP sizes", Source: "#45019", Merged: "2026-06-09", Evidence: Confirmed,
			Note:  "vLLM's v0.25.0 release notes: \"NIXL Mamba1 support\"",
			apply: func(p *Profile) { p.Mamba1Connector = true }},

		// 0.26.0
		{Behaviour: BInFlight, From: "0.26.0", Rule: "max_num_batched_tokens x batches in flight (2 with async scheduling at PP 1, else PP) instead of max_num_batched_tokens", Source: "#47728", Merged: "2026-07-08", Evidence: Confirmed,
			Note:  "vllm#49878 reports it as a regression from 0.25.1 to 0.26; with PP > 1 the V2 model runner keeps PP+1 batches in flight, kvscope counts PP (the V1 runner's)",
			apply: func(p *Profile) { p.InFlightBatches = true }},

		{Behaviour: BConnector, Family: "push prefix", From: "0.26.0", Rule: "with a D prefix hit, push moves the tail of P's blocks (before, it trimmed the head: wrong tokens)", Source: "#48758", Merged: "2026-07-15", Evidence: Inferred,
			apply: func(p *Profile) { p.PushPrefixTail = true }},
		{Behaviour: BHandshake, From: "0.26.0", Rule: "version 5: remote_blocks_expiry_time in kv_transfer_params; the handshake carries a clock-sync timestamp", Source: "#47021", Merged: "2026-07", Evidence: Inferred,
			apply: func(p *Profile) { p.NixlVersion = 5 }},

		// 0.27.0
		{Behaviour: BConnector, Family: "hybrid mla", From: "0.27.0", Rule: "an MLA + state hybrid moves (#49762), also with P TP > D TP (#49297)", Source: "#49762, #49297", Merged: "2026-07-21", Evidence: Confirmed,
			Note:  "vLLM's v0.27.0 release notes: \"NIXL P/D for hybrid MLA+SSM models\", \"NIXL hybrid MLA+mamba heterogeneous TP\"",
			apply: func(p *Profile) { p.HybridMLA, p.HybridMLAPGreaterTP = true, true }},
		{Behaviour: BConnector, Family: "block size", From: "0.27.0", Rule: "a hybrid's P and D may differ in block size: attention descriptors at the remote block granularity, state blocks 1:1; with Mamba prefix caching still refused (#51527 is open)", Source: "#49612", Merged: "2026-07", Evidence: Confirmed,
			Note:  "vLLM's v0.27.0 release notes: \"heterogeneous P/D block sizes for hybrid models\"; kvscope does not model that path's descriptors",
			apply: func(p *Profile) { p.HybridBlockSizes = true }},
		{Behaviour: BHandshake, From: "0.27.0", Rule: "version 7: the hash takes the EAGLE/MTP speculative config (v6) and the transfer mode, push or pull, instead of cross_layers_blocks", Source: "#49230, #50620", Merged: "2026-07-20, 07-31", Evidence: Inferred,
			Note:  "0.28.0 is possible for version 7",
			apply: func(p *Profile) { p.NixlVersion = 7 }},
		{Behaviour: BBucketMerge, From: "0.27.0", Rule: "specs that vLLM's merge accepts (full attention differing only in a recorded window or chunk) share a bucket", Source: "#50000", Merged: "2026-07-30", Evidence: Confirmed,
			apply: func(p *Profile) { p.MergeBuckets = true }},
		{Behaviour: BAlign, Family: "mla", From: "0.27.0", Rule: "an MLA + state hybrid aligns to at least 128", Source: "#50000", Merged: "2026-07-30", Evidence: Read,
			apply: func(p *Profile) { p.MLAHybridAlign128 = true }},
		{Behaviour: BKVSize, Family: "concurrency", From: "0.27.0", Rule: "concurrency = num_blocks / the sum over groups of ceil(worst case / page) (the same figure when every worst case is whole pages)", Source: "#48317", Merged: "2026-07-20", Evidence: Read,
			apply: func(p *Profile) {}},

		// 0.28.0
		{Behaviour: BPrefix, From: "0.28.0", Rule: "prefix caching on by default for hybrids, mamba cache mode align for every model", Source: "#50991", Merged: "2026-08-04", Evidence: Confirmed,
			apply: func(p *Profile) { p.HybridPrefixCaching, p.PrefixMambaMode = "on", "align" }},
		{Behaviour: BExtraRetained, From: "0.28.0", Rule: "multi-layer MTP keeps num_speculative_tokens-1 extra sliding-window tokens", Source: "#50062", Merged: "2026-08-13", Evidence: Read,
			apply: func(p *Profile) { p.ExtraRetained = true }},
		{Behaviour: BKVSize, Family: "log line", From: "0.28.0", Rule: "GPU KV cache size and maximum concurrency print on one line", Source: "#50462", Merged: "2026-08-04", Evidence: Read,
			apply: func(p *Profile) {}},

		{Behaviour: BHandshake, From: "0.28.0", Rule: "version 8: + dcp_size, pcp_size", Source: "#50611", Merged: "2026-07-31", Evidence: Inferred,
			Note:  "version 9 was on main by 2026-08-28, two days after 0.28.0",
			apply: func(p *Profile) { p.NixlVersion = 8 }},

		// 0.29.0
		{Behaviour: BRefusal, Family: "null block", From: "0.29.0", Rule: "the check and the max-length estimate hold back one block (the null block)", Source: "#47272", Merged: "2026-08-20", Evidence: Confirmed,
			Note:  "not in 0.28.0; in v0.29.0rc1-rc4",
			apply: func(p *Profile) { p.NullBlock = true }},
		{Behaviour: BPrefix, Family: "retention", From: "0.29.0", Rule: "--prefix-cache-retention-interval is a flag (default 0, sparse); a hybrid with EAGLE/MTP defaults to dense checkpointing (\"Hybrid model with EAGLE speculative decoding: defaulting prefix_cache_retention_interval to dense checkpointing.\")", Source: "#52216, #55760, #55861", Merged: "2026-09-07", Evidence: Confirmed,
			Note:  "syv-ai/qwen38-27b-rtx3090#183 reads it in 0.29.0's arg_utils.py; it decides which prefix-cache hits stay reachable, not the start-up figures kvscope plans",
			apply: func(p *Profile) {}},
		{Behaviour: BHandshake, From: "0.29.0", Rule: "version 9: + block_strides", Source: "vLLM main (PR not found)", Evidence: Inferred,
			Note:  "on main by 2026-08-28 (a public Kimi-K3 build script); 10 is possible",
			apply: func(p *Profile) { p.NixlVersion = 9 }},

		// 0.30.0
		{Behaviour: BHandshake, From: "0.30.0", Rule: "version 11: dense virtual transfer pages for compressed MLA caches (v10); per-region geometry and memory types (region_num_blocks, region_group_ids, region_names, region_mem_types)", Source: "#53780", Merged: "2026-09", Evidence: Inferred,
			apply: func(p *Profile) { p.NixlVersion = 11 }},

		// 0.31.0
		{Behaviour: BHandshake, From: "0.31.0", Rule: "version 12: + region_members, the layer names of each region (pipeline-parallel push with the hybrid manager)", Source: "#50494", Merged: "2026-09-15", Evidence: Inferred,
			Note:  "merged 2026-09-15, after the 0.30.0 cut",
			apply: func(p *Profile) { p.NixlVersion = 12 }},
		{Behaviour: BAlign, Family: "backends", From: "0.31.0", Rule: "the KV block size is one that every attention backend of the model supports, not only the first non-state backend's", Source: "#49845", Merged: "2026-09-23", Evidence: Inferred,
			Note:  "it changes the block size of models whose backends disagree (sparse MLA with an indexer supporting only 64); kvscope models no such model",
			apply: func(p *Profile) {}},
		{Behaviour: BPadPages, Family: "stride", From: "0.31.0", Rule: "a spec's block_stride_alignment pads the physical block stride (combined by least common multiple)", Source: "#55528", Merged: "2026-09-25", Evidence: Inferred,
			Note:  "merged two days before the 0.31.0 cut at the earliest estimate: 0.31.0 or later; only sparse-attention specs set an alignment, none that kvscope models",
			apply: func(p *Profile) {}},
		{Behaviour: BConnector, Family: "push pp", From: "0.31.0", Rule: "a pipeline-parallel push producer also with the hybrid manager's attention groups", Source: "#50494", Merged: "2026-09-15", Evidence: Inferred,
			apply: func(p *Profile) { p.PushPPHybrid = true }},

		// main (after 0.31.0, as far as kvscope has read): nothing that changes the numbers.

		// The branch: vLLM main plus #58207's selector and the group-pair transfers.
		{Behaviour: BSelector, From: Branch, Rule: "the g with the fewest worst-case padding bytes, then fewest groups, from min(max(smallest bucket, --min-kv-cache-group-layers), largest) up", Source: "#58207", Evidence: Read,
			Note:  "read from the PR's diff (reference/padding-bytes-selector.md); not merged in main as of 0.31",
			apply: func(p *Profile) { p.Selector, p.Threshold = SelectorPaddingBytes, 0 }},
		{Behaviour: BBucketMerge, From: Branch, Rule: "with padding-bytes, attention layers that agree on kind, block size, page bytes and window share a bucket whatever their head layout", Source: "the published P TP2 / D TP4 deployment", Evidence: Inferred,
			apply: func(p *Profile) { p.LooseMerge = true }},
		{Behaviour: BSSMHook, Family: "qwen3.5", From: Branch, Rule: "auto = the model dtype (the deployment's 592/304 block sizes need a bfloat16 SSM state)", Source: "the published P TP2 / D TP4 deployment", Evidence: Inferred,
			apply: func(p *Profile) { delete(p.SSMHooks, "qwen3.5") }},
		{Behaviour: BSSMHook, Family: "nemotron-h", From: Branch, Rule: "auto = the model dtype, as for Qwen3.5", Source: "kvscope's branch model", Evidence: Inferred,
			apply: func(p *Profile) { delete(p.SSMHooks, "nemotron-h") }},
		{Behaviour: BPrefix, From: Branch, Rule: "prefix caching off by default for hybrids (mamba cache mode none)", Source: "the published deployment's KV token figures", Evidence: Inferred,
			apply: func(p *Profile) { p.HybridPrefixCaching, p.PrefixMambaMode = "opt-in", "all-or-align" }},
		{Behaviour: BRefusal, Family: "null block", From: Branch, Rule: "no block held back in the check", Source: "kvscope's branch model", Evidence: Inferred,
			apply: func(p *Profile) { p.NullBlock = false }},
		{Behaviour: BConnector, Family: "plans", From: Branch, Rule: "layers move per pair of P and D cache groups, in pull and push; only MLA and pipeline-parallel push producers need P's plan on D; a connector that needs matching groups plans TP-invariantly", Source: "RFC #58638", Evidence: Inferred,
			apply: func(p *Profile) { p.GroupPairs, p.TPInvariant = true, true }},
		{Behaviour: BHandshake, From: Branch, Rule: "version 15, kvscope's own: version 12's members plus, per region member, its KV cache group, global head range and tokens per page", Source: "kvscope's group-pair protocol", Evidence: Inferred,
			apply: func(p *Profile) { p.NixlVersion = 15 }},
	}
}

// Versions lists the versions kvscope has profiles for, oldest first:
// every release of the release table (Releases), main and the branch.
func Versions() []string {
	out := make([]string, 0, len(releases)+2)
	for _, r := range releases {
		out = append(out, r.Name)
	}
	return append(out, Main, Branch)
}
