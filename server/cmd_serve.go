package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"mime"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	kvapp "github.com/kvscope/kvscope/app"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/static"
	"github.com/kvscope/kvscope/web"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// serveOptions configure the kvscope server.
type serveOptions struct {
	Addr  string
	Token string
	Agent string
	Logf  func(format string, args ...any)
}

func runServe(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	token := fs.String("token", "", "bearer token agents present; required to listen beyond loopback")
	agent := fs.String("agent", "embedded", "embedded (a host-memory agent in this process) or none")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o := serveOptions{Addr: *addr, Token: *token, Agent: *agent, Logf: log.New(stdout, "kvscope: ", log.LstdFlags).Printf}
	if err := o.check(); err != nil {
		return &usageError{err}
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	srv := newHTTPServer(newMux(catalog(), o))
	o.Logf("serving the app on http://%s (open it in a browser)", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}

// check refuses to listen beyond loopback without a token.
func (o serveOptions) check() error {
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", o.Addr, err)
	}
	ip := net.ParseIP(host)
	loopback := host == "localhost" || ip != nil && ip.IsLoopback()
	if !loopback && o.Token == "" {
		return fmt.Errorf("--addr %s listens beyond loopback: give --token", o.Addr)
	}
	switch o.Agent {
	case "embedded", "none":
	default:
		return fmt.Errorf("--agent %q: want embedded or none", o.Agent)
	}
	return nil
}

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// newMux routes the app, its assets and the JSON API.
func newMux(cat model.Catalog, o serveOptions) *http.ServeMux {
	kvapp.Register(cat)
	mux := http.NewServeMux()
	mux.Handle("/api/plan", api(cat, apiPlan))
	mux.Handle("/api/pd", api(cat, apiPD))
	mux.Handle("/api/oracle", api(cat, apiOracle))
	mux.Handle("/api/models", apiModels(cat))
	mux.Handle("/", appHandler())
	return mux
}

// appHandler is go-app's handler with every asset served from this binary:
// nothing is loaded from another host.
func appHandler() *app.Handler {
	return &app.Handler{
		Name:         "kvscope",
		ShortName:    "kvscope",
		Title:        "kvscope: KV cache groups and P/D transfers",
		Description:  "Plans vLLM's hybrid KV cache groups and proves prefill/decode KV transfers byte by byte.",
		Icon:         app.Icon{Default: "/web/icon-192.png", Large: "/web/icon-512.png", SVG: "/web/icon.svg", Maskable: "/web/icon-192.png"},
		Styles:       []string{"/web/kvscope.css"},
		Scripts:      []string{"/web/echarts.min.js", "/web/kvscope.js"},
		Resources:    newAssets(),
		LoadingLabel: "loading kvscope ({progress}%)",
		ThemeColor:   "#1f2937",
	}
}

// assets serves /web/ from the embedded web root (app.wasm) and the
// embedded static assets, app.wasm gzip-compressed.
type assets struct {
	webFS, staticFS fs.FS
	gzOnce          sync.Once
	gz              []byte // app.wasm compressed, when make did not ship app.wasm.gz
}

func newAssets() *assets { return &assets{webFS: web.Files(), staticFS: static.Files()} }

// Resolve leaves paths as they are: everything is served from this handler.
func (a *assets) Resolve(p string) string { return p }

func (a *assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(path.Clean(r.URL.Path), "/web/")
	if name == "app.wasm" {
		a.serveWasm(w, r)
		return
	}
	for _, candidate := range []struct {
		fsys fs.FS
		name string
	}{{a.staticFS, name}, {a.staticFS, "vendor/" + name}, {a.webFS, name}} {
		data, err := fs.ReadFile(candidate.fsys, candidate.name)
		if err != nil {
			continue
		}
		if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.Write(data)
		return
	}
	http.NotFound(w, r)
}

// serveWasm sends app.wasm, gzip-compressed when the browser accepts it.
func (a *assets) serveWasm(w http.ResponseWriter, r *http.Request) {
	raw, err := fs.ReadFile(a.webFS, "app.wasm")
	if err != nil {
		http.Error(w, "app.wasm is not built into this binary: run make run (it builds web/app.wasm first)", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/wasm")
	if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Write(raw)
		return
	}
	gz, err := fs.ReadFile(a.webFS, "app.wasm.gz")
	if err != nil {
		a.gzOnce.Do(func() { a.gz = gzipBytes(raw) })
		gz = a.gz
	}
	w.Header().Set("Content-Encoding", "gzip")
	w.Header().Set("Vary", "Accept-Encoding")
	w.Write(gz)
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}
