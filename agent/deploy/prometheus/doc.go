// Package prometheus ships kvscope's Prometheus rules (rules.yml:
// recording rules per engine pair and rank pair, and alerts with
// runbooks) beside their unit tests (rules_test.yml). Its tests run
// promtool on them and on a real watcher's metrics, and a real Prometheus
// server against a watcher and a kvscope serve; each skips, saying why,
// where Debian's prometheus package is not installed (.ci/run installs
// it). It holds no Go code the binaries use.
package prometheus
