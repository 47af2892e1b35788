//go:build !cgo

package gpu

// Discover reports that NVML needs cgo: this binary was built without it.
func Discover() Result {
	return Result{Reason: "GPU discovery needs cgo: rebuild with CGO_ENABLED=1"}
}
