package app

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/event"
)

var t0 = time.Unix(1_700_000_000, 0)

// feed numbers events per agent from 1, as an agent does.
type feed struct{ seq map[string]uint64 }

func (f *feed) ev(agent string, e event.Event) event.Event {
	if f.seq == nil {
		f.seq = map[string]uint64{}
	}
	f.seq[agent]++
	e.V, e.Agent, e.Seq = event.Version, agent, f.seq[agent]
	if e.TS == 0 {
		e.TS = t0.UnixNano() + int64(e.Seq)*1e6
	}
	return e
}

func batch(p, d, pg, dg int, bytes int64, timing event.Timing) event.Event {
	return event.Event{Kind: event.DescBatch, Batch: &event.BatchData{Request: "r", PRank: p, DRank: d, PGroup: pg, DGroup: dg,
		Layer: fmt.Sprintf("L%d", pg), Kind: "full", Descs: 4, Bytes: bytes, StartNS: 0, EndNS: 1000, Timing: timing}}
}

func TestLiveBandsComeFromTheEvents(t *testing.T) {
	l := NewLive()
	var f feed
	add := func(e event.Event) { l.Add(f.ev("a", e), t0) }
	// The agent's deployment: P TP 2, D TP 4, two groups on P, three on D.
	add(event.Event{Kind: event.Handshake, Handshake: &event.HandshakeData{Summary: "s", PTP: 2, DTP: 4}})
	add(batch(0, 1, 0, 2, 100, event.Measured))
	add(batch(0, 1, 0, 2, 50, event.Measured))
	add(batch(1, 3, 1, 0, 7, event.Measured))
	add(batch(1, 3, 1, 0, 7, event.Measured))
	add(batch(300, 0, 0, 0, 9, event.Measured)) // beyond what the view draws
	a := l.agents["a"]
	bands := a.Bands()
	if len(bands) != 2 {
		t.Fatalf("%d bands, want 2: %+v", len(bands), bands)
	}
	if b := bands[0]; b.bandKey != (bandKey{0, 1, 0, 2}) || b.Bytes != 150 || b.Batches != 2 || b.Descs != 8 {
		t.Errorf("first band %+v, want P0→D1 g0→g2 with 150 bytes in 2 batches, 8 descriptors", b)
	}
	if b := bands[1]; b.bandKey != (bandKey{1, 3, 1, 0}) || b.Bytes != 14 {
		t.Errorf("second band %+v", b)
	}
	if a.PRanks != 2 || a.DRanks != 4 || a.PGroups != 2 || a.DGroups != 3 {
		t.Errorf("deployment P%d D%d ranks, P%d D%d groups; want 2, 4 ranks and 2, 3 groups", a.PRanks, a.DRanks, a.PGroups, a.DGroups)
	}
	if a.Undrawn != 1 || a.Bytes != 150+14+9 {
		t.Errorf("undrawn %d, bytes %d; want 1 and 173", a.Undrawn, a.Bytes)
	}
}

func TestLiveRingStaysBoundedAndCountsWhatWasMissed(t *testing.T) {
	l := NewLive()
	var f feed
	sent := []event.Event{}
	for i := 0; i < liveRingSize+1000; i++ {
		e := f.ev("a", batch(0, 0, 0, 0, 1, event.Measured))
		sent = append(sent, e)
		if i == 10 || i == 11 {
			continue // lost on the way
		}
		l.Add(e, t0)
	}
	if l.Ring.Len() != liveRingSize || l.Ring.Total != uint64(len(sent)-2) || l.Ring.Gaps != 2 {
		t.Errorf("ring holds %d of %d, gaps %d; want %d, %d, 2", l.Ring.Len(), l.Ring.Total, l.Ring.Gaps, liveRingSize, len(sent)-2)
	}
	band := l.agents["a"].bands[bandKey{}]
	if band.Bytes != int64(len(sent)-2) {
		t.Errorf("the band counts %d bytes, want every batch received (%d), not only those the ring keeps", band.Bytes, len(sent)-2)
	}
	// A reconnect replays recent events: they are ignored, not counted twice.
	for _, e := range sent[len(sent)-2048:] {
		l.Add(e, t0)
	}
	if band.Bytes != int64(len(sent)-2) || l.Ignored != 2048 {
		t.Errorf("after a replay: %d bytes, %d ignored; want %d and 2048", band.Bytes, l.Ignored, len(sent)-2)
	}
	html := liveStatsHTML(l, liveStatus{State: "open"}, false, 0)
	if !strings.Contains(html, `data-testid="live-gaps" data-count="2"`) || !strings.Contains(html, `data-testid="live-ignored" data-count="2048"`) {
		t.Errorf("the counters do not show the gaps and repeats: %s", html)
	}
}

func TestLiveListsAreBoundedNewestFirst(t *testing.T) {
	l := NewLive()
	var f feed
	for i := 1; i <= 50; i++ {
		verdict := "exact"
		if i%10 == 0 {
			verdict = "skipped"
		}
		l.Add(f.ev("a", event.Event{Kind: event.TransferDone, Done: &event.DoneData{Request: fmt.Sprintf("req-%d", i), Bytes: 1 << 20,
			Timing: event.Measured, Verified: verdict}}), t0)
	}
	l.Add(f.ev("a", event.Event{Kind: event.Error, Error: &event.ErrorData{Request: "req-51", Status: "ERR_MISMATCH", Message: "D's bytes are <wrong>"}}), t0)
	if len(l.Transfers) != liveRecent || l.Transfers[liveRecent-1].Request != "req-50" {
		t.Fatalf("%d transfers listed, the last %q; want %d ending at req-50", len(l.Transfers), l.Transfers[len(l.Transfers)-1].Request, liveRecent)
	}
	if l.Verified["exact"] != 45 || l.Verified["skipped"] != 5 {
		t.Errorf("verified %v, want 45 exact and 5 skipped over all 50, not only the listed ones", l.Verified)
	}
	html := liveTransfersHTML(l)
	if first := strings.Index(html, "req-50"); first < 0 || first > strings.Index(html, "req-49") {
		t.Errorf("the newest transfer is not listed first")
	}
	if strings.Contains(html, ">req-30<") || strings.Count(html, `data-testid="live-transfer"`) != liveRecent {
		t.Errorf("more than the last %d transfers are listed", liveRecent)
	}
	if !strings.Contains(html, "ERR_MISMATCH") || !strings.Contains(html, "D&#39;s bytes are &lt;wrong&gt;") {
		t.Errorf("the error is not listed, escaped: %s", html)
	}
	stats := liveStatsHTML(l, liveStatus{State: "open"}, false, 0)
	if !strings.Contains(stats, `data-testid="live-verified" data-count="45"`) {
		t.Errorf("the verified count is not shown: %s", stats)
	}
}

func TestLiveTimingStyle(t *testing.T) {
	tests := []struct {
		name                  string
		measured, synthesized int64
		want                  event.Timing
	}{
		{"every batch measured draws measured", 5, 0, event.Measured},
		{"every batch synthesized draws synthesized", 0, 5, event.Synthesized},
		{"one synthesized batch among measured ones draws synthesized", 9, 1, event.Synthesized},
		{"no batch at all is not claimed measured", 0, 0, event.Synthesized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bandTiming(tt.measured, tt.synthesized); got != tt.want {
				t.Errorf("bandTiming(%d, %d) = %s, want %s", tt.measured, tt.synthesized, got, tt.want)
			}
		})
	}
}

// bandAttrs reads the live bands of an SVG: their timing, dash and counts.
var bandRE = regexp.MustCompile(`<path [^>]*class="([^"]*)"[^>]*?( stroke-dasharray="[^"]*")? data-testid="live-band" data-p="(\d+)" data-d="(\d+)" data-pg="(\d+)" data-dg="(\d+)" data-bytes="(\d+)" data-batches="(\d+)" data-timing="(\w+)"`)

func TestLiveSVGDrawsSynthesizedDashedAndPulsesNewBatches(t *testing.T) {
	l := NewLive()
	var f feed
	add := func(e event.Event, at time.Time) { l.Add(f.ev("a", e), at) }
	add(batch(0, 0, 0, 0, 1000, event.Measured), t0)
	add(batch(0, 1, 0, 0, 500, event.Synthesized), t0)
	add(batch(1, 1, 0, 0, 10, event.Measured), t0)
	add(batch(1, 1, 0, 0, 10, event.Synthesized), t0)
	a := l.agents["a"]
	svg := liveSVG(a, t0)
	m := bandRE.FindAllStringSubmatch(svg, -1)
	if len(m) != 3 {
		t.Fatalf("%d bands drawn, want 3:\n%s", len(m), svg)
	}
	for _, b := range m {
		synthesized := b[9] == "synthesized"
		dashed := b[2] != "" && strings.Contains(b[1], "synthesized")
		if synthesized != dashed {
			t.Errorf("band P%s→D%s: timing %s but dashed=%v", b[3], b[4], b[9], dashed)
		}
		if !strings.Contains(b[1], "live") {
			t.Errorf("band P%s→D%s is new but does not pulse", b[3], b[4])
		}
	}
	if m[0][9] != "measured" || m[0][7] != "1000" || m[1][9] != "synthesized" || m[2][9] != "synthesized" || m[2][8] != "2" {
		t.Errorf("bands %v", m)
	}
	if !strings.Contains(svg, `data-testid="live-bands"`) || !strings.Contains(liveBandsHTML(l, t0), "dashed = synthesized timing (NIXL reports completion per request only)") {
		t.Errorf("the SVG or its legend is missing")
	}
	// Once drawn, only a band that moves again pulses.
	for _, b := range a.bands {
		b.drawn = b.Batches
	}
	add(batch(0, 0, 0, 0, 1000, event.Measured), t0.Add(3*time.Second))
	m = bandRE.FindAllStringSubmatch(liveSVG(a, t0.Add(3*time.Second)), -1)
	if !strings.Contains(m[0][1], "live") || strings.Contains(m[1][1], "live") || m[0][7] != "2000" {
		t.Errorf("after one more batch on P0→D0: classes %q, %q, bytes %s", m[0][1], m[1][1], m[0][7])
	}
}

func TestLiveBandsFadeWithAge(t *testing.T) {
	prev := 2.0
	for _, age := range []time.Duration{0, 200 * time.Millisecond, time.Second, 3 * time.Second, 10 * time.Second, time.Hour} {
		o := bandOpacity(age)
		if o >= prev || o < 0.25 || o > 0.95 {
			t.Errorf("opacity %.3f at %v after %.3f: want decreasing within [0.25, 0.95]", o, age, prev)
		}
		prev = o
	}
}

func TestLiveTimelineFromSamples(t *testing.T) {
	l := NewLive()
	var f feed
	// 200 samples a second apart; the requests counter is the total served.
	for i := 0; i < 200; i++ {
		ts := t0.UnixNano() + int64(i)*1e9
		l.Add(f.ev("a", event.Event{Kind: event.Sample, TS: ts, Sample: &event.SampleData{GBps: float64(i), P50US: 10, P99US: 20, Requests: 4 * i}}), t0)
	}
	a := l.agents["a"]
	if len(a.Samples) > liveMaxSamples || len(a.Samples) < 121 {
		t.Fatalf("%d samples kept, want the last 120 s and at most %d", len(a.Samples), liveMaxSamples)
	}
	end := l.newestSample()
	pts := a.timeline(end, liveWindow)
	if len(pts) != 121 || pts[len(pts)-1].GBps != 199 || pts[0].GBps != 79 {
		t.Fatalf("%d points from GB/s %v to %v; want 121 from 79 to 199", len(pts), pts[0].GBps, pts[len(pts)-1].GBps)
	}
	if pts[5].ReqPS != 4 || pts[5].P99 != 20 || pts[5].MS != (t0.UnixNano()+84e9)/1e6 {
		t.Errorf("point %+v, want 4 requests/s, p99 20 µs at t0+84 s", pts[5])
	}
	// A counter that went back (an agent restarted) gives no rate.
	b := &liveAgent{Samples: []liveSample{{TS: 1e9, SampleData: event.SampleData{Requests: 10}}, {TS: 2e9, SampleData: event.SampleData{Requests: 3}}}}
	if got := b.timeline(2e9, liveWindow); !math.IsNaN(got[0].ReqPS) || !math.IsNaN(got[1].ReqPS) {
		t.Errorf("rates %v, want none", got)
	}

	var opt struct {
		Animation bool `json:"animation"`
		XAxis     []struct {
			Type string `json:"type"`
			Min  int64  `json:"min"`
			Max  int64  `json:"max"`
		} `json:"xAxis"`
		Series []struct {
			Name       string       `json:"name"`
			YAxisIndex int          `json:"yAxisIndex"`
			Data       [][]*float64 `json:"data"`
		} `json:"series"`
	}
	if err := json.Unmarshal([]byte(liveTimelineOption(l)), &opt); err != nil {
		t.Fatal(err)
	}
	if len(opt.XAxis) != 2 || opt.XAxis[0].Type != "time" || opt.XAxis[0].Max-opt.XAxis[0].Min != 120_000 || opt.XAxis[0].Max != end/1e6 {
		t.Errorf("x axes %+v, want time axes over the last 120 s", opt.XAxis)
	}
	names := []string{}
	for _, s := range opt.Series {
		names = append(names, s.Name+"@"+strconv.Itoa(s.YAxisIndex))
	}
	if strings.Join(names, ",") != "GB/s@0,requests/s@1,p50 ms@2,p99 ms@2" {
		t.Errorf("series %v", names)
	}
	last := opt.Series[0].Data[len(opt.Series[0].Data)-1]
	if len(opt.Series[0].Data) != 121 || *last[1] != 199 || opt.Series[1].Data[0][1] != nil || *opt.Series[1].Data[1][1] != 4 {
		t.Errorf("series data: %d points, last GB/s %v; want 121, 199, no rate for the first kept sample, then 4/s", len(opt.Series[0].Data), *last[1])
	}
	if opt.Animation {
		t.Errorf("the timeline animates every redraw")
	}
}

func TestLiveGPUPanel(t *testing.T) {
	l := NewLive()
	var f feed
	l.Add(f.ev("gpu-host", event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: "h200", Backend: "nixl/UCX", Memory: "VRAM", Role: "both",
		GPUs: []event.GPU{{Index: 0, Name: "NVIDIA H200", UUID: "GPU-1234", MemoryBytes: 141 << 30, PCIBusID: "0000:19:00.0",
			NVLinks: []event.NVLink{{Link: 0, Up: true}, {Link: 1, Up: true}, {Link: 2, Up: false}}}}}}), t0)
	l.Add(f.ev("laptop", event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: "lap", Backend: "host", Memory: "DRAM", GPUs: []event.GPU{}, NoGPU: "no NVIDIA driver"}}), t0)
	l.Add(f.ev("late", batch(0, 0, 0, 0, 1, event.Measured)), t0)
	html := liveGPUsHTML(l)
	for _, want := range []string{"NVIDIA H200", "GPU-1234", "0000:19:00.0", "<td>2 / 3</td>", "141.00 GiB", "nixl/UCX", "VRAM",
		`data-testid="live-nogpu">No GPUs: no NVIDIA driver.`, "hello came before this page connected"} {
		if !strings.Contains(html, want) {
			t.Errorf("the GPU panel lacks %q:\n%s", want, html)
		}
	}
}

func TestLiveForgetsTheLeastRecentAgent(t *testing.T) {
	l := NewLive()
	var f feed
	for i := 0; i <= liveMaxAgents; i++ {
		l.Add(f.ev(fmt.Sprintf("agent-%d", i), batch(0, 0, 0, 0, 1, event.Measured)), t0.Add(time.Duration(i)*time.Second))
	}
	if len(l.agents) != liveMaxAgents || l.agents["agent-0"] != nil || l.Forgotten != 1 {
		t.Errorf("%d agents, agent-0 kept=%v, forgotten %d", len(l.agents), l.agents["agent-0"] != nil, l.Forgotten)
	}
}

func TestLiveMalformedFramesAreCounted(t *testing.T) {
	l := NewLive()
	if err := l.AddFrame([]byte(`{"not":"an array"}`), t0); err == nil {
		t.Fatal("a malformed frame was accepted")
	}
	good, _ := event.EncodeFrame([]event.Event{{V: 1, Agent: "a", Seq: 1, Kind: event.Sample, Sample: &event.SampleData{}}})
	if err := l.AddFrame(good, t0); err != nil {
		t.Fatal(err)
	}
	if l.Malformed != 1 || l.Ring.Total != 1 {
		t.Errorf("malformed %d, events %d; want 1 and 1", l.Malformed, l.Ring.Total)
	}
	// One agent's bad event in a message that joins several agents'
	// frames costs that event only.
	mixed := []byte(`[{"v":1,"agent":"b","seq":1,"kind":"sample","sample":{}},` +
		`{"v":1,"agent":"c","seq":1,"kind":"desc_batch","batch":{"descs":"many","timing":"measured"}},` +
		`{"v":1,"agent":"b","seq":2,"kind":"sample","sample":{}}]`)
	if err := l.AddFrame(mixed, t0); err != nil {
		t.Fatal(err)
	}
	if l.Malformed != 2 || l.Ring.Total != 3 || !strings.Contains(l.LastMalformed, "c event 1") {
		t.Errorf("malformed %d (%s), events %d; want 2 and 3", l.Malformed, l.LastMalformed, l.Ring.Total)
	}
}

func TestLiveBackoff(t *testing.T) {
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for n, w := range want {
		if got := liveBackoff(n); got != w {
			t.Errorf("attempt %d waits %v, want %v", n, got, w)
		}
	}
	if liveBackoff(1000) != 30*time.Second {
		t.Errorf("a long outage does not cap at 30 s")
	}
}

// BenchmarkLiveAddFrame is what the browser does with the hub's replay on
// connect: decode a frame of 2,048 descriptor batches and aggregate it.
func BenchmarkLiveAddFrame(b *testing.B) {
	var f feed
	events := make([]event.Event, 2048)
	for i := range events {
		events[i] = f.ev("a", batch(i%2, i%4, i%2, (i/2)%2, 4096, event.Measured))
	}
	frame, err := event.EncodeFrame(events)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		l := NewLive()
		if err := l.AddFrame(frame, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLiveDraw is one redraw's markup: the bands of a P TP 8 → D TP 8
// deployment with four groups a side, the lists and the timeline.
func BenchmarkLiveDraw(b *testing.B) {
	l := NewLive()
	var f feed
	for p := 0; p < 8; p++ {
		for g := 0; g < 4; g++ {
			l.Add(f.ev("a", batch(p, p, g, g, 4096, event.Measured)), t0)
		}
	}
	for i := 0; i < 120; i++ {
		l.Add(f.ev("a", event.Event{Kind: event.Sample, TS: t0.UnixNano() + int64(i)*1e9, Sample: &event.SampleData{GBps: 1, Requests: i}}), t0)
		l.Add(f.ev("a", event.Event{Kind: event.TransferDone, Done: &event.DoneData{Request: "r", Timing: event.Measured, Verified: "exact"}}), t0)
	}
	for b.Loop() {
		_ = liveBandsHTML(l, t0) + liveStatsHTML(l, liveStatus{State: "open"}, false, 0) + liveTransfersHTML(l) + liveGPUsHTML(l) + liveTimelineOption(l)
	}
}

// TestLiveAgentRestart: an agent that starts again under its name (a hello
// with sequence 1, stamped later: "Run live" restarting the embedded
// agent) is a new deployment: its old bands, ranks and transfers go; a
// watched agent's second hello (sequence > 1) keeps what it had.
func TestLiveAgentRestart(t *testing.T) {
	l := NewLive()
	var f feed
	hello := event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: "h", Role: "both"}}
	done := event.Event{Kind: event.TransferDone, Done: &event.DoneData{Request: "req-1", Bytes: 10}}
	for _, e := range []event.Event{hello, batch(3, 3, 0, 0, 5, event.Measured), done, hello} {
		l.Add(f.ev("a", e), t0)
	}
	if a := l.agents["a"]; len(a.bands) != 1 || a.DRanks != 4 || len(l.Transfers) != 1 {
		t.Fatalf("before the restart: %d bands, %d D ranks, %d transfers", len(a.bands), a.DRanks, len(l.Transfers))
	}
	var again feed
	restart := again.ev("a", hello)
	restart.TS = t0.UnixNano() + 1e9 // later than everything before
	if !l.Add(restart, t0) {
		t.Fatal("the restart's hello was refused")
	}
	l.Add(again.ev("a", batch(0, 1, 0, 0, 7, event.Measured)), t0)
	a := l.agents["a"]
	if len(a.bands) != 1 || a.DRanks != 2 || a.Bytes != 7 || len(l.Transfers) != 0 || a.Hello == nil {
		t.Errorf("after the restart: %d bands, %d D ranks, %d bytes, %d transfers; want only the new run's", len(a.bands), a.DRanks, a.Bytes, len(l.Transfers))
	}
}

// TestLiveShowsTheGapItIsTold: a resume whose history header says the
// event log no longer held some of what the page missed ({"gone":N}) is
// shown as a warning with that count, even before any event arrives; a
// header without it shows none.
func TestLiveShowsTheGapItIsTold(t *testing.T) {
	for _, c := range []struct {
		header string
		gone   uint64
	}{{`{"history":3,"gone":37}`, 37}, {`{"history":3}`, 0}, {`{"gone":5}`, 0}, {`[1]`, 0}} {
		l := NewLive()
		h, _ := event.ReadHistory([]byte(c.header))
		l.Gone += h.Gone
		html := liveStatsHTML(l, liveStatus{State: "open"}, false, 0)
		shown := strings.Contains(html, fmt.Sprintf(`data-testid="live-gone" data-count="%d"`, c.gone))
		if c.gone > 0 != shown || c.gone == 0 && strings.Contains(html, "live-gone") {
			t.Errorf("header %s: gone %d, shown %v: %s", c.header, l.Gone, shown, html)
		}
	}
}

// TestLiveDeploymentVerdict: a watcher's preflight of the engine pair (a
// handshake event with a verdict) heads the Deployment panel, escaped,
// and the newest one replaces the last.
func TestLiveDeploymentVerdict(t *testing.T) {
	l := NewLive()
	var f feed
	hello := &event.HelloData{Host: "h", Backend: "nixl (watched)", Memory: "VRAM", Role: "watch", GPUs: []event.GPU{}, Engine: "P TP 1 → D TP 2 · every linked rank"}
	l.Add(f.ev("gpu7/deployment", event.Event{Kind: event.Hello, Hello: hello}), t0)
	l.Add(f.ev("gpu7/deployment", event.Event{Kind: event.Handshake, Handshake: &event.HandshakeData{PTP: 1, DTP: 2, Summary: "watched vLLM engines"}}), t0)
	if html := liveDeploymentHTML(l); strings.Contains(html, "deployment-verdict") {
		t.Errorf("a verdict before any preflight:\n%s", html)
	}
	l.Add(f.ev("gpu7/deployment", event.Event{Kind: event.Handshake, Handshake: &event.HandshakeData{PTP: 1, DTP: 2, Summary: "watched vLLM engines",
		Verdict: "ok", Sentence: "P and D advertise what kvscope plans for them"}}), t0)
	l.Add(f.ev("gpu7/deployment", event.Event{Kind: event.Handshake, Handshake: &event.HandshakeData{PTP: 1, DTP: 2, Summary: "watched vLLM engines",
		Verdict: "rejected", Rejection: "compatibility-hash", Sentence: "P's compatibility hash <9f2e> differs from D's"}}), t0)
	html := liveDeploymentHTML(l)
	for _, want := range []string{`class="preflight bad" data-testid="deployment-verdict" data-agent="gpu7/deployment" data-verdict="rejected"`,
		"P&#39;s compatibility hash &lt;9f2e&gt; differs", `data-testid="deployment-engine"`} {
		if !strings.Contains(html, want) {
			t.Errorf("the Deployment panel lacks %q:\n%s", want, html)
		}
	}
	if strings.Count(html, "deployment-verdict") != 1 {
		t.Errorf("want the newest verdict only:\n%s", html)
	}
}

// TestLiveDeploymentStuck: what a watcher finds stuck shows in the
// Deployment panel, oldest first, with when it started (UTC), the engine,
// the source and the reason; a cleared one leaves; vLLM's counters stand
// for their requests.
func TestLiveDeploymentStuck(t *testing.T) {
	l := NewLive()
	var f feed
	hello := &event.HelloData{Host: "h", Backend: "nixl (watched)", Memory: "VRAM", Role: "watch", GPUs: []event.GPU{}, Engine: "D rank 0 of TP 2"}
	l.Add(f.ev("gpu7/deployment", event.Event{Kind: event.Hello, Hello: hello}), t0)
	since := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	stuck := func(s event.StuckData) event.Event {
		return f.ev("gpu7/deployment", event.Event{Kind: event.StuckTransfer, Stuck: &s})
	}
	l.Add(stuck(event.StuckData{Request: "rx-7", Engine: "D rank 0", Source: "ring", Reason: "posted 130 s ago, not completed", SinceNS: since.Add(10 * time.Second).UnixNano()}), t0)
	l.Add(stuck(event.StuckData{Engine: "decode:8000", Source: "vllm", Reason: "vllm:nixl_num_kv_expired_reqs grew", SinceNS: since.UnixNano(), Count: 3}), t0)
	l.Add(stuck(event.StuckData{Request: "rx-8", Engine: "D rank 0", Source: "ring", Reason: "posted", SinceNS: since.Add(20 * time.Second).UnixNano()}), t0)
	l.Add(stuck(event.StuckData{Request: "rx-8", Engine: "D rank 0", Source: "ring", Cleared: true}), t0)
	html := liveDeploymentHTML(l)
	first, second := strings.Index(html, "2026-12-02 07:00:00 UTC"), strings.Index(html, "2026-12-02 07:00:10 UTC")
	if first < 0 || second < 0 || first > second || !strings.Contains(html, "decode:8000 (3 requests)") || !strings.Contains(html, "D rank 0 rx-7") {
		t.Errorf("the Stuck table, oldest first, with its engines:\n%s", html)
	}
	if strings.Contains(html, "rx-8") || strings.Count(html, `data-testid="deployment-stuck"`) != 2 {
		t.Errorf("a cleared request still shows, or rows are missing:\n%s", html)
	}
}

// TestLiveDetailAtCountsATailNoLaterDetailShows: a page coming back is told
// where a drawn agent's detail stood; what it had not seen by then shows
// in the detail-gaps counter at once, though that agent sends no more.
func TestLiveDetailAtCountsATailNoLaterDetailShows(t *testing.T) {
	l := NewLive()
	for d := uint64(1); d <= 20; d++ {
		l.Add(event.Event{V: event.Version, Agent: "a", Detail: d, Kind: event.DescBatch, Batch: &event.BatchData{Timing: event.Measured}}, t0)
	}
	version := l.Version
	header, _ := event.ReadHistory(event.HistoryHeader(event.History{DetailAt: map[string]uint64{"a": 32, "b": 7}})) // b: never drawn here
	l.DetailAt(header.DetailAt)
	if l.Ring.DetailGaps != 12 || l.Version == version {
		t.Fatalf("detail gaps %d (version %d, was %d); want 12 (dseq 21-32) and a redraw", l.Ring.DetailGaps, l.Version, version)
	}
	html := liveStatsHTML(l, liveStatus{State: "open"}, false, 0)
	if !strings.Contains(html, `data-testid="live-detail-gaps" data-count="12"`) {
		t.Errorf("the page does not show the 12 missed: %s", html)
	}
	version = l.Version
	l.DetailAt(header.DetailAt) // told again: nothing new
	if l.Ring.DetailGaps != 12 || l.Version != version {
		t.Errorf("told the same position twice: gaps %d, version %d (was %d)", l.Ring.DetailGaps, l.Version, version)
	}
}

// TestLiveTickCountsALostTail: a drawn agent's sample says its detail got
// to dseq 26; the page has 20, and nothing more comes. Within
// event.DetailGrace nothing is counted (it may be on its way); after it
// the 6 show in the detail-gaps counter and the page redraws, once.
func TestLiveTickCountsALostTail(t *testing.T) {
	l := NewLive()
	for d := uint64(1); d <= 20; d++ {
		l.Add(event.Event{V: event.Version, Agent: "a", Detail: d, Kind: event.DescBatch, Batch: &event.BatchData{Timing: event.Measured}}, t0)
	}
	l.Add(event.Event{V: event.Version, Agent: "a", Seq: 1, Kind: event.Sample, Sample: &event.SampleData{DetailThrough: 26}}, t0)
	l.Tick(t0)
	l.Tick(t0.Add(event.DetailGrace - time.Millisecond))
	if l.Ring.DetailGaps != 0 {
		t.Fatalf("within the grace: %d detail gaps, want 0", l.Ring.DetailGaps)
	}
	version := l.Version
	l.Tick(t0.Add(event.DetailGrace))
	if l.Ring.DetailGaps != 6 || l.Version == version {
		t.Fatalf("after the grace: %d detail gaps (version %d, was %d), want 6 and a redraw", l.Ring.DetailGaps, l.Version, version)
	}
	if html := liveStatsHTML(l, liveStatus{State: "open"}, false, 0); !strings.Contains(html, `data-testid="live-detail-gaps" data-count="6"`) {
		t.Errorf("the page does not show the 6 missed: %s", html)
	}
	version = l.Version
	l.Tick(t0.Add(10 * event.DetailGrace))
	if l.Ring.DetailGaps != 6 || l.Version != version {
		t.Errorf("ticking on: %d gaps, version %d (was %d); want 6, no redraw", l.Ring.DetailGaps, l.Version, version)
	}
}
