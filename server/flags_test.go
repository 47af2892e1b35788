package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// exampleJSON is a flag's example value as an engine's JSON writes it.
func exampleJSON(f *plan.Flag) string {
	switch f.Kind {
	case plan.IntFlag, plan.FloatFlag, plan.BoolFlag:
		return f.Example
	case plan.ToggleFlag:
		return map[string]string{"on": "true", "off": "false"}[f.Example]
	}
	return `"` + f.Example + `"`
}

// cliArgs is how a command line gives a flag its sample value, with a
// side's prefix or none.
func cliArgs(f *plan.Flag, prefix, text string) []string {
	switch {
	case f.Kind == plan.BoolFlag:
		return []string{"--" + prefix + f.Name}
	case f.Kind == plan.ToggleFlag && text == "off":
		return []string{"--" + prefix + "no-" + f.Name}
	case f.Kind == plan.ToggleFlag:
		return []string{"--" + prefix + f.Name}
	}
	return []string{"--" + prefix + f.Name, text}
}

// TestEveryEngineFlagHasOneName walks the engine-flag table: each flag is
// taken under one name by kvscope plan (--NAME) and kvscope pd (--p-NAME,
// --d-NAME), by the API's engine JSON (its snake-case key), and lands in
// the plan's resolved engine under that key with the value given; kvscope
// help shows it with its default, and GET /api/flags gives the same
// default text for each version. (The app's URL and form walk the same
// table: TestFormTakesEveryEngineFlag in package app.)
func TestEveryEngineFlagHasOneName(t *testing.T) {
	model := modelPath("Qwen__Qwen3-0.6B")
	srv := httptest.NewServer(newMux(catalog(), serveOptions{}))
	defer srv.Close()
	var help bytes.Buffer
	if code := run([]string{"help", "pd"}, &help, &help); code != 0 {
		t.Fatalf("kvscope help pd: exit %d: %s", code, help.String())
	}
	newest := vllm.For(vllm.Newest())
	for _, f := range plan.Flags() {
		t.Run(f.Name, func(t *testing.T) {
			// Each flag's example is a value a plan of Qwen3-0.6B on the newest
			// release accepts and keeps in its resolved engine.
			s := struct{ text, json string }{f.Example, exampleJSON(&f)}
			if s.text == "" {
				t.Fatalf("--%s has no example", f.Name)
			}
			// The resolved engine of plan --json and of the API.
			check := func(how string, out []byte) {
				t.Helper()
				var p struct {
					Engine map[string]json.RawMessage `json:"engine"`
				}
				if err := json.Unmarshal(out, &p); err != nil {
					t.Fatalf("%s: %v\n%s", how, err, out)
				}
				if _, ok := p.Engine[f.JSON()]; !ok {
					t.Errorf("%s: the resolved engine has no key %q", how, f.JSON())
				}
				var e plan.Engine
				raw, _ := json.Marshal(p.Engine)
				if err := json.Unmarshal(raw, &e); err != nil {
					t.Fatalf("%s: the resolved engine does not read back: %v", how, err)
				}
				if got, _ := f.Get(&e); got != s.text {
					t.Errorf("%s: the resolved engine has %s = %q, want %q", how, f.JSON(), got, s.text)
				}
			}
			code, out, errs := runCLI(t, append([]string{"plan", "--model", model, "--json"}, cliArgs(&f, "", s.text)...)...)
			if code != 0 {
				t.Fatalf("kvscope plan --%s %s: exit %d: %s", f.Name, s.text, code, errs)
			}
			check("kvscope plan", []byte(out))
			for _, side := range []string{"p-", "d-"} {
				args := append([]string{"pd", "--model", model, "--prompt-tokens", "100", "--connector", "offloading"}, cliArgs(&f, side, s.text)...)
				if code, _, errs := runCLI(t, args...); code != 0 {
					t.Errorf("kvscope %s: exit %d: %s", strings.Join(args, " "), code, errs)
				}
			}
			body := fmt.Sprintf(`{"model": "Qwen/Qwen3-0.6B", "engine": {%q: %s}}`, f.JSON(), s.json)
			resp, err := http.Post(srv.URL+"/api/plan", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("POST /api/plan %s: %d %s", body, resp.StatusCode, buf.String())
			}
			check("POST /api/plan", buf.Bytes())
			if def := f.Default(&newest); !strings.Contains(help.String(), "--"+f.Name) || !strings.Contains(help.String(), "(default "+def+")") {
				t.Errorf("kvscope help pd does not show --%s with its default %q", f.Name, def)
			}
			for _, v := range []string{"0.11.0", "0.19.0", vllm.Branch, ""} {
				prof, _ := vllm.Lookup(v)
				resp, err := http.Get(srv.URL + "/api/flags?vllm_version=" + v)
				if err != nil {
					t.Fatal(err)
				}
				var list struct {
					Flags []plan.FlagDoc `json:"flags"`
				}
				json.NewDecoder(resp.Body).Decode(&list)
				resp.Body.Close()
				found := false
				for _, d := range list.Flags {
					if d.Name == f.Name {
						found = true
						if d.JSON != f.JSON() || d.Default != f.Default(&prof) {
							t.Errorf("/api/flags?vllm_version=%s: %+v, want key %s and default %q", v, d, f.JSON(), f.Default(&prof))
						}
					}
				}
				if !found {
					t.Errorf("/api/flags?vllm_version=%s lacks %s", v, f.Name)
				}
			}
		})
	}
}

// TestEngineJSONNamesItsErrors: an engine key that is no flag, or a value
// of the wrong kind, is a 400 that names the key; a plan's resolved engine
// posted back plans the same engine.
func TestEngineJSONNamesItsErrors(t *testing.T) {
	srv := httptest.NewServer(newMux(catalog(), serveOptions{}))
	defer srv.Close()
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL+"/api/plan", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.String()
	}
	for _, c := range []struct{ body, want string }{
		{`{"model": "Qwen/Qwen3-0.6B", "engine": {"tensor_parallel": 2}}`, `unknown key \"tensor_parallel\"`},
		{`{"model": "Qwen/Qwen3-0.6B", "engine": {"tensor_parallel_size": "two"}}`, `tensor_parallel_size = \"two\": want a whole number`},
		{`{"model": "Qwen/Qwen3-0.6B", "engine": {"kv_cache_memory_bytes": "lots"}}`, `kv_cache_memory_bytes = \"lots\"`},
		{`{"model": "Qwen/Qwen3-0.6B", "engine": {"async_scheduling": true, "no_async_scheduling": true}}`, `contradict`},
		{`{"model": "Qwen/Qwen3-0.6B", "engine": {"enable_prefix_caching": "maybe"}}`, `enable_prefix_caching`},
	} {
		if code, out := post(c.body); code != 400 || !strings.Contains(out, c.want) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, code, out, c.want)
		}
	}
	code, out, errs := runCLI(t, "plan", "--model", modelPath("Qwen__Qwen3-0.6B"), "--tensor-parallel-size", "2", "--no-async-scheduling", "--kv-cache-memory-bytes", "6.5GiB", "--json")
	if code != 0 {
		t.Fatal(errs)
	}
	var p struct {
		Engine    json.RawMessage `json:"engine"`
		NumBlocks int64           `json:"num_blocks"`
	}
	json.Unmarshal([]byte(out), &p)
	code, back := post(`{"model": "Qwen/Qwen3-0.6B", "engine": ` + string(p.Engine) + `}`)
	var q struct {
		Engine    json.RawMessage `json:"engine"`
		NumBlocks int64           `json:"num_blocks"`
	}
	json.Unmarshal([]byte(back), &q)
	if code != 200 || !bytes.Equal(p.Engine, q.Engine) || p.NumBlocks != q.NumBlocks || p.NumBlocks == 0 {
		t.Errorf("posting plan --json's engine back: %d, engine %s\nwant %s, num_blocks %d and %d", code, q.Engine, p.Engine, q.NumBlocks, p.NumBlocks)
	}
}
