// kvscope's Tune worker: app.wasm, started here without a page, runs the
// Tune view's searches off the page's thread (app/wasm/worker_js.go). The
// page posts {query} to search (its settings as its URL holds them),
// {warm: query} to warm up on that search's first candidates, or {cancel:
// true}; the worker posts progress, then the result.
importScripts('/wasm_exec.js');

const go = new Go();
const ready = WebAssembly.instantiateStreaming(fetch('/web/app.wasm'), go.importObject)
  .then(r => { go.run(r.instance); });

self.onmessage = e => {
  ready.then(() => {
    if (e.data.cancel) self.kvscopeCancel();
    else if (e.data.warm !== undefined) self.kvscopeWarm(e.data.warm);
    else self.kvscopeTune(e.data.query);
  }, err => self.postMessage({type: 'error', error: 'app.wasm did not start in the search worker: ' + err}));
};
