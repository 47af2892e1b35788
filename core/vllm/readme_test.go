package vllm

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEShowsTheVersionTable: the package README's version table is
// the table in this package, row for row (kvscope versions --json prints
// it).
func TestREADMEShowsTheVersionTable(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	for _, c := range Changes() {
		row := "| " + c.From + " | " + c.What() + " | " + strings.ReplaceAll(c.Rule, "|", `\|`) + " | " + c.Source + " | " + string(c.Evidence) + " |"
		if !strings.Contains(readme, row) {
			t.Errorf("README.md lacks the row %s", row)
		}
	}
}
