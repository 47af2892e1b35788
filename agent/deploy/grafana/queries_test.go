package grafana_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/kvscope/kvscope/agent/deploy/deploytest"
	"github.com/kvscope/kvscope/agent/deploy/grafana"
	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/runner"
)

// rulesFile is the Prometheus rules kvscope ships beside the dashboards.
const rulesFile = "../prometheus/rules.yml"

// prometheusOwn are series Prometheus itself writes for every target,
// which rules may name (KvscopeWatcherDown reads up).
var prometheusOwn = map[string]bool{"up": true}

// TestDashboardQueriesNameExportedMetrics: every query of both
// dashboards (each panel's targets, the annotations' and the
// variables') parses with Prometheus' own PromQL parser once Grafana's
// variables are put in, and every metric it names is one kvscope
// exports (a real watcher's and a real hub's registries; a histogram's
// _bucket, _sum and _count series) or one rules.yml records.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	known := exported(t)
	recorded := recordedNames(t)
	files, err := grafana.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			var d any
			if err := json.Unmarshal(f.JSON, &d); err != nil {
				t.Fatal(err)
			}
			qs := dashboardQueries(t, d)
			if len(qs) < 20 {
				t.Fatalf("only %d queries found: the walk missed panels", len(qs))
			}
			for _, q := range qs {
				names, err := metricNames(q.expr)
				if err != nil {
					t.Errorf("%s: %q does not parse: %v", q.where, q.expr, err)
					continue
				}
				if len(names) == 0 {
					t.Errorf("%s: %q names no metric", q.where, q.expr)
				}
				for _, n := range names {
					if !recorded[n] && !known.has(n) {
						t.Errorf("%s: %q names %s, which kvscope does not export (and rules.yml does not record)", q.where, q.expr, n)
					}
				}
			}
		})
	}
}

// TestRulesNameExportedMetrics: every expression of rules.yml (recording
// rules and alerts) parses with the same parser and names only what
// kvscope exports, what an earlier rule records, or Prometheus' own up.
func TestRulesNameExportedMetrics(t *testing.T) {
	known := exported(t)
	recorded := recordedNames(t)
	rules := readRules(t)
	if len(rules) < 10 {
		t.Fatalf("only %d rules read from %s", len(rules), rulesFile)
	}
	for _, r := range rules {
		t.Run(r.Record+r.Alert, func(t *testing.T) {
			names, err := metricNames(r.Expr)
			if err != nil {
				t.Fatalf("%q does not parse: %v", r.Expr, err)
			}
			for _, n := range names {
				if !recorded[n] && !known.has(n) && !prometheusOwn[n] {
					t.Errorf("%q names %s, which kvscope does not export", r.Expr, n)
				}
			}
		})
	}
}

// TestEveryWatcherMetricIsOnTheDrillDown: each family a watcher exports
// appears in at least one query of the engine-pair dashboard, directly or
// through a recording rule, so a metric added to the watcher without a
// panel fails here.
func TestEveryWatcherMetricIsOnTheDrillDown(t *testing.T) {
	known := exported(t)
	var pair []byte
	files, err := grafana.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Name == "engine-pair.json" {
			pair = f.JSON
		}
	}
	var d any
	if err := json.Unmarshal(pair, &d); err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	add := func(expr string) {
		names, _ := metricNames(expr)
		for _, n := range names {
			shown[known.family(n)] = true
		}
	}
	for _, q := range dashboardQueries(t, d) {
		add(q.expr)
	}
	recordedExpr := map[string]string{}
	for _, r := range readRules(t) {
		if r.Record != "" {
			recordedExpr[r.Record] = r.Expr
		}
	}
	for name := range shown { // a recorded name stands for what its rule reads
		if e, ok := recordedExpr[name]; ok {
			add(e)
		}
	}
	for _, n := range known.watcher {
		if !shown[n] {
			t.Errorf("the watcher exports %s, which no query of engine-pair.json shows", n)
		}
	}
}

// known is what kvscope exports: each family's name and type.
type known struct {
	types   map[string]string // family -> counter, gauge, histogram, ...
	watcher []string          // the watcher's families
}

// has reports whether a series name belongs to an exported family.
func (k known) has(name string) bool { return k.family(name) != "" }

// family is the family a series name belongs to ("" when none): itself,
// or a histogram's for its _bucket, _sum and _count series.
func (k known) family(name string) string {
	if _, ok := k.types[name]; ok {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && k.types[base] == "histogram" {
			return base
		}
	}
	return ""
}

// exported fills a real watcher's and a real hub's registries.
func exported(t *testing.T) known {
	t.Helper()
	k := known{types: map[string]string{}}
	watched := deploytest.Watched(t)
	k.watcher = watched.Names()
	for _, reg := range []*metrics.Registry{watched, deploytest.Served(t)} {
		for n, typ := range familyTypes(reg) {
			k.types[n] = typ
		}
	}
	for _, n := range []string{runner.MetricRankUp, runner.MetricPlanMismatch, runner.MetricDescriptors, "kvscope_live_stuck_transfers_total"} {
		if k.types[n] == "" {
			t.Fatalf("the registries lack %s: deploytest fills too little", n)
		}
	}
	return k
}

// familyTypes reads each family's type from the registry's exposition
// (# TYPE lines).
func familyTypes(reg *metrics.Registry) map[string]string {
	var sb strings.Builder
	reg.Write(&sb)
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(sb.String()))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// rule is one rule of rules.yml.
type rule struct {
	Record string `json:"record"`
	Alert  string `json:"alert"`
	Expr   string `json:"expr"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// recordedNames are the series rules.yml's recording rules write.
func recordedNames(t *testing.T) map[string]bool {
	out := map[string]bool{}
	for _, r := range readRules(t) {
		if r.Record != "" {
			out[r.Record] = true
		}
	}
	return out
}

// promQL is Prometheus' parser with its default options (no
// experimental functions: a dashboard must run on a stock Prometheus).
var promQL = parser.NewParser(parser.Options{})

// metricNames parses a PromQL expression and lists the metric names its
// selectors name: each vector selector's name, or its __name__ matcher
// when that is an equality.
func metricNames(expr string) ([]string, error) {
	e, err := promQL.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name != labels.MetricName {
				continue
			}
			if m.Type != labels.MatchEqual {
				bad = fmt.Errorf("selector %s matches metric names by %s: every name must be spelled out", vs, m.Type)
			}
			name = m.Value
		}
		seen[name] = true
		return nil
	})
	if bad != nil {
		return nil, bad
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// q is one query of a dashboard and where it is.
type q struct{ where, expr string }

// grafanaVar is a Grafana variable in a query: $name, ${name} or
// ${name:format}.
var grafanaVar = regexp.MustCompile(`\$\{?(__\w+|\w+)(?::\w+)?\}?`)

// expand puts values in for Grafana's variables: its interval and range
// variables become a duration, the dashboard's own a label value.
func expand(expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		name := grafanaVar.FindStringSubmatch(v)[1]
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		case "__interval_ms", "__range_s", "__range_ms":
			return "300"
		}
		return "x"
	})
}

// labelValues is Grafana's label_values(selector, label) query.
var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+)\s*,\s*\w+\s*\)\s*$`)

// dashboardQueries walks a dashboard's JSON for every PromQL query:
// panels' targets (rows' panels too), annotations (their expr and their
// target's), and query variables (label_values' selector,
// query_result's expression).
func dashboardQueries(t *testing.T, d any) []q {
	t.Helper()
	root, _ := d.(map[string]any)
	var out []q
	var panels func(list any)
	panels = func(list any) {
		ps, _ := list.([]any)
		for _, p := range ps {
			pm, _ := p.(map[string]any)
			title := fmt.Sprintf("panel %q", pm["title"])
			targets, _ := pm["targets"].([]any)
			for _, tg := range targets {
				tm, _ := tg.(map[string]any)
				expr, ok := tm["expr"].(string)
				if !ok || expr == "" {
					t.Errorf("%s: a target without a PromQL expr: %v", title, tm)
					continue
				}
				out = append(out, q{fmt.Sprintf("%s target %v", title, tm["refId"]), expand(expr)})
			}
			panels(pm["panels"]) // a collapsed row's
		}
	}
	panels(root["panels"])
	anns, _ := root["annotations"].(map[string]any)
	list, _ := anns["list"].([]any)
	for _, a := range list {
		am, _ := a.(map[string]any)
		where := fmt.Sprintf("annotation %q", am["name"])
		if e, ok := am["expr"].(string); ok {
			out = append(out, q{where, expand(e)})
		}
		if tg, ok := am["target"].(map[string]any); ok {
			if e, ok := tg["expr"].(string); ok {
				out = append(out, q{where + " target", expand(e)})
			}
		}
	}
	tmpl, _ := root["templating"].(map[string]any)
	vars, _ := tmpl["list"].([]any)
	for _, v := range vars {
		vm, _ := v.(map[string]any)
		if vm["type"] != "query" {
			continue
		}
		where := fmt.Sprintf("variable %q", vm["name"])
		text, _ := vm["query"].(string)
		if m, ok := vm["query"].(map[string]any); ok {
			text, _ = m["query"].(string)
		}
		switch {
		case labelValues.MatchString(text):
			out = append(out, q{where, expand(labelValues.FindStringSubmatch(text)[1])})
		case strings.HasPrefix(text, "query_result(") && strings.HasSuffix(text, ")"):
			out = append(out, q{where, expand(text[len("query_result(") : len(text)-1])})
		default:
			t.Errorf("%s: query %q is neither label_values(selector, label) nor query_result(expr)", where, text)
		}
	}
	return out
}
