//go:build !(js && wasm)

package main

import "github.com/kvscope/kvscope/core/model"

// inWorker is false outside a browser.
func inWorker() bool { return false }

func serveTune(model.Catalog) {}
