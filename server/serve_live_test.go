package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
)

// TestServeWiresTheHub: kvscope serve's routes reach the hub through the
// access rules: an agent with the token streams on /ws/agent, a browser
// on /ws/live gets its events, /metrics shows the hub's figures and every
// drop counter (at 0), and --record holds each event once, a line each,
// once the hub has closed.
func TestServeWiresTheHub(t *testing.T) {
	const tok = "wiring-test-token"
	var rec syncBuffer
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	srv := newServer(catalog(), serveOptions{Addr: addr, Token: tok, Agent: "none", Logf: t.Logf}, &rec)
	hs := newHTTPServer(srv.handler)
	go hs.Serve(ln)
	defer hs.Close()
	defer srv.hub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	sub, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws/live", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.CloseNow()
	sub.SetReadLimit(event.MaxFrameBytes + 1024)
	const events = 21
	st := &stream.Streamer{Agent: "wired", URL: "ws://" + addr + "/ws/agent", Token: credential(t, tok, "wired")}
	go st.Run(ctx)
	st.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: "h", GPUs: []event.GPU{}}})
	for range events - 1 {
		st.Publish(event.Event{Kind: event.Sample, Sample: &event.SampleData{}})
	}
	got := map[uint64]bool{}
	for len(got) < events {
		_, data, err := sub.Read(ctx)
		if err != nil {
			t.Fatalf("the browser got %d of %d events: %v", len(got), events, err)
		}
		evs, err := event.DecodeFrame(data)
		if err != nil {
			continue // the history header, a fleet summary
		}
		for _, e := range evs {
			got[e.Seq] = e.Agent == "wired"
		}
	}
	if err := st.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`kvscope_hub_events_total{kind="sample"} 20`, "kvscope_hub_subscriber_dropped_frames_total 0",
		"kvscope_hub_subscriber_dropped_events_total 0", "kvscope_hub_record_dropped_total 0", "kvscope_hub_record_errors_total 0"} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	srv.hub.Close()
	seen := map[uint64]int{}
	sc := bufio.NewScanner(strings.NewReader(rec.String()))
	for sc.Scan() {
		var e event.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("record line %q: %v", sc.Text(), err)
		}
		seen[e.Seq]++
	}
	for seq := uint64(1); seq <= events; seq++ {
		if seen[seq] != 1 {
			t.Errorf("the recording holds event %d %d times, want once", seq, seen[seq])
		}
	}
}
