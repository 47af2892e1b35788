package vllm

import "slices"

// MetadataVersion is one value of vLLM's NIXL_CONNECTOR_VERSION: what it
// changed in the handshake P's side channel answers with, in the members
// of NixlAgentMetadata and in the inputs of the compatibility hash. The
// history is vLLM's own (the comment beside the constant in
// vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py, which
// reached 12); which release carries which version is the profile's
// business (the "NIXL handshake" rows of Changes).
type MetadataVersion struct {
	Version    int      `json:"version"`
	Change     string   `json:"change"`
	Source     string   `json:"source"`
	Adds       []string `json:"adds_members,omitempty"`
	HashAdds   []string `json:"hash_adds,omitempty"`
	HashDrops  []string `json:"hash_drops,omitempty"`
	KvscopeOwn bool     `json:"kvscope_own,omitempty"` // kvscope's group-pair protocol, not vLLM's
}

// baseMembers are the NixlAgentMetadata members before the version
// constant existed (0.10.x sent block_len, one length for all regions,
// where later releases send block_lens).
var baseMembers = []string{"engine_id", "agent_metadata", "kv_caches_base_addr", "device_id", "num_blocks", "block_lens", "kv_cache_layout", "block_size", "attn_backend_name"}

// metadataVersions is vLLM's version history of the handshake, plus
// kvscope's own version 15. Versions 3, 9 and 10 have no pull request
// kvscope could find; version 8's (#50611) is unverified.
var metadataVersions = []MetadataVersion{
	{Version: 1, Change: "compatibility checking: P answers NixlHandshakePayload{compatibility_hash, agent_metadata_bytes}", Source: "#29503",
		HashAdds: []string{"vllm_version", "nixl_connector_version", "model", "dtype", "num_kv_heads", "head_size", "num_hidden_layers", "attn_backend_name", "cache_dtype", "is_hma_enabled"}},
	{Version: 2, Change: "remote_request_id in kv_transfer_params", Source: "#29665"},
	{Version: 3, Change: "physical_blocks_per_logical_kv_block in the metadata", Source: "PR not found",
		Adds: []string{"physical_blocks_per_logical_kv_block"}, HashAdds: []string{"cross_layers_blocks"}},
	{Version: 4, Change: "KV block leases renewed through heartbeats", Source: "#41383",
		Adds: []string{"ssm_sizes"}},
	{Version: 5, Change: "remote_blocks_expiry_time in kv_transfer_params; a clock-sync timestamp in the handshake", Source: "#47021"},
	{Version: 6, Change: "EAGLE/MTP speculative configuration must agree", Source: "#49230",
		HashAdds: []string{"speculative_config"}},
	{Version: 7, Change: "the transfer mode (push or pull) in the compatibility hash", Source: "#50620",
		HashAdds: []string{"transfer_mode"}, HashDrops: []string{"cross_layers_blocks"}},
	{Version: 8, Change: "decode and prefill context parallel sizes", Source: "#50611 (unverified)",
		Adds: []string{"dcp_size", "pcp_size"}},
	{Version: 9, Change: "block strides", Source: "PR not found",
		Adds: []string{"block_strides"}},
	{Version: 10, Change: "dense virtual transfer pages for compressed MLA caches", Source: "PR not found"},
	{Version: 11, Change: "per-region transfer geometry and memory types", Source: "#53780",
		Adds: []string{"region_num_blocks", "region_group_ids", "region_names", "region_mem_types"}},
	{Version: 12, Change: "per-region member names (pipeline-parallel push with the hybrid manager)", Source: "#50494",
		Adds: []string{"region_members"}},
	{Version: 15, Change: "kvscope's group-pair protocol: each region member names its layer, KV cache group, global head range and tokens per page", Source: "kvscope", KvscopeOwn: true},
}

// MetadataVersions is the handshake's version history (a copy).
func MetadataVersions() []MetadataVersion { return slices.Clone(metadataVersions) }

// Handshake is the handshake a vLLM version's NixlConnector speaks.
type Handshake struct {
	// Version is NIXL_CONNECTOR_VERSION (0: before it existed).
	Version int `json:"nixl_connector_version"`
	// Wrapped: the answer is NixlHandshakePayload{compatibility_hash,
	// agent_metadata_bytes}; before version 1 it is the metadata itself.
	Wrapped bool `json:"payload_wrapped"`
	// Members are NixlAgentMetadata's members; HashInputs what the
	// compatibility hash covers (none before version 1). TP size, block
	// size and KV cache layout are never hashed: they are checked after
	// the handshake so that P and D may differ in them.
	Members    []string `json:"members"`
	HashInputs []string `json:"hash_inputs"`
	// KvscopeOwn: kvscope's own protocol (the branch profile's), not one
	// vLLM speaks.
	KvscopeOwn bool `json:"kvscope_own,omitempty"`
	// Rule is the table row that set the version, with its evidence.
	Rule Change `json:"rule"`
}

// Handshake is the handshake of this profile's version, built once with
// the profile (its slices are shared: read them, do not change them).
func (p Profile) Handshake() Handshake {
	if p.handshake == nil {
		return buildHandshake(p)
	}
	return *p.handshake
}

// buildHandshake builds a profile's handshake from the history up to its
// NIXL_CONNECTOR_VERSION.
func buildHandshake(p Profile) Handshake {
	h := Handshake{Version: p.NixlVersion, Wrapped: p.NixlVersion >= 1, Members: slices.Clone(baseMembers), HashInputs: []string{}}
	for _, mv := range metadataVersions {
		if mv.Version > p.NixlVersion {
			break
		}
		h.Members = append(h.Members, mv.Adds...)
		for _, d := range mv.HashDrops {
			h.HashInputs = slices.DeleteFunc(h.HashInputs, func(s string) bool { return s == d })
		}
		h.HashInputs = append(h.HashInputs, mv.HashAdds...)
		h.KvscopeOwn = mv.KvscopeOwn
	}
	h.Rule, _ = p.Rule(BHandshake, "")
	return h
}

// Describe says in a few words whose handshake this is and how its
// version is known.
func (h Handshake) Describe() string {
	switch {
	case h.KvscopeOwn:
		return "kvscope's group-pair protocol"
	case h.Version == 0:
		return "before NIXL_CONNECTOR_VERSION, " + string(h.Rule.Evidence)
	}
	return "NIXL_CONNECTOR_VERSION from vLLM " + h.Rule.From + ", " + string(h.Rule.Evidence)
}

// VersionOfMembers is the lowest handshake version whose metadata has
// every member named (and, wrapped, the payload around it): what a
// decoder can tell of an engine's version from what it sent. It returns
// the version and the member that decided it ("" when none did).
func VersionOfMembers(members []string, wrapped bool) (int, string) {
	v, why := 0, ""
	if wrapped {
		v, why = 1, "compatibility_hash"
	}
	for _, mv := range metadataVersions {
		if mv.KvscopeOwn {
			continue
		}
		for _, a := range mv.Adds {
			if slices.Contains(members, a) && mv.Version > v {
				v, why = mv.Version, a
			}
		}
	}
	return v, why
}

// UnknownMembers lists the members no handshake version kvscope has read
// defines (sorted): a newer vLLM's, or a fork's.
func UnknownMembers(members []string) []string {
	known := map[string]bool{"block_len": true} // 0.10.x's single block length
	for _, m := range baseMembers {
		known[m] = true
	}
	for _, mv := range metadataVersions {
		for _, a := range mv.Adds {
			known[a] = true
		}
	}
	var out []string
	for _, m := range members {
		if !known[m] {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// ReleasesSpeaking lists the profiled releases whose handshake has
// version v.
func ReleasesSpeaking(v int) []string {
	var out []string
	for _, r := range releases {
		if For(mustVersion(r.Name)).NixlVersion == v {
			out = append(out, r.Name)
		}
	}
	return out
}
