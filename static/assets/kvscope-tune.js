// kvscope's Tune worker: app.wasm, started here without a page, runs the
// Tune view's searches off the page's thread (app/wasm/worker_js.go). The
// page posts {query, id, shard, shards} to search a shard (the settings as
// the URL holds them), {partial, id} to hand shard 0 another shard's
// partial result, {warm: query} to warm up on that search's first
// candidates, or {cancel: true}; see app/wasm/worker_js.go for what the
// worker posts back.
importScripts('/wasm_exec.js');

const go = new Go();
const ready = WebAssembly.instantiateStreaming(fetch('/web/app.wasm'), go.importObject)
  .then(r => { go.run(r.instance); });

self.onmessage = e => {
  ready.then(() => {
    const m = e.data;
    if (m.cancel) self.kvscopeCancel();
    else if (m.warm !== undefined) self.kvscopeWarm(m.warm);
    else if (m.partial) self.kvscopePartial(m.id, m.partial);
    else self.kvscopeTune(m.query, m.id, m.shard, m.shards);
  }, err => self.postMessage({type: 'error', id: e.data.id, error: 'app.wasm did not start in the search worker: ' + err}));
};
