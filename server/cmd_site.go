package main

import (
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	kvapp "github.com/kvscope/kvscope/app"
	"github.com/kvscope/kvscope/static"
	"github.com/kvscope/kvscope/web"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

func runSite(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("site", flag.ContinueOnError)
	out := fs.String("out", "site", "directory to write the static website into")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := writeSite(*out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote a static website to %s: serve it from any static file host (it needs no kvscope server; planning runs in WebAssembly)\n", *out)
	return nil
}

// writeSite generates go-app's static website and copies the web assets
// (app.wasm, CSS, JavaScript, icons, ECharts) next to it.
func writeSite(dir string) error {
	if _, err := fs.Stat(web.Files(), "app.wasm"); err != nil {
		return fmt.Errorf("site: this binary carries no app.wasm; build it with make site")
	}
	kvapp.Register(catalog())
	if err := app.GenerateStaticWebsite(dir, appHandler(nil)); err != nil {
		return fmt.Errorf("site: %w", err)
	}
	webDir := filepath.Join(dir, "web")
	for _, src := range []fs.FS{static.Files(), web.Files()} {
		err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || filepath.Ext(p) == ".go" || p == "README.md" || p == "app.wasm.gz" {
				return err
			}
			data, err := fs.ReadFile(src, p)
			if err != nil {
				return err
			}
			dst := filepath.Join(webDir, filepath.Base(p)) // vendor/echarts.min.js lands at web/echarts.min.js
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			return os.WriteFile(dst, data, 0o644)
		})
		if err != nil {
			return fmt.Errorf("site: copying assets: %w", err)
		}
	}
	return nil
}
