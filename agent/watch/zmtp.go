package watch

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
)

// The side channel's client: a ZMTP 3.0 REQ with the NULL mechanism,
// from rfc.zeromq.org/spec/23 (ZMTP 3.0) and spec/37 (3.1, whose PING it
// answers); the package doc says why it is not zmq4.

// DefaultMaxAnswerBytes bounds one side channel answer, every frame and
// command of it together, when no limit is given: vLLM's handshake answer
// is a few kilobytes per rank.
const DefaultMaxAnswerBytes = 16 << 20

// maxAnswerFrames bounds the frames (and commands) of one answer: a REQ
// reply is an empty delimiter and one body; a peer that sends more
// without end is refused when it reaches this many.
const maxAnswerFrames = 64

// maxProperties bounds the properties of a READY command (ZMTP defines
// Socket-Type and Identity; libzmq adds a few).
const maxProperties = 64

// ZMTP frame flags (spec 23, "Framing").
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
	flagsKnown  = flagMore | flagLong | flagCommand
)

// ZMTPError is a side channel peer that broke the protocol, or a frame
// over the limit; Op is the step (greeting, READY, answer).
type ZMTPError struct {
	Op     string
	Reason string
	Err    error // the connection's error, if one ended the step
}

// Error implements error.
func (e *ZMTPError) Error() string {
	if e.Err != nil {
		return "zmtp " + e.Op + ": " + e.Reason + ": " + e.Err.Error()
	}
	return "zmtp " + e.Op + ": " + e.Reason
}

// Unwrap is the connection's error.
func (e *ZMTPError) Unwrap() error { return e.Err }

// zmtpConn is one ZMTP connection to a side channel, as a REQ socket.
type zmtpConn struct {
	rw       io.ReadWriter
	maxBytes int64
}

// dialZMTP connects to addr and completes ZMTP's handshake as a REQ
// socket; ctx's deadline bounds the dial and, through the connection's
// deadline, every read and write after it.
func dialZMTP(ctx context.Context, addr string, maxBytes int64) (*zmtpConn, net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	z := &zmtpConn{rw: conn, maxBytes: maxBytes}
	if err := z.handshake(); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return z, conn, nil
}

// greeting is the 64-byte greeting of a ZMTP 3.0 client with the NULL
// mechanism.
func greeting() []byte {
	g := make([]byte, 64)
	g[0], g[9] = 0xff, 0x7f // signature
	g[10], g[11] = 3, 0     // version
	copy(g[12:32], "NULL")  // mechanism; as-server (g[32]) is 0
	return g
}

// handshake sends this side's greeting and READY and reads the peer's:
// ZMTP 3.x, the NULL mechanism, and a READY whose Socket-Type a REQ may
// talk to (ROUTER or REP).
func (z *zmtpConn) handshake() error {
	ready := []byte("\x05READY")
	ready = appendProperty(ready, "Socket-Type", "REQ")
	ready = appendProperty(ready, "Identity", "")
	out := append(greeting(), appendFrame(nil, flagCommand, ready)...)
	if _, err := z.rw.Write(out); err != nil {
		return &ZMTPError{"greeting", "sending the greeting", err}
	}
	var g [64]byte
	if _, err := io.ReadFull(z.rw, g[:]); err != nil {
		return &ZMTPError{"greeting", "reading the peer's 64-byte greeting", err}
	}
	if g[0] != 0xff || g[9]&1 != 1 {
		return &ZMTPError{"greeting", fmt.Sprintf("signature %x: not a ZMTP 3 peer", g[:10]), nil}
	}
	if g[10] < 3 {
		return &ZMTPError{"greeting", fmt.Sprintf("ZMTP version %d.%d: this client speaks 3.x", g[10], g[11]), nil}
	}
	if mech := string(bytes.TrimRight(g[12:32], "\x00")); mech != "NULL" {
		return &ZMTPError{"greeting", fmt.Sprintf("security mechanism %q: this client speaks NULL only (vLLM's side channel uses NULL)", clip(mech)), nil}
	}
	flags, body, err := z.readFrame("READY", z.maxBytes, fmt.Sprintf("the %d-byte limit", z.maxBytes))
	if err != nil {
		return err
	}
	if flags&flagCommand == 0 {
		return &ZMTPError{"READY", fmt.Sprintf("a message frame of %d bytes before the peer's READY command", len(body)), nil}
	}
	props, err := parseReady(body)
	if err != nil {
		return err
	}
	switch t := props["socket-type"]; t {
	case "ROUTER", "REP":
	default:
		return &ZMTPError{"READY", fmt.Sprintf("Socket-Type %q: a REQ talks to ROUTER or REP (vLLM binds a ROUTER)", clip(t)), nil}
	}
	return nil
}

// parseReady reads a READY command's properties (spec 23: a 1-byte
// name length, the name, a 4-byte big-endian value length and the
// value), keyed by lower-cased name. An ERROR command is the peer's
// refusal and comes back as an error with its reason.
func parseReady(b []byte) (map[string]string, error) {
	bad := func(format string, args ...any) (map[string]string, error) {
		return nil, &ZMTPError{"READY", fmt.Sprintf(format, args...), nil}
	}
	if len(b) == 0 || int(b[0]) > len(b)-1 {
		return bad("a command of %d bytes whose name does not fit", len(b))
	}
	name, rest := string(b[1:1+int(b[0])]), b[1+int(b[0]):]
	switch name {
	case "READY":
	case "ERROR":
		reason := rest
		if len(rest) > 0 && int(rest[0]) <= len(rest)-1 {
			reason = rest[1 : 1+int(rest[0])]
		}
		return bad("the peer refused the connection: %q", clip(string(reason)))
	default:
		return bad("command %q where READY was due", clip(name))
	}
	props := map[string]string{}
	for i := 0; len(rest) > 0; i++ {
		if i == maxProperties {
			return bad("more than %d properties", maxProperties)
		}
		n := int(rest[0])
		if n == 0 || n > len(rest)-1-4 {
			return bad("a property name of %d bytes with %d bytes left", n, len(rest)-1)
		}
		key := string(rest[1 : 1+n])
		rest = rest[1+n:]
		v := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(v) > uint64(len(rest)) {
			return bad("property %q declares a %d-byte value, %d bytes are left", clip(key), v, len(rest))
		}
		props[strings.ToLower(key)] = string(rest[:v])
		rest = rest[v:]
	}
	return props, nil
}

// readFrame reads one frame of at most limit bytes: its size is checked
// before anything is allocated, and the body is read as it arrives (a
// peer that claims 16 MiB and sends less costs what it sent).
// limitWhat names the limit in the error.
func (z *zmtpConn) readFrame(op string, limit int64, limitWhat string) (flags byte, body []byte, err error) {
	var h [9]byte
	if _, err := io.ReadFull(z.rw, h[:1]); err != nil {
		return 0, nil, &ZMTPError{op, "reading a frame header", err}
	}
	flags = h[0]
	if flags&^flagsKnown != 0 {
		return 0, nil, &ZMTPError{op, fmt.Sprintf("frame flags %#02x: reserved bits set", flags), nil}
	}
	var size uint64
	if flags&flagLong != 0 {
		if _, err := io.ReadFull(z.rw, h[1:9]); err != nil {
			return 0, nil, &ZMTPError{op, "reading a frame size", err}
		}
		size = binary.BigEndian.Uint64(h[1:9])
	} else {
		if _, err := io.ReadFull(z.rw, h[1:2]); err != nil {
			return 0, nil, &ZMTPError{op, "reading a frame size", err}
		}
		size = uint64(h[1])
	}
	if size > uint64(max(limit, 0)) {
		return 0, nil, &ZMTPError{op, fmt.Sprintf("a frame of %d bytes, over %s", size, limitWhat), nil}
	}
	if flags&flagCommand != 0 && flags&flagMore != 0 {
		return 0, nil, &ZMTPError{op, "a command frame flagged MORE", nil}
	}
	body, err = io.ReadAll(io.LimitReader(z.rw, int64(size)))
	if err == nil && uint64(len(body)) < size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return 0, nil, &ZMTPError{op, fmt.Sprintf("a frame of %d bytes cut after %d", size, len(body)), err}
	}
	return flags, body, nil
}

// send writes one request as a REQ does: an empty delimiter frame, then
// the body.
func (z *zmtpConn) send(body []byte) error {
	out := appendFrame(nil, flagMore, nil)
	out = appendFrame(out, 0, body)
	if _, err := z.rw.Write(out); err != nil {
		return &ZMTPError{"request", "sending it", err}
	}
	return nil
}

// recv reads one answer: its frames after REQ's empty delimiter, at most
// maxAnswerFrames frames and commands and maxBytes bytes in all. A PING
// (ZMTP 3.1 heartbeat) is answered; other commands are skipped.
func (z *zmtpConn) recv() ([][]byte, error) {
	var frames [][]byte
	total := int64(0)
	for n := 0; ; n++ {
		if n == maxAnswerFrames {
			return nil, &ZMTPError{"answer", fmt.Sprintf("more than %d frames", maxAnswerFrames), nil}
		}
		left := z.maxBytes - total
		flags, body, err := z.readFrame("answer", left,
			fmt.Sprintf("the %d bytes left of the %d-byte limit on an answer (%d frames so far)", left, z.maxBytes, n))
		if err != nil {
			return nil, err
		}
		total += int64(len(body)) + 1
		if flags&flagCommand != 0 {
			if len(body) >= 5 && string(body[:5]) == "\x04PING" {
				pong := append([]byte("\x04PONG"), body[min(len(body), 7):]...) // echo the context after the TTL
				if _, err := z.rw.Write(appendFrame(nil, flagCommand, pong)); err != nil {
					return nil, &ZMTPError{"answer", "answering a PING", err}
				}
			}
			continue
		}
		frames = append(frames, body)
		if flags&flagMore == 0 {
			break
		}
	}
	if len(frames[0]) != 0 {
		return nil, &ZMTPError{"answer", fmt.Sprintf("no empty delimiter before the answer (its first frame holds %d bytes): not a reply to a REQ", len(frames[0])), nil}
	}
	if len(frames) == 1 {
		return nil, &ZMTPError{"answer", "an empty answer", nil}
	}
	return frames[1:], nil
}

// appendFrame appends a frame: flags, a 1- or 8-byte size, the body.
func appendFrame(b []byte, flags byte, body []byte) []byte {
	if len(body) > 255 {
		b = append(b, flags|flagLong)
		b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	} else {
		b = append(b, flags, byte(len(body)))
	}
	return append(b, body...)
}

// appendProperty appends a READY property.
func appendProperty(b []byte, name, value string) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// clip shortens a peer's string for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
