package watch_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
)

// The bytes a ZMTP 3.0 ROUTER sends, written out from the spec
// (rfc.zeromq.org/spec/23) rather than by the client under test.
var (
	// routerGreeting: signature, version 3.0, NULL, as-server 1, filler.
	routerGreeting = append(append([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0}, nullMechanism()...), make([]byte, 32)...)
	// routerReady: a command frame, READY with Socket-Type ROUTER.
	routerReady = append([]byte{0x04, 28, 5, 'R', 'E', 'A', 'D', 'Y', 11}, append([]byte("Socket-Type\x00\x00\x00\x06"), "ROUTER"...)...)
)

func nullMechanism() []byte {
	m := make([]byte, 20)
	copy(m, "NULL")
	return m
}

// longHeader is a frame header (flags with LONG set) claiming size bytes.
func longHeader(flags byte, size uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | 0x02}, size)
}

// hostilePeer listens on loopback and, for each connection, writes
// script's bytes while reading (and dropping) what the client sends; the
// connection stays open until the test ends, so the client sees exactly
// the bytes, then silence.
func hostilePeer(t testing.TB, script func(w io.Writer)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(io.Discard, c) }()
			go func() { defer wg.Done(); script(c) }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// write sends each byte slice in turn.
func write(parts ...[]byte) func(io.Writer) {
	return func(w io.Writer) {
		for _, p := range parts {
			if _, err := w.Write(p); err != nil {
				return
			}
		}
	}
}

// endless sends frame after frame until the client hangs up.
func endless(head []byte, frame []byte) func(io.Writer) {
	return func(w io.Writer) {
		if _, err := w.Write(head); err != nil {
			return
		}
		for {
			if _, err := w.Write(frame); err != nil {
				return
			}
		}
	}
}

// TestQueryRankHostilePeer: a side channel peer that breaks ZMTP, or
// claims frames no answer needs, is an error naming its endpoint and the
// step, within the deadline and without allocating what it claims.
func TestQueryRankHostilePeer(t *testing.T) {
	const limit = 1 << 20 // the answer limit in this test: 1 MiB
	handshake := append(append([]byte{}, routerGreeting...), routerReady...)
	delimiter := []byte{0x01, 0}
	big := make([]byte, 64<<10)
	bigFrame := append(longHeader(0x01, uint64(len(big))), big...)
	for _, c := range []struct {
		name   string
		script func(io.Writer)
		want   string
	}{
		{"a malformed READY property of 9 bytes", write(routerGreeting, []byte{0x04, 9, 5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o'}), "property name of 11 bytes"},
		{"a READY whose value runs past its frame", write(routerGreeting, []byte{0x04, 12, 5, 'R', 'E', 'A', 'D', 'Y', 1, 'S', 0xff, 0xff, 0xff, 0xff}), "declares a 4294967295-byte value, 0 bytes are left"},
		{"a READY value claiming 4 GiB", write(routerGreeting, append([]byte{0x04, 14, 5, 'R', 'E', 'A', 'D', 'Y', 1, 'S', 0xff, 0xff, 0xff, 0xff}, "xx"...)), "declares a 4294967295-byte value"},
		{"a READY frame header claiming 2^40 bytes", write(routerGreeting, longHeader(0x04, 1<<40)), "a frame of 1099511627776 bytes, over the 1048576-byte limit"},
		{"a READY frame header claiming 2^62 bytes", write(routerGreeting, longHeader(0x04, 1<<62)), "a frame of 4611686018427387904 bytes"},
		{"a READY frame header claiming 2^64-1 bytes", write(routerGreeting, longHeader(0x04, 1<<64-1)), "a frame of 18446744073709551615 bytes"},
		{"an answer frame claiming 2^40 bytes", write(handshake, delimiter, longHeader(0, 1<<40)), "a frame of 1099511627776 bytes, over the"},
		{"an answer frame claiming 2^62 bytes", write(handshake, delimiter, longHeader(0, 1<<62)), "a frame of 4611686018427387904 bytes, over the"},
		{"endless 64 KiB frames", endless(append(handshake, delimiter...), bigFrame), "left of the 1048576-byte limit on an answer"},
		{"endless empty frames", endless(handshake, delimiter), "more than 64 frames"},
		{"an HTTP server", write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" + strings.Repeat(" ", 64))), "not a ZMTP 3 peer"},
		{"ZMTP 2", write(append([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 1, 0}, make([]byte, 52)...)), "ZMTP version 1.0"},
		{"the CURVE mechanism", write(append(append([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0}, "CURVE"...), make([]byte, 47)...)), `mechanism "CURVE"`},
		{"a DEALER", write(routerGreeting, []byte{0x04, 28, 5, 'R', 'E', 'A', 'D', 'Y', 11}, []byte("Socket-Type\x00\x00\x00\x06DEALER")), `Socket-Type "DEALER"`},
		{"an ERROR command", write(routerGreeting, []byte{0x04, 11, 5, 'E', 'R', 'R', 'O', 'R', 4, 'n', 'o', 'p', 'e'}), `refused the connection: "nope"`},
		{"reserved flag bits", write(routerGreeting, []byte{0x80, 0}), "reserved bits set"},
		{"an answer without the delimiter", write(handshake, []byte{0x00, 1, 0x80}), "no empty delimiter"},
		{"a peer that stops after its greeting", write(routerGreeting), "no answer within 500ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := hostilePeer(t, c.script)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			md, err := watch.QueryRank(context.Background(), addr, 0, 500*time.Millisecond, limit)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("answered %+v", md)
			}
			if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %q: want it to name %s and say %q", err, addr, c.want)
			}
			var ze *watch.ZMTPError
			if c.want != "no answer within 500ms" && !errors.As(err, &ze) {
				t.Errorf("err %q is no *watch.ZMTPError", err)
			}
			if took > 3*time.Second {
				t.Errorf("took %s", took)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*limit {
				t.Errorf("allocated %d bytes for an answer limited to %d", alloc, limit)
			}
		})
	}
}

// TestQueryRankCancelled: cancelling the watcher ends a wait at once.
func TestQueryRankCancelled(t *testing.T) {
	addr := hostilePeer(t, write(routerGreeting))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := watch.QueryRank(ctx, addr, 0, 10*time.Second, 0)
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err %v: want an error naming %s", err, addr)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a cancelled query returned after %s", d)
	}
}
