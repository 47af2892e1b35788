package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vllmLog is a real startup log of testdata/vllm-logs.
func vllmLog(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "vllm-logs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCheckTakesOneLogOrTwo: one log (in either slot) is checked as
// kvscope check checks it; two are preflighted as kvscope pd --p-log
// --d-log preflights them (server/pd_logs_test.go holds the same pairs to
// the CLI's verdicts); an error names the side it belongs to.
func TestCheckTakesOneLogOrTwo(t *testing.T) {
	const (
		p0240  = "club3090-612-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log"
		d0240  = "club3090-652-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log"
		q0200  = "qwen36-35b-a3b-nvfp4-v0.20.0-262k.log"
		llama  = "llama31-8b-l4-v0.11.0.log"
		llama3 = "llama3-8b-v0.11.2.log"
	)
	for _, tt := range []struct {
		name    string
		p, d    string
		one     string // the one log's verdict
		pair    string // the pair's verdict
		wantErr string
	}{
		{name: "one log in P's slot is checked alone", p: q0200, one: "match"},
		{name: "one log in D's slot is checked alone", d: q0200, one: "match"},
		{name: "two 0.24.0 logs transfer", p: p0240, d: d0240, pair: "ok"},
		{name: "0.20.0 with Mamba prefix caching is rejected", p: q0200, d: q0200, pair: "rejected"},
		{name: "two models are refused", p: llama, d: llama3, wantErr: "P and D must serve one model"},
		{name: "a D log that is not one names D", p: q0200, d: "not a log at all\n", wantErr: "D's log: "},
		{name: "a P log that is not one names P", p: "not a log at all\n", d: q0200, wantErr: "P's log: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &Root{Catalog: testCatalog()}
			for i, f := range []string{tt.p, tt.d} {
				switch {
				case strings.HasSuffix(f, ".log"):
					c.check.logs[i] = vllmLog(t, f)
				default:
					c.check.logs[i] = f
				}
			}
			c.runCheck()
			st := c.check
			switch {
			case tt.wantErr != "":
				if !strings.Contains(st.err, tt.wantErr) || st.result != nil || st.pair != nil {
					t.Errorf("err %q (result %v, pair %v), want %q", st.err, st.result != nil, st.pair != nil, tt.wantErr)
				}
			case tt.one != "":
				if st.err != "" || st.pair != nil || st.result == nil || st.result.Verdict != tt.one {
					t.Errorf("err %q pair %v result %+v, want the one log's verdict %s", st.err, st.pair != nil, st.result, tt.one)
				}
			default:
				if st.err != "" || st.result != nil || st.pair == nil {
					t.Fatalf("err %q result %v pair %v, want a pair", st.err, st.result != nil, st.pair != nil)
				}
				pf := st.pair.Preflight
				if pf.Verdict != tt.pair || pf.Sentence == "" || len(pf.Facets) == 0 {
					t.Errorf("preflight %+v, want verdict %s with a sentence and facets", pf, tt.pair)
				}
				if tt.pair == "ok" && (pf.Descs == 0 || pf.Bytes == 0 || st.pair.Transfer.Descs < pf.Descs) {
					t.Errorf("an ok pair moves %d descriptors, %d B per rank pair (%d in all)", pf.Descs, pf.Bytes, st.pair.Transfer.Descs)
				}
			}
		})
	}
}

// TestOpenPairKeepsEachSide: opening a checked pair in P vs D plans P and
// D with the engines their own logs imply (they differ), on P's version,
// with the pair's request; the views then compute the same transfer.
func TestOpenPairKeepsEachSide(t *testing.T) {
	c := &Root{Catalog: testCatalog()}
	c.check.logs = [2]string{vllmLog(t, "qwen36-35b-a3b-nvfp4-v0.20.0-262k.log"), vllmLog(t, "qwen36-35b-a3b-nvfp4-mtp2-v0.20.2-262k.log")}
	c.check.prompt = 1000
	c.runCheck()
	if c.check.pair == nil {
		t.Fatalf("no pair: %s", c.check.err)
	}
	s := DefaultSettings()
	c.pairEdit("pd")(&s)
	pc := c.check.pair
	if s.View != "pd" || s.Model != pc.Model.Name || s.Version != pc.P.Profile || s.Prompt != 1000 || s.Draft != "" {
		t.Errorf("settings %+v", s)
	}
	if s.P.KVCacheMemoryBytes != pc.Engines[0].KVCacheMemoryBytes || s.D.KVCacheMemoryBytes != pc.Engines[1].KVCacheMemoryBytes || s.P == s.D {
		t.Errorf("P %+v, D %+v: want each side's engine", s.P, s.D)
	}
	back, errs := ParseQuery(s.Query())
	if len(errs) > 0 || back.P.KVCacheMemoryBytes != s.P.KVCacheMemoryBytes || back.D.NumSpeculativeTokens != s.D.NumSpeculativeTokens {
		t.Errorf("the link does not keep the engines: %v, %+v", errs, back)
	}
}
