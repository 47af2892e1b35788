//go:build nixl && cgo

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvscope/kvscope/server/live/livetest"
)

// These tests run kvscope-agent processes (this test binary, see TestMain)
// with the nixl backend over UCX on loopback.

// agentProc is one kvscope-agent process and its log.
type agentProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan error
}

func (a *agentProc) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log.Write(p)
}

// Log is what the process wrote so far.
func (a *agentProc) Log() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log.String()
}

// startAgent runs kvscope-agent with args and UCX on loopback TCP (tls
// overrides UCX_TLS).
func startAgent(t *testing.T, tls string, args ...string) *agentProc {
	t.Helper()
	a := &agentProc{done: make(chan error, 1)}
	a.cmd = exec.Command(os.Args[0], args...)
	a.cmd.Env = append(os.Environ(), "KVSCOPE_AGENT_MAIN=1", "UCX_TLS="+tls, "UCX_NET_DEVICES=lo", "NIXL_LOG_LEVEL=ERROR")
	a.cmd.Stdout, a.cmd.Stderr = a, a
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.done
		if t.Failed() {
			t.Logf("kvscope-agent %s:\n%s", strings.Join(args, " "), a.Log())
		}
	})
	return a
}

// waitLog waits until the log matches re.
func (a *agentProc) waitLog(t *testing.T, re *regexp.Regexp, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if re.MatchString(a.Log()) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %q in the log within %s", re, within)
}

// wait waits for the process to exit.
func (a *agentProc) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-a.done:
		a.done <- err // for the cleanup
		return err
	case <-time.After(within):
		t.Fatalf("kvscope-agent still running after %s", within)
		return nil
	}
}

// waitCount waits until re matches the log at least n times.
func (a *agentProc) waitCount(t *testing.T, re *regexp.Regexp, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for len(re.FindAllString(a.Log(), -1)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d matches of %q in the log within %s, want %d", len(re.FindAllString(a.Log(), -1)), re, within, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// loopbackBurst waits until more than 1 MiB crosses the loopback device
// within 5 ms (a READ under way), or for at most within; it reports whether
// it saw one. Without /proc/net/dev it waits 300 ms.
func loopbackBurst(within time.Duration) bool {
	last, ok := loopbackBytes()
	if !ok {
		time.Sleep(300 * time.Millisecond)
		return false
	}
	for deadline := time.Now().Add(within); time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		now, _ := loopbackBytes()
		if now-last > 1<<20 {
			return true
		}
		last = now
	}
	return false
}

// loopbackBytes is the bytes the loopback device received so far.
func loopbackBytes() (int64, bool) {
	data, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		return n, err == nil
	}
	return 0, false
}

var (
	serving  = regexp.MustCompile(`P agent serving \d+ ranks`)
	exact    = regexp.MustCompile(`(?m)req-\d+: \d+ bytes, .*measured by nixl.*, exact$`)
	landed   = regexp.MustCompile(`(?m)request req-\d+: every READ of D landed`)
	pushedRe = regexp.MustCompile(`(?m)pushed \d+ bytes into D`)
	wrong    = regexp.MustCompile(`(?m), wrong$`)
)

// startP starts a P agent on addr (extra: more flags) and waits until it
// serves.
func startP(t *testing.T, addr string, extra ...string) *agentProc {
	p := startAgent(t, "tcp,self", append([]string{"--role", "p", "--backend", "nixl", "--listen", addr, "--peer-token", "tok", "--name", "kvs-p"}, extra...)...)
	p.waitLog(t, serving, 30*time.Second)
	return p
}

// TestTwoNIXLAgentProcesses: a P and a D kvscope-agent, the bytes moved by
// NIXL over UCX (tcp on loopback), every request proven exact by D's
// oracle, and P told of each by NIXL notifications.
func TestTwoNIXLAgentProcesses(t *testing.T) {
	pull := []string{"--connector", "nixl"}
	push := []string{"--connector", "nixl-push", "--p-tensor-parallel-size", "4", "--d-tensor-parallel-size", "2"}
	for _, tc := range []struct {
		name, tls string
		engines   []string
		pLearns   *regexp.Regexp // what P logs per request
	}{
		{"pull over tcp,self", "tcp,self", pull, landed},
		{"pull over tcp,shm,self", "tcp,shm,self", pull, landed},
		{"push over tcp,self", "tcp,self", push, pushedRe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := livetest.FreeAddr(t)
			p := startAgent(t, tc.tls, append([]string{"--role", "p", "--backend", "nixl", "--listen", addr, "--peer-token", "tok", "--name", "kvs-p"}, tc.engines...)...)
			p.waitLog(t, serving, 30*time.Second)
			const n = 8
			d := startAgent(t, tc.tls, append([]string{"--role", "d", "--backend", "nixl", "--peer", addr, "--peer-token", "tok", "--name", "kvs-d",
				"--requests", fmt.Sprint(n), "--verify-every", "1", "--rate", "0"}, tc.engines...)...)
			if err := d.wait(t, 90*time.Second); err != nil {
				t.Fatalf("D: %v", err)
			}
			if got := len(exact.FindAllString(d.Log(), -1)); got != n {
				t.Errorf("D proved %d transfers exact, want %d", got, n)
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(tc.pLearns.FindAllString(p.Log(), -1)) < n && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if got := len(tc.pLearns.FindAllString(p.Log(), -1)); got != n {
				t.Errorf("P logged %d completed requests (%s), want %d", got, tc.pLearns, n)
			}
		})
	}
}

// TestNIXLAgentFailures: P killed while D runs (D reports errors naming the
// cause, then a new handshake when P returns, and nothing it proved is
// wrong), P killed while D's NIXL READ of 256 MiB is in flight (the error
// is NIXL's ERR_REMOTE_DISCONNECT from the request itself, and D is exact
// again after a new handshake), and UCX without tcp (a start-up error
// naming NIXL's status).
func TestNIXLAgentFailures(t *testing.T) {
	t.Run("P killed and restarted", func(t *testing.T) {
		addr := livetest.FreeAddr(t)
		p := startP(t, addr)
		// D runs until the test interrupts it: its duration is a hang's
		// ceiling (the subtest takes about 6 s here).
		d := startAgent(t, "tcp,self", "--role", "d", "--backend", "nixl", "--peer", addr, "--peer-token", "tok", "--name", "kvs-d",
			"--duration", "180", "--verify-every", "1", "--rate", "0")
		d.waitLog(t, exact, 30*time.Second)
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		p.done <- nil
		failed := regexp.MustCompile(`(?m)request \d+: ERR_[A-Z_]+: `)
		d.waitLog(t, failed, 20*time.Second)
		before := len(exact.FindAllString(d.Log(), -1))
		startP(t, addr)
		deadline := time.Now().Add(30 * time.Second)
		for len(exact.FindAllString(d.Log(), -1)) < before+3 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if got := len(exact.FindAllString(d.Log(), -1)); got < before+3 {
			t.Fatalf("D proved %d transfers after P came back, want at least 3", got-before)
		}
		if wrong.MatchString(d.Log()) {
			t.Error("D proved a transfer wrong")
		}
		errLines := regexp.MustCompile(`(?m)request \d+: ERR_.*$`).FindAllString(d.Log(), -1)
		t.Logf("D's errors while P was down (%d): first %q", len(errLines), errLines[0])
		for _, line := range failed.FindAllString(d.Log(), -1) {
			if !strings.Contains(line, "ERR_REMOTE_DISCONNECT") {
				t.Errorf("an error names %q, want NIXL's ERR_REMOTE_DISCONNECT", line)
			}
		}
		d.cmd.Process.Signal(os.Interrupt)
		d.wait(t, 20*time.Second)
	})

	t.Run("P killed while a NIXL READ is in flight", func(t *testing.T) {
		// 256 MiB per request (Qwen2.5-32B, 1,000 tokens, TP 1), so that a
		// READ over UCX's tcp lasts a few hundred milliseconds.
		sc := filepath.Join(t.TempDir(), "big.json")
		if err := os.WriteFile(sc, []byte(`{"model": "Qwen/Qwen2.5-32B", "prompt_min": 1000, "prompt_max": 1024, "prefix_hit_fraction": 0,
			"p": {"tensor_parallel_size": 1, "kv_cache_memory_bytes": 285212672, "max_model_len": 1024},
			"d": {"tensor_parallel_size": 1, "kv_cache_memory_bytes": 285212672, "max_model_len": 1024}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		addr := livetest.FreeAddr(t)
		p := startP(t, addr, "--scenario", sc)
		d := startAgent(t, "tcp,self", "--role", "d", "--backend", "nixl", "--peer", addr, "--peer-token", "tok", "--name", "kvs-d",
			"--scenario", sc, "--duration", "180", "--verify-every", "1", "--rate", "0")
		d.waitLog(t, exact, 60*time.Second)
		// The first error after a kill: NIXL's status from the request's
		// status check or post when the kill lands in a READ, the control
		// channel's when it lands in a prefill. Kill until one lands in a
		// READ (bytes flowing on loopback), at most four times.
		errLine := regexp.MustCompile(`(?m)request \d+: ERR_.*$`)
		fromNIXL := regexp.MustCompile(`^request \d+: ERR_REMOTE_DISCONNECT: transfer: nixl (getXferStatus|postXferReq)\b.*NIXL_ERR_REMOTE_DISCONNECT`)
		for attempt := 1; ; attempt++ {
			errs, proved := len(errLine.FindAllString(d.Log(), -1)), len(exact.FindAllString(d.Log(), -1))
			d.waitCount(t, exact, proved+1, 60*time.Second) // a new request has begun
			flowing := loopbackBurst(3 * time.Second)
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			p.done <- nil
			d.waitCount(t, errLine, errs+1, 20*time.Second)
			first := errLine.FindAllString(d.Log(), -1)[errs]
			t.Logf("kill %d (bytes flowing: %v): D's first error %q", attempt, flowing, first)
			proved = len(exact.FindAllString(d.Log(), -1))
			p = startP(t, addr, "--scenario", sc)
			d.waitCount(t, exact, proved+2, 60*time.Second) // a new handshake, and exact transfers again
			if fromNIXL.MatchString(first) {
				break
			}
			if attempt == 4 {
				t.Fatalf("none of %d kills landed in a NIXL request (the last error: %q)", attempt, first)
			}
		}
		for _, line := range errLine.FindAllString(d.Log(), -1) {
			if !strings.Contains(line, "ERR_REMOTE_DISCONNECT") {
				t.Errorf("an error names %q, want ERR_REMOTE_DISCONNECT", line)
			}
		}
		if wrong.MatchString(d.Log()) {
			t.Error("D proved a transfer wrong")
		}
		d.cmd.Process.Signal(os.Interrupt)
		d.wait(t, 20*time.Second)
	})

	t.Run("UCX_TLS without tcp", func(t *testing.T) {
		a := startAgent(t, "shm,self", "--role", "p", "--backend", "nixl", "--listen", livetest.FreeAddr(t), "--peer-token", "tok", "--name", "kvs-notcp")
		err := a.wait(t, 30*time.Second)
		if err == nil {
			t.Fatal("the agent started without tcp in UCX_TLS")
		}
		log := a.Log()
		if !strings.Contains(log, "NIXL_ERR_") || !strings.Contains(log, "leaves out tcp") {
			t.Errorf("the start-up error does not name NIXL's status and the cause:\n%s", log)
		}
	})
}
