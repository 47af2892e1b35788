// Package event is the live event schema shared by the agent, the server
// hub and the browser app: what an agent reports about its GPUs, its
// registered memory, its handshakes and every transfer it performs.
//
// On the wire every event is a JSON object with at least v (the schema
// version), agent, seq (contiguous per agent, from 1) and kind; a
// websocket frame carries a JSON array of events. Descriptor events are
// aggregated per (P group, D group) and layer: a large request never sends
// one message per descriptor.
//
// A timing is measured or synthesized. The host backend times its own
// copies (measured). NIXL reports completion per request only, so
// per-descriptor times derived from it are synthesized and say so.
package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Version is the schema version every event carries.
const Version = 1

// Kind names an event.
type Kind string

// The event kinds.
const (
	Hello         Kind = "hello"          // an agent introduces itself
	Registration  Kind = "registration"   // a rank registered its KV regions
	Handshake     Kind = "handshake"      // a P/D handshake completed (or was rejected)
	TransferStart Kind = "transfer_start" // a request's transfer was posted
	DescBatch     Kind = "desc_batch"     // descriptors of one layer and group pair moved
	TransferDone  Kind = "transfer_done"  // a request's transfer completed
	Error         Kind = "error"          // something failed
	Sample        Kind = "sample"         // a 1 Hz sample of throughput and latency
	PlanMismatch  Kind = "plan_mismatch"  // a watched engine runs another plan than kvscope predicts
	StuckTransfer Kind = "stuck_transfer" // a transfer or a peer stopped making progress (added in schema 1, backward-compatibly)
)

// IsDetail reports whether events of kind k are per-layer detail (a
// request's descriptor batches and the start that frames them), which an
// agent that splits its events sends on its detail subject, unstored,
// only while a browser draws it; every other kind is a summary, stored.
func IsDetail(k Kind) bool { return k == DescBatch || k == TransferStart }

// Timing says where a duration comes from.
type Timing string

// The timings.
const (
	Measured    Timing = "measured"
	Synthesized Timing = "synthesized"
)

// payloads names each kind's payload (its JSON key), in the order of
// Event's payload fields.
var payloads = [...]struct {
	kind Kind
	key  string
}{
	{Hello, "hello"}, {Registration, "registration"}, {Handshake, "handshake"}, {TransferStart, "start"},
	{DescBatch, "batch"}, {TransferDone, "done"}, {Error, "error"}, {Sample, "sample"}, {PlanMismatch, "mismatch"},
	{StuckTransfer, "stuck"},
}

// payloadIndex is a kind's place in payloads, -1 for an unknown kind.
func payloadIndex(k Kind) int {
	for i, p := range payloads {
		if p.kind == k {
			return i
		}
	}
	return -1
}

// Event is one event. Exactly the payload of its kind is set.
type Event struct {
	V     int    `json:"v"`
	Agent string `json:"agent"`
	Seq   uint64 `json:"seq"`
	Kind  Kind   `json:"kind"`
	TS    int64  `json:"ts_ns"` // wall clock, Unix nanoseconds
	// Stream is the event log's (JetStream's) sequence number of the
	// message that stored it, set by the server that read it back; a
	// browser resumes after the last one it saw. Agents do not set it.
	Stream uint64 `json:"stream_seq,omitempty"`
	// Detail is a detail event's number (IsDetail kinds, sent by an agent
	// that splits its detail from its summaries) in its agent's detail
	// sequence: contiguous per agent process from 1, counting every detail
	// event the agent produced, sent or not, so a jump is detail a
	// watching browser missed. Such an event has no Seq (0): the stored
	// sequence numbers the summaries only.
	Detail uint64 `json:"dseq,omitempty"`

	Hello        *HelloData        `json:"hello,omitempty"`
	Registration *RegistrationData `json:"registration,omitempty"`
	Handshake    *HandshakeData    `json:"handshake,omitempty"`
	Start        *StartData        `json:"start,omitempty"`
	Batch        *BatchData        `json:"batch,omitempty"`
	Done         *DoneData         `json:"done,omitempty"`
	Error        *ErrorData        `json:"error,omitempty"`
	Sample       *SampleData       `json:"sample,omitempty"`
	Mismatch     *MismatchData     `json:"mismatch,omitempty"`
	Stuck        *StuckData        `json:"stuck,omitempty"`
}

// StuckData is a transfer, or a peer, that stopped making progress: a
// NIXL request posted and not completed within the watcher's
// --stuck-after (source ring, or agent for the agent's own transfers), KV
// a prefill engine let expire or notifications that failed (source vllm:
// its counters grew), or a side channel rank that stopped answering
// (source side_channel). Cleared says it is over: the request completed
// late, the rank answers again.
type StuckData struct {
	Request string  `json:"request,omitempty"` // the request as the agent names it (NIXL's ring names none: the watcher's count)
	Engine  string  `json:"engine,omitempty"`  // the engine rank or endpoint, as the hello's engine line names it
	Source  string  `json:"source"`            // ring, agent, vllm or side_channel
	Reason  string  `json:"reason"`            // one line: what was seen and what to check
	SinceNS int64   `json:"since_ns"`          // when it started (posted, first failed), Unix nanoseconds
	AgeS    float64 `json:"age_s,omitempty"`   // how long it had lasted when reported, seconds
	Count   int     `json:"count,omitempty"`   // requests it stands for (expired KV, failed notifications)
	Cleared bool    `json:"cleared,omitempty"` // it is over
}

// MismatchData is one field of a watched engine's plan that differs from
// kvscope's prediction for the engine's model and flags.
type MismatchData struct {
	Engine    string `json:"engine"`    // the engine as watched (its endpoint and index)
	Side      string `json:"side"`      // P or D, as the scenario maps it
	Field     string `json:"field"`     // block_size, num_gpu_blocks, ...
	Observed  string `json:"observed"`  // what the engine reports
	Predicted string `json:"predicted"` // what kvscope plans
	Source    string `json:"source"`    // where the observation comes from (vllm:cache_config_info)
}

// HelloData introduces an agent.
type HelloData struct {
	Host     string `json:"host"`
	Backend  string `json:"backend"` // host, nixl/UCX
	Memory   string `json:"memory"`  // DRAM or VRAM
	Role     string `json:"role"`    // both, p or d
	GPUs     []GPU  `json:"gpus"`
	NoGPU    string `json:"no_gpu,omitempty"` // why there are no GPUs ("no NVIDIA driver")
	Scenario string `json:"scenario"`         // a one-line description
	Model    string `json:"model"`
	// Engine is the engine rank a watched NIXL agent belongs to ("D rank
	// 1 of TP 4 · side channel host:port"), when the watcher knows it.
	Engine string `json:"engine,omitempty"`
}

// GPU is one discovered GPU.
type GPU struct {
	Index       int      `json:"index"`
	Name        string   `json:"name"`
	UUID        string   `json:"uuid"`
	MemoryBytes uint64   `json:"memory_bytes"`
	PCIBusID    string   `json:"pci_bus_id"`
	NVLinks     []NVLink `json:"nvlinks"`
}

// NVLink is one NVLink's state.
type NVLink struct {
	Link int  `json:"link"`
	Up   bool `json:"up"`
}

// RegistrationData is one rank's registered memory.
type RegistrationData struct {
	Side    string `json:"side"` // P or D
	Rank    int    `json:"rank"`
	Regions int    `json:"regions"`
	Bytes   int64  `json:"bytes"`
	Memory  string `json:"memory"` // DRAM or VRAM
}

// HandshakeData is a completed handshake.
type HandshakeData struct {
	Summary   string `json:"summary"`
	Path      string `json:"path"`
	PTP       int    `json:"p_tp"`
	DTP       int    `json:"d_tp"`
	Rejection string `json:"rejection,omitempty"`
	// Verdict and Sentence are a watcher's preflight of the engines it
	// watches, from what their side channels advertise
	// (xfer.PreflightObserved): "ok", "rejected" or "unverified", and the
	// answer in one sentence. Agents that transfer leave them empty.
	Verdict  string `json:"verdict,omitempty"`
	Sentence string `json:"sentence,omitempty"`
}

// StartData is a posted transfer.
type StartData struct {
	Request string `json:"request"`
	Prompt  int    `json:"prompt_tokens"`
	Hit     int    `json:"prefix_hit_tokens"`
	Mode    string `json:"mode"` // pull or push
	Descs   int    `json:"descs"`
	Bytes   int64  `json:"bytes"`
}

// BatchData aggregates the descriptors of one layer between one P rank
// and one D rank for one group pair.
type BatchData struct {
	Request string `json:"request"`
	PRank   int    `json:"p_rank"`
	DRank   int    `json:"d_rank"`
	PGroup  int    `json:"p_group"`
	DGroup  int    `json:"d_group"`
	Layer   string `json:"layer"`
	Kind    string `json:"layer_kind"`
	Descs   int    `json:"descs"`
	Bytes   int64  `json:"bytes"`
	StartNS int64  `json:"start_ns"` // from the transfer's start
	EndNS   int64  `json:"end_ns"`
	Timing  Timing `json:"timing"`
}

// DoneData is a completed transfer.
type DoneData struct {
	Request    string  `json:"request"`
	Bytes      int64   `json:"bytes"`
	Descs      int     `json:"descs"`
	Merged     int     `json:"descs_merged"`
	PrepUS     float64 `json:"prep_us"`
	PostUS     float64 `json:"post_us"`
	TransferUS float64 `json:"transfer_us"`
	GBps       float64 `json:"gbps"` // bytes / 1e9 / transfer seconds
	Timing     Timing  `json:"timing"`
	// Source is the clock behind the figures: "host" (the host backend's
	// Go copies) or "nixl" (NIXL's per-request telemetry).
	Source   string `json:"source,omitempty"`
	Verified string `json:"verified"` // exact, wrong or skipped (sampled out)
	// What the request's detail (its start and descriptor batches) said,
	// summarised, so that the fleet view and the metrics never need the
	// detail: the transfer's mode and prompt, and per rank pair and group
	// pair its descriptors, bytes and layers (at most MaxDonePairs; the
	// rest counted in PairsOmitted). Empty from agents before the split.
	Mode         string     `json:"mode,omitempty"`
	Prompt       int        `json:"prompt_tokens,omitempty"`
	Hit          int        `json:"prefix_hit_tokens,omitempty"`
	Pairs        []PairStat `json:"pairs,omitempty"`
	PairsOmitted int        `json:"pairs_omitted,omitempty"`
}

// MaxDonePairs bounds the pairs a transfer_done lists.
const MaxDonePairs = 64

// PairStat is a request's descriptors between one P rank and one D rank
// for one group pair, summed over its layers.
type PairStat struct {
	PRank  int   `json:"p_rank"`
	DRank  int   `json:"d_rank"`
	PGroup int   `json:"p_group"`
	DGroup int   `json:"d_group"`
	Layers int   `json:"layers"`
	Descs  int   `json:"descs"`
	Bytes  int64 `json:"bytes"`
}

// Summarise folds one descriptor batch of a request into pairs, keeping at
// most MaxDonePairs and reporting whether it was kept (false: omitted).
func Summarise(pairs []PairStat, b *BatchData) ([]PairStat, bool) {
	for i := range pairs {
		p := &pairs[i]
		if p.PRank == b.PRank && p.DRank == b.DRank && p.PGroup == b.PGroup && p.DGroup == b.DGroup {
			p.Layers++
			p.Descs += b.Descs
			p.Bytes += b.Bytes
			return pairs, true
		}
	}
	if len(pairs) >= MaxDonePairs {
		return pairs, false
	}
	return append(pairs, PairStat{PRank: b.PRank, DRank: b.DRank, PGroup: b.PGroup, DGroup: b.DGroup, Layers: 1, Descs: b.Descs, Bytes: b.Bytes}), true
}

// ErrorData reports a failure.
type ErrorData struct {
	Request string `json:"request,omitempty"`
	Status  string `json:"status"` // a NIXL-like status name: ERR_MISMATCH, ERR_BACKEND, ...
	Message string `json:"message"`
}

// SampleData is an agent's last second: throughput and latency over that
// second, with running totals of requests and dropped events.
type SampleData struct {
	GBps          float64 `json:"gbps"`
	P50US         float64 `json:"p50_us"`
	P99US         float64 `json:"p99_us"`
	Requests      int     `json:"requests"` // transfers completed so far (a running total)
	Descs         int     `json:"descs"`
	DroppedEvents uint64  `json:"dropped_events"` // total so far: the agent's queue overflowed
	// DetailThrough is the agent's detail sequence so far (the last dseq it
	// numbered, sent or not), from agents that send detail apart: a
	// browser drawing the agent that has not had that detail a little
	// later knows it was lost (Ring.DetailDue), though no later detail
	// shows the jump.
	DetailThrough uint64 `json:"detail_through,omitempty"`
}

// Limits bound what a frame may hold.
const (
	MaxFrameBytes  = 1 << 20 // one websocket message
	MaxFrameEvents = 4096
	MaxAgentName   = 128 // bytes of an agent's name
)

// Clip bounds free text (an error message, a close reason) to at most n
// bytes, cutting on a rune boundary and ending a cut text with "…".
func Clip(s string, n int) string {
	const mark = "…"
	if len(s) <= n {
		return s
	}
	cut := max(0, n-len(mark))
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// FrameError reports a malformed frame: which event and what is wrong.
type FrameError struct {
	Index  int // the event's position in the frame, -1 for the frame itself
	Field  string
	Reason string
}

func (e *FrameError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("event: frame: %s", e.Reason)
	}
	return fmt.Sprintf("event: event %d: %s: %s", e.Index, e.Field, e.Reason)
}

// CheckAgentName refuses an agent name that is empty, longer than
// MaxAgentName bytes, or holds anything but letters, digits and . _ - : @ /
// + (a newline in a name would forge a line in the server's log).
func CheckAgentName(name string) error {
	if name == "" || len(name) > MaxAgentName {
		return fmt.Errorf("an agent name is 1 to %d characters", MaxAgentName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._-:@/+", c) >= 0 {
			continue
		}
		return fmt.Errorf("agent name %q: character %q at byte %d: use letters, digits and . _ - : @ / +", name, c, i)
	}
	return nil
}

// CheckAgent refuses a frame that carries another agent's events than
// name's (a connection, or a stored message, is one agent's), naming the
// first such event.
func CheckAgent(events []Event, name string) error {
	for i, e := range events {
		if e.Agent != name {
			return &FrameError{Index: i, Field: "agent", Reason: fmt.Sprintf("%q on the connection of agent %q", e.Agent, name)}
		}
	}
	return nil
}

// EncodeFrame writes events as one frame: a JSON array.
func EncodeFrame(events []Event) ([]byte, error) {
	parts := make([][]byte, len(events))
	for i, e := range events {
		b, err := Encode(e)
		if err != nil {
			return nil, err
		}
		parts[i] = b
	}
	return JoinFrame(parts), nil
}

// Encode is one event's JSON, without HTML escaping: a "<" an agent sent
// reaches subscribers as one byte, not six.
func Encode(e Event) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// JoinFrame makes a frame of encoded events.
func JoinFrame(events [][]byte) []byte {
	n := 2
	for _, e := range events {
		n += len(e) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, e := range events {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e...)
	}
	return append(out, ']')
}

// History is the first message the hub sends a subscriber,
// {"history":N,"gone":G,"detail_at":{"agent":dseq}}. Frames of history
// (each agent's state and recent events, one agent wholly in one frame)
// come before the live frames. Gone is, for a browser resuming from the
// event log, the stored messages it missed that the log no longer holds (a
// gap it is told of). DetailAt is, for each agent the browser draws, the
// last dseq the hub handed its browsers before this one joined. Detail is
// never stored or resent: for a browser coming back, what it had not seen
// by then is lost, and a Ring counts it with DetailAt even when the agent
// sends no more; for a new one it is where each agent's detail starts.
type History struct {
	Frames   int               `json:"history"`
	Gone     uint64            `json:"gone,omitempty"`
	DetailAt map[string]uint64 `json:"detail_at,omitempty"`
}

// HistoryHeader is h as the hub sends it.
func HistoryHeader(h History) []byte {
	b, _ := json.Marshal(h)
	return b
}

// ReadHistory reads a history header; ok is false for anything else. A
// "gone" or "detail_at" that does not read as one is left out (0, nil).
func ReadHistory(msg []byte) (h History, ok bool) {
	var raw struct {
		Frames   *int            `json:"history"`
		Gone     json.RawMessage `json:"gone"`
		DetailAt json.RawMessage `json:"detail_at"`
	}
	msg = bytes.TrimSpace(msg)
	if len(msg) == 0 || msg[0] != '{' || json.Unmarshal(msg, &raw) != nil || raw.Frames == nil || *raw.Frames < 0 || *raw.Frames > 1<<20 {
		return History{}, false
	}
	h.Frames = *raw.Frames
	if json.Unmarshal(raw.Gone, &h.Gone) != nil {
		h.Gone = 0
	}
	if json.Unmarshal(raw.DetailAt, &h.DetailAt) != nil {
		h.DetailAt = nil
	}
	return h, true
}

// HistoryCount is ReadHistory's count of history frames.
func HistoryCount(msg []byte) (int, bool) {
	h, ok := ReadHistory(msg)
	return h.Frames, ok
}

// DecodeFrame reads and validates one frame.
func DecodeFrame(data []byte) ([]Event, error) {
	if len(data) > MaxFrameBytes {
		return nil, &FrameError{Index: -1, Reason: fmt.Sprintf("%d bytes exceeds %d", len(data), MaxFrameBytes)}
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '[' {
		return nil, &FrameError{Index: -1, Reason: "not a JSON array of events"}
	}
	// The fast path decodes the whole array at once; only a frame that
	// fails is decoded again event by event, to name the event at fault.
	var out []Event
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err == nil && !dec.More() {
		if len(out) > MaxFrameEvents {
			return nil, &FrameError{Index: -1, Reason: fmt.Sprintf("%d events exceeds %d", len(out), MaxFrameEvents)}
		}
		for i := range out {
			if err := out[i].Validate(); err != nil {
				fe := err.(*FrameError)
				fe.Index = i
				return nil, fe
			}
		}
		return out, nil
	}
	return nil, locate(data)
}

// DecodeEvent reads and validates one event's JSON object (one element
// of a frame, as Peek's Head.Raw holds it).
func DecodeEvent(raw []byte) (Event, error) {
	var e Event
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Event{}, &FrameError{Field: "event", Reason: err.Error()}
	}
	if dec.More() {
		return Event{}, &FrameError{Field: "event", Reason: "trailing data after the event"}
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// locate finds what is wrong with a frame the fast path refused.
func locate(data []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return &FrameError{Index: -1, Reason: "not a JSON array of events: " + err.Error()}
	}
	if len(raw) > MaxFrameEvents {
		return &FrameError{Index: -1, Reason: fmt.Sprintf("%d events exceeds %d", len(raw), MaxFrameEvents)}
	}
	for i, r := range raw {
		var e Event
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return &FrameError{Index: i, Field: "event", Reason: err.Error()}
		}
	}
	return &FrameError{Index: -1, Reason: "trailing data after the array"}
}

// Validate checks the fields every event needs and that the payload
// matches the kind.
func (e *Event) Validate() error {
	bad := func(field, reason string) error { return &FrameError{Field: field, Reason: reason} }
	switch {
	case e.V != Version:
		return bad("v", fmt.Sprintf("version %d, want %d", e.V, Version))
	case CheckAgentName(e.Agent) != nil:
		return bad("agent", CheckAgentName(e.Agent).Error())
	case e.Seq == 0 && e.Detail == 0:
		return bad("seq", "must be positive")
	case e.Seq != 0 && e.Detail != 0:
		return bad("dseq", "a detail event has no seq")
	case e.Detail != 0 && !IsDetail(e.Kind):
		return bad("dseq", fmt.Sprintf("kind %s is not detail", e.Kind))
	}
	set := [len(payloads)]bool{e.Hello != nil, e.Registration != nil, e.Handshake != nil, e.Start != nil, e.Batch != nil,
		e.Done != nil, e.Error != nil, e.Sample != nil, e.Mismatch != nil, e.Stuck != nil}
	i := payloadIndex(e.Kind)
	if i < 0 {
		return bad("kind", fmt.Sprintf("unknown kind %q", e.Kind))
	}
	has := set[i]
	if !has {
		return bad("kind", fmt.Sprintf("kind %s without its payload", e.Kind))
	}
	n := 0
	for _, p := range set {
		if p {
			n++
		}
	}
	if n != 1 {
		return bad("kind", fmt.Sprintf("kind %s carries %d payloads, want 1", e.Kind, n))
	}
	if b := e.Batch; b != nil && (b.Timing != Measured && b.Timing != Synthesized) {
		return bad("batch.timing", fmt.Sprintf("%q is neither measured nor synthesized", b.Timing))
	}
	if d := e.Done; d != nil && (d.Timing != Measured && d.Timing != Synthesized) {
		return bad("done.timing", fmt.Sprintf("%q is neither measured nor synthesized", d.Timing))
	}
	if s := e.Stuck; s != nil {
		switch s.Source {
		case "ring", "agent", "vllm", "side_channel":
		default:
			return bad("stuck.source", fmt.Sprintf("%q is none of ring, agent, vllm, side_channel", s.Source))
		}
		if s.SinceNS <= 0 {
			return bad("stuck.since_ns", fmt.Sprintf("%d: must be positive", s.SinceNS))
		}
	}
	return nil
}
