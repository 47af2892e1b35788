// Package xfer computes the exact descriptor geometry of a prefill (P) to
// decode (D) KV cache transfer over NIXL, between two engines that may run
// different tensor-parallel sizes, block sizes and KV cache group plans.
//
// The steps, in order:
//
//   - Register: each rank's registered memory regions, from its plan (one
//     slot tensor per plan slot; split K/V regions in HND, or one region per
//     tensor in the blocks-first layout; one region for MLA; conv and SSM
//     sub-descriptors for Mamba/GDN), with deterministic synthetic base
//     addresses, block lengths and vLLM's descriptor ids.
//   - Handshake: the version-15 metadata each rank advertises (what vLLM
//     sends today, plus each region member's KV cache group, global head
//     range and tokens per page) and the checks that accept a pair of
//     engines or reject it with a reason.
//   - Transfer: for one request (N prompt tokens, H prefix-hit tokens on D),
//     every descriptor pair (P rank, region, offset, length -> D rank,
//     region, offset) for pull or push, labelled with layer, segment, head
//     range, token range and group pair.
//
// Matched plans that vLLM's model-wide head mapping fits take vLLM's own
// path (NixlConnector, vllm/distributed/kv_transfer/kv_connector/v1/nixl,
// worker.py and transfer_plan.py at commit 0016029b): block ids flattened
// over groups and broadcast over every region, with the same descriptor
// lists and ids. Everything else transfers layer by layer per pair of (P
// group, D group), following token runs where pages hold different token
// counts. This second path is kvscope's design, not vLLM's.
//
// xfer knows nothing of bytes in memory; package oracle replays the pairs
// on byte buffers and proves them.
package xfer
