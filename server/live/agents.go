package live

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/eventlog"
)

// AgentHandler is /ws/agent?agent=NAME&epoch=E: an agent with its
// credential as the bearer (event.IssueCredential under secret, the
// server's token: for NAME or a name above it) sends frames of events;
// each stored frame is acknowledged with the agent's last stored sequence
// number ({"ack":N}, also sent first, on connecting). E is the agent
// process's id: a new one means the agent restarted, and its sequence
// starts again. A malformed or oversized frame, or one whose sequence
// jumps too far, closes that connection only.
func (h *Hub) AgentHandler(secret string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if _, err := event.CredentialScope(got); !ok || err != nil {
			h.reject("token")
			msg := "an agent credential is required as the bearer (kvscope serve agent-token NAME issues one)"
			if ok && secret != "" && subtle.ConstantTimeCompare([]byte(got), []byte(secret)) == 1 {
				msg = "this is the server's token, which agents do not present: give the agent its own credential, from kvscope serve agent-token NAME"
			}
			http.Error(w, msg, http.StatusUnauthorized)
			return
		}
		name, epoch := r.URL.Query().Get("agent"), r.URL.Query().Get("epoch")
		if err := event.CheckAgentName(name); err != nil {
			h.reject("agent_name")
			http.Error(w, fmt.Sprintf("/ws/agent?agent=NAME: %v", err), http.StatusBadRequest)
			return
		}
		if err := event.CheckEpoch(epoch); err != nil {
			h.reject("agent_name")
			http.Error(w, fmt.Sprintf("/ws/agent?epoch=E: %v", err), http.StatusBadRequest)
			return
		}
		if err := event.CheckCredential(secret, got, name); err != nil {
			h.reject("token")
			http.Error(w, "agent "+event.Clip(name, 64)+": "+err.Error(), http.StatusUnauthorized)
			return
		}
		scope, _ := event.CredentialScope(got)
		n, ok := h.claim(scope, name)
		if !ok {
			h.reject("credential_agents")
			w.Header().Set("Retry-After", "10")
			http.Error(w, fmt.Sprintf("agent %s: the credential of %q has %d agents connected already (at most %d)", event.Clip(name, 64), event.Clip(scope, 64), n, h.maxPerCredential), http.StatusTooManyRequests)
			return
		}
		claimed := true
		unclaim := func() {
			if claimed {
				h.unclaim(name)
				claimed = false
			}
		}
		defer unclaim()
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		h.agentsIn.Add(1)
		defer h.agentsIn.Add(-1)
		defer h.closeAgentOnStop(conn)()
		conn.SetReadLimit(event.MaxFrameBytes)
		ctx := r.Context()
		var in messageReader
		split := r.URL.Query().Get("detail") == "1"
		welcome := h.connect(ctx, name, epoch, conn, r.RemoteAddr)
		unclaim() // connected: counted by its connection from now on
		defer h.disconnect(name, conn)
		if err := h.ack(ctx, conn, welcome); err != nil {
			return
		}
		h.mu.Lock()
		a := h.agent(name)
		a.split, a.detailOn = split, false
		h.mu.Unlock()
		if split { // it numbers its detail apart: tell it whether a browser draws it
			h.tellAgent(name, time.Now())
		}
		for {
			data, err := in.read(ctx, conn)
			if err != nil {
				if websocket.CloseStatus(err) == websocket.StatusMessageTooBig || errors.Is(err, websocket.ErrMessageTooBig) {
					h.reject("too_big")
				}
				return
			}
			var heads []event.Head
			if split {
				var detail bool
				heads, detail, err = checkDetail(data, name)
				if err != nil {
					h.reject("malformed")
					h.logf("agent %q: frame rejected: %q", name, err.Error())
					conn.Close(websocket.StatusUnsupportedData, event.Clip(err.Error(), 123))
					return
				}
				if detail { // not stored, not acknowledged
					h.detailFrame(name, data, heads)
					continue
				}
			} else {
				heads, err = event.Peek(data)
			}
			// Read once, in the pass Peek made, the pairs checked and
			// not kept: nothing here aggregates them; the agent's
			// bytes are what is stored and sent.
			var events []event.Event
			if err == nil {
				events, err = event.Admit(heads)
			}
			if err == nil {
				err = event.CheckAgent(events, name)
			}
			if err != nil {
				h.reject("malformed")
				h.logf("agent %q: frame rejected: %q", name, err.Error())
				conn.Close(websocket.StatusUnsupportedData, event.Clip(err.Error(), 123))
				return
			}
			last, err := h.store(ctx, name, epoch, events, data)
			if je := (*event.SeqJumpError)(nil); errors.As(err, &je) {
				h.reject("seq_jump")
				h.logf("agent %q: frame refused: %v", name, err)
				conn.Close(websocket.StatusPolicyViolation, event.Clip(err.Error(), 123))
				return
			}
			if err != nil {
				h.logf("agent %q: %v", name, err)
				conn.Close(websocket.StatusTryAgainLater, event.Clip(err.Error(), 123))
				return
			}
			if err := h.ack(ctx, conn, last); err != nil {
				return
			}
		}
	})
}

// messageReader reads a connection's messages into buffers sized by the
// last one: a steady stream of frames costs one allocation each, not the
// doubling of a buffer grown from empty (and its copies).
type messageReader struct{ last int }

func (m *messageReader) read(ctx context.Context, conn *websocket.Conn) ([]byte, error) {
	_, r, err := conn.Reader(ctx)
	if err != nil {
		return nil, err
	}
	buf := bytes.NewBuffer(make([]byte, 0, m.last+m.last/8+2*bytes.MinRead))
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	m.last = buf.Len()
	return buf.Bytes(), nil
}

// reject counts a connection or frame refused, by reason.
func (h *Hub) reject(reason string) {
	h.metrics.Add("kvscope_hub_rejected_total", "Connections and frames the hub refused, by reason.", 1, "reason", reason)
}

// ack tells an agent the last sequence number stored for it.
func (h *Hub) ack(ctx context.Context, conn *websocket.Conn, last uint64) error {
	msg, _ := json.Marshal(map[string]uint64{"ack": last})
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return conn.Write(wctx, websocket.MessageText, msg)
}

// connect ties a connection to an agent's name, closing an older
// connection of the same name (an agent reconnecting before the server
// noticed its old connection drop), and returns the last sequence number
// stored for the agent: the agent resumes after it. An agent process
// other than the one stored last (another epoch) is the agent restarted:
// nothing of it is stored yet.
func (h *Hub) connect(ctx context.Context, name, epoch string, conn *websocket.Conn, addr string) uint64 {
	var stored eventlog.Stored
	if h.log != nil {
		var err error
		if stored, err = h.log.LastStored(ctx, name); err != nil {
			h.logf("agent %s: its last stored event: %v (acknowledging what this replica stored)", name, err)
		}
	}
	h.mu.Lock()
	a := h.agent(name)
	if stored.Seq > a.storedSeq || stored.Epoch != a.storedEpoch && stored.Seq > 0 {
		a.storedSeq, a.storedTS, a.storedEpoch = stored.Seq, stored.TS, stored.Epoch
	}
	restarted := epoch != "" && a.storedEpoch != "" && epoch != a.storedEpoch
	if h.log == nil {
		restarted = epoch != "" && a.epoch != "" && epoch != a.epoch
	}
	if restarted { // its sequence starts again; what it sent before stays where it is
		a.storedSeq, a.storedTS, a.storedEpoch = 0, 0, epoch
		if h.log == nil {
			a.lastSeq, a.lastTS, a.epoch = 0, 0, epoch
		}
	}
	old := a.conn
	a.conn = conn
	a.seen = time.Now()
	h.prune(time.Now())
	welcome := a.lastSeq
	if h.log != nil {
		welcome = a.storedSeq
	}
	h.mu.Unlock()
	if restarted {
		h.logf("agent %s connected from %s as a new process (epoch %s): its sequence starts again", name, addr, epoch)
	}
	if old != nil {
		h.logf("agent %s connected again from %s; closing its older connection", name, addr)
		go old.Close(websocket.StatusPolicyViolation, "replaced by a newer connection of this agent")
	}
	return welcome
}

// connectedIn counts the agents other than name connected here under
// scope (a credential's), or being accepted (claim); h.mu held.
func (h *Hub) connectedIn(scope, name string) int {
	n := 0
	for other, a := range h.agents {
		if a.conn != nil && other != name && event.InScope(scope, other) && h.accepting[other] == 0 {
			n++
		}
	}
	for other, k := range h.accepting {
		if k > 0 && other != name && event.InScope(scope, other) {
			n++
		}
	}
	return n
}

// claim counts an agent's connection against its credential's bound
// before the connection is accepted, and holds the count until the
// connection is registered (or fails): it reports the agents counted and
// whether this one may connect.
func (h *Hub) claim(scope, name string) (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.connectedIn(scope, name)
	if n >= h.maxPerCredential {
		return n, false
	}
	h.accepting[name]++
	return n, true
}

// unclaim ends a claim.
func (h *Hub) unclaim(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.accepting[name]--; h.accepting[name] <= 0 {
		delete(h.accepting, name)
	}
}

// disconnect unties a connection from its agent's name.
func (h *Hub) disconnect(name string, conn *websocket.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.agent(name)
	if a.conn == conn {
		a.conn = nil
	}
	a.seen = time.Now()
}
