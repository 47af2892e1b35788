package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// UnmarshalJSON reads an engine from JSON whose keys are vLLM's flag
// names in snake case (the engine-flag table's JSON keys, and
// vllm_version), as plan --json writes an engine and the API takes one.
// Numbers are whole numbers, byte counts numbers or sizes such as
// "40GiB"; a toggle is true or false, or "on" or "off", and its "no_"
// twin (no_async_scheduling) is true or false: a resolved engine writes
// both keys of async scheduling, and both false there means unset. A key
// that is no flag, or a value of the wrong kind, is an error that names
// the key. Keys the JSON leaves out keep their value in e; ranges are
// checked when the engine is planned.
func (e *Engine) UnmarshalJSON(data []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return fmt.Errorf("plan: engine: want a JSON object whose keys are vLLM's flags in snake case: %w", err)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		raw := obj[k]
		if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			continue
		}
		if k == "vllm_version" {
			if err := json.Unmarshal(raw, &e.VLLMVersion); err != nil {
				return jsonKeyErr(k, raw, "a version string such as \"0.19.0\"")
			}
			continue
		}
		f, negated, ok := flagByJSON(k)
		if !ok {
			return fmt.Errorf("plan: engine: unknown key %q (the keys are vLLM's flag names in snake case, such as tensor_parallel_size; kvscope help flags lists them)", k)
		}
		if err := f.setJSON(e, k, raw, negated, obj); err != nil {
			return err
		}
	}
	return nil
}

// flagByJSON finds a flag by its JSON key, or a toggle by its "no_" twin.
func flagByJSON(key string) (f *Flag, negated, ok bool) {
	for i := range flagTable {
		f := &flagTable[i]
		switch key {
		case f.JSON():
			return f, false, true
		case "no_" + f.JSON():
			if f.Kind == ToggleFlag {
				return f, true, true
			}
		}
	}
	return nil, false, false
}

// setJSON sets the flag from its JSON value.
func (f *Flag) setJSON(e *Engine, key string, raw json.RawMessage, negated bool, obj map[string]json.RawMessage) error {
	if f.Kind == ToggleFlag {
		return f.setToggleJSON(e, key, raw, negated, obj)
	}
	switch f.Kind {
	case IntFlag:
		n, err := jsonInt(raw)
		if err != nil {
			return jsonKeyErr(key, raw, "a whole number")
		}
		*f.int(e) = n
	case BytesFlag:
		var s string
		if json.Unmarshal(raw, &s) == nil {
			n, err := ParseBytes(s)
			if err != nil {
				return jsonKeyErr(key, raw, "a byte count, or a size such as \"40GiB\"")
			}
			*f.int64(e) = n
			return nil
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
		if err != nil {
			return jsonKeyErr(key, raw, "a byte count, or a size such as \"40GiB\"")
		}
		*f.int64(e) = n
	case FloatFlag:
		if err := json.Unmarshal(raw, f.float(e)); err != nil {
			return jsonKeyErr(key, raw, "a number")
		}
	case ChoiceFlag:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return jsonKeyErr(key, raw, "a string")
		}
		return f.Set(e, s)
	case BoolFlag:
		if err := json.Unmarshal(raw, f.bool(e)); err != nil {
			return jsonKeyErr(key, raw, "true or false")
		}
	}
	return nil
}

// setToggleJSON reads a toggle: true or false (or "on", "off", "") on
// its own key, true or false on its "no_" twin. Where both keys are
// given, as a resolved engine writes async scheduling, true on one of
// them says which, and false on both leaves it unset.
func (f *Flag) setToggleJSON(e *Engine, key string, raw json.RawMessage, negated bool, obj map[string]json.RawMessage) error {
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		var s string
		if negated || json.Unmarshal(raw, &s) != nil {
			return jsonKeyErr(key, raw, "true or false")
		}
		if err := f.Set(e, s); err != nil {
			return jsonKeyErr(key, raw, "true or false, or \"on\" or \"off\"")
		}
		return nil
	}
	twin := "no_" + f.JSON()
	if negated {
		twin = f.JSON()
	}
	_, both := obj[twin]
	on := b != negated
	switch {
	case !both:
		f.setToggle(e, onOff(on))
	case b:
		if v := f.toggle(e); v != "" && v != onOff(on) {
			return fmt.Errorf("plan: engine: %s and %s are both true: they contradict each other", f.JSON(), "no_"+f.JSON())
		}
		f.setToggle(e, onOff(on))
	}
	return nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// jsonInt reads a whole number (a JSON number with no fraction).
func jsonInt(raw json.RawMessage) (int, error) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(n.String(), 10, 0)
	return int(v), err
}

func jsonKeyErr(key string, raw json.RawMessage, want string) error {
	v := string(bytes.TrimSpace(raw))
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	return fmt.Errorf("plan: engine: %s = %s: want %s", key, v, want)
}
