package event

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Head is what routing an event needs, read without decoding its payload:
// who sent it, its place in the agent's sequence, its kind and time, and
// its bytes in the frame.
type Head struct {
	Agent  string
	Seq    uint64
	Kind   Kind
	TS     int64
	Stream uint64
	Detail uint64 // dseq: a detail event's number (Event.Detail)
	Raw    []byte // the event's JSON object: a slice of the frame, not a copy
	// Payload is the JSON object of the event's payload (its kind's:
	// "done" for a transfer_done), a slice of Raw; nil when it has none.
	Payload []byte
}

// Peek reads the heads of a frame's events in one pass over its bytes. The
// frame must be well-formed JSON (every payload is checked for that, not
// decoded) and each event's envelope stricter than DecodeFrame asks: each
// top-level key one of the schema's, spelled exactly and at most once; v,
// seq, ts_ns and stream_seq integers; exactly one payload, an object, the
// one its kind names. A frame Peek accepts may still hold a payload
// DecodeFrame refuses (a field of the wrong type): Peek is for frames a
// reader routes, not for frames it trusts.
func Peek(frame []byte) ([]Head, error) {
	if len(frame) > MaxFrameBytes {
		return nil, &FrameError{Index: -1, Reason: fmt.Sprintf("%d bytes exceeds %d", len(frame), MaxFrameBytes)}
	}
	s := scanner{data: frame}
	s.space()
	if !s.take('[') {
		return nil, &FrameError{Index: -1, Reason: "not a JSON array of events"}
	}
	var heads []Head
	var agent string
	s.space()
	if !s.take(']') {
		for {
			if len(heads) == MaxFrameEvents {
				return nil, &FrameError{Index: -1, Reason: fmt.Sprintf("more than %d events", MaxFrameEvents)}
			}
			s.space()
			var h Head
			start := s.i
			if err := s.event(&h, &agent); err != nil {
				if fe, ok := err.(*FrameError); ok {
					fe.Index = len(heads)
					return nil, fe
				}
				return nil, &FrameError{Index: len(heads), Field: "event", Reason: err.Error()}
			}
			h.Raw = frame[start:s.i:s.i]
			heads = append(heads, h)
			s.space()
			if s.take(',') {
				continue
			}
			if s.take(']') {
				break
			}
			return nil, &FrameError{Index: -1, Reason: s.want("',' or ']' after event " + strconv.Itoa(len(heads)-1))}
		}
	}
	s.space()
	if s.i != len(s.data) {
		return nil, &FrameError{Index: -1, Reason: "trailing data after the array"}
	}
	return heads, nil
}

// envelope is the top-level keys of an event besides its payloads.
var envelope = [...]string{"v", "agent", "seq", "kind", "ts_ns", "stream_seq", "dseq"}

// keyIndex is a top-level key's place among the envelope's keys and then
// the payloads', -1 for any other key.
func keyIndex(key []byte) int {
	for i, k := range envelope {
		if string(key) == k {
			return i
		}
	}
	for i, p := range payloads {
		if string(key) == p.key {
			return len(envelope) + i
		}
	}
	return -1
}

// keyName is the key at a keyIndex.
func keyName(i int) string {
	if i < len(envelope) {
		return envelope[i]
	}
	return payloads[i-len(envelope)].key
}

// kindOf is the kind a name spells, as the constant (no copy of b).
func kindOf(b []byte) Kind {
	for _, p := range payloads {
		if string(b) == string(p.kind) {
			return p.kind
		}
	}
	return Kind(b)
}

// event reads one event object into h; agent is the name the last event
// had (reused when this one has it too).
func (s *scanner) event(h *Head, agent *string) error {
	bad := func(field, reason string) error { return &FrameError{Field: field, Reason: reason} }
	var seen uint32
	var version int64
	var given [len(payloads)]int // the payloads present
	ngiven := 0
	err := s.members("event", "", func(key []byte) error {
		k := keyIndex(key)
		switch {
		case k < 0:
			return bad(string(key), "unknown field")
		case seen&(1<<k) != 0:
			return bad(keyName(k), "given twice")
		}
		seen |= 1 << k
		var err error
		switch keyName(k) {
		case "v":
			version, err = s.integer()
		case "agent":
			var b []byte
			if b, err = s.plainString(); err == nil && string(b) != *agent {
				*agent = string(b) // a frame is mostly one agent's: one string for all
			}
			h.Agent = *agent
		case "kind":
			var b []byte
			if b, err = s.plainString(); err == nil {
				h.Kind = kindOf(b)
			}
		case "seq":
			h.Seq, err = s.unsigned()
		case "stream_seq":
			h.Stream, err = s.unsigned()
		case "ts_ns":
			h.TS, err = s.integer()
		case "dseq":
			h.Detail, err = s.unsigned()
		default: // a payload: an object, or null for none
			if s.literal("null") {
				break
			}
			if s.peek() != '{' {
				return bad(keyName(k), s.want("an object"))
			}
			given[ngiven] = k - len(envelope)
			ngiven++
			start := s.i
			if err = s.value(); err == nil {
				h.Payload = s.data[start:s.i:s.i]
			}
		}
		if err != nil {
			return bad(keyName(k), err.Error())
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case version != Version:
		return bad("v", fmt.Sprintf("version %d, want %d", version, Version))
	case CheckAgentName(h.Agent) != nil:
		return bad("agent", CheckAgentName(h.Agent).Error())
	case h.Seq == 0 && h.Detail == 0:
		return bad("seq", "must be positive")
	case h.Seq != 0 && h.Detail != 0:
		return bad("dseq", "a detail event has no seq")
	case h.Detail != 0 && !IsDetail(h.Kind):
		return bad("dseq", fmt.Sprintf("kind %s is not detail", h.Kind))
	}
	i := payloadIndex(h.Kind)
	switch {
	case i < 0:
		return bad("kind", fmt.Sprintf("unknown kind %q", h.Kind))
	case ngiven == 0 || ngiven == 1 && given[0] != i:
		return bad("kind", fmt.Sprintf("kind %s without its payload", h.Kind))
	case ngiven > 1:
		return bad("kind", fmt.Sprintf("kind %s carries %d payloads, want 1", h.Kind, ngiven))
	}
	return nil
}

// maxDepth bounds the nesting of a JSON value, as encoding/json does.
const maxDepth = 10000

// scanner reads JSON from data at i: a validating pass that decodes
// nothing but the scalars asked for.
type scanner struct {
	data []byte
	i    int
}

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

func (s *scanner) take(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// want describes what was expected where the scanner stands.
func (s *scanner) want(what string) string {
	if s.i >= len(s.data) {
		return "want " + what + ", found the end"
	}
	return fmt.Sprintf("want %s at byte %d, found %q", what, s.i, s.data[s.i])
}

func (s *scanner) literal(word string) bool {
	if len(s.data)-s.i >= len(word) && string(s.data[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// str skips a string and reports whether it holds escapes.
func (s *scanner) str() (escaped bool, err error) {
	if !s.take('"') {
		return false, fmt.Errorf("%s", s.want("a string"))
	}
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped, nil
		case c < 0x20:
			return false, fmt.Errorf("control character %q in a string at byte %d", c, s.i)
		case c == '\\':
			escaped = true
			s.i++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for range 4 {
					if !isHex(s.peek()) {
						return false, fmt.Errorf("%s", s.want(`four hex digits after \u`))
					}
					s.i++
				}
			default:
				return false, fmt.Errorf("%s", s.want("an escape"))
			}
		default:
			s.i++
		}
	}
	return false, fmt.Errorf("unterminated string")
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// plainString reads a string without escapes (a key, a name, a kind).
func (s *scanner) plainString() ([]byte, error) {
	start := s.i
	escaped, err := s.str()
	if err != nil {
		return nil, err
	}
	if escaped {
		return nil, fmt.Errorf("string with escapes at byte %d", start)
	}
	return s.data[start+1 : s.i-1], nil
}

// number skips a number and reports whether it is an integer.
func (s *scanner) number() (integer bool, err error) {
	digits := func() int {
		n := 0
		for s.i < len(s.data) && '0' <= s.data[s.i] && s.data[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	s.take('-')
	switch {
	case s.take('0'):
	case digits() == 0:
		return false, fmt.Errorf("%s", s.want("a value"))
	}
	integer = true
	if s.take('.') {
		integer = false
		if digits() == 0 {
			return false, fmt.Errorf("%s", s.want("a digit after '.'"))
		}
	}
	if s.take('e') || s.take('E') {
		integer = false
		if !s.take('+') {
			s.take('-')
		}
		if digits() == 0 {
			return false, fmt.Errorf("%s", s.want("an exponent"))
		}
	}
	return integer, nil
}

// integer reads a signed 64-bit integer.
func (s *scanner) integer() (int64, error) {
	text, err := s.integerText()
	if err != nil {
		return 0, err
	}
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	u, err := parseDigits(text)
	switch {
	case err == nil && !neg && u <= 1<<63-1:
		return int64(u), nil
	case err == nil && neg && u <= 1<<63:
		return -int64(u-1) - 1, nil
	}
	return 0, fmt.Errorf("%s is out of range for a 64-bit integer", s.data[s.i-len(text):s.i])
}

// unsigned reads an unsigned 64-bit integer.
func (s *scanner) unsigned() (uint64, error) {
	text, err := s.integerText()
	if err != nil {
		return 0, err
	}
	if text[0] == '-' {
		return 0, fmt.Errorf("%s is negative", text)
	}
	u, err := parseDigits(text)
	if err != nil {
		return 0, fmt.Errorf("%s is out of range for an unsigned 64-bit integer", text)
	}
	return u, nil
}

// parseDigits is the value of a run of decimal digits, refusing one past
// 64 bits.
func parseDigits(digits []byte) (uint64, error) {
	var u uint64
	for _, c := range digits {
		d := uint64(c - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, errOverflow
		}
		u = u*10 + d
	}
	return u, nil
}

var errOverflow = errors.New("overflow")

func (s *scanner) integerText() ([]byte, error) {
	start := s.i
	integer, err := s.number()
	if err != nil {
		return nil, err
	}
	if !integer {
		return nil, fmt.Errorf("%s is not an integer", s.data[start:s.i])
	}
	return s.data[start:s.i], nil
}

// value skips one JSON value of any kind, checking it is well formed,
// without recursion (a deep value costs a byte of stack per level).
func (s *scanner) value() error {
	var open []byte // the containers the scanner is inside, innermost last
	for {
		// a value
		s.space()
		switch c := s.peek(); c {
		case '{', '[':
			if len(open) == maxDepth {
				return fmt.Errorf("nested deeper than %d at byte %d", maxDepth, s.i)
			}
			s.i++
			s.space()
			if s.take(c + 2) { // '{'+2 is '}', '['+2 is ']'
				break
			}
			open = append(open, c)
			if c == '{' {
				if err := s.key(); err != nil {
					return err
				}
			}
			continue
		case '"':
			if _, err := s.str(); err != nil {
				return err
			}
		case 't':
			if !s.literal("true") {
				return fmt.Errorf("%s", s.want("true"))
			}
		case 'f':
			if !s.literal("false") {
				return fmt.Errorf("%s", s.want("false"))
			}
		case 'n':
			if !s.literal("null") {
				return fmt.Errorf("%s", s.want("null"))
			}
		default:
			if _, err := s.number(); err != nil {
				return err
			}
		}
		// after a value: close what ends here, then the next value
		for {
			if len(open) == 0 {
				return nil
			}
			s.space()
			inner := open[len(open)-1]
			if s.take(inner + 2) {
				open = open[:len(open)-1]
				continue
			}
			if !s.take(',') {
				return fmt.Errorf("%s", s.want(fmt.Sprintf("',' or %q", inner+2)))
			}
			if inner == '{' {
				if err := s.key(); err != nil {
					return err
				}
			}
			break
		}
	}
}

// members reads an object, calling member with each key and the scanner
// at the key's value, which member reads. Errors name the object (what)
// or the key, after prefix.
func (s *scanner) members(what, prefix string, member func(key []byte) error) error {
	if !s.take('{') {
		return &FrameError{Field: what, Reason: s.want("an object")}
	}
	s.space()
	if s.take('}') {
		return nil
	}
	for {
		s.space()
		key, err := s.plainString()
		if err != nil {
			return &FrameError{Field: what, Reason: "key: " + err.Error()}
		}
		s.space()
		if !s.take(':') {
			return &FrameError{Field: prefix + string(key), Reason: s.want("':'")}
		}
		s.space()
		if err := member(key); err != nil {
			return err
		}
		s.space()
		if s.take(',') {
			continue
		}
		if s.take('}') {
			return nil
		}
		return &FrameError{Field: what, Reason: s.want("',' or '}'")}
	}
}

// key reads an object's key and its colon.
func (s *scanner) key() error {
	s.space()
	if _, err := s.str(); err != nil {
		return err
	}
	s.space()
	if !s.take(':') {
		return fmt.Errorf("%s", s.want("':'"))
	}
	return nil
}
