// kvscope's chart worker: ECharts drawing on canvases the page handed over
// (OffscreenCanvas), so that drawing a chart of hundreds of points, and
// ECharts' first chart of a page, never hold the page's thread. The page
// (kvscope.js, chartOff) posts
//   {id, canvas, width, height, dpr, dark}  a chart's canvas, once;
//   {id, option, merge}                     an option to draw (JSON);
//   {id, move: [x, y]} / {id, out: true}    the pointer over the canvas;
//   {id, image: true}                       a PNG of the canvas, wanted.
// It posts back {id, drawn: n} once a draw is on the canvas (n points),
// {id, image} (a PNG Blob, null if it could not make one) when asked, and
// {id, hover: text} when the pointer enters or leaves a point (text is ""
// on leaving); the tooltip itself is drawn on the canvas.
importScripts('/web/echarts.min.js');

// ECharts measures text on a canvas of its own: in a worker, an offscreen one.
echarts.setPlatformAPI({createCanvas: () => new OffscreenCanvas(1, 1)});

const charts = new Map(); // id → {chart, canvas, dark, seq, posted, points}

// option is the chart's option from its JSON, on a transparent background
// in the dark theme (the page's card shows through).
const option = (c, json) => {
  const o = JSON.parse(json);
  if (c.dark) o.backgroundColor = 'transparent';
  return o;
};

self.onmessage = e => {
  const m = e.data;
  if (m.canvas) {
    const old = charts.get(m.id);
    if (old) old.chart.dispose();
    const chart = echarts.init(m.canvas, m.dark ? 'dark' : null, {width: m.width, height: m.height, devicePixelRatio: m.dpr});
    const c = {chart, canvas: m.canvas, dark: m.dark, seq: 0, posted: 0, points: 0};
    chart.on('mouseover', p => self.postMessage({id: m.id, hover: (p.seriesName ? p.seriesName + ': ' : '') + (p.name || '')}));
    chart.on('mouseout', () => self.postMessage({id: m.id, hover: ''}));
    // Once a draw is on the canvas, the page learns so.
    chart.on('finished', () => {
      if (c.posted === c.seq) return;
      c.posted = c.seq;
      self.postMessage({id: m.id, drawn: c.points});
    });
    charts.set(m.id, c);
    return;
  }
  const c = charts.get(m.id);
  if (!c) {
    if (m.image) self.postMessage({id: m.id, image: null});
    return;
  }
  if (m.option !== undefined) {
    const opt = option(c, m.option);
    c.seq++;
    // The points drawn: those of series not hidden (a placeholder's are).
    c.points = (opt.series || []).reduce((a, s) => a + ((s.itemStyle && s.itemStyle.opacity === 0) ? 0 : (s.data || []).length), 0);
    c.chart.setOption(opt, !m.merge);
    // The first option of a chart that others will be merged into is
    // drawn once more, here, so that this worker has run (and compiled)
    // the code that updates a chart before the option that matters comes
    // (the Tune view's result: its update took 150–250 ms of this worker
    // cold, while the page drew the rest on the same two cores).
    if (m.merge && c.seq === 1) {
      setTimeout(() => {
        if (c.seq === 1 && charts.get(m.id) === c) c.chart.setOption(option(c, m.option));
      }, 0);
    }
  } else if (m.image) {
    c.canvas.convertToBlob({type: 'image/png'}).then(image => self.postMessage({id: m.id, image}), () => self.postMessage({id: m.id, image: null}));
  } else if (m.move) {
    c.chart.getZr().handler.dispatch('mousemove', {zrX: m.move[0], zrY: m.move[1]});
  } else if (m.out) {
    c.chart.getZr().handler.dispatch('mouseout', {zrX: -1, zrY: -1});
  }
};
