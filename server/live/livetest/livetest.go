// Package livetest runs the pieces the live path's tests share, all real
// and on loopback: a NATS server with JetStream on file storage that
// restarts on its address and directory, and a fleet of agents streaming
// a mix of events to servers' /ws/agent. It is for tests only.
package livetest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
)

// Token is the agents' token in the fleet tests.
const Token = "fleet-token"

// FreeAddr is a loopback address nothing listens on (a restarted
// component comes back on it).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// NATS is a NATS server with JetStream on file storage, restartable on
// its address and directory.
type NATS struct {
	t    testing.TB
	addr string
	dir  string
	srv  *natsserver.Server
}

// StartNATS starts a NATS server on a free loopback port; the test's
// cleanup stops it.
func StartNATS(t testing.TB) *NATS {
	n := &NATS{t: t, addr: FreeAddr(t), dir: t.TempDir()}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// URL is the server's client URL.
func (n *NATS) URL() string { return "nats://" + n.addr }

// Start starts the server (again) on its address and directory.
func (n *NATS) Start() {
	host, p, err := net.SplitHostPort(n.addr)
	if err != nil {
		n.t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		n.t.Fatal(err)
	}
	srv, err := natsserver.NewServer(&natsserver.Options{ServerName: "fleet-test", Host: host, Port: port, JetStream: true,
		StoreDir: n.dir, NoSigs: true, NoLog: true, MaxPayload: 8 << 20})
	if err != nil {
		n.t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		n.t.Fatal("NATS did not start")
	}
	n.srv = srv
}

// Stop stops the server (its files stay).
func (n *NATS) Stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// FleetEvent is the i-th event of a simulated agent: mostly descriptor
// batches, a transfer every 8th, a sample every 50th.
func FleetEvent(i int) event.Event {
	switch {
	case i%50 == 0:
		return event.Event{Kind: event.Sample, Sample: &event.SampleData{GBps: 1.5, P50US: 80, P99US: 400, Requests: i / 8}}
	case i%8 == 0:
		return event.Event{Kind: event.TransferDone, Done: &event.DoneData{Request: fmt.Sprintf("req-%d", i/8), Bytes: 1 << 20, Descs: 96, Merged: 12,
			TransferUS: 90, GBps: 11.6, Timing: event.Measured, Source: "host", Verified: "exact"}}
	}
	return event.Event{Kind: event.DescBatch, Batch: &event.BatchData{Request: fmt.Sprintf("req-%d", i/8), PRank: i % 2, DRank: i % 4,
		Layer: fmt.Sprintf("model.layers.%d.self_attn", i%24), Kind: "full", Descs: 8, Bytes: 131072, EndNS: 4000, Timing: event.Measured}}
}

// StartAgents starts n agents named by the format name (given the
// agent's index), spread over the servers' addresses, each publishing its
// hello and then perAgent-1 fleet events at rate a second, with Token;
// wg ends with their streams, pubs with their publishing.
func StartAgents(ctx context.Context, wg, pubs *sync.WaitGroup, n, perAgent, rate int, name string, addrs ...string) []*stream.Streamer {
	streamers := make([]*stream.Streamer, n)
	for i := range streamers {
		st := &stream.Streamer{Agent: fmt.Sprintf(name, i), URL: "ws://" + addrs[i%len(addrs)] + "/ws/agent", Token: Credential(fmt.Sprintf(name, i))}
		streamers[i] = st
		wg.Add(1)
		go func() { defer wg.Done(); st.Run(ctx) }()
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			st.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: st.Agent, Role: "both", Backend: "host", GPUs: []event.GPU{}}})
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for j := 2; j <= perAgent; j++ {
				<-tick.C
				st.Publish(FleetEvent(j))
			}
		}()
	}
	return streamers
}

// StartSplitAgent starts an agent named name on the server at addr that
// sends its detail apart (stream.Streamer.SplitDetail), with its hello
// published; wg ends with its stream, which runs until ctx ends.
func StartSplitAgent(ctx context.Context, wg *sync.WaitGroup, addr, name string) *stream.Streamer {
	st := &stream.Streamer{Agent: name, URL: "ws://" + addr + "/ws/agent", Token: Credential(name), SplitDetail: true}
	wg.Add(1)
	go func() { defer wg.Done(); st.Run(ctx) }()
	st.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: name, Role: "both", Backend: "host", GPUs: []event.GPU{}}})
	return st
}

// Serve starts what one replica serves on ln over the NATS at natsURL
// (opening the event log there): its handler, served until the returned
// stop, which also closes what the handler holds, its hub and its log.
type Serve func(ln net.Listener, natsURL string, replay uint64) (stop func())

// Replica is one kvscope serve on the shared event log, stopped and
// started again on its address (a replica's restart).
type Replica struct {
	Addr   string
	Replay uint64 // frames read back at start (0: the default)
	t      testing.TB
	nats   string
	serve  Serve
	stop   func()
}

// StartReplica starts a replica on addr over the NATS at natsURL, stopped
// when the test ends.
func StartReplica(t testing.TB, natsURL, addr string, serve Serve) *Replica {
	r := &Replica{Addr: addr, t: t, nats: natsURL, serve: serve}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Start serves on the replica's address again.
func (r *Replica) Start() { r.stop = r.serve(Listen(r.t, r.Addr), r.nats, r.Replay) }

// Listen listens on addr, waiting up to 5 s for a stopped server's port
// to free.
func Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	for range 100 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

// Stop ends every connection, as a stopping server does.
func (r *Replica) Stop() {
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
}

// Credential is agent's credential from a server whose token is Token
// ("" for a name no credential is issued for: the server refuses it).
func Credential(agent string) string {
	cred, _ := event.IssueCredential(Token, agent)
	return cred
}

// RequestBatches is how many descriptor batches Request makes: the
// default scenario's shape (P TP 2 to D TP 4: 4 rank pairs, 2 group pairs,
// 24 layers each), about the 190 events a request of it produces.
const RequestBatches = 4 * 2 * 24

// Request is the i-th request of a simulated agent, as an agent that
// transfers reports it: its start, its descriptor batches (detail) and
// its transfer_done, which summarises them per rank pair and group pair.
// With detail false only the transfer_done is built (nobody draws the
// detail: the caller counts RequestBatches+1 skipped).
func Request(i int, detail bool) []event.Event {
	req := fmt.Sprintf("req-%d", i)
	done := &event.DoneData{Request: req, Bytes: RequestBatches * 131072, Descs: RequestBatches * 8, Merged: RequestBatches,
		TransferUS: 900, GBps: 27.9, Timing: event.Measured, Source: "host", Verified: "exact", Mode: "pull", Prompt: 4096}
	var out []event.Event
	if detail {
		out = append(out, event.Event{Kind: event.TransferStart, Start: &event.StartData{Request: req, Prompt: 4096, Mode: "pull", Descs: done.Descs, Bytes: done.Bytes}})
	}
	for d := range 4 {
		for g := range 2 {
			for l := range 24 {
				b := &event.BatchData{Request: req, PRank: d / 2, DRank: d, PGroup: g, DGroup: g, Layer: fmt.Sprintf("model.layers.%d.self_attn", 2*l+g),
					Kind: "full", Descs: 8, Bytes: 131072, StartNS: int64(l) * 10_000, EndNS: int64(l+1) * 10_000, Timing: event.Measured}
				done.Pairs, _ = event.Summarise(done.Pairs, b)
				if detail {
					out = append(out, event.Event{Kind: event.DescBatch, Batch: b})
				}
			}
		}
	}
	return append(out, event.Event{Kind: event.TransferDone, Done: done})
}

// PublishRequest publishes the i-th request on st, building its detail
// only while a browser draws st's agent (an agent that splits its events);
// it returns how many events it built.
func PublishRequest(st *stream.Streamer, i int) int {
	detail := !st.SplitDetail || st.DetailOn()
	events := Request(i, detail)
	if !detail {
		st.SkipDetail(RequestBatches + 1)
	}
	for _, e := range events {
		st.Publish(e)
	}
	return len(events)
}
