package vlog

import "strings"

// Field is one key=value pair of a repr such as the engine config line
// ("model='m', speculative_config=None, dtype=torch.bfloat16, ...").
type Field struct {
	Key   string
	Value string // as written; see Unquote
}

// SplitFields splits "k1=v1, k2=v2, ..." at the top level: commas inside
// quotes, brackets, braces and parentheses stay in their value. Text that
// is not a key=value pair is kept as a field with an empty key.
func SplitFields(s string) []Field {
	var out []Field
	depth := 0
	var quote byte
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			if depth > 0 {
				depth--
			}
		case c == ',' && depth == 0 && startsField(s[i+1:]):
			out = append(out, field(s[start:i]))
			start = i + 1
		}
	}
	if strings.TrimSpace(s[start:]) != "" {
		out = append(out, field(s[start:]))
	}
	return out
}

// startsField reports whether s (after a comma) begins a new key=value.
func startsField(s string) bool {
	s = strings.TrimLeft(s, " ")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '=':
			return i > 0
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return false
}

func field(s string) Field {
	s = strings.TrimSpace(s)
	k, v, ok := strings.Cut(s, "=")
	if !ok || !startsField(s) {
		return Field{Value: s}
	}
	return Field{Key: strings.TrimSpace(k), Value: strings.TrimSpace(v)}
}

// Unquote strips one pair of matching quotes.
func Unquote(v string) string {
	if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}

// Lookup returns the value of the first field named key.
func Lookup(fields []Field, key string) (string, bool) {
	for _, f := range fields {
		if f.Key == key {
			return f.Value, true
		}
	}
	return "", false
}

// CallFields reads the arguments of a call repr, "Name(k=v, ...)", or nil.
func CallFields(v string) []Field {
	i := strings.IndexByte(v, '(')
	if i <= 0 || !strings.HasSuffix(v, ")") {
		return nil
	}
	return SplitFields(v[i+1 : len(v)-1])
}
