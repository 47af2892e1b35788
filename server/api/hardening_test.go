package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/catalog"
)

// bigLog is a startup log of about n bytes: a real vLLM log, its lines
// repeated.
func bigLog(t testing.TB, n int) string {
	t.Helper()
	b, err := os.ReadFile("../../testdata/vllm-logs/gpt-oss-120b-h100-fp8kv-v0.11.2.log")
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for sb.Len()+len(b) < n {
		sb.Write(b)
	}
	return sb.String()
}

// checkBody is an /api/check body of at most n bytes, a log of whole
// lines.
func checkBody(t testing.TB, n int) []byte {
	t.Helper()
	log := bigLog(t, n)
	for {
		b, err := json.Marshal(map[string]string{"log": log, "model": "openai/gpt-oss-120b"})
		if err != nil {
			t.Fatal(err)
		}
		if len(b) <= n {
			return b
		}
		cut := strings.LastIndexByte(log[:len(log)-(len(b)-n)], '\n')
		log = log[:cut+1]
	}
}

// TestCheckMemoryEstimate: the memory admission reserves for an
// /api/check (from its body's length) is never below what reading,
// decoding and checking the body allocates (collector off), for a small
// log and for logs near the 4 MiB body limit.
func TestCheckMemoryEstimate(t *testing.T) {
	s := New(catalog.Bundled(), Limits{MaxMemory: 8 << 30, MaxPairs: 1 << 30, MaxResponse: 1 << 30, QueueWait: time.Second, MaxQueue: 1})
	h := handle(s, s.check)
	junk := func(t testing.TB) []byte {
		b, _ := json.Marshal(map[string]string{"log": strings.Repeat("INFO 01-02 03:04:05 [x.py:1] not a line kvscope reads\n", (maxBody-1024)/56),
			"model": "openai/gpt-oss-120b", "vllm_version": "0.11.2"})
		return b
	}
	for _, c := range []struct {
		name   string
		body   func(t testing.TB) []byte
		status int
	}{
		{"a 64 KiB log", func(t testing.TB) []byte { return checkBody(t, 64<<10) }, http.StatusOK},
		{"a 1 MiB log", func(t testing.TB) []byte { return checkBody(t, 1<<20) }, http.StatusOK},
		{"a 4 MiB log", func(t testing.TB) []byte { return checkBody(t, maxBody-1024) }, http.StatusOK},
		{"4 MiB of lines kvscope does not read", junk, http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := c.body(t)
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			old := debug.SetGCPercent(-1)
			w := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/api/check", bytes.NewReader(body))
			h.ServeHTTP(w, req)
			runtime.ReadMemStats(&m1)
			debug.SetGCPercent(old)
			used := int64(m1.TotalAlloc - m0.TotalAlloc)
			est := checkMemory(int64(len(body)))
			t.Logf("%d-byte body: status %d; estimate %.1f MiB, allocated %.1f MiB (%.1f bytes a body byte)", len(body), w.Code,
				float64(est)/(1<<20), float64(used)/(1<<20), float64(used)/float64(len(body)))
			if w.Code != c.status {
				t.Fatalf("status %d: %s", w.Code, w.Body.String()[:min(w.Body.Len(), 300)])
			}
			if est < used {
				t.Errorf("the estimate %d is below the %d bytes the check allocated", est, used)
			}
		})
	}
}

// countingBody counts the bytes the server reads of a request body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// TestCheckBodyAdmittedBeforeDecoding: an /api/check body is admitted by
// its size before a byte of it is read: a Content-Length over the 4 MiB
// limit is refused with 413 while the client is still sending (its body
// never finishes here), and with the heavy requests' memory taken a 4 MiB
// check waits in the queue and gets 429 with none of its body read.
func TestCheckBodyAdmittedBeforeDecoding(t *testing.T) {
	s := New(catalog.Bundled(), Limits{MaxMemory: 256 << 20, MaxPairs: 1 << 30, MaxResponse: 1 << 30, QueueWait: 200 * time.Millisecond, MaxQueue: 4, MaxRunning: 1})
	mux := http.NewServeMux()
	s.Register(mux)
	var read atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A shallow copy: the server reads its own request's Body to
		// decide what to do with what the handler left unread.
		r2 := r.WithContext(r.Context())
		r2.Body = countingBody{r.Body, &read}
		mux.ServeHTTP(w, r2)
	}))
	defer srv.Close()

	t.Run("a Content-Length over the limit is refused before the body is sent", func(t *testing.T) {
		read.Store(0)
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		// The headers and 1 KiB of the body, then nothing: the client
		// hangs mid-body.
		fmt.Fprintf(c, "POST /api/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", maxBody+1, strings.Repeat(" ", 1024))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer while the body was unfinished: %v", err)
		}
		defer resp.Body.Close()
		var out errorEnvelope
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(out.Error, fmt.Sprintf("Content-Length %d", maxBody+1)) {
			t.Errorf("%d %+v, want 413 naming the Content-Length", resp.StatusCode, out)
		}
		if n := read.Load(); n != 0 {
			t.Errorf("the server read %d bytes of the body before refusing it", n)
		}
	})

	t.Run("a check waiting for memory reads none of its body", func(t *testing.T) {
		read.Store(0)
		if err := s.adm.acquire(context.Background(), 256<<20); err != nil {
			t.Fatal(err)
		}
		body := checkBody(t, maxBody-1024)
		code, hdr, out, err := post(t, context.Background(), srv.URL+"/api/check", string(body))
		s.adm.release(256 << 20)
		if err != nil || code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
			t.Errorf("a check with the memory taken: %d %v (%v), want 429 with Retry-After", code, out, err)
		}
		if n := read.Load(); n != 0 {
			t.Errorf("the server read %d bytes of the body of a check it had not admitted", n)
		}
		if code, _, out, _ = post(t, context.Background(), srv.URL+"/api/check", string(body)); code != http.StatusOK {
			t.Errorf("the same check with the memory free: %d %v", code, out)
		}
	})
}
