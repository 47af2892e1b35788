// Package nixltest moves one real request through real NIXL for the tests
// that watch what NIXL reports of it (its telemetry rings, the metrics a
// watcher exports from them). Its helper builds with the nixl tag and cgo
// (make test-nixl).
package nixltest
