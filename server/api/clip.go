package api

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxQuoted is the most of one user-supplied value an error message
// quotes, in bytes of the value before escaping: enough to recognise it,
// never enough to echo a pasted file back.
const MaxQuoted = 256

// maxErrorBytes bounds an error envelope's message whatever it quotes: the
// longest honest message (an unknown model, with the bundled names listed)
// is about 1.3 KiB.
const maxErrorBytes = 4 << 10

// Clip quotes v as %q does, with at most MaxQuoted bytes of it: a longer
// value is cut at a character boundary and followed by an ellipsis and its
// length, as in "abc…" (3300000 bytes).
func Clip(v string) string {
	if len(v) <= MaxQuoted {
		return strconv.Quote(v)
	}
	return strconv.Quote(cut(v, MaxQuoted)+"…") + " (" + strconv.Itoa(len(v)) + " bytes)"
}

// cut is v's first n bytes or fewer, ending on a character boundary.
func cut(v string, n int) string {
	if len(v) <= n {
		return v
	}
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n]
}

// clipMessage bounds an error message built elsewhere (core's errors, the
// JSON decoder's), which may quote the request: each double-quoted value
// (as %q writes one) longer than MaxQuoted is clipped as Clip clips it,
// and so is each unquoted run of non-space bytes (a number or a version
// echoed bare); what is left over maxErrorBytes keeps its head and its
// tail, where the field is named, and loses its middle.
func clipMessage(msg string) string {
	if len(msg) <= MaxQuoted {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); {
		switch c := msg[i]; {
		case c == '"':
			end := closingQuote(msg, i)
			span := msg[i:end]
			if len(span) <= MaxQuoted+2 {
				b.WriteString(span)
			} else if v, err := strconv.Unquote(span); err == nil {
				b.WriteString(Clip(v))
			} else {
				b.WriteString(Clip(strings.Trim(span, `"`)))
			}
			i = end
		case c == ' ':
			b.WriteByte(c)
			i++
		default:
			end := i + strings.IndexAny(msg[i:], ` "`)
			if end < i {
				end = len(msg)
			}
			if word := msg[i:end]; len(word) <= MaxQuoted {
				b.WriteString(word)
			} else {
				body := strings.TrimRight(word, ":;,.)")
				b.WriteString(cut(body, MaxQuoted) + "… (" + strconv.Itoa(len(body)) + " bytes)" + word[len(body):])
			}
			i = end
		}
	}
	out := b.String()
	if len(out) <= maxErrorBytes {
		return out
	}
	keep := maxErrorBytes/2 - 32
	head, tail := cut(out, keep), out[len(out)-keep:]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return head + " … (" + strconv.Itoa(len(out)-len(head)-len(tail)) + " bytes left out) … " + tail
}

// closingQuote is the index just past the double quote that closes the
// one at msg[open] (backslash escapes skipped), or len(msg) when none does.
func closingQuote(msg string, open int) int {
	for i := open + 1; i < len(msg); i++ {
		switch msg[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(msg)
}
