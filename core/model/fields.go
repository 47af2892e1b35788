package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// FieldError reports a config key whose value is missing or unusable.
// Field is the key's path in the JSON ("text_config.num_key_value_heads").
type FieldError struct {
	Field  string
	Value  string // the value as written in the JSON, "" when the key is missing
	Reason string
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("model: %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("model: %s = %s: %s", e.Field, e.Value, e.Reason)
}

// object is one JSON object of a config, with its path for error messages.
type object struct {
	path string
	m    map[string]json.RawMessage
}

func parseObject(path string, data []byte) (object, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		field := path
		if field == "" {
			field = "config.json"
		}
		return object{}, &FieldError{Field: field, Reason: "not a JSON object: " + err.Error()}
	}
	if m == nil {
		return object{}, &FieldError{Field: orRoot(path), Value: "null", Reason: "not a JSON object"}
	}
	if dec.More() {
		return object{}, &FieldError{Field: orRoot(path), Reason: "trailing data after the JSON object"}
	}
	return object{path: path, m: m}, nil
}

func orRoot(path string) string {
	if path == "" {
		return "config.json"
	}
	return path
}

func (o object) field(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

// raw returns the key's raw value, treating JSON null as absent.
func (o object) raw(key string) (json.RawMessage, bool) {
	v, ok := o.m[key]
	if !ok || string(bytes.TrimSpace(v)) == "null" {
		return nil, false
	}
	return v, true
}

func (o object) has(key string) bool {
	_, ok := o.raw(key)
	return ok
}

func (o object) errf(key string, format string, args ...any) error {
	v, _ := o.raw(key)
	return &FieldError{Field: o.field(key), Value: shorten(string(v)), Reason: fmt.Sprintf(format, args...)}
}

func shorten(s string) string {
	s = string(bytes.TrimSpace([]byte(s)))
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// sub returns a nested object, and whether it exists.
func (o object) sub(key string) (object, bool, error) {
	v, ok := o.raw(key)
	if !ok {
		return object{}, false, nil
	}
	s, err := parseObject(o.field(key), v)
	if err != nil {
		return object{}, false, err
	}
	return s, true, nil
}

// intValue parses an integer-valued JSON number (1024 or 1024.0).
func (o object) intValue(key string) (int, bool, error) {
	v, ok := o.raw(key)
	if !ok {
		return 0, false, nil
	}
	var n json.Number
	if err := json.Unmarshal(v, &n); err != nil {
		return 0, true, o.errf(key, "not a number")
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		if i > math.MaxInt32 || i < math.MinInt32 {
			return 0, true, o.errf(key, "out of range")
		}
		return int(i), true, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || math.IsInf(f, 0) || f > math.MaxInt32 || f < math.MinInt32 {
		return 0, true, o.errf(key, "not an integer")
	}
	return int(f), true, nil
}

// positive reads a required positive integer.
func (o object) positive(key string) (int, error) {
	v, ok, err := o.intValue(key)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, &FieldError{Field: o.field(key), Reason: "required key is missing"}
	}
	return v, o.checkRange(key, v)
}

// upperBounds caps dimensions far beyond any real model, so that sizes
// computed from them stay well inside int64.
var upperBounds = map[string]int{
	"num_hidden_layers": 4096, "num_attention_heads": 16384, "num_key_value_heads": 1024,
	"num_global_key_value_heads": 1024, "head_dim": 2048, "global_head_dim": 2048,
	"kv_lora_rank": 2048, "qk_rope_head_dim": 2048, "hidden_size": 1 << 20, "intermediate_size": 1 << 20,
	"linear_num_key_heads": 4096, "linear_num_value_heads": 4096, "linear_key_head_dim": 4096,
	"linear_value_head_dim": 4096, "linear_conv_kernel_dim": 64, "conv_kernel": 64,
	"mamba_num_heads": 4096, "mamba_head_dim": 4096, "n_groups": 4096, "ssm_state_size": 4096,
	"state_size": 4096, "expand": 64, "sliding_window_pattern": 4096, "full_attention_interval": 4096,
	"no_rope_layer_interval": 4096, "sliding_window": 1 << 30, "attention_chunk_size": 1 << 30,
	"mtp_num_hidden_layers": 64, "num_nextn_predict_layers": 64, "num_heads": 4096, "short_conv_kernel_size": 64,
	"v_head_dim": 2048, "swa_head_dim": 2048, "swa_v_head_dim": 2048, "swa_num_key_value_heads": 1024, "swa_num_attention_heads": 16384, "sliding_window_size": 1 << 30,
	"mamba_expand": 64, "mamba_d_state": 4096, "mamba_d_conv": 64, "attn_layer_period": 4096,
}

func (o object) checkRange(key string, v int) error {
	if v <= 0 {
		return o.errf(key, "must be positive")
	}
	if limit, ok := upperBounds[key]; ok && v > limit {
		return o.errf(key, "implausibly large (at most %d)", limit)
	}
	return nil
}

// positiveOr reads an optional positive integer, returning def when absent.
// applied reports whether the default was used.
func (o object) positiveOr(key string, def int) (v int, applied bool, err error) {
	v, ok, err := o.intValue(key)
	if err != nil {
		return 0, false, err
	}
	if !ok {
		return def, true, nil
	}
	return v, false, o.checkRange(key, v)
}

func (o object) str(key string) (string, bool, error) {
	v, ok := o.raw(key)
	if !ok {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", true, o.errf(key, "not a string")
	}
	return s, true, nil
}

func (o object) boolean(key string) (bool, bool, error) {
	v, ok := o.raw(key)
	if !ok {
		return false, false, nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return false, true, o.errf(key, "not a boolean")
	}
	return b, true, nil
}

func (o object) strings(key string) ([]string, bool, error) {
	v, ok := o.raw(key)
	if !ok {
		return nil, false, nil
	}
	var s []string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, true, o.errf(key, "not a list of strings")
	}
	return s, true, nil
}

func (o object) ints(key string) ([]int, bool, error) {
	v, ok := o.raw(key)
	if !ok {
		return nil, false, nil
	}
	var raw []json.Number
	if err := json.Unmarshal(v, &raw); err != nil {
		return nil, true, o.errf(key, "not a list of integers")
	}
	out := make([]int, len(raw))
	for i, n := range raw {
		x, err := strconv.Atoi(string(n))
		if err != nil {
			return nil, true, &FieldError{Field: fmt.Sprintf("%s[%d]", o.field(key), i), Value: string(n), Reason: "not an integer"}
		}
		out[i] = x
	}
	return out, true, nil
}

// firstString returns the first element of a list-of-strings key.
func (o object) firstString(key string) string {
	s, _, err := o.strings(key)
	if err != nil || len(s) == 0 {
		return ""
	}
	return s[0]
}
