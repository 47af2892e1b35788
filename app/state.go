package app

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/plan"
)

// Settings is everything the app shows, as it lives in the URL query: a
// view is a shareable link. Engine flags use vLLM's names with a p- or d-
// prefix, as kvscope pd does on the command line.
type Settings struct {
	View      string      // configure, plan, pd, flow, charts or check
	Version   string      // the vLLM version profile ("" = the newest release)
	Model     string      // a bundled model name, or "custom"
	Config    string      // a pasted config.json when Model is "custom"
	Draft     string      // "", a bundled model, "mtp" or "custom"
	DraftJSON string      // a pasted draft config.json
	P, D      plan.Engine // the engines' flags; their versions are Version
	Connector string
	Plans     string // auto, independent or invariant
	Layout    string // split or blocks-first
	Prompt    int
	Hit       int
	Dark      bool
	Tune      TuneSettings
	// Unknown lists the query keys kvscope does not know, and Warnings
	// what a link said in a form that is no longer current (an old key):
	// shown, never silently dropped. Neither is part of the query.
	Unknown  []string
	Warnings []string
}

// TuneSettings is the Tune view's search, as kvscope tune's flags take it
// (every field a range in tune's syntax; "" is tune's default).
type TuneSettings struct {
	TPPairs, BlockSizes, PBlockSizes, MinLayers, Selectors, MNBT, KVDTypes, Connectors string
	Objective, Weights                                                                 string
}

// tuneFields are the Tune view's settings: query key, kvscope tune's flag,
// help, and the field.
var tuneFields = []struct {
	key, flag, help string
	ptr             func(t *TuneSettings) *string
}{
	{"tune-tp-pairs", "--tp-pairs", "P:D pairs (2:4,1:2) or P sizes x D sizes (1,2x2,4,8); default the engines' own", func(t *TuneSettings) *string { return &t.TPPairs }},
	{"tune-block-sizes", "--block-sizes", "D's --block-size: a list and/or from:to:step (default 0,16:1024:16; 0 = the version's)", func(t *TuneSettings) *string { return &t.BlockSizes }},
	{"tune-p-block-sizes", "--p-block-sizes", "P's --block-size values (default P's own)", func(t *TuneSettings) *string { return &t.PBlockSizes }},
	{"tune-min-group-layers", "--min-group-layers", "--min-kv-cache-group-layers, both engines (default their own)", func(t *TuneSettings) *string { return &t.MinLayers }},
	{"tune-selectors", "--selectors", "default, classic, min, balanced, padding-bytes (both engines)", func(t *TuneSettings) *string { return &t.Selectors }},
	{"tune-mnbt", "--mnbt", "D's --max-num-batched-tokens values (default D's own)", func(t *TuneSettings) *string { return &t.MNBT }},
	{"tune-kv-cache-dtypes", "--kv-cache-dtypes", "default, auto, bfloat16, float16, fp8 (both engines)", func(t *TuneSettings) *string { return &t.KVDTypes }},
	{"tune-connectors", "--connectors", "nixl and/or nixl-push (default nixl)", func(t *TuneSettings) *string { return &t.Connectors }},
	{"tune-objective", "--objective", "kv-tokens, concurrency, descriptors, padding or mix", func(t *TuneSettings) *string { return &t.Objective }},
	{"tune-weights", "--weights", "with mix: kv=1,concurrency=0,descriptors=1,padding=0", func(t *TuneSettings) *string { return &t.Weights }},
}

// blankSettings are vLLM's defaults for everything, with no model.
func blankSettings() Settings {
	return Settings{View: "plan", Connector: "nixl", Plans: "auto", Layout: "split", Prompt: 1024}
}

// DefaultSettings is the first view: the seed deployment, Qwen3.6-35B-A3B
// with its DFlash drafter, P at TP 2 and D at TP 4, on the group-pair
// profile (pr58207), the one whose transfers move between the different
// plans P and D choose. A link that names a model starts from the newest
// release instead.
func DefaultSettings() Settings {
	s := blankSettings()
	s.Version = "pr58207"
	s.Model, s.Draft = "Qwen/Qwen3.6-35B-A3B", "z-lab/Qwen3.6-35B-A3B-DFlash"
	s.P = plan.Engine{TensorParallelSize: 2, NumSpeculativeTokens: 7, MaxModelLen: 262144}
	s.D = plan.Engine{TensorParallelSize: 4, NumSpeculativeTokens: 7, MaxModelLen: 262144}
	return s
}

// Views are the app's views in tab order.
var Views = []struct{ ID, Title string }{
	{"configure", "Configure"},
	{"plan", "Plan"},
	{"pd", "P vs D"},
	{"flow", "Descriptor flow"},
	{"charts", "Charts"},
	{"check", "Check"},
	{"tune", "Tune"},
}

// legacyKeys are engine query keys of older links, read into their
// flag with a warning that names the key to use now.
func legacyKeys() map[string]func(e *plan.Engine, v string) (warning string, err error) {
	return map[string]func(*plan.Engine, string) (string, error){
		"kv-cache-memory-gib": func(e *plan.Engine, v string) (string, error) {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || !(n > 0 && n <= 1<<20) {
				return "", fmt.Errorf("%q is not a positive number of GiB", v)
			}
			e.KVCacheMemoryBytes = int64(n * (1 << 30))
			return "kv-cache-memory-bytes=" + plan.FormatBytes(e.KVCacheMemoryBytes), nil
		},
		"no-async-scheduling": func(e *plan.Engine, v string) (string, error) {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "", fmt.Errorf("%q is not true or false", v)
			}
			if !b {
				return "without it (false is the default)", nil
			}
			e.AsyncScheduling, e.NoAsyncScheduling = false, true
			return "async-scheduling=off", nil
		},
	}
}

// FieldErrors maps a field's query key to what is wrong with its value.
type FieldErrors map[string]string

// ParseQuery reads settings from a URL query. A query that names a model
// describes the whole deployment: every setting it leaves out is vLLM's
// default. A query without a model edits the default view (the seed
// deployment). Values that do not parse are reported per field.
func ParseQuery(q url.Values) (Settings, FieldErrors) {
	errs := FieldErrors{}
	s := DefaultSettings()
	if _, ok := q["model"]; ok {
		s = blankSettings()
	}
	str := func(key string, dst *string) {
		if v, ok := q[key]; ok {
			*dst = v[0]
		}
	}
	num := func(key string, dst *int) {
		v, ok := q[key]
		if !ok {
			return
		}
		n, err := strconv.Atoi(strings.TrimSpace(v[0]))
		if err != nil || n < 0 {
			errs[key] = fmt.Sprintf("%q is not a non-negative integer", v[0])
			return
		}
		*dst = n
	}
	str("view", &s.View)
	for _, f := range tuneFields {
		str(f.key, f.ptr(&s.Tune))
	}
	str("vllm-version", &s.Version)
	str("model", &s.Model)
	str("draft", &s.Draft)
	str("connector", &s.Connector)
	str("plans", &s.Plans)
	str("layout", &s.Layout)
	num("prompt-tokens", &s.Prompt)
	num("prefix-hit-tokens", &s.Hit)
	if v := q.Get("theme"); v == "dark" {
		s.Dark = true
	}
	for key, dst := range map[string]*string{"config": &s.Config, "draft-config": &s.DraftJSON} {
		if v, ok := q[key]; ok {
			text, err := unpack(v[0])
			if err != nil {
				errs[key] = "the pasted config in the link is damaged: " + err.Error()
				continue
			}
			*dst = text
		}
	}
	// An engine key without a side applies to both, as the CLI's flags do;
	// a p- or d- key then overrides it on its side.
	legacy := legacyKeys()
	for _, side := range []string{"", "p-", "d-"} {
		targets := map[string][]*plan.Engine{"": {&s.P, &s.D}, "p-": {&s.P}, "d-": {&s.D}}[side]
		for _, f := range plan.Flags() {
			v, ok := q[side+f.Name]
			if !ok {
				continue
			}
			for _, e := range targets {
				if err := f.Set(e, strings.TrimSpace(v[0])); err != nil {
					errs[side+f.Name] = fmt.Sprintf("%q: %v", v[0], err)
				}
			}
		}
		for _, key := range sortedNames(legacy) {
			v, ok := q[side+key]
			if !ok {
				continue
			}
			for _, e := range targets {
				now, err := legacy[key](e, v[0])
				if err != nil {
					errs[side+key] = err.Error()
					continue
				}
				s.Warnings = appendNew(s.Warnings, fmt.Sprintf("the link's %s%s=%s is now written %s%s", side, key, v[0], side, now))
			}
		}
	}
	known := map[string]bool{"view": true, "vllm-version": true, "model": true, "draft": true, "connector": true, "plans": true, "layout": true,
		"prompt-tokens": true, "prefix-hit-tokens": true, "theme": true, "config": true, "draft-config": true}
	for _, side := range []string{"", "p-", "d-"} {
		for _, f := range plan.Flags() {
			known[side+f.Name] = true
		}
		for key := range legacy {
			known[side+key] = true
		}
	}
	for _, f := range tuneFields {
		known[f.key] = true
	}
	for k := range q {
		if !known[k] {
			s.Unknown = append(s.Unknown, k)
		}
	}
	sort.Strings(s.Unknown)
	knownView := false
	for _, v := range Views {
		knownView = knownView || v.ID == s.View
	}
	if !knownView {
		errs["view"] = fmt.Sprintf("unknown view %q", s.View)
		s.View = "plan"
	}
	return s, errs
}

// sortedNames are a map's keys in order.
func sortedNames[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// appendNew appends s unless list holds it already.
func appendNew(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}

// Query writes the settings as a URL query: the model always, everything
// else where it differs from vLLM's defaults. ParseQuery(s.Query()) == s.
func (s Settings) Query() url.Values {
	q := url.Values{}
	b := blankSettings()
	set := func(key, v, def string) {
		if v != def {
			q.Set(key, v)
		}
	}
	q.Set("model", s.Model)
	set("view", s.View, b.View)
	set("vllm-version", s.Version, "")
	set("draft", s.Draft, "")
	set("connector", s.Connector, b.Connector)
	set("plans", s.Plans, b.Plans)
	set("layout", s.Layout, b.Layout)
	set("prompt-tokens", strconv.Itoa(s.Prompt), strconv.Itoa(b.Prompt))
	set("prefix-hit-tokens", strconv.Itoa(s.Hit), "0")
	if s.Dark {
		q.Set("theme", "dark")
	}
	for _, f := range tuneFields {
		set(f.key, *f.ptr(&s.Tune), "")
	}
	if s.Model == "custom" && s.Config != "" {
		q.Set("config", pack(s.Config))
	}
	if s.Draft == "custom" && s.DraftJSON != "" {
		q.Set("draft-config", pack(s.DraftJSON))
	}
	for side, e := range map[string]plan.Engine{"p-": s.P, "d-": s.D} {
		for _, f := range plan.Flags() {
			if v, ok := f.Get(&e); ok {
				q.Set(side+f.Name, v)
			}
		}
	}
	return q
}

// Link is the settings as a relative URL.
func (s Settings) Link() string { return "/?" + encodeSorted(s.Query()) }

// encodeSorted encodes a query with keys in a stable, readable order.
func encodeSorted(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	rank := func(k string) int {
		switch {
		case k == "view":
			return 0
		case k == "model" || k == "draft":
			return 1
		case strings.HasPrefix(k, "p-"):
			return 3
		case strings.HasPrefix(k, "d-"):
			return 4
		}
		return 2
	}
	sort.Slice(keys, func(i, j int) bool {
		if rank(keys[i]) != rank(keys[j]) {
			return rank(keys[i]) < rank(keys[j])
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(k))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(q.Get(k)))
	}
	return b.String()
}

// pack compresses a pasted config for the URL.
func pack(text string) string {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	w.Write([]byte(text))
	w.Close()
	return base64.RawURLEncoding.EncodeToString(buf.Bytes())
}

func unpack(v string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return "", err
	}
	out, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(raw)), 1<<20))
	if err != nil {
		return "", err
	}
	return string(out), nil
}
