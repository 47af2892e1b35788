// Package grafana builds kvscope's two Grafana dashboards as code, with
// Grafana's foundation SDK (github.com/grafana/grafana-foundation-sdk/go):
// FleetOverview, every engine pair a watcher (kvscope-agent watch --name)
// reports, and EnginePair, one pair's drill-down down to its rank pairs.
// Their panels query what kvscope exports (agent/runner/watch_metrics.go,
// server/live/metrics.go) and the recording rules of
// agent/deploy/prometheus/rules.yml, over a Prometheus data source chosen
// by a dashboard variable.
//
// Files is what make dashboards writes (cmd/dashboards) into dashboards/,
// where the generated JSON is committed; a test regenerates it and fails
// on any drift, and another parses every query with Prometheus' own PromQL
// parser and holds each metric it names against a real watcher's and a
// real hub's registries.
//
// Non-goals: the package does not talk to a Grafana server (import the
// JSON by hand, by provisioning or with grizzly), and neither binary
// imports it: the SDK stays out of kvscope and kvscope-agent (a test
// holds them to that).
package grafana
