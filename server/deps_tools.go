//go:build tools

// This file pins modules that later parts of kvscope import (the app, the
// charts, GPU discovery, websockets and the browser tests), so that go mod
// tidy keeps them in go.mod. It never builds.
package main

import (
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/chromedp/chromedp"
	_ "github.com/coder/websocket"
	_ "github.com/go-echarts/go-echarts/v2/opts"
	_ "github.com/maxence-charriere/go-app/v10/pkg/app"
)
