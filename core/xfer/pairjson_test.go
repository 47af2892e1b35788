package xfer

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPairJSON: a pair's JSON has every field under its own name, in the
// documented order (the app, the agent's clients and scripts read them).
func TestPairJSON(t *testing.T) {
	p := Pair{
		Src: Loc{1, 2}, Dst: Loc{3, 4}, Len: 5,
		SrcID: 6, DstID: 7, Layer: "model.layers.0.self_attn", Seg: SegV, Lo: 8, Hi: 9,
		Tokens: Span{10, 11}, PGroup: 12, DGroup: 13,
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"src":{"region":1,"offset":2},"dst":{"region":3,"offset":4},"len":5,"src_desc_id":6,"dst_desc_id":7,` +
		`"layer":"model.layers.0.self_attn","segment":"V","lo":8,"hi":9,"tokens":{"Lo":10,"Hi":11},"p_group":12,"d_group":13}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
	var back Pair
	if err := json.NewDecoder(strings.NewReader(string(b))).Decode(&back); err != nil || back != p {
		t.Errorf("decoded %+v (%v), want %+v", back, err, p)
	}
}
