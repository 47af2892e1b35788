package event

import (
	"strings"
	"testing"
)

// TestDetailEvents: a detail event carries dseq instead of seq; Peek and
// DecodeFrame agree on what is one, and a ring counts jumps in the
// detail sequence apart from the stored one.
func TestDetailEvents(t *testing.T) {
	batch := `"batch":{"request":"r","p_rank":0,"d_rank":0,"p_group":0,"d_group":0,"layer":"l","layer_kind":"full","descs":1,"bytes":1,"start_ns":0,"end_ns":1,"timing":"measured"}`
	for _, c := range []struct {
		name, frame, err string
	}{
		{"a batch numbered in the detail sequence is one", `[{"v":1,"agent":"a","seq":0,"dseq":3,"kind":"desc_batch","ts_ns":1,` + batch + `}]`, ""},
		{"a batch with both numbers is refused", `[{"v":1,"agent":"a","seq":2,"dseq":3,"kind":"desc_batch","ts_ns":1,` + batch + `}]`, "dseq"},
		{"a summary in the detail sequence is refused", `[{"v":1,"agent":"a","dseq":3,"kind":"sample","ts_ns":1,"sample":{"gbps":0,"p50_us":0,"p99_us":0,"requests":0,"descs":0,"dropped_events":0}}]`, "not detail"},
		{"an event with neither number is refused", `[{"v":1,"agent":"a","kind":"desc_batch","ts_ns":1,` + batch + `}]`, "seq"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, perr := Peek([]byte(c.frame))
			_, derr := DecodeFrame([]byte(c.frame))
			for what, err := range map[string]error{"Peek": perr, "DecodeFrame": derr} {
				switch {
				case c.err == "" && err != nil:
					t.Errorf("%s: %v", what, err)
				case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
					t.Errorf("%s: %v, want an error naming %q", what, err, c.err)
				}
			}
		})
	}
	r := NewRing(16)
	for _, e := range []Event{{Agent: "a", Seq: 1, Kind: Hello}, {Agent: "a", Detail: 5, Kind: DescBatch}, {Agent: "a", Seq: 2, Kind: Sample},
		{Agent: "a", Detail: 6, Kind: DescBatch}, {Agent: "a", Detail: 9, Kind: DescBatch}, {Agent: "a", Seq: 3, Kind: TransferDone}} {
		r.Add(e)
	}
	if r.Gaps != 0 || r.DetailGaps != 2 {
		t.Errorf("gaps %d, detail gaps %d; want 0 and 2 (dseq 7 and 8)", r.Gaps, r.DetailGaps)
	}
	if DetailSubject("gpu1.x/agent") != "kvscope.detail.gpu1~2Ex/agent" || WatchSubject("a") != "kvscope.watch.a" {
		t.Errorf("subjects: %s %s", DetailSubject("gpu1.x/agent"), WatchSubject("a"))
	}
	if a, err := AgentOfDetail(DetailSubject("gpu1.x/agent")); err != nil || a != "gpu1.x/agent" {
		t.Errorf("AgentOfDetail: %q %v", a, err)
	}
}
