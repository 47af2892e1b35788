// Package plan turns an engine's vLLM flags into its KV cache group plan,
// as vLLM's get_kv_cache_configs does, and says what the plan costs.
//
// The steps from an Engine to a Plan are: resolve the engine's defaults
// for its vLLM version profile (Engine; package vllm holds the profiles);
// compute every layer's per-rank spec (package kvspec); dispatch to one
// uniform group, one uniform-type group or hybrid groups, unifying page
// sizes; bucket the layers; choose the group size g (the selectors:
// Classic, Min, Balanced, PaddingBytes) and split each bucket into
// strided groups of at most g layers; size the memory pool (num_blocks,
// bytes per block, per pipeline stage); and run vLLM's start-up check,
// whose refusal is a *RefusalError that comes with its plan. Each rule
// names the vLLM generation it follows; where kvscope infers vLLM's
// behaviour the plan says so (Plan.Inferred, Plan.InferredReasons).
//
// Entry points:
//
//   - New plans one model for one engine.
//   - A Planner (NewPlanner) plans one model for many engines: it does
//     once, and caches, what does not change between engines (the
//     profiles, the per-rank specs, page unification and buckets), so a
//     search over engines pays only for the group size, the split and the
//     memory pool. Planner.Summary gives a plan's figures without
//     allocating; Planner.Plan gives the whole plan. New is a Planner
//     used once.
//   - WithLayout imposes a fixed grouping, and NewInvariant plans a
//     prefill and a decode engine with one TP-invariant layout (inferred).
//   - FromSpecs plans specs given directly, as vLLM's unit tests do.
//   - Compare diffs two plans layer by layer.
//
// The package knows nothing of descriptors, registrations or connectors:
// those belong to package xfer, which reads plans.
package plan
