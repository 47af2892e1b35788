// Package app is kvscope's browser UI: go-app v10 components compiled to
// WebAssembly together with core, so the browser computes every number with
// the same code as the CLI. It draws what core computes and holds no
// planning logic.
package app
