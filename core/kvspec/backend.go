package kvspec

import (
	"fmt"
	"strings"
)

// Backend describes an attention backend's KV cache rules: which kernel
// block sizes it supports and how it lays out a layer's cache.
type Backend struct {
	Name string
	// MultipleOf, when non-zero, means any multiple of it is a supported
	// kernel block size; otherwise Sizes lists them.
	MultipleOf int
	Sizes      []int
	// BlocksFirst reports whether the cache tensor is [num_blocks, 2, ...]
	// (one region per layer holding K and V) rather than [2, num_blocks, ...].
	BlocksFirst bool
	MLA         bool // an MLA backend
}

// Backends lists the attention backends kvscope knows, by vLLM name.
func Backends() []Backend {
	return []Backend{
		{Name: "FLASH_ATTN", MultipleOf: 16},
		{Name: "FLASHINFER", Sizes: []int{16, 32, 64}, BlocksFirst: true},
		{Name: "TRITON_ATTN", MultipleOf: 16},
		{Name: "FLASH_ATTN_MLA", MultipleOf: 16, MLA: true},
		{Name: "FLASHMLA", Sizes: []int{64}, MLA: true},
		{Name: "CUTLASS_MLA", Sizes: []int{128}, MLA: true},
		{Name: "TRITON_MLA", MultipleOf: 16, MLA: true},
	}
}

// LookupBackend finds a backend by name; "" picks the default for the
// model: FLASH_ATTN, or FLASH_ATTN_MLA for MLA models (vLLM's Hopper
// default in its newest generation).
func LookupBackend(name string, mla bool) (Backend, error) {
	if name == "" {
		name = "FLASH_ATTN"
		if mla {
			name = "FLASH_ATTN_MLA"
		}
	}
	var names []string
	for _, b := range Backends() {
		if strings.EqualFold(b.Name, name) {
			if b.MLA != mla {
				kind := "non-MLA"
				if mla {
					kind = "MLA"
				}
				return Backend{}, optErr("--attention-backend", name, "cannot serve this %s model", kind)
			}
			return b, nil
		}
		names = append(names, b.Name)
	}
	return Backend{}, optErr("--attention-backend", name, "unknown backend (want one of %s)", strings.Join(names, ", "))
}

// Supports reports whether the backend's kernels take this block size.
func (b Backend) Supports(blockSize int) bool {
	if b.MultipleOf > 0 {
		return blockSize%b.MultipleOf == 0
	}
	for _, s := range b.Sizes {
		if s == blockSize {
			return true
		}
	}
	return false
}

// minKernelBlock is the smallest kernel block size the backend supports,
// the alignment the hybrid block size is rounded to.
func (b Backend) minKernelBlock() int {
	if b.MultipleOf > 0 {
		return b.MultipleOf
	}
	m := b.Sizes[0]
	for _, s := range b.Sizes {
		m = min(m, s)
	}
	return m
}

// preferred is the block size vLLM switches to when the configured one is
// not supported.
func (b Backend) preferred() int {
	if b.MultipleOf > 0 {
		return b.MultipleOf
	}
	return b.Sizes[0]
}

// KernelBlockSize is the largest supported kernel block size dividing the
// logical block size (the worker splits a logical block into kernel blocks).
func (b Backend) KernelBlockSize(blockSize int) int {
	if b.Supports(blockSize) {
		return blockSize
	}
	best := 0
	if b.MultipleOf > 0 {
		for k := b.MultipleOf; k <= blockSize; k += b.MultipleOf {
			if blockSize%k == 0 {
				best = k
			}
		}
		return best
	}
	for _, s := range b.Sizes {
		if blockSize%s == 0 && s > best {
			best = s
		}
	}
	return best
}

func (b Backend) String() string { return fmt.Sprintf("%s", b.Name) }
