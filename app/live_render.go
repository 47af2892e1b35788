package app

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
)

// liveLegend says how the live bands are drawn.
const liveLegend = "each band = one P rank → D rank and P group → D group, coloured by layer kind · solid = measured timing · dashed = synthesized timing (NIXL reports completion per request only) · " +
	"width = bytes moved since this page connected · brightness = how recently a batch moved"

// liveBandsHTML draws every agent's live bands, then the legend.
func liveBandsHTML(l *Live, now time.Time) string {
	var sb strings.Builder
	drawn := 0
	for _, a := range l.Agents() {
		if len(a.bands) == 0 && a.Handshake == nil {
			continue
		}
		drawn++
		host := ""
		if a.Hello != nil && a.Hello.Host != "" {
			host = " on " + a.Hello.Host
		}
		fmt.Fprintf(&sb, `<div class="live-agent" data-agent="%s"><h3>%s%s: %s moved</h3>`,
			html.EscapeString(a.Name), html.EscapeString(a.Name), html.EscapeString(host), humanBytes(a.Bytes))
		if h := a.Handshake; h != nil {
			line := h.Summary
			if h.Path != "" {
				line += " · " + h.Path
			}
			if h.Rejection != "" {
				line += " · rejected: " + h.Rejection
			}
			fmt.Fprintf(&sb, `<p class="muted">%s</p>`, html.EscapeString(line))
		}
		if len(a.bands) > 0 {
			sb.WriteString(liveSVG(a, now))
		}
		if a.Undrawn > 0 {
			fmt.Fprintf(&sb, `<p class="muted">%s batches are not drawn (beyond %d ranks, %d groups or %d bands per agent).</p>`,
				commas(int64(a.Undrawn)), liveMaxRank, liveMaxGroup, liveMaxBands)
		}
		sb.WriteString(`</div>`)
	}
	if drawn == 0 {
		sb.WriteString(`<p class="muted">No descriptor batches yet.</p>`)
	}
	fmt.Fprintf(&sb, `<p class="legend muted" data-testid="live-legend">%s`, html.EscapeString(liveLegend))
	for _, k := range []model.Kind{model.Full, model.Sliding, model.ChunkedLocal, model.MLA, model.GatedDeltaNet, model.KDA, model.Mamba2} {
		fmt.Fprintf(&sb, ` <span class="key"><span class="swatch" style="background:%s"></span>%s</span>`, kindColor(k), html.EscapeString(shortKind(k)))
	}
	sb.WriteString(`</p>`)
	return sb.String()
}

// liveSVG draws one agent's bands in the flow view's visual language: P
// ranks on the left, D ranks on the right, each with a slot per KV cache
// group, and a band per (P rank, D rank, P group, D group) as wide as the
// bytes it moved. The ranks and groups are the ones the agent's events
// name, not the form's settings: the agent's deployment may differ.
func liveSVG(a *liveAgent, now time.Time) string {
	const width, boxW, gap, top = 900.0, 130.0, 18.0, 24.0
	nP, nD := max(a.PRanks, 1), max(a.DRanks, 1)
	gP, gD := max(a.PGroups, 1), max(a.DGroups, 1)
	boxH := func(groups int) float64 { return max(48, float64(groups)*18) }
	pH, dH := boxH(gP), boxH(gD)
	height := top + max(float64(nP)*(pH+gap), float64(nD)*(dH+gap)) + 4
	bands := a.Bands()
	var maxBytes int64
	for _, b := range bands {
		maxBytes = max(maxBytes, b.Bytes)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" class="flow live-flow" data-testid="live-bands" data-agent="%s">`,
		width, height, html.EscapeString(a.Name))
	box := func(x float64, side string, rank int, h float64, groups int) {
		y0 := top + float64(rank)*(h+gap)
		fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.0f" height="%.1f" rx="6" class="rank"/>`, x, y0, boxW, h)
		for g := 0; g < groups; g++ {
			gy := y0 + float64(g)*h/float64(groups)
			fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.0f" height="%.1f" class="region"><title>%s rank %d, KV cache group %d</title></rect>`,
				x+4, gy+2, boxW-8, max(1, h/float64(groups)-4), side, rank, g)
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" class="group-label">g%d</text>`, x+boxW/2, gy+h/float64(groups)/2+4, g)
		}
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" class="rank-label">%s rank %d</text>`, x+boxW/2, y0-6, side, rank)
	}
	for r := 0; r < nP; r++ {
		box(10, "P", r, pH, gP)
	}
	for r := 0; r < nD; r++ {
		box(width-10-boxW, "D", r, dH, gD)
	}
	slotY := func(rank int, h float64, group, groups int) float64 {
		return top + float64(rank)*(h+gap) + (float64(group)+0.5)*h/float64(groups)
	}
	x1, x2 := 10+boxW, width-10-boxW
	mid := (x1 + x2) / 2
	for _, b := range bands {
		y1, y2 := slotY(b.P, pH, b.PG, gP), slotY(b.D, dH, b.DG, gD)
		w := 1.5
		if maxBytes > 0 {
			w += 14 * float64(b.Bytes) / float64(maxBytes)
		}
		cls := "band"
		if b.Batches > b.drawn {
			cls += " live"
		}
		timing := b.Timing()
		dash := ""
		if timing == event.Synthesized {
			cls += " synthesized"
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&sb, `<path d="M %.1f %.1f C %.1f %.1f, %.1f %.1f, %.1f %.1f" class="%s" stroke="%s" stroke-width="%.1f" style="stroke-opacity:%.2f"%s `+
			`data-testid="live-band" data-p="%d" data-d="%d" data-pg="%d" data-dg="%d" data-bytes="%d" data-batches="%d" data-timing="%s"><title>%s</title></path>`,
			x1, y1, mid, y1, mid, y2, x2, y2, cls, kindColor(model.Kind(b.Kind)), w, bandOpacity(now.Sub(b.LastAt)), dash,
			b.P, b.D, b.PG, b.DG, b.Bytes, b.Batches, timing, html.EscapeString(bandTitle(b)))
	}
	sb.WriteString(`</svg>`)
	return sb.String()
}

// bandTitle is a band's tooltip.
func bandTitle(b *liveBand) string {
	names := someNames(b.layers, 6)
	kind := b.Kind
	if kind == "" {
		kind = "kind not reported"
	}
	timing := fmt.Sprintf("timing measured (%s batches)", commas(b.Measured))
	if b.Timing() == event.Synthesized {
		timing = fmt.Sprintf("timing synthesized in %s of %s batches (NIXL reports completion per request only)", commas(b.Synthesized), commas(b.Batches))
	}
	return fmt.Sprintf("P%d → D%d · P g%d → D g%d (%s): %d layers %v · %s descriptors · %s in %s batches · last batch %s ms · %s",
		b.P, b.D, b.PG, b.DG, kind, len(b.layers), names, commas(b.Descs), humanBytes(b.Bytes), commas(b.Batches),
		ms(float64(b.LastNS)/1e3), timing)
}

// liveStatus is the connection's state as the panel shows it.
type liveStatus struct {
	State  string // connecting, open, closed, none
	Detail string
}

// liveStatsHTML is the status line and counters: what the ring holds, what
// was missed, what was verified, and what arrived while paused.
// ms writes a duration given in µs as milliseconds, to the µs.
func ms(us float64) string { return strconv.FormatFloat(us/1000, 'f', 3, 64) }

// liveStreamsHTML says what the live panel streams: each agent's
// scenario as its hello describes it, which is not the views' deployment
// until Run live restarts the embedded agent on it.
func liveStreamsHTML(l *Live) string {
	agents := l.Agents()
	if len(agents) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.WriteString(`<div class="live-streams" data-testid="live-streams">streaming: `)
	for i, a := range agents {
		if i == 3 {
			fmt.Fprintf(&sb, " and %d more agents", len(agents)-3)
			break
		}
		if i > 0 {
			sb.WriteString("; ")
		}
		what := "(no hello yet)"
		if h := a.Hello; h != nil && h.Scenario != "" {
			what = h.Scenario
		} else if h != nil && h.Model != "" {
			what = h.Model
		}
		fmt.Fprintf(&sb, `<b>%s</b> %s`, html.EscapeString(a.Name), html.EscapeString(what))
	}
	sb.WriteString(` <span class="muted">· the views compute the settings' own transfer; Run live streams that one</span></div>`)
	return sb.String()
}

func liveStatsHTML(l *Live, st liveStatus, paused bool, sincePause uint64) string {
	var sb strings.Builder
	label := map[string]string{"connecting": "connecting…", "open": "live", "closed": "disconnected", "none": "no live server"}[st.State]
	fmt.Fprintf(&sb, `<span class="live-state %s" data-testid="live-status" data-state="%s">%s</span>`, st.State, st.State, label)
	detail := st.Detail
	if detail == "" && st.State == "open" && l.Ring.Total == 0 {
		detail = "connected; no agent has sent events yet (kvscope serve runs an embedded agent unless --agent none; " +
			"kvscope-agent --server ws://HOST:PORT/ws/agent --token CRED streams from a GPU host, CRED from kvscope serve agent-token NAME)"
	}
	if detail != "" {
		fmt.Fprintf(&sb, ` <span class="muted">· %s</span>`, html.EscapeString(detail))
	}
	sb.WriteString(liveStreamsHTML(l))
	if l.Ring.Total == 0 && l.Ignored == 0 && l.Malformed == 0 && l.Gone == 0 {
		return sb.String()
	}
	var dropped uint64
	for _, a := range l.agents {
		dropped += a.Dropped
	}
	sb.WriteString(`<div class="live-counters">`)
	item := func(testid, count, text string, cls string) {
		fmt.Fprintf(&sb, `<span class="counter %s" data-testid="%s" data-count="%s">%s</span>`, cls, testid, count, html.EscapeString(text))
	}
	exact, wrong, skipped := l.Verified["exact"], l.Verified["wrong"], l.Verified["skipped"]
	item("live-verified", strconv.FormatUint(exact, 10), fmt.Sprintf("✓ %s transfers verified exact", commas(int64(exact))), "ok")
	if wrong > 0 {
		item("live-wrong", strconv.FormatUint(wrong, 10), fmt.Sprintf("✗ %s WRONG", commas(int64(wrong))), "bad")
	}
	if skipped > 0 {
		item("live-skipped", strconv.FormatUint(skipped, 10), fmt.Sprintf("%s not verified (sampled out)", commas(int64(skipped))), "")
	}
	item("live-events", strconv.FormatUint(l.Ring.Total, 10), fmt.Sprintf("%s events received, the last %s kept (of %s)",
		commas(int64(l.Ring.Total)), commas(int64(l.Ring.Len())), commas(liveRingSize)), "")
	gapCls := ""
	if l.Ring.Gaps > 0 {
		gapCls = "warn"
	}
	if l.Ring.DetailGaps > 0 { // detail is never resent: what a fault lost is told here
		item("live-detail-gaps", strconv.FormatUint(l.Ring.DetailGaps, 10), fmt.Sprintf("%s descriptor batches missed (a fault, or a slow page: detail is sent once, never stored)", commas(int64(l.Ring.DetailGaps))), "warn")
	}
	item("live-gaps", strconv.FormatUint(l.Ring.Gaps, 10), fmt.Sprintf("%s missed (sequence gaps)", commas(int64(l.Ring.Gaps))), gapCls)
	if l.Gone > 0 {
		item("live-gone", strconv.FormatUint(l.Gone, 10), fmt.Sprintf("%s stored frames missed while away: the event log no longer held them when this page resumed (its retention limits)", commas(int64(l.Gone))), "warn")
	}
	if dropped > 0 {
		item("live-agent-dropped", strconv.FormatUint(dropped, 10), fmt.Sprintf("%s dropped by the agents' queues", commas(int64(dropped))), "warn")
	}
	if l.Ignored > 0 {
		item("live-ignored", strconv.FormatUint(l.Ignored, 10), fmt.Sprintf("%s repeats ignored (replayed after a reconnect)", commas(int64(l.Ignored))), "")
	}
	if l.Malformed > 0 {
		item("live-malformed", strconv.FormatUint(l.Malformed, 10), fmt.Sprintf("%s malformed events or frames dropped: %s", commas(int64(l.Malformed)), l.LastMalformed), "bad")
	}
	if l.Forgotten > 0 {
		item("live-forgotten", strconv.FormatUint(l.Forgotten, 10), fmt.Sprintf("%s agents forgotten (at most %d are drawn)", commas(int64(l.Forgotten)), liveMaxAgents), "")
	}
	if paused {
		item("live-paused", strconv.FormatUint(sincePause, 10), fmt.Sprintf("paused: %s events arrived since (counted; the drawing catches up on resume)", commas(int64(sincePause))), "warn")
	}
	sb.WriteString(`</div>`)
	return sb.String()
}

// liveGPUsHTML is the GPU panel: each agent's hello.
func liveGPUsHTML(l *Live) string {
	agents := l.Agents()
	if len(agents) == 0 {
		return `<h3>GPUs</h3><p class="muted">No agent yet.</p>`
	}
	var sb strings.Builder
	sb.WriteString(`<h3>GPUs</h3>`)
	for _, a := range agents {
		h := a.Hello
		if h == nil {
			fmt.Fprintf(&sb, `<div class="live-host" data-agent="%s"><h4>%s</h4><p class="muted">Its hello came before this page connected and the server no longer replays it, so its host and GPUs are unknown here.</p></div>`,
				html.EscapeString(a.Name), html.EscapeString(a.Name))
			continue
		}
		fmt.Fprintf(&sb, `<div class="live-host" data-agent="%s"><h4>%s on %s</h4><dl class="stats">`, html.EscapeString(a.Name), html.EscapeString(a.Name), html.EscapeString(h.Host))
		for _, kv := range [][2]string{{"backend", h.Backend}, {"memory", h.Memory}, {"role", h.Role}, {"model", h.Model}} {
			if kv[1] != "" {
				fmt.Fprintf(&sb, `<div class="stat"><dt>%s</dt><dd>%s</dd></div>`, kv[0], html.EscapeString(kv[1]))
			}
		}
		sb.WriteString(`</dl>`)
		if h.Scenario != "" {
			fmt.Fprintf(&sb, `<p class="muted">%s</p>`, html.EscapeString(h.Scenario))
		}
		switch {
		case len(h.GPUs) > 0:
			sb.WriteString(`<table class="descs gpus"><thead><tr><th>#</th><th>GPU</th><th>UUID</th><th>memory</th><th>PCI bus</th><th>NVLinks up</th></tr></thead><tbody>`)
			for _, g := range h.GPUs {
				up := 0
				for _, link := range g.NVLinks {
					if link.Up {
						up++
					}
				}
				fmt.Fprintf(&sb, `<tr><td>%d</td><td>%s</td><td><code>%s</code></td><td>%s</td><td>%s</td><td>%d / %d</td></tr>`,
					g.Index, html.EscapeString(g.Name), html.EscapeString(g.UUID), humanBytes(int64(min(g.MemoryBytes, math.MaxInt64))),
					html.EscapeString(g.PCIBusID), up, len(g.NVLinks))
			}
			sb.WriteString(`</tbody></table>`)
		case h.NoGPU != "":
			fmt.Fprintf(&sb, `<p class="nogpu" data-testid="live-nogpu">No GPUs: %s.</p>`, html.EscapeString(h.NoGPU))
		default:
			sb.WriteString(`<p class="nogpu">No GPUs reported.</p>`)
		}
		sb.WriteString(`</div>`)
	}
	return sb.String()
}

// liveDeploymentHTML is the Deployment panel: the preflight of the
// watched engine pair where a watcher judged it from their side channels
// (the verdict kvscope pd --p-side-channel --d-side-channel gives), then
// every watched engine or NIXL agent (kvscope-agent watch), its observed
// plan, its latest rate and p50/p99 transfer time from NIXL's or vLLM's
// own numbers, its failures, and every plan field that differs from
// kvscope's prediction, in red.
func liveDeploymentHTML(l *Live) string {
	var names []string
	for name, a := range l.agents {
		if a.Hello != nil && a.Hello.Role == "watch" {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	// Rows by engine rank (linked agents first, P before D), then name.
	engineOf := func(name string) string {
		if e := l.agents[name].Hello.Engine; e != "" {
			return "0" + e
		}
		return "1"
	}
	sort.Slice(names, func(i, j int) bool {
		ei, ej := engineOf(names[i]), engineOf(names[j])
		if ei != ej {
			return ei < ej
		}
		return names[i] < names[j]
	})
	var sb strings.Builder
	sb.WriteString(`<h3>Deployment</h3>`)
	for _, name := range names {
		h := l.agents[name].Handshake
		if h == nil || h.Verdict == "" {
			continue
		}
		class := "bad"
		switch h.Verdict {
		case "ok":
			class = "ok"
		case "unverified":
			class = "muted"
		}
		fmt.Fprintf(&sb, `<p class="preflight %s" data-testid="deployment-verdict" data-agent="%s" data-verdict="%s"><b>preflight %s</b> · %s</p>`,
			class, html.EscapeString(name), html.EscapeString(h.Verdict), html.EscapeString(h.Verdict), html.EscapeString(h.Sentence))
	}
	sb.WriteString(`<div class="scroll"><table class="descs deployment"><thead><tr><th>engine rank</th><th>NIXL agent or endpoint</th><th>watched through</th>` +
		`<th>observed</th><th>GB/s</th><th>p50 µs</th><th>p99 µs</th><th>transfers</th><th>failures</th><th>plan</th></tr></thead><tbody>`)
	for _, name := range names {
		a := l.agents[name]
		var last event.SampleData
		if n := len(a.Samples); n > 0 {
			last = a.Samples[n-1].SampleData
		}
		plan := `<td class="plan ok" data-testid="plan-ok">as predicted, or not compared</td>`
		if len(a.Mismatch) > 0 {
			var fields []string
			for f := range a.Mismatch {
				fields = append(fields, f)
			}
			sort.Strings(fields)
			var cells []string
			for _, f := range fields {
				m := a.Mismatch[f]
				cells = append(cells, fmt.Sprintf(`<span class="mismatch bad" data-testid="plan-mismatch" data-field="%s">%s: observed %s, predicted %s</span>`,
					html.EscapeString(f), html.EscapeString(f), html.EscapeString(m.Observed), html.EscapeString(m.Predicted)))
			}
			plan = `<td class="plan bad">` + strings.Join(cells, "<br>") + `</td>`
		}
		rank := `<td class="muted">not linked</td>`
		if a.Hello.Engine != "" {
			rank = `<td data-testid="engine-rank">` + html.EscapeString(a.Hello.Engine) + `</td>`
		}
		fmt.Fprintf(&sb, `<tr data-testid="deployment-engine" data-agent="%s">%s<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class="%s">%d</td>%s</tr>`,
			html.EscapeString(name), rank, html.EscapeString(name), html.EscapeString(a.Hello.Backend), html.EscapeString(a.Hello.Scenario),
			strconv.FormatFloat(last.GBps, 'f', 2, 64), strconv.FormatFloat(last.P50US, 'f', 0, 64), strconv.FormatFloat(last.P99US, 'f', 0, 64),
			commas(int64(last.Requests)), map[bool]string{true: "bad", false: ""}[a.Failures > 0], a.Failures, plan)
	}
	sb.WriteString(`</tbody></table></div>`)
	sb.WriteString(liveStuckHTML(l, names))
	return sb.String()
}

// liveStuckHTML lists what the watched agents found stuck and not
// cleared: requests posted and not completed, expired KV, failed
// notifications, silent side channel ranks, each with when it started.
func liveStuckHTML(l *Live, names []string) string {
	type row struct {
		agent string
		s     event.StuckData
	}
	var rows []row
	for _, name := range names {
		for _, s := range l.agents[name].Stuck {
			rows = append(rows, row{name, s})
		}
	}
	if len(rows) == 0 {
		return ""
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].s.SinceNS < rows[j].s.SinceNS })
	var sb strings.Builder
	sb.WriteString(`<h4>Stuck and failed</h4><div class="scroll"><table class="descs stuck"><thead><tr><th>since</th><th>agent</th><th>what</th><th>source</th><th>reason</th></tr></thead><tbody>`)
	for _, r := range rows {
		what := r.s.Request
		if r.s.Engine != "" {
			what = strings.TrimSpace(r.s.Engine + " " + what)
		}
		if r.s.Count > 0 {
			what += fmt.Sprintf(" (%d requests)", r.s.Count)
		}
		since := time.Unix(0, r.s.SinceNS).UTC().Format("2006-01-02 15:04:05 UTC")
		fmt.Fprintf(&sb, `<tr class="bad" data-testid="deployment-stuck" data-source="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>`,
			html.EscapeString(r.s.Source), since, html.EscapeString(r.agent), html.EscapeString(what), html.EscapeString(r.s.Source), html.EscapeString(r.s.Reason))
	}
	sb.WriteString(`</tbody></table></div>`)
	return sb.String()
}

// liveFleetHTML is the fleet table: every agent the server knows, from its
// fleet summary (who it is, when last heard, events/s, GB/s, p99, errors),
// each row a button that adds the agent to or removes it from what the
// page draws, and the slowest transfers of the last minute fleet-wide.
func liveFleetHTML(l *Live, selected map[string]bool) string {
	f := l.Fleet
	if len(f.Fleet) == 0 {
		return ""
	}
	var sb strings.Builder
	drawn := "every agent"
	if selected != nil {
		drawn = fmt.Sprintf("%d of %d agents (click a row to add or remove it)", len(selected), len(f.Fleet))
	}
	fmt.Fprintf(&sb, `<h3>Fleet: %s</h3><p class="muted">The bands, timeline and transfers show %s. <button type="button" data-pick="*" data-testid="fleet-all">Draw every agent</button></p>`,
		plural(len(f.Fleet), "agent"), html.EscapeString(drawn))
	sb.WriteString(`<div class="scroll"><table class="descs fleet"><thead><tr><th>agent</th><th>host</th><th>role</th><th>backend</th><th>GPUs</th>` +
		`<th>last seen</th><th>events/s</th><th>GB/s</th><th>p99 ms</th><th>errors</th></tr></thead><tbody>`)
	for _, a := range f.Fleet {
		cls := ""
		if selected == nil || selected[a.Agent] {
			cls = "drawn"
		}
		fmt.Fprintf(&sb, `<tr data-testid="fleet-agent" data-agent="%s" data-pick="%s" class="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%.1f s ago</td><td>%s</td><td>%s</td><td>%s</td><td class="%s">%d</td></tr>`,
			html.EscapeString(a.Agent), html.EscapeString(a.Agent), cls, html.EscapeString(a.Agent), html.EscapeString(a.Host), html.EscapeString(a.Role),
			html.EscapeString(a.Backend), a.GPUs, a.LastSeenS, commas(int64(a.EventsPS)), strconv.FormatFloat(a.GBps, 'f', 2, 64),
			ms(a.P99US), map[bool]string{true: "bad", false: ""}[a.Errors > 0], a.Errors)
	}
	sb.WriteString(`</tbody></table></div>`)
	if len(f.Slowest) > 0 {
		sb.WriteString(`<h3>Slowest transfers, last minute, fleet-wide</h3><div class="scroll"><table class="descs"><thead><tr><th>agent</th><th>request</th><th>bytes</th><th>ms</th><th>timing</th></tr></thead><tbody>`)
		for _, t := range f.Slowest {
			fmt.Fprintf(&sb, `<tr data-testid="fleet-slowest"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>`,
				html.EscapeString(t.Agent), html.EscapeString(t.Request), humanBytes(t.Bytes), ms(t.TransferUS), html.EscapeString(string(t.Timing)))
		}
		sb.WriteString(`</tbody></table></div>`)
	}
	return sb.String()
}

// liveTransfersHTML lists the latest transfers, newest first, and the
// latest errors.
func liveTransfersHTML(l *Live) string {
	var sb strings.Builder
	sb.WriteString(`<h3>Recent transfers</h3>`)
	if len(l.Transfers) == 0 {
		sb.WriteString(`<p class="muted">No transfer completed yet.</p>`)
	} else {
		sb.WriteString(`<div class="scroll"><table class="descs"><thead><tr><th>agent</th><th>request</th><th>bytes</th><th>descriptors</th><th>after merging</th>` +
			`<th>ms</th><th>GB/s</th><th>timing</th><th>verified</th></tr></thead><tbody>`)
		for i := len(l.Transfers) - 1; i >= 0; i-- {
			t := l.Transfers[i]
			timing := string(t.Timing)
			if t.Source != "" {
				timing += " by " + t.Source // whose clock: the host backend's or NIXL's telemetry
			}
			fmt.Fprintf(&sb, `<tr data-testid="live-transfer" data-verified="%s" data-timing="%s" data-source="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class="timing %s">%s</td><td class="verified %s">%s</td></tr>`,
				html.EscapeString(t.Verified), t.Timing, html.EscapeString(t.Source), html.EscapeString(t.Agent), html.EscapeString(t.Request), humanBytes(t.Bytes),
				commas(int64(t.Descs)), commas(int64(t.Merged)), ms(t.TransferUS), strconv.FormatFloat(t.GBps, 'f', 2, 64),
				t.Timing, html.EscapeString(timing), html.EscapeString(t.Verified), html.EscapeString(t.Verified))
		}
		sb.WriteString(`</tbody></table></div>`)
	}
	if len(l.Errors) > 0 {
		sb.WriteString(`<h3>Errors</h3><div class="scroll"><table class="descs errors"><thead><tr><th>agent</th><th>request</th><th>status</th><th>message</th></tr></thead><tbody>`)
		for i := len(l.Errors) - 1; i >= 0; i-- {
			e := l.Errors[i]
			fmt.Fprintf(&sb, `<tr data-testid="live-error"><td>%s</td><td>%s</td><td>%s</td><td class="message">%s</td></tr>`,
				html.EscapeString(e.Agent), html.EscapeString(e.Request), html.EscapeString(e.Status), html.EscapeString(e.Message))
		}
		sb.WriteString(`</tbody></table></div>`)
	}
	return sb.String()
}

// liveTimelineOption is the timeline's ECharts option: GB/s and requests
// per second above, transfer latency p50 and p99 below, over the last two
// minutes of samples.
func liveTimelineOption(l *Live) string {
	end := l.newestSample()
	agents := l.Agents()
	named := func(a *liveAgent, s string) string {
		if len(agents) > 1 {
			return a.Name + " · " + s
		}
		return s
	}
	xAxis := func(grid int) echartAxis {
		x := echartAxis{Type: "time", GridIndex: grid}
		if end > 0 {
			x.Min, x.Max = (end-int64(liveWindow))/1e6, end/1e6
		}
		return x
	}
	off := false
	o := echartOption{Animation: &off,
		Title:   echartTitle{Text: "Live: throughput, requests and transfer latency (1 Hz samples, last 120 s)"},
		Tooltip: echartTooltip{Show: true, Trigger: "axis"},
		Legend:  echartLegend{Show: true, Top: "26"},
		Grid:    []echartGrid{{Top: "64", Height: "30%", Left: "64", Right: "64"}, {Top: "62%", Bottom: "28", Left: "64", Right: "64"}},
		XAxis:   []echartAxis{xAxis(0), xAxis(1)},
		YAxis: []echartAxis{{Name: "GB/s", Type: "value", GridIndex: 0}, {Name: "req/s", Type: "value", GridIndex: 0, Position: "right"},
			{Name: "ms", Type: "value", GridIndex: 1}},
		Series: []echartSeries{}}
	point := func(ms int64, v float64) [2]any {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return [2]any{ms, nil}
		}
		return [2]any{ms, math.Round(v*1000) / 1000}
	}
	for _, a := range agents {
		pts := a.timeline(end, liveWindow)
		series := func(name string, x, y int, get func(timelinePoint) float64) echartSeries {
			data := make([][2]any, len(pts))
			for i, p := range pts {
				data[i] = point(p.MS, get(p))
			}
			s := lineSeries(named(a, name), data, x, y)
			s.ShowSymbol = false
			return s
		}
		o.Series = append(o.Series,
			series("GB/s", 0, 0, func(p timelinePoint) float64 { return p.GBps }),
			series("requests/s", 0, 1, func(p timelinePoint) float64 { return p.ReqPS }),
			series("p50 ms", 1, 2, func(p timelinePoint) float64 { return p.P50 / 1000 }),
			series("p99 ms", 1, 2, func(p timelinePoint) float64 { return p.P99 / 1000 }))
	}
	return o.JSON()
}
