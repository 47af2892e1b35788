//go:build nixl

package transfer

import (
	"os"
	"testing"
)

// TestNIXLStatusNamesMatchTheHeader reads nixl_status_t from the installed
// NIXL's nixl_types.h (built with the nixl tag, as make test-nixl builds
// it with NIXL's environment): every status it declares has its name in the table,
// and NIXL v1.4.0's statuses are all there with their values.
func TestNIXLStatusNamesMatchTheHeader(t *testing.T) {
	path := nixlTypesHeader()
	if path == "" {
		msg := "no NIXL headers (nixl_types.h under NIXL_PREFIX, CGO_CPPFLAGS's -I or NIXL's default prefixes): eval \"$(agent/transfer/nixl-env.sh)\" to check the status names against them"
		if os.Getenv("KVSCOPE_REQUIRE_NIXL") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	declared, err := parseStatusEnum(string(src))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	t.Logf("%s declares %d statuses", path, len(declared))
	for name, code := range declared {
		if got := nixlStatusName(code); got != name {
			t.Errorf("%s declares %s = %d; nixlStatusName(%d) = %q", path, name, code, code, got)
		}
	}
	for _, s := range nixlV140Statuses {
		if code, ok := declared[s.name]; !ok {
			t.Errorf("%s does not declare %s (NIXL v1.4.0: %d)", path, s.name, s.code)
		} else if code != s.code {
			t.Errorf("%s declares %s = %d, NIXL v1.4.0 %d", path, s.name, code, s.code)
		}
	}
}
