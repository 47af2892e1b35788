package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/scenario"
	kvapp "github.com/kvscope/kvscope/app"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/kvscope/kvscope/server/api"
)

// hostileLiveQuery is a Run live query like the probe's: a pasted config
// of 1,024 layers with 1,024 KV heads of one channel, P at TP 256 and D at
// TP 1,024, a 16-token prompt. Its KV pools fit the agent's host memory
// (so fitting them refuses nothing), but preparing it would register 2.6
// million regions (1,280 ranks of 2,048) before its 25 million descriptor
// pairs were counted.
func hostileLiveQuery(t testing.TB) string {
	t.Helper()
	s := kvapp.DefaultSettings()
	s.Model, s.Draft = "custom", ""
	s.Config = `{"architectures":["LlamaForCausalLM"],"model_type":"llama","num_hidden_layers":1024,"num_attention_heads":1024,` +
		`"num_key_value_heads":1024,"head_dim":1,"hidden_size":4096,"intermediate_size":8192,"vocab_size":32000,` +
		`"max_position_embeddings":4096,"torch_dtype":"bfloat16"}`
	s.P.TensorParallelSize, s.D.TensorParallelSize = 256, 1024
	s.Prompt = 16
	return s.Query().Encode()
}

// TestLiveRunAdmission: Run live is admitted before anything is
// prepared. The probe's query (P TP 256 to D TP 1,024 of a 4,096-layer
// pasted config) is refused with 413 too_large naming --max-pairs, fast and
// without the gigabyte of registrations its preparation took; with the
// heavy requests' memory taken, a fitting query waits and gets 429.
func TestLiveRunAdmission(t *testing.T) {
	o := serveOptions{Addr: "127.0.0.1:0", Token: "tok", Agent: "embedded", Logf: t.Logf,
		Limits: api.Limits{MaxMemory: 512 << 20, MaxPairs: 4_000_000, MaxResponse: 64 << 20, QueueWait: 200 * time.Millisecond, MaxQueue: 0, MaxRunning: 1}}
	srv := newServer(catalog(), o, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv.embedded.begin(ctx, func(ctx context.Context, _ scenario.Scenario) { <-ctx.Done() }, embeddedScenario())
	ts := httptest.NewServer(srv.handler)
	defer ts.Close()
	post := func(query string) (int, map[string]any) {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"query": query})
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/api/live/run", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	q := hostileLiveQuery(t)
	t.Logf("the query: %d bytes", len(q))
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	code, out := post(q)
	took := time.Since(start)
	runtime.ReadMemStats(&m1)
	grew := int64(m1.TotalAlloc - m0.TotalAlloc)
	t.Logf("refused in %v, %.1f MiB allocated: %v", took, float64(grew)/(1<<20), out["error"])
	if code != http.StatusRequestEntityTooLarge || out["error_type"] != "too_large" || !strings.Contains(out["error"].(string), "--max-pairs") {
		t.Fatalf("the hostile query: %d %v", code, out)
	}
	// Refused from the plans, it allocates a few MiB (its registrations
	// alone would be 2.6 million regions).
	if grew > 64<<20 || took > 2*time.Second {
		t.Errorf("refusing the hostile query allocated %d MiB in %v, want under 64 MiB and 2 s", grew>>20, took)
	}

	// The heavy requests' only core taken: a fitting query is told to
	// come back, not prepared beside it.
	sc := scenario.Default()
	m, err := sc.LoadModel(catalog())
	if err != nil {
		t.Fatal(err)
	}
	setup, err := sc.Setup(m)
	if err != nil {
		t.Fatal(err)
	}
	_, release, err := srv.api.AdmitPD(context.Background(), func() (xfer.Setup, error) { return setup, nil })
	if err != nil {
		t.Fatal(err)
	}
	code, out = post("model=Qwen%2FQwen3-0.6B&prompt-tokens=512")
	release()
	if code != http.StatusTooManyRequests || out["error_type"] != "busy" {
		t.Errorf("a query while the heavy requests' core is taken: %d %v, want 429 busy", code, out)
	}
	if code, out = post("model=Qwen%2FQwen3-0.6B&prompt-tokens=512"); code != http.StatusOK {
		t.Errorf("a fitting query: %d %v", code, out)
	}
}

// TestRecordOpensOnlyRegularFiles: --record appends to a regular file (new
// or existing) and refuses, at once and naming --record and what it found,
// a named pipe (which would block serve's start until a reader came), a
// directory and a device.
func TestRecordOpensOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "events.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(dir, "old.jsonl")
	if err := os.WriteFile(existing, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, want string
	}{
		{"a new file is created", filepath.Join(dir, "new.jsonl"), ""},
		{"an existing file is appended to", existing, ""},
		{"a named pipe is refused", fifo, "--record " + fifo + ": a named pipe (FIFO), not a regular file"},
		{"a directory is refused", dir, "--record " + dir + ": a directory"},
		{"a device is refused", "/dev/null", "--record /dev/null: a character device"},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				f, err := openRecord(c.path)
				if err == nil {
					_, err = f.WriteString("{}\n")
					f.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("opening the recording blocked")
			}
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%v, want it opened", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%v, want %q", err, c.want)
			}
		})
	}
	// kvscope serve itself: exit 1 with the message, not a hang (serve
	// sets the runtime's memory limit: put back after).
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"serve", "--addr", "127.0.0.1:0", "--agent", "none", "--record", fifo}, &out, &errb)
	}()
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(errb.String(), "named pipe") {
			t.Errorf("kvscope serve --record FIFO: exit %d, stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("kvscope serve --record FIFO hung")
	}
}

// TestConnectionsPerClient: one client (a remote IP address) holds at
// most the cap of connections; those past it are closed as they come and
// counted; a connection closed gives its place back; another client is
// served throughout.
func TestConnectionsPerClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	const max = 4
	lim := limitConns(ln, max, func(string) { refused.Add(1) })
	hs := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	go hs.Serve(lim)
	defer hs.Close()
	addr := ln.Addr().String()
	dialFrom := func(ip string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
		return d.Dial("tcp", addr)
	}
	// answered reports whether a request on c is answered.
	answered := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return false
		}
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		return strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200")
	}
	var flood []net.Conn
	for range max + 3 {
		c, err := dialFrom("127.0.0.2")
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	ok := 0
	for _, c := range flood {
		if answered(c) {
			ok++
		}
	}
	if ok != max || refused.Load() != 3 {
		t.Errorf("%d of %d connections from one client answered, %d refused; want %d and 3", ok, len(flood), refused.Load(), max)
	}
	other, err := dialFrom("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if !answered(other) {
		t.Error("another client was not served while the first held its cap")
	}
	for _, c := range flood {
		c.Close()
	}
	l := lim.(*connLimiter)
	for deadline := time.Now().Add(5 * time.Second); l.openConns("127.0.0.2") > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := l.openConns("127.0.0.2"); n != 0 {
		t.Fatalf("%d connections still counted after the client closed them all", n)
	}
	again, err := dialFrom("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if !answered(again) {
		t.Error("the client was not served again after closing its connections")
	}
}

// TestConnsPerClientFlag: --max-conns-per-client is 1 to 65,536 (the
// limits' flags, --tune-deadline among them, are TestLimitFlags').
func TestConnsPerClientFlag(t *testing.T) {
	for _, n := range []string{"0", "65537"} {
		var out, errb bytes.Buffer
		if code := run([]string{"serve", "--max-conns-per-client", n}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--max-conns-per-client "+n+": must be between 1 and 65536") {
			t.Errorf("--max-conns-per-client %s: exit %d, stderr %q", n, code, errb.String())
		}
	}
}
