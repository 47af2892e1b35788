package vlog

import (
	"fmt"
	"strconv"
	"strings"
)

// Raw is a Python value kvscope does not interpret (an object repr such as
// <Enum.X: 1> or PosixPath('/m')), kept as written.
type Raw string

// ParseLiteral reads one Python literal as vLLM logs print them with
// repr(): dicts, lists, tuples, sets, strings (single, double or triple
// quoted, with escapes), ints, floats, True, False and None. Anything else
// (an object repr, a call, a bare name) becomes a Raw of its balanced text.
// Dicts become map[string]any keyed by the key's string value (or its
// text); lists, tuples and sets become []any; numbers int64 or float64.
func ParseLiteral(s string) (any, error) {
	p := &litParser{s: s}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, p.errf("trailing text %q", clip(p.s[p.i:], 24))
	}
	return v, nil
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 64

type litParser struct {
	s string
	i int
}

func (p *litParser) errf(format string, args ...any) error {
	return fmt.Errorf("python literal at offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *litParser) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *litParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *litParser) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, p.errf("nested deeper than %d", maxDepth)
	}
	p.space()
	switch c := p.peek(); {
	case c == 0:
		return nil, p.errf("unexpected end")
	case c == '{':
		return p.dict(depth)
	case c == '[':
		return p.seq(depth, '[', ']')
	case c == '(':
		return p.seq(depth, '(', ')')
	case c == '\'' || c == '"':
		return p.str()
	case c == '-' || c == '+' || c == '.' || c >= '0' && c <= '9':
		if v, ok := p.number(); ok {
			return v, nil
		}
	}
	for _, w := range []struct {
		word string
		v    any
	}{{"True", true}, {"False", false}, {"None", nil}} {
		if strings.HasPrefix(p.s[p.i:], w.word) && !identByte(p.at(p.i+len(w.word))) {
			p.i += len(w.word)
			return w.v, nil
		}
	}
	return p.raw()
}

func (p *litParser) at(i int) byte {
	if i < len(p.s) {
		return p.s[i]
	}
	return 0
}

func identByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.'
}

func (p *litParser) dict(depth int) (any, error) {
	p.i++ // {
	out := map[string]any{}
	set := false
	for {
		p.space()
		if p.peek() == '}' {
			p.i++
			if set {
				return mapValues(out), nil
			}
			return out, nil
		}
		k, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		p.space()
		switch p.peek() {
		case ':':
			p.i++
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			out[keyString(k)] = v
		case ',', '}':
			set = true // a set literal {a, b}
			out[keyString(k)] = k
		default:
			return nil, p.errf("want ':' after a dict key")
		}
		p.space()
		switch p.peek() {
		case ',':
			p.i++
		case '}':
		default:
			return nil, p.errf("want ',' or '}' in a dict")
		}
	}
}

func mapValues(m map[string]any) []any {
	out := make([]any, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func keyString(k any) string {
	switch v := k.(type) {
	case string:
		return v
	case Raw:
		return string(v)
	}
	return fmt.Sprint(k)
}

func (p *litParser) seq(depth int, open, close byte) (any, error) {
	p.i++
	out := []any{}
	for {
		p.space()
		if p.peek() == close {
			p.i++
			return out, nil
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		p.space()
		switch p.peek() {
		case ',':
			p.i++
		case close:
		default:
			return nil, p.errf("want ',' or '%c'", close)
		}
	}
}

func (p *litParser) str() (any, error) {
	q := p.s[p.i]
	triple := strings.HasPrefix(p.s[p.i:], strings.Repeat(string(q), 3))
	end := string(q)
	if triple {
		end = strings.Repeat(string(q), 3)
	}
	p.i += len(end)
	var b strings.Builder
	for {
		if p.i >= len(p.s) {
			return nil, p.errf("unterminated string")
		}
		if strings.HasPrefix(p.s[p.i:], end) {
			p.i += len(end)
			return b.String(), nil
		}
		c := p.s[p.i]
		if c == '\\' && p.i+1 < len(p.s) {
			p.i++
			switch e := p.s[p.i]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'x':
				if p.i+2 < len(p.s) {
					if n, err := strconv.ParseUint(p.s[p.i+1:p.i+3], 16, 8); err == nil {
						b.WriteByte(byte(n))
						p.i += 3
						continue
					}
				}
				b.WriteByte(e)
			default:
				b.WriteByte(e)
			}
			p.i++
			continue
		}
		b.WriteByte(c)
		p.i++
	}
}

func (p *litParser) number() (any, bool) {
	start := p.i
	j := p.i
	if j < len(p.s) && (p.s[j] == '-' || p.s[j] == '+') {
		j++
	}
	for j < len(p.s) && (p.s[j] >= '0' && p.s[j] <= '9' || strings.IndexByte(".eE_+-", p.s[j]) >= 0) {
		if (p.s[j] == '+' || p.s[j] == '-') && j > start && p.s[j-1] != 'e' && p.s[j-1] != 'E' {
			break
		}
		j++
	}
	text := strings.ReplaceAll(p.s[start:j], "_", "")
	if identByte(p.at(j)) && p.at(j) != '.' {
		return nil, false // 1abc: not a number
	}
	if n, err := strconv.ParseInt(text, 10, 64); err == nil {
		p.i = j
		return n, true
	}
	if f, err := strconv.ParseFloat(text, 64); err == nil {
		p.i = j
		return f, true
	}
	return nil, false
}

// raw consumes a value kvscope does not interpret: text up to the next
// ',', ':' or closing bracket at its own nesting level, keeping quoted
// strings and balanced brackets (including <...>) whole.
func (p *litParser) raw() (any, error) {
	start := p.i
	var stack []byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '\'' || c == '"':
			if _, err := p.str(); err != nil {
				return nil, err
			}
			continue
		case c == '(' || c == '[' || c == '{' || c == '<':
			stack = append(stack, closer(c))
		case len(stack) > 0 && c == stack[len(stack)-1]:
			stack = stack[:len(stack)-1]
		case len(stack) == 0 && (c == ',' || c == ':' || c == ')' || c == ']' || c == '}'):
			text := strings.TrimSpace(p.s[start:p.i])
			if text == "" {
				return nil, p.errf("unexpected %q", c)
			}
			return Raw(text), nil
		}
		p.i++
	}
	if len(stack) > 0 {
		return nil, p.errf("unbalanced %q", stack[len(stack)-1])
	}
	return Raw(strings.TrimSpace(p.s[start:])), nil
}

func closer(c byte) byte {
	switch c {
	case '(':
		return ')'
	case '[':
		return ']'
	case '{':
		return '}'
	}
	return '>'
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
