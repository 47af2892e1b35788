// Package peer is the wire protocol between the two agents of a
// disaggregated deployment: P, which holds the prefill engine's KV regions
// and serves them (transfer.PeerServer), and D, which moves them into its
// own (transfer.Remote reads them over this connection, transfer.NIXLRemote
// over NIXL). It owns the message types, their framing and size limits, the
// JSON bodies and the binary read descriptors. It knows nothing of memory,
// backends, sessions or locks: those belong to the two ends.
//
// With the host backend P serves its registered regions over TCP and D
// reads them, as NIXL's D pulls from P. With the nixl backend the
// connection is only the control channel: the handshake carries each
// side's NIXL metadata, and the bytes move by NIXL over UCX.
//
// A message is one type byte, a big-endian uint32 payload length and the
// payload:
//
//	H  D→P  hello (Hello): JSON {token, session, conn, d: D's version-15
//	        metadata, nixl: D's NIXL agent name and getLocalMD blob (nixl
//	        backend)}
//	M  P→D  JSON: P's version-15 metadata, one entry per P rank
//	N  P→D  JSON (NIXLHello): P's NIXL agent name and blob (nixl backend),
//	        sent once P checked D's token and loaded D's blob
//	F  D→P  prefill (Prefill): JSON {id, prompt_tokens, prefix_hit_tokens};
//	        P plans the same request and writes its blocks as a prefill would
//	R  P→D  ready (Ready): JSON {id}
//	W  D→P  push (Push; nixl backend, connector nixl-push): JSON {notif}; P
//	        WRITEs the last prefilled request's blocks into D over NIXL,
//	        each request carrying notif
//	D  P→D  pushed (Report): JSON, NIXL's statistics of the WRITEs
//	Q  D→P  read: uint32 count, then per descriptor uint32 rank, uint32
//	        region, uint64 offset, uint64 length (EncodeRead, ReadDesc)
//	B  P→D  the bytes of every descriptor of the read, in order
//	E  P→D  an error (text); P closes the connection after it
//
// A read names a rank, a region index, an offset and a length; P checks
// each against its registered regions. Nothing a TCP read sends is a
// memory address: base addresses in the metadata are informational there.
// With NIXL they are the real addresses the peer registered, as in vLLM's
// handshake, and every remote descriptor is checked against the regions
// the peer advertised before it reaches NIXL.
package peer

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// The message types.
const (
	MsgHello   = 'H'
	MsgMeta    = 'M'
	MsgNIXL    = 'N'
	MsgPrefill = 'F'
	MsgReady   = 'R'
	MsgPush    = 'W'
	MsgPushed  = 'D'
	MsgRead    = 'Q'
	MsgData    = 'B'
	MsgError   = 'E'
)

// The limits both ends hold each other to.
const (
	MaxHelloBytes    = 1 << 20          // a hello, read before the token is checked
	MaxControlBytes  = 4 << 20          // metadata, prefill or read messages
	MaxReadBytes     = 16 << 20         // the bytes one read may ask for
	HandshakeTimeout = 10 * time.Second // dialling and the handshake
	OpTimeout        = 60 * time.Second // one prefill, push or read
)

// Error is a failure the peer reported or a protocol violation, in the
// operation named by Op (hello, handshake, prefill, push, read, ...).
type Error struct {
	Op  string
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("peer %s: %v", e.Op, e.Err) }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// WriteMsg writes one message whose payload is the concatenation of
// payload, and flushes w.
func WriteMsg(w *bufio.Writer, typ byte, payload ...[]byte) error {
	var n int
	for _, p := range payload {
		n += len(p)
	}
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(n))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	for _, p := range payload {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return w.Flush()
}

// ReadHeader reads a message's type and payload length, refusing a
// payload over limit bytes before any of it is read.
func ReadHeader(r *bufio.Reader, limit int) (byte, int, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n > limit {
		return 0, 0, fmt.Errorf("message %q of %d bytes exceeds %d", hdr[0], n, limit)
	}
	return hdr[0], n, nil
}

// ReadMsg reads one message of at most limit payload bytes.
func ReadMsg(r *bufio.Reader, limit int) (byte, []byte, error) {
	typ, n, err := ReadHeader(r, limit)
	if err != nil {
		return 0, nil, err
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return typ, buf, nil
}
