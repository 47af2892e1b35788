package api

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestClip: a value of at most MaxQuoted bytes is quoted whole; a longer
// one is cut on a character boundary, with an ellipsis and its length.
func TestClip(t *testing.T) {
	long := strings.Repeat("a", 300)
	tests := []struct {
		name, in, want string
	}{
		{"a short value is quoted whole", "0.19.0", `"0.19.0"`},
		{"a value of exactly MaxQuoted bytes is quoted whole", long[:MaxQuoted], `"` + long[:MaxQuoted] + `"`},
		{"a longer value keeps MaxQuoted bytes and says how long it was", long, `"` + long[:MaxQuoted] + `…" (300 bytes)`},
		{"a cut never splits a character", strings.Repeat("é", 200), `"` + strings.Repeat("é", 128) + `…" (400 bytes)`},
		{"a cut one byte into a character drops it", "x" + strings.Repeat("é", 200), `"x` + strings.Repeat("é", 127) + `…" (401 bytes)`},
		{"quotes and controls are escaped", "a\"b\n", `"a\"b\n"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Clip(tt.in); got != tt.want {
				t.Errorf("Clip: %q, want %q", got, tt.want)
			}
		})
	}
}

// TestClipMessage: what a message quotes of the request is clipped
// wherever core or the JSON decoder put it, and the rest survives.
func TestClipMessage(t *testing.T) {
	big := strings.Repeat("9", 1<<20)
	tests := []struct {
		name, in string
		want     []string // substrings of the result
		max      int      // bytes the result may have
	}{
		{"a short message is left alone", `plan: --block-size "x": want a number`, []string{`plan: --block-size "x": want a number`}, 64},
		{"a quoted value is clipped, the text around it kept", fmt.Sprintf("xfer: --connector %q: unknown connector (want nixl)", big),
			[]string{`xfer: --connector "999`, `…" (1048576 bytes): unknown connector (want nixl)`}, 400},
		{"an escaped quote does not end the value", fmt.Sprintf("key %q: bad", `a\"`+big), []string{`key "a\\\"999`, `…" (1048579 bytes): bad`}, 400},
		{"a bare value is clipped, its colon kept", "plan: --vllm-version " + big + ": want a release", []string{"plan: --vllm-version 999", "… (1048576 bytes): want a release"}, 400},
		{"a number the decoder echoes keeps the field after it", "json: cannot unmarshal number " + big + " into Go struct field PDRequest.prompt_tokens of type int",
			[]string{"json: cannot unmarshal number 999", "… (1048576 bytes) into Go struct field PDRequest.prompt_tokens of type int"}, 400},
		{"an unterminated quote is clipped to the end", `key "` + big, []string{`key "999`, `…" (1048576 bytes)`}, 400},
		{"many short words keep the head and the tail", "field: " + strings.Repeat("ab ", 1<<18) + "end",
			[]string{"field: ab ab", "bytes left out) … ", " ab ab end"}, maxErrorBytes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := clipMessage(tt.in)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("%.300q lacks %q", got, w)
				}
			}
			if len(got) > tt.max || !utf8.ValidString(got) {
				t.Errorf("%d bytes (at most %d), valid UTF-8 %v", len(got), tt.max, utf8.ValidString(got))
			}
		})
	}
}

// TestWriteErrorClips: the envelope's message is clipped whatever error
// reaches WriteError.
func TestWriteErrorClips(t *testing.T) {
	w := httptest.NewRecorder()
	WriteError(w, 400, BadData(fmt.Errorf("vllm_version: %w", errors.New("unknown "+strings.Repeat("x", 3<<20)))))
	if body := w.Body.String(); len(body) > 1024 || !strings.Contains(body, "vllm_version: unknown xxx") || !strings.Contains(body, "(3145728 bytes)") {
		t.Errorf("%d bytes: %.400s", len(body), body)
	}
}
