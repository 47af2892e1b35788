package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Decode is the event h heads: its envelope from the head, its payload
// decoded as DecodeEvent decodes it (an unknown field refused, Validate's
// checks), except what no reader of summaries uses: a transfer_done's
// pairs, most of its bytes, are skipped (Done.Pairs is nil). A replica
// reads the summaries it aggregates this way, once Peek has read the
// frame; whoever needs the pairs decodes Raw with DecodeEvent.
func (h Head) Decode() (Event, error) { return h.decode(false) }

// Admit decodes the events of a frame an agent sends, as Peek read it,
// for a server to store: each as Head.Decode reads it, and a
// transfer_done's pairs checked as DecodeEvent checks them (each an object
// of PairStat's fields, integers in range), not kept. Where Admit takes an
// event, DecodeEvent does too (browsers read the pairs) and Head.Decode
// reads it back the same (replicas read the stored frame); it is stricter
// than DecodeEvent only in matching keys exactly, as agents write them.
// An error names the event at fault.
func Admit(heads []Head) ([]Event, error) {
	events := make([]Event, len(heads))
	for i, h := range heads {
		e, err := h.decode(true)
		if err != nil {
			if fe, ok := err.(*FrameError); ok {
				fe.Index = i
			}
			return nil, err
		}
		events[i] = e
	}
	return events, nil
}

// decode is Decode, checking a transfer_done's pairs when pairs is set.
func (h Head) decode(pairs bool) (Event, error) {
	e := Event{V: Version, Agent: h.Agent, Seq: h.Seq, Kind: h.Kind, TS: h.TS, Stream: h.Stream, Detail: h.Detail}
	if h.Payload == nil {
		return Event{}, &FrameError{Field: "kind", Reason: "kind " + string(h.Kind) + " without its payload"}
	}
	i := payloadIndex(h.Kind)
	if i < 0 {
		return Event{}, &FrameError{Field: "kind", Reason: "unknown kind " + string(h.Kind)}
	}
	key := payloads[i].key // the payload's JSON key, named in its errors
	var err error
	switch h.Kind {
	case Hello:
		e.Hello, err = decodePayload[HelloData](h.Payload, key)
	case Registration:
		e.Registration, err = decodePayload[RegistrationData](h.Payload, key)
	case Handshake:
		e.Handshake, err = decodePayload[HandshakeData](h.Payload, key)
	case TransferStart:
		e.Start, err = decodePayload[StartData](h.Payload, key)
	case DescBatch:
		e.Batch, err = decodePayload[BatchData](h.Payload, key)
	case TransferDone:
		e.Done, err = readDone(h.Payload, pairs)
	case Error:
		e.Error, err = decodePayload[ErrorData](h.Payload, key)
	case Sample:
		e.Sample, err = decodePayload[SampleData](h.Payload, key)
	case PlanMismatch:
		e.Mismatch, err = decodePayload[MismatchData](h.Payload, key)
	case StuckTransfer:
		e.Stuck, err = decodePayload[StuckData](h.Payload, key)
	}
	if err != nil {
		return Event{}, err
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// decodePayload decodes a payload object strictly, an error naming field.
func decodePayload[T any](raw []byte, field string) (*T, error) {
	v := new(T)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return nil, &FrameError{Field: field, Reason: err.Error()}
	}
	return v, nil
}

// readDone reads a transfer_done's payload in one pass of Peek's scanner,
// the fields a replica aggregates and not its pairs (the summaries' hot
// path: encoding/json's reflection costs several times this). It is
// stricter than encoding/json: keys are matched exactly, as agents write
// them. A value of the wrong type is refused naming its field. The pairs
// are checked to be a list, and with checkPairs to be pair objects.
func readDone(raw []byte, checkPairs bool) (*DoneData, error) {
	d := &DoneData{}
	s := scanner{data: raw}
	bad := func(field string, err error) error {
		return &FrameError{Field: "done." + field, Reason: err.Error()}
	}
	err := s.members("done", "done.", func(key []byte) error {
		if s.literal("null") { // null leaves a field as it is, as encoding/json does
			return nil
		}
		if numeric[string(key)] && !s.startsNumber() {
			return bad(string(key), fmt.Errorf("%s", s.want("a number")))
		}
		var err error
		switch string(key) {
		case "request":
			d.Request, err = s.text()
		case "timing":
			var t string
			t, err = s.text()
			d.Timing = Timing(t)
		case "source":
			d.Source, err = s.text()
		case "verified":
			d.Verified, err = s.text()
		case "mode":
			d.Mode, err = s.text()
		case "bytes":
			d.Bytes, err = s.integer()
		case "descs":
			d.Descs, err = s.int()
		case "descs_merged":
			d.Merged, err = s.int()
		case "prompt_tokens":
			d.Prompt, err = s.int()
		case "prefix_hit_tokens":
			d.Hit, err = s.int()
		case "pairs_omitted":
			d.PairsOmitted, err = s.int()
		case "prep_us":
			d.PrepUS, err = s.float()
		case "post_us":
			d.PostUS, err = s.float()
		case "transfer_us":
			d.TransferUS, err = s.float()
		case "gbps":
			d.GBps, err = s.float()
		case "pairs": // not kept: checked to be a list (of pairs), skipped
			switch {
			case s.peek() != '[':
				err = fmt.Errorf("%s", s.want("a list"))
			case checkPairs:
				return s.pairs()
			default:
				err = s.value()
			}
		default:
			return &FrameError{Field: "done", Reason: fmt.Sprintf("unknown field %q", key)}
		}
		if err != nil {
			return bad(string(key), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if s.space(); s.i != len(raw) {
		return nil, &FrameError{Field: "done", Reason: "trailing data after the object"}
	}
	return d, nil
}

// pairs checks a list of PairStat objects (or nulls, as encoding/json
// takes them) without keeping them.
func (s *scanner) pairs() error {
	s.take('[')
	s.space()
	if s.take(']') {
		return nil
	}
	for n := 0; ; n++ {
		s.space()
		if !s.literal("null") {
			const field = "done.pairs[]" // its index put in on an error only
			err := s.members(field, field+".", func(key []byte) error {
				if s.literal("null") {
					return nil
				}
				var err error
				switch k := string(key); {
				case !pairFields[k]:
					return &FrameError{Field: field, Reason: fmt.Sprintf("unknown field %q", key)}
				case !s.startsNumber():
					err = fmt.Errorf("%s", s.want("a number"))
				case k == "bytes":
					_, err = s.integer()
				default:
					_, err = s.int()
				}
				if err != nil {
					return &FrameError{Field: field + "." + string(key), Reason: err.Error()}
				}
				return nil
			})
			if fe, ok := err.(*FrameError); ok {
				fe.Field = strings.Replace(fe.Field, "[]", fmt.Sprintf("[%d]", n), 1)
			}
			if err != nil {
				return err
			}
		}
		s.space()
		if s.take(',') {
			continue
		}
		if s.take(']') {
			return nil
		}
		return &FrameError{Field: "done.pairs", Reason: s.want("',' or ']'")}
	}
}

// pairFields is PairStat's fields, all integers ("bytes" 64-bit, the
// others ints).
var pairFields = map[string]bool{"p_rank": true, "d_rank": true, "p_group": true, "d_group": true, "layers": true, "descs": true, "bytes": true}

// startsNumber reports whether a number starts at the scanner.
func (s *scanner) startsNumber() bool {
	c := s.peek()
	return c == '-' || '0' <= c && c <= '9'
}

// numeric is the done fields that are numbers.
var numeric = map[string]bool{"bytes": true, "descs": true, "descs_merged": true, "prompt_tokens": true, "prefix_hit_tokens": true,
	"pairs_omitted": true, "prep_us": true, "post_us": true, "transfer_us": true, "gbps": true}

// text reads a string, unescaping it when it holds escapes.
func (s *scanner) text() (string, error) {
	start := s.i
	escaped, err := s.str()
	if err != nil {
		return "", err
	}
	// A string with neither escapes nor invalid UTF-8 is its bytes;
	// any other encoding/json reads (each invalid byte becomes U+FFFD), so
	// that Head.Decode and DecodeEvent never read one string two ways.
	if body := s.data[start+1 : s.i-1]; !escaped && utf8.Valid(body) {
		return string(body), nil
	}
	var out string
	if err := json.Unmarshal(s.data[start:s.i], &out); err != nil {
		return "", err
	}
	return out, nil
}

// int reads an integer that fits an int.
func (s *scanner) int() (int, error) {
	v, err := s.integer()
	if err != nil {
		return 0, err
	}
	if int64(int(v)) != v {
		return 0, fmt.Errorf("%d is out of range for an int", v)
	}
	return int(v), nil
}

// float reads a number as a float64.
func (s *scanner) float() (float64, error) {
	start := s.i
	if _, err := s.number(); err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(string(s.data[start:s.i]), 64)
	if err != nil {
		return 0, fmt.Errorf("%s is out of range for a float", s.data[start:s.i])
	}
	return f, nil
}
