package peer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/event"
)

// TestMessagesOnTheWire holds each message to the bytes the protocol
// defines (written out by hand from the message table): two agents of
// different builds must keep understanding each other.
func TestMessagesOnTheWire(t *testing.T) {
	tests := []struct {
		name    string
		typ     byte
		payload [][]byte
		want    string
	}{
		{"a ready names the request", MsgReady, [][]byte{[]byte(`{"id":"r1"}`)}, "R\x00\x00\x00\x0b{\"id\":\"r1\"}"},
		{"an empty error", MsgError, nil, "E\x00\x00\x00\x00"},
		{"data of several descriptors is one payload", MsgData, [][]byte{[]byte("ab"), nil, []byte("cde")}, "B\x00\x00\x00\x05abcde"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := bufio.NewWriter(&buf)
			if err := WriteMsg(w, tt.typ, tt.payload...); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tt.want {
				t.Fatalf("WriteMsg wrote %q, want %q", got, tt.want)
			}
			typ, body, err := ReadMsg(bufio.NewReader(strings.NewReader(tt.want)), 1<<10)
			if err != nil || typ != tt.typ || string(body) != tt.want[5:] {
				t.Fatalf("ReadMsg read %q %q (%v), want %q %q", typ, body, err, tt.typ, tt.want[5:])
			}
		})
	}
}

// TestBodiesOnTheWire holds each JSON body to the bytes the protocol
// defines: key names and order.
func TestBodiesOnTheWire(t *testing.T) {
	tests := []struct {
		name string
		body any
		want string
	}{
		{"a hello of a data connection over TCP", Hello{Token: "t", Session: "s", Conn: 1},
			`{"token":"t","session":"s","conn":1,"d":null}`},
		{"a hello with NIXL", Hello{Session: "s", NIXL: &NIXLHello{Agent: "a-D", MD: []byte{1, 2}}},
			`{"token":"","session":"s","conn":0,"d":null,"nixl":{"agent":"a-D","md":"AQI="}}`},
		{"a prefill", Prefill{ID: "r", PromptTokens: 100, PrefixHitTokens: 16},
			`{"id":"r","prompt_tokens":100,"prefix_hit_tokens":16}`},
		{"a ready", Ready{ID: "r<1>"}, `{"id":"r\u003c1\u003e"}`},
		{"a push", Push{Notif: "r:done"}, `{"notif":"r:done"}`},
		{"a push's report", Report{Bytes: 1, Descs: 2, Merged: 3, PrepUS: 0.5, PostUS: 1.5, TransferUS: 2, Timing: event.Measured, Source: "nixl"},
			`{"bytes":1,"descs":2,"descs_merged":3,"prep_us":0.5,"post_us":1.5,"transfer_us":2,"timing":"measured","source":"nixl","batches":null}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.body)
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %s (%v), want %s", got, err, tt.want)
			}
		})
	}
}

// TestReadHeaderRefusesOversizedMessages: a length over the limit is
// refused from the header, before the payload is read.
func TestReadHeaderRefusesOversizedMessages(t *testing.T) {
	r := bufio.NewReader(strings.NewReader("Q\x00\x00\x00\x11"))
	if _, _, err := ReadHeader(r, 16); err == nil || err.Error() != "message 'Q' of 17 bytes exceeds 16" {
		t.Fatalf("ReadHeader: %v", err)
	}
	r = bufio.NewReader(strings.NewReader("Q\x00\x00\x00\x10"))
	if typ, n, err := ReadHeader(r, 16); err != nil || typ != MsgRead || n != 16 {
		t.Fatalf("ReadHeader at the limit: %q %d %v", typ, n, err)
	}
}

func TestErrorNamesTheOperation(t *testing.T) {
	cause := bytes.ErrTooLarge
	err := &Error{Op: "read", Err: cause}
	if err.Error() != "peer read: bytes.Buffer: too large" || err.Unwrap() != cause {
		t.Fatalf("%v, unwraps to %v", err, err.Unwrap())
	}
}
