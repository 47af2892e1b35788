package transfer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// nixlV140Statuses is nixl_status_t of NIXL v1.4.0 (src/api/cpp/nixl_types.h).
var nixlV140Statuses = []struct {
	code int
	name string
}{
	{1, "NIXL_IN_PROG"},
	{0, "NIXL_SUCCESS"},
	{-1, "NIXL_ERR_NOT_POSTED"},
	{-2, "NIXL_ERR_INVALID_PARAM"},
	{-3, "NIXL_ERR_BACKEND"},
	{-4, "NIXL_ERR_NOT_FOUND"},
	{-5, "NIXL_ERR_MISMATCH"},
	{-6, "NIXL_ERR_NOT_ALLOWED"},
	{-7, "NIXL_ERR_REPOST_ACTIVE"},
	{-8, "NIXL_ERR_UNKNOWN"},
	{-9, "NIXL_ERR_NOT_SUPPORTED"},
	{-10, "NIXL_ERR_REMOTE_DISCONNECT"},
	{-11, "NIXL_ERR_CANCELED"},
	{-12, "NIXL_ERR_NO_TELEMETRY"},
}

func TestNIXLStatusNames(t *testing.T) {
	tests := []struct {
		code       int
		name       string // nixlStatusName
		event      string // NIXLError.StatusName, as error events carry it
		unknownNum bool   // a code no table knows: the name carries the number
	}{
		{code: -10, name: "NIXL_ERR_REMOTE_DISCONNECT", event: "ERR_REMOTE_DISCONNECT"},
		{code: -4, name: "NIXL_ERR_NOT_FOUND", event: "ERR_NOT_FOUND"},
		{code: 1, name: "NIXL_IN_PROG", event: "IN_PROG"},
		{code: shimErrException, name: "SHIM_ERR_EXCEPTION", event: "SHIM_ERR_EXCEPTION"},
		{code: shimErrNoMemory, name: "SHIM_ERR_NO_MEMORY", event: "SHIM_ERR_NO_MEMORY"},
		{code: shimErrArgument, name: "SHIM_ERR_ARGUMENT", event: "SHIM_ERR_ARGUMENT"},
		// Statuses of a NIXL newer than the table, and garbage.
		{code: -13, name: "NIXL_STATUS_-13", event: "STATUS_-13", unknownNum: true},
		{code: 2, name: "NIXL_STATUS_2", event: "STATUS_2", unknownNum: true},
		{code: -999, name: "NIXL_STATUS_-999", event: "STATUS_-999", unknownNum: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nixlStatusName(tt.code); got != tt.name {
				t.Errorf("nixlStatusName(%d) = %q, want %q", tt.code, got, tt.name)
			}
			e := &NIXLError{Op: "postXferReq", Status: tt.code, Msg: "m"}
			if got := e.StatusName(); got != tt.event {
				t.Errorf("StatusName() = %q, want %q", got, tt.event)
			}
			if want := "transfer: nixl postXferReq: " + tt.name + ": m"; e.Error() != want {
				t.Errorf("Error() = %q, want %q", e.Error(), want)
			}
			if tt.unknownNum {
				for code, known := range nixlStatusNames {
					if known == tt.name {
						t.Errorf("the fallback %q is the name of status %d", tt.name, code)
					}
				}
			}
		})
	}
	t.Run("every status of NIXL v1.4.0", func(t *testing.T) {
		for _, s := range nixlV140Statuses {
			if got := nixlStatusName(s.code); got != s.name {
				t.Errorf("nixlStatusName(%d) = %q, want %q", s.code, got, s.name)
			}
		}
		if got, want := len(nixlStatusNames), len(nixlV140Statuses)+3; got != want {
			t.Errorf("the table names %d statuses, want NIXL v1.4.0's %d and the shim's 3", got, len(nixlV140Statuses))
		}
	})
}

func TestParseStatusEnum(t *testing.T) {
	tests := []struct {
		name, src string
		want      map[string]int
		err       string
	}{
		{"two statuses and a comment", "enum nixl_status_t {\n  NIXL_IN_PROG = 1, // pending\n  NIXL_ERR_X = -3\n};", map[string]int{"NIXL_IN_PROG": 1, "NIXL_ERR_X": -3}, ""},
		{"other enums around it", "enum a { NIXL_NOT = 7 };\nenum nixl_status_t { NIXL_SUCCESS = 0 };\nenum b { NIXL_ALSO_NOT = 8 };", map[string]int{"NIXL_SUCCESS": 0}, ""},
		{"no such enum", "enum other { A = 1 };", nil, "no enum nixl_status_t"},
		{"an implicit value", "enum nixl_status_t { NIXL_SUCCESS = 0, NIXL_NEXT };", nil, "NIXL_NEXT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatusEnum(tt.src)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// nixlTypesHeader finds nixl_types.h of an installed NIXL, or "".
func nixlTypesHeader() string {
	var dirs []string
	if p := os.Getenv("NIXL_PREFIX"); p != "" {
		dirs = append(dirs, filepath.Join(p, "include"))
	}
	for _, v := range []string{"CGO_CPPFLAGS", "CGO_CXXFLAGS", "CGO_CFLAGS"} {
		for _, f := range strings.Fields(os.Getenv(v)) {
			if d, ok := strings.CutPrefix(f, "-I"); ok && d != "" {
				dirs = append(dirs, d)
			}
		}
	}
	dirs = append(dirs, "/opt/nvidia/nvda_nixl/include", "/usr/local/nixl/include")
	for _, d := range dirs {
		p := filepath.Join(d, "nixl_types.h")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

var (
	statusEnum   = regexp.MustCompile(`(?s)enum\s+nixl_status_t\s*\{(.*?)\}`)
	statusMember = regexp.MustCompile(`^\s*(NIXL_[A-Z0-9_]+)\s*=\s*(-?\d+)\s*$`)
	lineComment  = regexp.MustCompile(`//[^\n]*`)
)

// parseStatusEnum reads the enumerators of nixl_status_t from C++ source;
// each must have an explicit value, as NIXL's do.
func parseStatusEnum(src string) (map[string]int, error) {
	m := statusEnum.FindStringSubmatch(src)
	if m == nil {
		return nil, errors.New("no enum nixl_status_t")
	}
	out := map[string]int{}
	for _, member := range strings.Split(lineComment.ReplaceAllString(m[1], ""), ",") {
		if strings.TrimSpace(member) == "" {
			continue
		}
		mm := statusMember.FindStringSubmatch(member)
		if mm == nil {
			return nil, fmt.Errorf("enumerator %q: want NIXL_NAME = value", strings.TrimSpace(member))
		}
		v, err := strconv.Atoi(mm[2])
		if err != nil {
			return nil, err
		}
		out[mm[1]] = v
	}
	if len(out) == 0 {
		return nil, errors.New("enum nixl_status_t has no enumerators")
	}
	return out, nil
}
