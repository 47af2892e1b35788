package transfer

import (
	"fmt"
	"strings"
)

// The shim's own status codes (nixl_shim.h), outside NIXL's range.
const (
	shimErrException = -1000
	shimErrNoMemory  = -1001
	shimErrArgument  = -1002
)

// nixlNotFound is NIXL_ERR_NOT_FOUND.
const nixlNotFound = -4

// NIXLError is a NIXL call that failed: the call, NIXL's status (or one of
// the shim's own codes) and the shim's message.
type NIXLError struct {
	Op     string
	Status int
	Msg    string
}

func (e *NIXLError) Error() string {
	return fmt.Sprintf("transfer: nixl %s: %s: %s", e.Op, nixlStatusName(e.Status), e.Msg)
}

// StatusName is the status as events name it ("ERR_BACKEND").
func (e *NIXLError) StatusName() string { return strings.TrimPrefix(nixlStatusName(e.Status), "NIXL_") }

// nixlStatusNames are nixl_status_t's names, and the shim's own codes.
var nixlStatusNames = map[int]string{
	1: "NIXL_IN_PROG", 0: "NIXL_SUCCESS", -1: "NIXL_ERR_NOT_POSTED", -2: "NIXL_ERR_INVALID_PARAM",
	-3: "NIXL_ERR_BACKEND", -4: "NIXL_ERR_NOT_FOUND", -5: "NIXL_ERR_MISMATCH", -6: "NIXL_ERR_NOT_ALLOWED",
	-7: "NIXL_ERR_REPOST_ACTIVE", -8: "NIXL_ERR_UNKNOWN", -9: "NIXL_ERR_NOT_SUPPORTED",
	-10: "NIXL_ERR_REMOTE_DISCONNECT", -11: "NIXL_ERR_CANCELED", -12: "NIXL_ERR_NO_TELEMETRY",
	shimErrException: "SHIM_ERR_EXCEPTION", shimErrNoMemory: "SHIM_ERR_NO_MEMORY", shimErrArgument: "SHIM_ERR_ARGUMENT",
}

func nixlStatusName(st int) string {
	if s, ok := nixlStatusNames[st]; ok {
		return s
	}
	return fmt.Sprintf("NIXL_STATUS_%d", st) // a status newer than this table
}
