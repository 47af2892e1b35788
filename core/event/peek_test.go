package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// mixedFrame is a frame of every kind of event the hub routes, the way an
// agent encodes them.
func mixedFrame(t testing.TB) ([]Event, []byte) {
	events := []Event{
		{V: Version, Agent: "host-1/agent", Seq: 7, Kind: Hello, TS: 1_700_000_000_000_000_000, Hello: &HelloData{Host: "h", Backend: "host", GPUs: []GPU{}}},
		{V: Version, Agent: "host-1/agent", Seq: 8, Kind: DescBatch, TS: -5, Stream: 42, Batch: &BatchData{Request: `r"1\` + "\u00e9<", Layer: "L3", Descs: 12, Bytes: 4096, Timing: Measured}},
		{V: Version, Agent: "host-1/agent", Seq: 1 << 63, Kind: TransferDone, Done: &DoneData{Request: "r1", Bytes: 4096, Timing: Synthesized, Verified: "exact"}},
		{V: Version, Agent: "host-1/agent", Seq: 10, Kind: Error, Error: &ErrorData{Status: "NIXL_ERR_BACKEND", Message: "{[\"]}"}},
	}
	frame, err := EncodeFrame(events)
	if err != nil {
		t.Fatal(err)
	}
	return events, frame
}

func TestPeekReadsWhatDecodeFrameReads(t *testing.T) {
	events, frame := mixedFrame(t)
	// Whitespace wherever JSON allows it changes nothing.
	spaced := bytes.ReplaceAll(frame, []byte(`,"`), []byte(" ,\n\t\"")) // inside strings too: the request is escaped, not spaced
	for _, data := range [][]byte{frame, spaced, append(append([]byte(" \r\n"), frame...), ' ')} {
		heads, err := Peek(data)
		if err != nil {
			t.Fatalf("Peek(%s): %v", data, err)
		}
		decoded, err := DecodeFrame(data)
		if err != nil {
			t.Fatalf("DecodeFrame(%s): %v", data, err)
		}
		if len(heads) != len(events) || len(decoded) != len(events) {
			t.Fatalf("%d heads, %d decoded, want %d", len(heads), len(decoded), len(events))
		}
		for i, h := range heads {
			e := decoded[i]
			if h.Agent != e.Agent || h.Seq != e.Seq || h.Kind != e.Kind || h.TS != e.TS || h.Stream != e.Stream {
				t.Errorf("event %d: head %+v, decoded %+v", i, h, e)
			}
			// Raw is exactly the event: it decodes alone to the same event.
			one, err := DecodeFrame(append(append([]byte{'['}, h.Raw...), ']'))
			if err != nil || len(one) != 1 || one[0].Seq != e.Seq || one[0].Kind != e.Kind {
				t.Errorf("event %d: Raw %s decodes to %+v, %v", i, h.Raw, one, err)
			}
		}
	}
	if heads, err := Peek([]byte(" [ ] ")); err != nil || len(heads) != 0 {
		t.Errorf("empty frame: %v, %v", heads, err)
	}
}

func TestPeekRefusesWithAReason(t *testing.T) {
	ev := func(fields string) string { return `[{"v":1,"agent":"a","seq":1,` + fields + `}]` }
	tests := []struct {
		name, frame, want string
	}{
		{"not an array", `{"v":1}`, "not a JSON array"},
		{"trailing data", `[] []`, "trailing data"},
		{"unterminated array", `[` + ev(`"kind":"sample","sample":{}`)[1:len(ev(`"kind":"sample","sample":{}`))-1], "',' or ']'"},
		{"an event not an object", `[1]`, "an object"},
		{"unknown field", ev(`"kind":"sample","sample":{},"extra":1`), "extra: unknown field"},
		{"key in another case", ev(`"Kind":"sample","sample":{}`), "Kind: unknown field"},
		{"escaped key", ev(`"kin\u0064":"sample","sample":{}`), "string with escapes"},
		{"key twice", ev(`"kind":"sample","sample":{},"seq":2`), "seq: given twice"},
		{"wrong version", `[{"v":2,"agent":"a","seq":1,"kind":"sample","sample":{}}]`, "version 2, want 1"},
		{"seq zero", `[{"v":1,"agent":"a","seq":0,"kind":"sample","sample":{}}]`, "seq: must be positive"},
		{"seq negative", `[{"v":1,"agent":"a","seq":-1,"kind":"sample","sample":{}}]`, "seq: "},
		{"seq a float", `[{"v":1,"agent":"a","seq":1.0,"kind":"sample","sample":{}}]`, "1.0 is not an integer"},
		{"seq a string", `[{"v":1,"agent":"a","seq":"1","kind":"sample","sample":{}}]`, "seq: "},
		{"seq past 64 bits", `[{"v":1,"agent":"a","seq":18446744073709551616,"kind":"sample","sample":{}}]`, "out of range"},
		{"ts past 64 bits", ev(`"ts_ns":-9223372036854775809,"kind":"sample","sample":{}`), "out of range"},
		{"leading zero", `[{"v":1,"agent":"a","seq":01,"kind":"sample","sample":{}}]`, "',' or '}'"},
		{"bad agent", `[{"v":1,"agent":"a b","seq":1,"kind":"sample","sample":{}}]`, "agent: "},
		{"unknown kind", ev(`"kind":"gossip","sample":{}`), `unknown kind "gossip"`},
		{"payload missing", ev(`"kind":"sample"`), "without its payload"},
		{"another kind's payload", ev(`"kind":"sample","done":{}`), "without its payload"},
		{"two payloads", ev(`"kind":"sample","sample":{},"done":{}`), "carries 2 payloads"},
		{"payload not an object", ev(`"kind":"sample","sample":[1]`), "sample: want an object"},
		{"control character", ev(`"kind":"sample","sample":{"x":"a` + "\n" + `"}}`), "control character"},
		{"bad escape", ev(`"kind":"sample","sample":{"x":"\q"}`), "an escape"},
		{"short unicode escape", ev(`"kind":"sample","sample":{"x":"\u12"}`), "hex digits"},
		{"bad literal", ev(`"kind":"sample","sample":{"x":nul}`), "null"},
		{"missing colon", ev(`"kind":"sample","sample":{"x" 1}`), "':'"},
		{"unclosed payload", `[{"v":1,"agent":"a","seq":1,"kind":"sample","sample":{"x":[1,2}}]`, `',' or ']'`},
		{"too deep", ev(`"kind":"sample","sample":{"x":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + "}"), "nested deeper"},
		{"too big", "[" + strings.Repeat(" ", MaxFrameBytes) + "]", "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Peek([]byte(tt.frame))
			var fe *FrameError
			if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Peek(%.80s) = %v, want a FrameError with %q", tt.frame, err, tt.want)
			}
		})
	}
	var many strings.Builder
	many.WriteString("[")
	for i := range MaxFrameEvents + 1 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`{"v":1,"agent":"a","seq":1,"kind":"sample","sample":{}}`)
	}
	many.WriteString("]")
	if _, err := Peek([]byte(many.String())); err == nil || !strings.Contains(err.Error(), "more than 4096 events") {
		t.Errorf("%d events: %v", MaxFrameEvents+1, err)
	}
}

// FuzzPeek holds Peek against encoding/json: what Peek accepts is valid
// JSON, its heads are what DecodeFrame reads where that accepts the frame
// too, and every frame DecodeFrame accepts, re-encoded as agents encode,
// Peek accepts.
func FuzzPeek(f *testing.F) {
	_, frame := mixedFrame(f)
	f.Add(frame)
	f.Add([]byte(`[{"v":1,"agent":"a","seq":1,"kind":"desc_batch","batch":{"x":[1,-2.5e3,true,null,{"y":"\u00e9\n"}]}}]`))
	f.Add([]byte(`[ ]`))
	f.Add([]byte(`[{"v":1,"agent":"a","seq":1,"kind":"transfer_done","done":{"request":"r\n","bytes":-1,"descs":null,"gbps":1e-7,"timing":"measured","pairs":[{"p_rank":1}],"verified":"exact","Bytes":2}}]`))
	f.Add([]byte(`[{"v":1,"agent":"a","seq":1,"kind":"sample","sample":{},"sample":{}}]`))
	f.Add([]byte(`[{"v":1,"agent":"a","seq":1,"kind":"transfer_done","done":{"request":"r","timing":"measured","verified":"exact","pairs":[null,{"p_rank":"1","bytes":2.5,"x":1}]}}]`))
	// Invalid UTF-8, raw and escaped, which encoding/json reads as U+FFFD
	// (CI's fuzzer found Head.Decode keeping the raw byte).
	f.Add([]byte("[{\"v\":1,\"agent\":\"t\",\"seq\":2,\"kind\":\"transfer_done\",\"done\":{\"timing\":\"synthesized\",\"verified\":\"\xff\",\"request\":\"\xed\xa0\x80\\ud800\"}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		heads, perr := Peek(data)
		events, derr := DecodeFrame(data)
		if perr != nil {
			var fe *FrameError
			if !errors.As(perr, &fe) {
				t.Fatalf("error %v is not a FrameError", perr)
			}
		} else {
			if !json.Valid(data) {
				t.Fatalf("Peek accepted invalid JSON %q", data)
			}
			if derr == nil {
				if len(heads) != len(events) {
					t.Fatalf("%d heads, %d events", len(heads), len(events))
				}
				for i, h := range heads {
					e := events[i]
					if h.Agent != e.Agent || h.Seq != e.Seq || h.Kind != e.Kind || h.TS != e.TS || h.Stream != e.Stream {
						t.Fatalf("event %d: head %+v, decoded %+v", i, h, e)
					}
				}
			}
		}
		if derr == nil {
			again, err := EncodeFrame(events)
			if err != nil {
				t.Fatal(err)
			}
			heads, err := Peek(again)
			if err != nil || len(heads) != len(events) {
				t.Fatalf("Peek refuses what agents encode, %s: %v", again, err)
			}
			// What an agent encodes, Head.Decode reads as DecodeEvent does
			// (a transfer_done's pairs left out).
			for i, h := range heads {
				got, err := h.Decode()
				if err != nil {
					t.Fatalf("Head.Decode refuses what agents encode, %s: %v", h.Raw, err)
				}
				if !reflect.DeepEqual(got, unpaired(events[i])) {
					t.Fatalf("Head.Decode(%s) = %+v, DecodeEvent without pairs %+v", h.Raw, got, unpaired(events[i]))
				}
			}
		}
		for _, h := range heads { // whatever the frame: never two readings
			got, herr := h.Decode()
			whole, werr := DecodeEvent(h.Raw)
			if herr == nil && werr == nil && !reflect.DeepEqual(got, unpaired(whole)) {
				t.Fatalf("Head.Decode(%s) = %+v, DecodeEvent without pairs %+v", h.Raw, got, unpaired(whole))
			}
			// What a server admits, browsers (DecodeEvent) and replicas
			// (Head.Decode) read, the same.
			admitted, aerr := Admit([]Head{h})
			if aerr == nil && (werr != nil || herr != nil) {
				t.Fatalf("Admit took %s, which DecodeEvent (%v) or Head.Decode (%v) refuses", h.Raw, werr, herr)
			}
			if aerr == nil && !reflect.DeepEqual(admitted[0], got) {
				t.Fatalf("Admit(%s) = %+v, Head.Decode %+v", h.Raw, admitted[0], got)
			}
		}
	})
}

func BenchmarkPeek(b *testing.B) {
	// A frame of 256 descriptor batches, as a busy agent sends them:
	// Peek against decoding it (the baseline, in the same run).
	events := make([]Event, 256)
	for i := range events {
		events[i] = Event{V: Version, Agent: "host-17/agent", Seq: uint64(i + 1), Kind: DescBatch, TS: 1_700_000_000_000_000_000 + int64(i),
			Batch: &BatchData{Request: "req-1234", PRank: 1, DRank: 3, Layer: "model.layers.17.self_attn", Kind: "full", Descs: 8, Bytes: 131072, EndNS: 4000, Timing: Measured}}
	}
	frame, err := EncodeFrame(events)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("peek", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for range b.N {
			if _, err := Peek(frame); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-baseline", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for range b.N {
			if _, err := DecodeFrame(frame); err != nil {
				b.Fatal(err)
			}
		}
	})
}
