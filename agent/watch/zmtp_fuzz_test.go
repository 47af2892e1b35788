package watch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// FuzzZMTP: whatever a side channel peer sends, the client's handshake
// and answer either fail with a *ZMTPError or return an answer within its
// limits (frames and bytes), never a panic.
func FuzzZMTP(f *testing.F) {
	greet := append(append([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 1}, "NULL"...), make([]byte, 48)...)
	ready := append([]byte{0x04, 28, 5, 'R', 'E', 'A', 'D', 'Y', 11}, "Socket-Type\x00\x00\x00\x06ROUTER"...)
	ok := append(append(append([]byte{}, greet...), ready...), 0x01, 0, 0x00, 3, 0x81, 0xa1, 'x')
	f.Add(ok)
	f.Add(append(append([]byte{}, greet...), 0x04, 9, 5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o'))
	f.Add(append(append([]byte{}, greet...), binary.BigEndian.AppendUint64([]byte{0x06}, 1<<62)...))
	f.Add(append(append(append([]byte{}, greet...), ready...), 0x04, 10, 4, 'P', 'I', 'N', 'G', 0, 1, 'c', 't', 'x', 0x01, 0, 0x00, 0))
	const limit = 1 << 12
	f.Fuzz(func(t *testing.T, peer []byte) {
		z := &zmtpConn{rw: struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(peer), io.Discard}, maxBytes: limit}
		check := func(err error) {
			var ze *ZMTPError
			if !errors.As(err, &ze) {
				t.Fatalf("err %v (%T): want a *ZMTPError", err, err)
			}
			if ze.Op == "" || ze.Reason == "" {
				t.Fatalf("err %v names no step or reason", err)
			}
		}
		if err := z.handshake(); err != nil {
			check(err)
			return
		}
		if err := z.send([]byte("req")); err != nil {
			check(err)
			return
		}
		frames, err := z.recv()
		if err != nil {
			check(err)
			return
		}
		total := 0
		for _, fr := range frames {
			total += len(fr)
		}
		if len(frames) == 0 || len(frames) > maxAnswerFrames || total > limit {
			t.Fatalf("an answer of %d frames, %d bytes: over the limits (%d frames, %d bytes)", len(frames), total, maxAnswerFrames, limit)
		}
	})
}
