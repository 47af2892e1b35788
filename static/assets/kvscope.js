// kvscope's browser helpers, called from the Go app: ECharts drawing,
// downloads, link copying and view export. Nothing here loads anything from
// another host.
window.kvscope = {
  // hold keeps strings too big to copy into WebAssembly and out again (a
  // Tune search's markup and chart option, hundreds of kilobytes) on the
  // page, for the app to draw by name: values is {part: string}, each
  // held as prefix + '/' + part, and the prefix is returned. A group's
  // values replace those it held before.
  hold(group, values) {
    const held = this._held = this._held || new Map();
    for (const k of Array.from(held.keys())) if (k.startsWith(group + '#')) held.delete(k);
    const prefix = group + '#' + (this._holdSeq = (this._holdSeq || 0) + 1);
    for (const [part, v] of Object.entries(values)) held.set(prefix + '/' + part, v);
    return prefix;
  },
  // _text is the held string named held where there is a name, else text.
  _text(text, held) {
    return held ? ((this._held && this._held.get(held)) || '') : text;
  },
  // _fresh reports whether el was last asked to show something other than
  // text (or the held string named held) with the options opts, and
  // records that it is asked now. The app may ask twice for one drawing
  // (once directly, once when it renders the page after); the second
  // costs nothing.
  _fresh(el, text, held, opts) {
    const src = (held ? '\u0000' + held : text) + '\u0000' + opts;
    if (el.__kvscopeSrc === src) return false;
    el.__kvscopeSrc = src;
    return true;
  },
  // chart draws the ECharts option json (or the held option named held)
  // on the element id, afresh or, with merge, into the chart there (see
  // Chart.Merge in app/).
  chart(id, json, dark, merge, held) {
    const el = document.getElementById(id);
    if (!el || !this._fresh(el, json, held, [dark, merge])) return;
    this._chartNow(el, this._text(json, held), dark, merge);
  },
  _chartNow(el, json, dark, merge) {
    if (!window.echarts && document.readyState === 'loading') {
      // ECharts is deferred: it runs before DOMContentLoaded.
      document.addEventListener('DOMContentLoaded', () => this._chartNow(el, json, dark, merge), {once: true});
      return;
    }
    if (!window.echarts || !el.isConnected) return;
    let c = echarts.getInstanceByDom(el);
    if (c && c.__kvscopeDark !== dark) { c.dispose(); c = null; }
    if (!c) { c = echarts.init(el, dark ? 'dark' : null); c.__kvscopeDark = dark; }
    const opt = JSON.parse(json);
    if (dark) opt.backgroundColor = 'transparent';
    c.setOption(opt, !merge);
  },
  // chartOff draws as chart does, but in the chart worker
  // (kvscope-chart.js) on an OffscreenCanvas the element id holds, so that
  // the page's thread never waits for the drawing; where the browser has
  // no OffscreenCanvas it draws as chartLater. The worker draws the
  // tooltip on the canvas; the point under the pointer is also written
  // into the element's hover line (for screen readers, and tests), and
  // the element's data-drawn says how many points the last draw put on
  // the canvas.
  chartOff(id, json, dark, merge, held) {
    const el = document.getElementById(id);
    if (!el) return;
    if (!window.Worker || !window.OffscreenCanvas || !HTMLCanvasElement.prototype.transferControlToOffscreen) {
      this.chartLater(id, json, dark, merge, held);
      return;
    }
    const w = this._chartWorker();
    let cv = el.querySelector('canvas[data-offscreen]');
    if (!cv || cv.dataset.dark !== String(dark)) {
      if (cv) cv.remove();
      const width = el.clientWidth || 600, height = el.clientHeight || 400, dpr = window.devicePixelRatio || 1;
      cv = document.createElement('canvas');
      cv.dataset.offscreen = ''; cv.dataset.dark = String(dark);
      cv.style.width = width + 'px'; cv.style.height = height + 'px';
      cv.width = Math.round(width * dpr); cv.height = Math.round(height * dpr);
      el.appendChild(cv);
      let hover = el.querySelector('.chart-hover');
      if (!hover) {
        hover = document.createElement('div');
        hover.className = 'chart-hover'; hover.dataset.testid = id + '-hover';
        hover.setAttribute('aria-live', 'polite');
        el.appendChild(hover);
      }
      // The pointer goes to the worker at most once a frame.
      let at = null;
      cv.addEventListener('pointermove', e => {
        const send = !at;
        at = [e.offsetX, e.offsetY];
        if (send) requestAnimationFrame(() => { w.postMessage({id, move: at}); at = null; });
      });
      cv.addEventListener('pointerleave', () => w.postMessage({id, out: true}));
      const off = cv.transferControlToOffscreen();
      w.postMessage({id, canvas: off, width, height, dpr, dark}, [off]);
    }
    if (!this._fresh(cv, json, held, merge)) return;
    delete el.dataset.drawn;
    w.postMessage({id, option: this._text(json, held), merge});
  },
  _chartWorker() {
    if (this._charts) return this._charts;
    this._chartImages = {};
    const w = this._charts = new Worker('/web/kvscope-chart.js');
    this._chartWaits = {};
    w.onmessage = e => {
      const m = e.data;
      if (m.image !== undefined) {
        const wait = this._chartWaits[m.id];
        if (!wait) return;
        delete this._chartWaits[m.id];
        if (!m.image) { wait(); return; }
        const r = new FileReader();
        r.onload = () => { this._chartImages[m.id] = r.result; wait(); };
        r.onerror = () => wait();
        r.readAsDataURL(m.image);
        return;
      }
      const el = document.getElementById(m.id);
      if (!el) return;
      if (m.hover !== undefined) {
        const h = el.querySelector('.chart-hover');
        if (h) h.textContent = m.hover;
      } else if (m.drawn !== undefined) {
        el.dataset.drawn = m.drawn;
      }
    };
    return w;
  },
  // chartImages has the chart worker make a PNG of each of its canvases in
  // the view (kept for viewSVG) and resolves once it has, or after 3 s.
  chartImages() {
    const ids = Array.from(document.querySelectorAll('#view canvas[data-offscreen]')).map(cv => cv.closest('.chart').id);
    if (!ids.length || !this._charts) return Promise.resolve();
    return Promise.all(ids.map(id => new Promise(done => {
      const timer = setTimeout(done, 3000);
      this._chartWaits[id] = () => { clearTimeout(timer); done(); };
      this._charts.postMessage({id, image: true});
    })));
  },
  // onShortcut calls fn(key) for each key pressed outside a form field
  // without Ctrl or Meta, and returns the keydown listener it added (for
  // removeEventListener). Keys typed into fields never reach fn: typing
  // costs the page no call into WebAssembly.
  onShortcut(fn) {
    const h = e => {
      const tag = e.target && e.target.tagName;
      if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT' || e.ctrlKey || e.metaKey) return;
      fn(e.key);
    };
    window.addEventListener('keydown', h);
    return h;
  },
  // later runs fn in a task of its own after the browser has painted the
  // next frame (and answered input waiting for it); of the calls made for
  // one key before then, the last one's fn runs, once. The fns wait in
  // line, one a frame: what each adds to the page is laid out and drawn
  // before the next adds more, so no frame lays out all of them at once.
  later(key, fn) {
    this._later = this._later || new Map();
    this._later.set(key, fn); // a key already waiting keeps its place
    if (this._laterTicking) return;
    this._laterTicking = true;
    const tick = () => requestAnimationFrame(() => setTimeout(() => {
      const next = this._later.entries().next();
      if (next.done) { this._laterTicking = false; return; }
      const [k, f] = next.value;
      this._later.delete(k);
      try { f(); } finally { tick(); }
    }, 0));
    tick();
  },
  // chartLater draws a chart later (see later).
  chartLater(id, json, dark, merge, held) {
    const el = document.getElementById(id);
    if (!el || !this._fresh(el, json, held, [dark, merge])) return;
    this.later('chart:' + id, () => this._chartNow(el, this._text(json, held), dark, merge));
  },
  // markupLater sets the element id's content to the markup html (or the
  // held markup named held) later (see later); markup the element was last
  // asked to show is not drawn again.
  //
  // The browser's first layout of a table costs milliseconds a row (the
  // Tune view's 20 rows held the page 60–105 ms in a Chromium trace), so
  // a table comes without the rows of its bodies, which follow
  // rowsPerFrame a frame, each after the browser has drawn (and answered
  // input).
  markupLater(id, html, held) {
    const target = document.getElementById(id);
    if (target && !this._fresh(target, html, held, '')) return;
    html = this._text(html, held);
    const gens = this._markupGens = this._markupGens || {};
    const gen = gens[id] = (gens[id] || 0) + 1;
    const rowsPerFrame = 2;
    this.later('markup:' + id, () => {
      const el = document.getElementById(id);
      if (!el) return;
      const t = document.createElement('template');
      t.innerHTML = html;
      const rest = [];
      t.content.querySelectorAll('tbody').forEach(body => {
        const rows = Array.from(body.rows);
        rows.forEach(r => r.remove());
        if (rows.length) rest.push({body, rows});
      });
      el.replaceChildren(t.content);
      const more = () => {
        if (gens[id] !== gen) return; // newer markup came for this element
        let n = 0;
        while (rest.length && n < rowsPerFrame) {
          const {body, rows} = rest[0];
          while (rows.length && n < rowsPerFrame) { body.appendChild(rows.shift()); n++; }
          if (!rows.length) rest.shift();
        }
        if (rest.length) this.later('markup-rows:' + id, more);
      };
      if (rest.length) this.later('markup-rows:' + id, more);
    });
  },
  // morph makes the element id show the markup html, updating in place
  // the nodes whose structure is unchanged (so tooltips, hover and
  // selection survive a redraw) and replacing the rest. An element whose
  // class gains or keeps "live" restarts its animation: the live view marks
  // a band live when a batch moved since the last redraw.
  morph(id, html) {
    const el = document.getElementById(id);
    if (!el) return;
    const next = document.createElement('div');
    next.innerHTML = html;
    this._morph(el, next);
  },
  _morph(cur, next) {
    const want = Array.from(next.childNodes);
    while (cur.childNodes.length > want.length) cur.removeChild(cur.lastChild);
    want.forEach((y, i) => {
      const x = cur.childNodes[i];
      if (!x) { cur.appendChild(y); return; }
      if (x.nodeType !== y.nodeType || x.nodeName !== y.nodeName) { cur.replaceChild(y, x); return; }
      if (x.nodeType !== 1) { if (x.nodeValue !== y.nodeValue) x.nodeValue = y.nodeValue; return; }
      for (const a of Array.from(x.attributes)) if (!y.hasAttribute(a.name)) x.removeAttribute(a.name);
      for (const a of Array.from(y.attributes)) if (x.getAttribute(a.name) !== a.value) x.setAttribute(a.name, a.value);
      if (x.classList.contains('live')) {
        x.classList.remove('live');
        void x.getBoundingClientRect(); // restart the animation
        x.classList.add('live');
      }
      this._morph(x, y);
    });
  },
  downloadURL(name, url) {
    const a = document.createElement('a');
    a.href = url; a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
  },
  download(name, mime, text) {
    const url = URL.createObjectURL(new Blob([text], {type: mime}));
    this.downloadURL(name, url);
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  },
  // fetchText GETs url without cookies (the Hub answers cross-origin
  // requests) and calls done(status, text, commit, failure): status 0 and
  // what failed when no answer came (offline, or a refused request);
  // commit is the X-Repo-Commit header where the server exposes it.
  fetchText(url, done) {
    fetch(url, {credentials: 'omit'}).then(
      r => r.text().then(t => done(r.status, t, r.headers.get('X-Repo-Commit') || '', ''),
        e => done(r.status, '', '', String(e))),
      e => done(0, '', '', String(e)));
  },
  copyLink(path) {
    const url = location.origin + path;
    if (navigator.clipboard) navigator.clipboard.writeText(url).catch(() => {});
    this.toast('link copied: ' + url);
  },
  // runLive asks the server to restart its embedded agent on the app's
  // settings (a URL query) and says in #live-run-status what runs now.
  runLive(query) {
    const st = document.getElementById('live-run-status');
    const show = (state, text) => {
      if (!st) return;
      st.dataset.state = state; st.textContent = text;
    };
    show('pending', 'restarting the embedded agent on this configuration…');
    fetch('/api/live/run', {method: 'POST', credentials: 'same-origin',
      headers: {'Content-Type': 'application/json'}, body: JSON.stringify({query})})
      .then(r => r.json().catch(() => ({error: r.status + ' ' + r.statusText})).then(j => ({ok: r.ok, j})))
      .then(({ok, j}) => {
        if (!ok) { show('error', 'Run live refused: ' + (j.error || 'no reason given')); return; }
        let text = 'Embedded agent running ' + j.describe;
        if (j.adjusted && j.adjusted.length) text += ' · fitted to its host memory, plans unchanged: ' + j.adjusted.join('; ');
        show('ok', text);
      })
      .catch(e => show('error', 'Run live failed: ' + e));
  },
  // tuneStart runs a Tune search in workers (kvscope-tune.js: app.wasm
  // started without a page), one per core but one, up to four, each
  // searching a shard of the space; the page's thread only draws their
  // progress. query is the app's settings as its URL holds them;
  // onMessage gets {type: "progress", done, total} (all shards'), then
  // {type: "result", json, done, total, canceled, rank_ms, search_ms,
  // held} (the summary, table and chart held under held: see hold) or
  // {type: "error", error}. It returns false where the browser has no
  // workers (the app then searches in the page).
  tuneStart(query, onMessage) {
    const ws = this._tuneWorkers();
    if (!ws) return false;
    const id = this._tuneId = (this._tuneId || 0) + 1;
    const done = ws.map(() => 0), total = ws.map(() => 0);
    let drawn = 0;
    this._tuneOn = (i, m) => {
      if (m.id !== id) return; // a search abandoned since
      switch (m.type) {
      case 'progress': {
        done[i] = m.done; total[i] = m.total;
        // The page redraws the bar at most every 150 ms, however many
        // workers report: each redraw is the page's work, taken from
        // input and from the workers' cores.
        const now = performance.now();
        if (now - drawn < 150) break;
        drawn = now;
        onMessage({type: 'progress', done: done.reduce((a, b) => a + b), total: total.reduce((a, b) => a + b)});
        break;
      }
      case 'partial':
        ws[0].postMessage({partial: m.bytes, id}, [m.bytes.buffer]);
        break;
      case 'error':
        this.tuneCancel();
        this._tuneOn = null;
        onMessage(m);
        break;
      case 'result':
        this._tuneOn = null;
        // The markup and the chart stay here; the app draws them by name.
        onMessage({type: m.type, json: m.json, done: m.done, total: m.total, canceled: m.canceled, rank_ms: m.rank_ms, search_ms: m.search_ms,
          held: this.hold('tune', {summary: m.summary, table: m.table, chart: m.chart})});
      }
    };
    // The workers start once the page has drawn the search's start: on a
    // machine with no core to spare they would otherwise slow that
    // drawing down.
    // A Cancel pressed before then is sent right after the search.
    this._tunePosted = this._tuneCancelEarly = false;
    requestAnimationFrame(() => setTimeout(() => {
      if (this._tuneId !== id) return;
      ws.forEach((w, shard) => w.postMessage({query, id, shard, shards: ws.length}));
      this._tunePosted = true;
      if (this._tuneCancelEarly) this.tuneCancel();
    }, 0));
    return true;
  },
  // tuneCancel stops the workers' search between two candidates; the
  // result then ranks the candidates they evaluated.
  tuneCancel() {
    this._tuneCancelEarly = this._tunePosted === false;
    if (this._tuneCancelEarly) return;
    (this._tunes || []).forEach(w => w.postMessage({cancel: true}));
  },
  // tuneWarm starts the workers before the first search and has each run
  // the first candidates of query's search, so that the browser compiles
  // the planner's hot code before the user asks; onMessage gets {type:
  // "ready"} once all of them have.
  tuneWarm(query, onMessage) {
    if (this._tunes) return;
    const ws = this._tuneWorkers();
    if (!ws) return;
    let ready = 0;
    this._tuneOn = (i, m) => {
      if (m.type === 'ready' && ++ready === ws.length) {
        this._tuneOn = null;
        onMessage(m);
      }
    };
    ws.forEach(w => w.postMessage({warm: query}));
  },
  _tuneWorkers() {
    if (!window.Worker) return null;
    if (!this._tunes) {
      // A worker per core but one, up to four: the core left is the
      // page's, whose threads (the page's, the compositor's) must draw a
      // keystroke while the workers search. On two cores, measured in
      // turns: two workers searched 10,240 candidates in 1.26–1.56 s but
      // showed a keystroke 56–80 ms after it came; one worker took
      // 1.55–1.87 s and showed it after 40–48 ms. window.kvscopeTuneWorkers,
      // set before the view opens, overrides the count (the tests use it).
      const cores = navigator.hardwareConcurrency || 1;
      const n = window.kvscopeTuneWorkers || Math.max(1, Math.min(4, cores - 1));
      this._tunes = [];
      for (let i = 0; i < n; i++) {
        const w = new Worker('/web/kvscope-tune.js');
        w.onmessage = e => { if (this._tuneOn) this._tuneOn(i, e.data); };
        w.onerror = e => {
          e.preventDefault();
          this._tunes.forEach(x => x.terminate());
          this._tunes = null;
          const on = this._tuneOn;
          this._tuneOn = null;
          if (on) on(i, {type: 'error', id: this._tuneId, error: 'a search worker failed: ' + (e.message || 'no reason given')});
        };
        this._tunes.push(w);
      }
    }
    return this._tunes;
  },
  toast(text) {
    let t = document.getElementById('toast');
    if (!t) { t = document.createElement('div'); t.id = 'toast'; document.body.appendChild(t); }
    t.textContent = text; t.className = 'show';
    clearTimeout(this._toast); this._toast = setTimeout(() => { t.className = ''; }, 2500);
  },
  // viewSVG returns the current view as SVG text: the descriptor flow is
  // SVG already; other views are wrapped in a foreignObject with the page's
  // CSS inlined; chart canvases become images.
  viewSVG() {
    const flow = document.getElementById('flow-svg');
    if (flow) {
      const clone = flow.cloneNode(true);
      const style = document.createElementNS('http://www.w3.org/2000/svg', 'style');
      style.textContent = this.css();
      clone.insertBefore(style, clone.firstChild);
      return {svg: new XMLSerializer().serializeToString(clone), w: flow.viewBox.baseVal.width, h: flow.viewBox.baseVal.height};
    }
    const view = document.getElementById('view');
    const clone = view.cloneNode(true);
    clone.querySelectorAll('canvas').forEach(cv => {
      const id = cv.closest('.chart').id;
      const orig = view.querySelector('#' + id + ' canvas');
      const img = document.createElement('img');
      // A canvas the chart worker draws on is read from the image the
      // worker made of it (chartImages, before).
      img.src = cv.dataset.offscreen !== undefined ? (this._chartImages || {})[id] || '' : (orig || cv).toDataURL('image/png');
      img.style.width = cv.style.width; img.style.height = cv.style.height;
      cv.replaceWith(img);
    });
    const w = view.scrollWidth, h = view.scrollHeight;
    const root = document.getElementById('kvscope');
    const html = new XMLSerializer().serializeToString(clone);
    return {svg: `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}"><style>${this.css()}</style>` +
      `<foreignObject width="100%" height="100%"><div xmlns="http://www.w3.org/1999/xhtml" class="${root.className}">${html}</div></foreignObject></svg>`, w, h};
  },
  css() {
    let out = '';
    for (const sheet of document.styleSheets) {
      try { for (const r of sheet.cssRules) out += r.cssText + '\n'; } catch (e) { /* cross-origin: none here */ }
    }
    return out;
  },
  // exportView downloads the view as kind (svg or png) under name (the
  // app's kvscope-<model>-<view>-<P TP>to<D TP>).
  exportView(kind, name) {
    this.chartImages().then(() => this._exportView(kind, name));
  },
  _exportView(kind, name) {
    const {svg, w, h} = this.viewSVG();
    if (kind === 'svg') { this.download(name + '.svg', 'image/svg+xml', svg); return; }
    const img = new Image();
    img.onload = () => {
      const canvas = document.createElement('canvas');
      const scale = window.devicePixelRatio || 1;
      canvas.width = w * scale; canvas.height = h * scale;
      const g = canvas.getContext('2d');
      g.scale(scale, scale);
      g.fillStyle = getComputedStyle(document.getElementById('kvscope')).backgroundColor || '#fff';
      g.fillRect(0, 0, w, h);
      g.drawImage(img, 0, 0);
      try { this.downloadURL(name + '.png', canvas.toDataURL('image/png')); }
      catch (e) { this.toast('PNG export is blocked by this browser; use SVG'); }
    };
    img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(svg);
  },
};
