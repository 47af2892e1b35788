package live

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/eventlog"
	"github.com/kvscope/kvscope/server/live/livetest"
)

// The hostile cases of agents on the event log: every agent holds its own
// credential, and holding one (mallory's) never lets it speak for, read
// for, or silence another (victim's).

const identityToken = "identity-test-server-token"

// identityRig is a replica on the embedded NATS server, a browser
// stand-in following it, and mallory connected to NATS with its own
// credential.
type identityRig struct {
	log     *eventlog.Log
	srv     *liveServer
	sub     *fleetSub
	mallory *nats.Conn
	async   chan error // mallory's asynchronous errors (permission violations)
}

func newIdentityRig(t *testing.T, ctx context.Context, o eventlog.Options) *identityRig {
	t.Helper()
	o.DataDir, o.Token = t.TempDir(), identityToken
	b, err := eventlog.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	r := &identityRig{log: b, async: make(chan error, 16)}
	r.srv = startServer(t, "127.0.0.1:0", serverOptions{token: identityToken, log: b, logf: t.Logf})
	t.Cleanup(r.srv.stop)
	r.sub = newFleetSub(r.srv.addr)
	go r.sub.run(ctx)
	r.mallory, err = nats.Connect(b.URL(), nats.UserInfo("mallory", credFor(identityToken, "mallory")),
		nats.CustomInboxPrefix(stream.InboxPrefix("mallory")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case r.async <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.mallory.Close)
	return r
}

// streamVictim sends n sample events from victim over /ws/agent and
// waits for their acknowledgement.
func (r *identityRig) streamVictim(t *testing.T, ctx context.Context, epoch string, n int) *stream.Streamer {
	t.Helper()
	st := &stream.Streamer{Agent: "victim", URL: "ws://" + r.srv.addr + "/ws/agent", Token: credFor(identityToken, "victim"), Epoch: epoch, Logf: t.Logf}
	go st.Run(ctx)
	for i := 1; i <= n; i++ {
		st.Publish(livetest.FleetEvent(i))
	}
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := st.Flush(fctx); err != nil {
		t.Fatalf("victim: %d events not acknowledged: %v", st.Pending(), err)
	}
	return st
}

// waitDelivered waits until the browser has every event of want.
func (r *identityRig) waitDelivered(t *testing.T, want map[string]uint64) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); r.sub.missing(want) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d acknowledged events never reached the browser: %s", r.sub.missing(want), r.sub.someMissing(want))
		}
	}
}

func (r *identityRig) metric(name string) string {
	var sb strings.Builder
	r.srv.metrics.Write(&sb)
	for _, line := range strings.Split(sb.String(), "\n") {
		if strings.HasPrefix(line, name) {
			return line
		}
	}
	return ""
}

// TestAgentsCannotSpeakForEachOther: mallory cannot connect to NATS as
// victim, cannot read any inbox but its own, and whatever it publishes on
// its own subject (a frame of victim's events, a header naming victim, a
// sequence number of 10^15) is never routed as victim's: it is counted bad
// or refused, and victim's 2,000 real events all arrive.
func TestAgentsCannotSpeakForEachOther(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newIdentityRig(t, ctx, eventlog.Options{})

	// Connecting as victim with mallory's credential, or with the
	// server's token, is refused.
	for _, pass := range []string{credFor(identityToken, "mallory"), identityToken, credFor("another-server-token", "victim")} {
		if nc, err := nats.Connect(r.log.URL(), nats.UserInfo("victim", pass)); err == nil {
			nc.Close()
			t.Errorf("NATS took user victim with password %.16s…", pass)
		}
	}
	// Reading every inbox, or victim's, is refused.
	for _, subj := range []string{"_INBOX.>", stream.InboxPrefix("victim") + ".>", event.Subject("victim")} {
		if _, err := r.mallory.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		r.mallory.Flush()
		select {
		case err := <-r.async:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Errorf("subscribing to %s: %v", subj, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("mallory subscribed to %s", subj)
		}
	}

	// On its own subject: victim's events, and its own under victim's
	// name in the header.
	js, err := jetstream.New(r.mallory)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := event.EncodeFrame([]event.Event{livetestEvent("victim", 1)})
	own, _ := event.EncodeFrame([]event.Event{livetestEvent("mallory", 1)})
	m := nats.NewMsg(event.Subject("mallory"))
	m.Data, m.Header = forged, nats.Header{stream.HeaderAgent: {"victim"}}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	m = nats.NewMsg(event.Subject("mallory"))
	m.Data, m.Header = own, nats.Header{stream.HeaderAgent: {"victim"}}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// Its own events, then one numbered 10^15, then more of its own.
	publish := func(seqs ...uint64) {
		t.Helper()
		var evs []event.Event
		for _, s := range seqs {
			evs = append(evs, livetestEvent("mallory", s))
		}
		f, _ := event.EncodeFrame(evs)
		if _, err := js.Publish(ctx, event.Subject("mallory"), f); err != nil {
			t.Fatal(err)
		}
	}
	publish(1, 2)
	publish(1_000_000_000_000_000)
	publish(3, 4, 5)

	r.streamVictim(t, ctx, "", 2000)
	r.waitDelivered(t, map[string]uint64{"victim": 2000, "mallory": 5})
	r.sub.mu.Lock()
	for seq := range r.sub.got["mallory"] {
		if seq > 5 {
			t.Errorf("mallory's event %d reached a browser", seq)
		}
	}
	r.sub.mu.Unlock()
	if got := r.metric("kvscope_bus_bad_messages_total"); got != "kvscope_bus_bad_messages_total 2" {
		t.Errorf("forged messages: %q, want 2 counted bad", got)
	}
	if got := r.metric(`kvscope_hub_rejected_total{reason="seq_jump"}`); !strings.HasSuffix(got, " 1") {
		t.Errorf("the sequence jump: %q, want 1 refused", got)
	}
	// The refused connections and subscriptions are counted too.
	if got := r.log.Refused(); got["credential"] != 3 || got["subscribe"] != 3 || got["publish"] != 0 {
		t.Errorf("refusals counted %v, want 3 credentials and 3 subscriptions", got)
	}
	if got := r.metric(`kvscope_nats_refused_total{reason="subscribe"}`); !strings.HasSuffix(got, " 3") {
		t.Errorf("on /metrics: %q", got)
	}
}

// livetestEvent is a sample event of agent numbered seq.
func livetestEvent(agent string, seq uint64) event.Event {
	e := livetest.FleetEvent(int(min(seq, 1<<30)))
	e.V, e.Agent, e.Seq, e.TS = event.Version, agent, seq, time.Now().UnixNano()
	return e
}

// TestForgedMessageIDsLoseNothing: message ids cannot be guessed, and
// even an id that is known (a leaked key, simulated here by computing
// victim's next ids with the server's secret) only makes JetStream answer
// "duplicate" for a frame it never stored: that is no acknowledgement,
// and the frame is stored under a new id. Both for a server storing what
// an agent sent over /ws/agent and for an agent publishing to NATS itself.
func TestForgedMessageIDsLoseNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newIdentityRig(t, ctx, eventlog.Options{})
	js, err := jetstream.New(r.mallory)
	if err != nil {
		t.Fatal(err)
	}
	junk, _ := event.EncodeFrame([]event.Event{livetestEvent("mallory", 1)})
	// The ids of the old scheme (agent#first-last), and the new one's for
	// the frames to come.
	var ids []string
	for first := uint64(1); first <= 20; first++ {
		ids = append(ids, fmt.Sprintf("victim#%d-%d", first, first))
	}
	srvKey := event.MessageIDKey(identityToken, "victim")
	ids = append(ids, event.MessageID(srvKey, "victim", "EPOCHONE", 1, 1))
	natsCred := credFor(identityToken, "natsvictim")
	ids = append(ids, event.MessageID(event.MessageIDKey(natsCred, "natsvictim"), "natsvictim", "EPOCHTWO", 1, 1))
	for _, id := range ids {
		if _, err := js.Publish(ctx, event.Subject("mallory"), junk, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}

	// Over /ws/agent: the server stores the frame (1-1 first: one event,
	// then flushed) although its id is taken.
	st := &stream.Streamer{Agent: "victim", URL: "ws://" + r.srv.addr + "/ws/agent", Token: credFor(identityToken, "victim"), Epoch: "EPOCHONE", Logf: t.Logf}
	go st.Run(ctx)
	st.Publish(livetestEvent("victim", 1))
	fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
	defer fcancel()
	if err := st.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 200; i++ {
		st.Publish(livetest.FleetEvent(i))
	}
	if err := st.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	// Straight to NATS, the agent's own publish.
	var told atomic.Int64
	na := &stream.NATS{Streamer: stream.Streamer{Agent: "natsvictim", Epoch: "EPOCHTWO", Logf: func(f string, a ...any) {
		if strings.Contains(fmt.Sprintf(f, a...), "which this agent did not send") {
			told.Add(1)
		}
	}}, URLs: r.log.URL(),
		Auth: stream.NATSAuth{User: "natsvictim", Password: natsCred}}
	go na.Run(ctx)
	na.Publish(livetestEvent("natsvictim", 1))
	if err := na.Flush(fctx); err != nil {
		t.Fatalf("the NATS agent's first frame: %v", err)
	}
	for i := 2; i <= 200; i++ {
		na.Publish(livetest.FleetEvent(i))
	}
	if err := na.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	r.waitDelivered(t, map[string]uint64{"victim": 200, "natsvictim": 200})
	if told.Load() != 1 {
		t.Errorf("the NATS agent told of %d forged duplicates, want 1 (its first frame's)", told.Load())
	}
	// The one forged id the server met (victim's first frame) is counted.
	if got := r.metric("kvscope_bus_forged_duplicates_total"); got != "kvscope_bus_forged_duplicates_total 1" {
		t.Errorf("forged duplicates: %q, want 1 counted", got)
	}
	for _, agent := range []string{"victim", "natsvictim"} {
		if got, err := r.log.LastStored(ctx, agent); err != nil || got.Seq != 200 {
			t.Errorf("%s: the log holds through %d (%v), want 200", agent, got.Seq, err)
		}
	}
}

// TestRestartedAgentIsStoredAgain: an agent process that restarts under
// the same name (a new epoch) and whose first events are not a hello (a
// watcher's side channel reports errors only) has them stored and
// delivered, not dropped as already stored; with the event log and
// without it.
func TestRestartedAgentIsStoredAgain(t *testing.T) {
	for _, withLog := range []bool{false, true} {
		t.Run(fmt.Sprintf("log=%v", withLog), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := serverOptions{token: identityToken, logf: t.Logf}
			if withLog {
				b := openLog(t, eventlog.Options{Token: identityToken})
				o.log = b
			}
			l := startServer(t, "127.0.0.1:0", o)
			defer l.stop()
			var mu sync.Mutex
			var got []string
			go func() {
				conn, _, err := websocket.Dial(ctx, "ws://"+l.addr+"/ws/live", nil)
				if err != nil {
					return
				}
				defer conn.CloseNow()
				conn.SetReadLimit(event.MaxFrameBytes + 1024)
				for {
					_, data, err := conn.Read(ctx)
					if err != nil {
						return
					}
					evs, _ := event.DecodeFrame(data)
					mu.Lock()
					for _, e := range evs {
						if e.Kind == event.Error {
							got = append(got, e.Error.Message)
						}
					}
					mu.Unlock()
				}
			}()
			time.Sleep(100 * time.Millisecond) // subscribed
			for run, epoch := range []string{"RUNONE", "RUNTWO"} {
				rctx, rcancel := context.WithCancel(ctx)
				st := &stream.Streamer{Agent: "host/side", URL: "ws://" + l.addr + "/ws/agent", Token: credFor(identityToken, "host"), Epoch: epoch, Logf: t.Logf}
				go st.Run(rctx)
				for i := 1; i <= 5; i++ {
					st.Publish(event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_SIDE_CHANNEL", Message: fmt.Sprintf("run %d error %d", run+1, i)}})
				}
				fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
				if err := st.Flush(fctx); err != nil {
					t.Fatalf("run %d: %v", run+1, err)
				}
				fcancel()
				rcancel()
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				mu.Lock()
				n := len(got)
				mu.Unlock()
				if n >= 10 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the browser got %d of the 10 errors: %v", n, got)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if got[5] != "run 2 error 1" || got[9] != "run 2 error 5" {
				t.Errorf("the restarted agent's errors: %v", got)
			}
		})
	}
}

// TestSeqJumpOverWebsocketIsRefused: an agent's frame numbered far past
// its last stored event closes its connection with the reason, and is not
// adopted: its real next events are stored and delivered.
func TestSeqJumpOverWebsocketIsRefused(t *testing.T) {
	l := startLive(t, "127.0.0.1:0", identityToken, nil)
	defer l.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := newFleetSub(l.addr)
	go sub.run(ctx)
	dial := func() *websocket.Conn {
		conn, _, err := websocket.Dial(ctx, "ws://"+l.addr+"/ws/agent?agent=jumpy", &websocket.DialOptions{HTTPHeader: map[string][]string{"Authorization": {"Bearer " + credFor(identityToken, "jumpy")}}})
		if err != nil {
			t.Fatal(err)
		}
		conn.Read(ctx) // the welcome
		return conn
	}
	send := func(conn *websocket.Conn, seqs ...uint64) error {
		var evs []event.Event
		for _, s := range seqs {
			evs = append(evs, livetestEvent("jumpy", s))
		}
		f, _ := event.EncodeFrame(evs)
		if err := conn.Write(ctx, websocket.MessageText, f); err != nil {
			return err
		}
		_, _, err := conn.Read(ctx)
		return err
	}
	conn := dial()
	if err := send(conn, 1, 2); err != nil {
		t.Fatal(err)
	}
	err := send(conn, 2+event.MaxSeqJump+1)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation || !strings.Contains(err.Error(), "jumps") {
		t.Fatalf("a jump of MaxSeqJump+1: %v, want the connection closed with the reason", err)
	}
	conn = dial()
	if err := send(conn, 3, 2+event.MaxSeqJump); err != nil {
		t.Fatalf("a jump of MaxSeqJump - 1 (an agent whose queue dropped that many): %v", err)
	}
	conn.Close(websocket.StatusNormalClosure, "")
	for deadline := time.Now().Add(10 * time.Second); sub.missing(map[string]uint64{"jumpy": 3}) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(sub.someMissing(map[string]uint64{"jumpy": 3}))
		}
	}
}

// TestNATSConnectionsAreBounded: one credential holds at most
// MaxAgentConnections connections to the embedded server, and the server
// at most MaxConnections: past them connections are refused, and other
// agents (and the server itself) still connect.
func TestNATSConnectionsAreBounded(t *testing.T) {
	b := openLog(t, eventlog.Options{Token: identityToken, MaxConnections: 12, MaxAgentConnections: 3})
	connect := func(agent string) (*nats.Conn, error) {
		return nats.Connect(b.URL(), nats.UserInfo(agent, credFor(identityToken, agent)), nats.MaxReconnects(0))
	}
	var open []*nats.Conn
	defer func() {
		for _, nc := range open {
			nc.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		nc, err := connect("greedy")
		if err != nil {
			t.Fatalf("greedy's connection %d: %v", i+1, err)
		}
		open = append(open, nc)
	}
	for i := 0; i < 6; i++ { // again and again: counted by admission, then from the server's list
		if nc, err := connect("greedy"); err == nil {
			open = append(open, nc)
			t.Fatalf("greedy's connection %d was taken (at most 3), %d ms after the first", len(open), i*400)
		}
		time.Sleep(400 * time.Millisecond)
	}
	// One closed frees its place, once the server's list says so.
	open[0].Close()
	open = open[1:]
	var again *nats.Conn
	var err error
	for deadline := time.Now().Add(5 * time.Second); again == nil; time.Sleep(100 * time.Millisecond) {
		if again, err = connect("greedy"); err != nil && time.Now().After(deadline) {
			t.Fatalf("greedy, with 2 connections open: %v", err)
		}
	}
	open = append(open, again)
	for i := 0; i < 8; i++ {
		nc, err := connect(fmt.Sprintf("other%d", i))
		if err != nil {
			t.Fatalf("another agent, with 3+%d connections open: %v", i, err)
		}
		open = append(open, nc)
	}
	// 11 agents' connections and the server's own: the server is full.
	if nc, err := connect("late"); err == nil {
		nc.Close()
		t.Error("a 13th connection was taken (at most 12)")
	}
	time.Sleep(100 * time.Millisecond) // the server logs the last refusal after closing the connection
	if got := b.Refused()["connections"]; got < 7 {
		t.Errorf("%d refused connections counted, want the 6 of greedy's and the 13th", got)
	}
}

// TestAgentsPerCredentialAreBounded: one credential (a watcher's) opens
// at most MaxAgentsPerCredential agents' connections at once; past it a
// connection is refused with 429 and the reason, and another credential's
// agents still connect.
func TestAgentsPerCredentialAreBounded(t *testing.T) {
	l := startServer(t, "127.0.0.1:0", serverOptions{token: identityToken, perCredential: 3, logf: t.Logf})
	defer l.stop()
	reg := l.addr
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(scope, name string) (*websocket.Conn, error) {
		conn, resp, err := websocket.Dial(ctx, "ws://"+reg+"/ws/agent?agent="+name, &websocket.DialOptions{HTTPHeader: map[string][]string{"Authorization": {"Bearer " + credFor(identityToken, scope)}}})
		if err != nil && resp != nil && resp.StatusCode != 429 {
			t.Errorf("%s: status %d, want 429", name, resp.StatusCode)
		}
		return conn, err
	}
	for i := 0; i < 3; i++ {
		conn, err := dial("host", fmt.Sprintf("host/e%d", i))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseNow()
	}
	if conn, err := dial("host", "host/e3"); err == nil {
		conn.CloseNow()
		t.Fatal("a fourth agent of one credential connected (at most 3)")
	} else if !strings.Contains(err.Error(), "429") {
		t.Errorf("the fourth: %v", err)
	}
	conn, err := dial("host", "host/e0") // the same agent again replaces its connection
	if err != nil {
		t.Fatalf("an agent reconnecting under a full credential: %v", err)
	}
	defer conn.CloseNow()
	other, err := dial("other", "other")
	if err != nil {
		t.Fatalf("another credential's agent: %v", err)
	}
	other.CloseNow()
}
