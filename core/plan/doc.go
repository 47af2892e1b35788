// Package plan turns an engine's vLLM flags into its KV cache group plan,
// as vLLM's get_kv_cache_configs does, and says what the plan costs.
//
// # One path
//
// Every plan, whichever entry point asks for it, is made by the same
// steps, each rule written once:
//
//  1. Resolve the engine's defaults for its vLLM version profile and check
//     its ranges (Engine; package vllm holds the profiles; engine.go).
//  2. Prepare the rank (rank.go): every layer's per-rank spec (package
//     kvspec) with vLLM's extra retained tokens, then the dispatch to one
//     uniform group, one uniform-type group or hybrid groups, with page
//     unification, and the ordered buckets (group.go); a fixed layout's
//     groups in place of the buckets.
//  3. Per engine (call.go): the limits, each distinct spec's worst-case
//     blocks, the group size g (the selectors Classic, Min, Balanced,
//     PaddingBytes; selector.go) and the strided split of every bucket
//     into groups of at most g layers; the figures (groups, slots,
//     padding, blocks per request); the memory pool (per pipeline stage
//     bytes per block and num_blocks, the override, concurrency,
//     capacity and the version's KV cache tokens line).
//  4. vLLM's start-up check (refusal.go): the bytes one request needs by
//     the version's rule, against each worker's memory; its refusal is a
//     *RefusalError that comes with its plan.
//  5. The plan itself (build.go): groups, layers, stages, log lines,
//     warnings and notes; and where kvscope infers vLLM's behaviour the
//     plan says so (Plan.Inferred, Plan.InferredReasons; inferred.go).
//
// Each rule names the vLLM generation it follows.
//
// # Entry points
//
//   - New plans one model for one engine: a Planner used once.
//   - A Planner (NewPlanner) plans one model for many engines: it caches
//     step 2 per rank (and the split per group size), so a search over
//     engines pays only for steps 3 to 5. Planner.Summary stops after step
//     4 and allocates nothing; Planner.Plan gives the whole plan;
//     Planner.PlanInto writes it into a Plan it reuses.
//   - WithLayout imposes a fixed grouping (dispatch "fixed") in step 2,
//     and NewInvariant plans a prefill and a decode engine with one
//     TP-invariant layout (inferred; invariant.go).
//   - FromSpecs plans specs given directly, as vLLM's unit tests do: step
//     2 starts from those specs, with no model, one pipeline stage and no
//     start-up check.
//   - Compare diffs two plans layer by layer.
//
// The package knows nothing of descriptors, registrations or connectors:
// those belong to package xfer, which reads plans.
package plan
