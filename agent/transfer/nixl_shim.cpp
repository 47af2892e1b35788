//go:build nixl && cgo

// nixl_shim.cpp implements nixl_shim.h over NIXL's installed C++ API. It is
// kvscope's own code: each function builds NIXL's descriptor lists and
// argument structs from plain C values, calls one nixlAgent method, and turns
// the outcome into a status code and a message. Exceptions stop here.
//
// To stay compatible across NIXL releases it uses only the calls and fields
// that every release of the headers we read (up to 1.4) declares: descriptor lists are built
// with the memory type alone, agent options are set as fields on a
// default-constructed nixlAgentConfig, and notifications use the
// hasNotif/notifMsg pair rather than the newer optional notif field.

#include "nixl_shim.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <nixl.h>

struct kvs_agent {
    std::unique_ptr<nixlAgent> agent;
    nixlBackendH *backend = nullptr; // owned by the agent
    std::string backendName;
};

struct kvs_dlist {
    kvs_agent *owner = nullptr;
    nixlDlistH *h = nullptr;
};

struct kvs_xfer {
    kvs_agent *owner = nullptr;
    nixlXferReqH *req = nullptr; // null once NIXL no longer owns a handle for us
};

namespace {

// put copies msg into the caller's error buffer, truncating it.
void put(char *err, size_t errlen, const std::string &msg) {
    if (err == nullptr || errlen == 0) {
        return;
    }
    size_t n = std::min(msg.size(), errlen - 1);
    std::memcpy(err, msg.data(), n);
    err[n] = '\0';
}

// failed reports status st with message msg.
int failed(char *err, size_t errlen, int st, const std::string &msg) {
    put(err, errlen, msg);
    return st;
}

// guarded runs f, turning any exception into KVS_ERR_EXCEPTION (or
// KVS_ERR_NO_MEMORY) with a message naming op.
template <class F> int guarded(const char *op, char *err, size_t errlen, F &&f) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        return failed(err, errlen, KVS_ERR_NO_MEMORY, std::string(op) + ": out of memory");
    } catch (const std::exception &e) {
        return failed(err, errlen, KVS_ERR_EXCEPTION, std::string(op) + ": C++ exception: " + e.what());
    } catch (...) {
        return failed(err, errlen, KVS_ERR_EXCEPTION, std::string(op) + ": unknown C++ exception");
    }
}

// memKind checks a memory kind the shim supports.
bool memKind(int mem, nixl_mem_t &out) {
    switch (mem) {
    case KVS_MEM_DRAM:
        out = DRAM_SEG;
        return true;
    case KVS_MEM_VRAM:
        out = VRAM_SEG;
        return true;
    default:
        return false;
    }
}

// backendArgs limits a call to the agent's own backend.
nixl_opt_args_t backendArgs(const kvs_agent *a) {
    nixl_opt_args_t args;
    args.backends.push_back(a->backend);
    return args;
}

// regList builds a registration list from parallel arrays.
nixl_reg_dlist_t regList(nixl_mem_t mem, const uint64_t *addr, const uint64_t *len, const uint64_t *dev, size_t n) {
    nixl_reg_dlist_t list(mem);
    for (size_t i = 0; i < n; i++) {
        list.addDesc(nixlBlobDesc(static_cast<uintptr_t>(addr[i]), static_cast<size_t>(len[i]),
                                  static_cast<uint64_t>(dev[i]), nixl_blob_t()));
    }
    return list;
}

// forgetOnHandleLoss drops our pointer to a request handle when NIXL may
// have freed it itself: some NIXL releases delete the handle inside
// postXferReq/getXferStatus when they return NIXL_ERR_NOT_FOUND (the remote
// was invalidated) or NIXL_ERR_REPOST_ACTIVE. Releasing it again would be a
// double free; forgetting it leaks one handle on releases that do not.
void forgetOnHandleLoss(kvs_xfer *x, nixl_status_t st) {
    if (st == NIXL_ERR_NOT_FOUND || st == NIXL_ERR_REPOST_ACTIVE) {
        x->req = nullptr;
    }
}

void appendU32(std::string &out, uint32_t v) { out.append(reinterpret_cast<const char *>(&v), sizeof v); }

} // namespace

extern "C" {

int kvs_agent_new(const char *name, const char *backend, int prog_thread, kvs_agent **out, char *err, size_t errlen) {
    return guarded("create agent", err, errlen, [&]() -> int {
        if (name == nullptr || backend == nullptr || out == nullptr) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "create agent: null argument");
        }
        *out = nullptr;
        nixlAgentConfig cfg;
        cfg.useProgThread = prog_thread != 0;
        // The UCX backend's progress thread polls its workers' event fds
        // with this as the timeout (rounded up to whole milliseconds). The
        // default 0 makes it spin, a core per agent, which starves
        // everything else on a small host: wake on events, and at least
        // every millisecond (NIXL's guard against a missed wake-up).
        cfg.pthrDelay = 1000;
        // The progress thread and our calls (serialised by the Go side)
        // share the agent: let NIXL lock its own state.
        cfg.syncMode = nixl_thread_sync_t::NIXL_THREAD_SYNC_STRICT;
        // Per-request telemetry (getXferTelemetry) whatever NIXL_TELEMETRY_ENABLE says:
        // transfer_done reports NIXL's own durations and merged descriptor count.
        cfg.captureTelemetry = true;
        auto a = std::make_unique<kvs_agent>();
        a->agent = std::make_unique<nixlAgent>(std::string(name), cfg);
        a->backendName = backend;

        nixl_mem_list_t mems;
        nixl_b_params_t params;
        nixl_status_t st = a->agent->getPluginParams(a->backendName, mems, params);
        if (st != NIXL_SUCCESS) {
            std::vector<nixl_backend_t> plugins;
            std::string found;
            if (a->agent->getAvailPlugins(plugins) == NIXL_SUCCESS) {
                for (const auto &p : plugins) {
                    found += (found.empty() ? "" : ", ") + p;
                }
            }
            if (found.empty()) {
                found = "none";
            }
            return failed(err, errlen, st,
                          "getPluginParams(" + a->backendName + "): the plugin is missing or failed to load (plugins found: " +
                              found + "); set NIXL_PLUGIN_DIR to the directory holding libplugin_" + a->backendName +
                              ".so");
        }
        st = a->agent->createBackend(a->backendName, params, a->backend);
        if (st != NIXL_SUCCESS || a->backend == nullptr) {
            return failed(err, errlen, st != NIXL_SUCCESS ? static_cast<int>(st) : static_cast<int>(NIXL_ERR_BACKEND),
                          "createBackend(" + a->backendName + ") for agent " + name);
        }
        *out = a.release();
        return NIXL_SUCCESS;
    });
}

void kvs_agent_free(kvs_agent *a) {
    try {
        delete a;
    } catch (...) {
        // A destructor that throws leaves nothing to recover; never let it
        // cross into Go.
    }
}

int kvs_mem_alloc(uint64_t bytes, void **out, char *err, size_t errlen) {
    if (out == nullptr) {
        return failed(err, errlen, KVS_ERR_ARGUMENT, "alloc: null argument");
    }
    *out = nullptr;
    if (bytes == 0 || static_cast<uint64_t>(static_cast<size_t>(bytes)) != bytes) {
        return failed(err, errlen, KVS_ERR_ARGUMENT, "alloc: size " + std::to_string(bytes) + " is out of range");
    }
    void *p = nullptr;
    if (posix_memalign(&p, 4096, static_cast<size_t>(bytes)) != 0 || p == nullptr) {
        return failed(err, errlen, KVS_ERR_NO_MEMORY, "alloc: " + std::to_string(bytes) + " bytes of host memory");
    }
    std::memset(p, 0, static_cast<size_t>(bytes));
    *out = p;
    return NIXL_SUCCESS;
}

void kvs_mem_free(void *p) { std::free(p); }

int kvs_register(kvs_agent *a, int mem, const uint64_t *addr, const uint64_t *len, const uint64_t *dev, size_t n,
                 char *err, size_t errlen) {
    return guarded("registerMem", err, errlen, [&]() -> int {
        nixl_mem_t kind;
        if (a == nullptr || (n > 0 && (addr == nullptr || len == nullptr || dev == nullptr)) || !memKind(mem, kind)) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "registerMem: bad argument");
        }
        nixl_reg_dlist_t list = regList(kind, addr, len, dev, n);
        nixl_opt_args_t args = backendArgs(a);
        nixl_status_t st = a->agent->registerMem(list, &args);
        if (st != NIXL_SUCCESS) {
            return failed(err, errlen, st, "registerMem of " + std::to_string(n) + " buffers");
        }
        return NIXL_SUCCESS;
    });
}

int kvs_deregister(kvs_agent *a, int mem, const uint64_t *addr, const uint64_t *len, const uint64_t *dev, size_t n,
                   char *err, size_t errlen) {
    return guarded("deregisterMem", err, errlen, [&]() -> int {
        nixl_mem_t kind;
        if (a == nullptr || (n > 0 && (addr == nullptr || len == nullptr || dev == nullptr)) || !memKind(mem, kind)) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "deregisterMem: bad argument");
        }
        nixl_reg_dlist_t list = regList(kind, addr, len, dev, n);
        nixl_opt_args_t args = backendArgs(a);
        nixl_status_t st = a->agent->deregisterMem(list, &args);
        if (st != NIXL_SUCCESS) {
            return failed(err, errlen, st, "deregisterMem of " + std::to_string(n) + " buffers");
        }
        return NIXL_SUCCESS;
    });
}

int kvs_local_md(kvs_agent *a, void **md, size_t *mdlen, char *err, size_t errlen) {
    return guarded("getLocalMD", err, errlen, [&]() -> int {
        if (a == nullptr || md == nullptr || mdlen == nullptr) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "getLocalMD: null argument");
        }
        *md = nullptr;
        *mdlen = 0;
        nixl_blob_t blob;
        nixl_status_t st = a->agent->getLocalMD(blob);
        if (st != NIXL_SUCCESS) {
            return failed(err, errlen, st, "getLocalMD");
        }
        // The blob is binary: copy by size, never as a C string.
        void *buf = std::malloc(blob.empty() ? 1 : blob.size());
        if (buf == nullptr) {
            return failed(err, errlen, KVS_ERR_NO_MEMORY, "getLocalMD: out of memory");
        }
        std::memcpy(buf, blob.data(), blob.size());
        *md = buf;
        *mdlen = blob.size();
        return NIXL_SUCCESS;
    });
}

void kvs_buf_free(void *p) { std::free(p); }

int kvs_load_md(kvs_agent *a, const void *md, size_t mdlen, char *name, size_t namelen, char *err, size_t errlen) {
    return guarded("loadRemoteMD", err, errlen, [&]() -> int {
        if (a == nullptr || (md == nullptr && mdlen > 0) || name == nullptr || namelen == 0) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "loadRemoteMD: bad argument");
        }
        name[0] = '\0';
        nixl_blob_t blob(static_cast<const char *>(md), mdlen);
        std::string remote;
        nixl_status_t st = a->agent->loadRemoteMD(blob, remote);
        if (st != NIXL_SUCCESS) {
            return failed(err, errlen, st, "loadRemoteMD of a " + std::to_string(mdlen) + "-byte blob");
        }
        if (remote.size() >= namelen) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "loadRemoteMD: the peer's name is longer than " +
                                                             std::to_string(namelen - 1) + " bytes");
        }
        std::memcpy(name, remote.data(), remote.size());
        name[remote.size()] = '\0';
        return NIXL_SUCCESS;
    });
}

int kvs_invalidate_md(kvs_agent *a, const char *remote, char *err, size_t errlen) {
    return guarded("invalidateRemoteMD", err, errlen, [&]() -> int {
        if (a == nullptr || remote == nullptr) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "invalidateRemoteMD: null argument");
        }
        nixl_status_t st = a->agent->invalidateRemoteMD(std::string(remote));
        if (st != NIXL_SUCCESS) {
            return failed(err, errlen, st, std::string("invalidateRemoteMD(") + remote + ")");
        }
        return NIXL_SUCCESS;
    });
}

int kvs_dlist_prep(kvs_agent *a, const char *remote, int mem, const uint64_t *addr, const uint64_t *len, uint64_t dev,
                   size_t n, kvs_dlist **out, char *err, size_t errlen) {
    return guarded("prepXferDlist", err, errlen, [&]() -> int {
        nixl_mem_t kind;
        if (a == nullptr || out == nullptr || n == 0 || addr == nullptr || len == nullptr || !memKind(mem, kind)) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "prepXferDlist: bad argument");
        }
        *out = nullptr;
        nixl_xfer_dlist_t list(kind);
        for (size_t i = 0; i < n; i++) {
            list.addDesc(nixlBasicDesc(static_cast<uintptr_t>(addr[i]), static_cast<size_t>(len[i]), dev));
        }
        std::string who = remote == nullptr ? std::string(NIXL_INIT_AGENT) : std::string(remote);
        nixl_opt_args_t args = backendArgs(a);
        nixlDlistH *h = nullptr;
        nixl_status_t st = a->agent->prepXferDlist(who, list, h, &args);
        if (st != NIXL_SUCCESS || h == nullptr) {
            return failed(err, errlen, st != NIXL_SUCCESS ? static_cast<int>(st) : static_cast<int>(NIXL_ERR_UNKNOWN),
                          "prepXferDlist of " + std::to_string(n) + " descriptors " +
                              (remote == nullptr ? std::string("in local memory") : "in " + who + "'s memory"));
        }
        auto d = new (std::nothrow) kvs_dlist;
        if (d == nullptr) {
            a->agent->releasedDlistH(h);
            return failed(err, errlen, KVS_ERR_NO_MEMORY, "prepXferDlist: out of memory");
        }
        d->owner = a;
        d->h = h;
        *out = d;
        return NIXL_SUCCESS;
    });
}

int kvs_dlist_free(kvs_dlist *d, char *err, size_t errlen) {
    if (d == nullptr) {
        return NIXL_SUCCESS;
    }
    int st = guarded("releasedDlistH", err, errlen, [&]() -> int {
        nixl_status_t rst = d->owner->agent->releasedDlistH(d->h);
        if (rst != NIXL_SUCCESS) {
            return failed(err, errlen, rst, "releasedDlistH");
        }
        return NIXL_SUCCESS;
    });
    delete d;
    return st;
}

int kvs_xfer_make(kvs_agent *a, int op, const kvs_dlist *local, const int32_t *lidx, const kvs_dlist *remote,
                  const int32_t *ridx, size_t n, kvs_xfer **out, char *err, size_t errlen) {
    return guarded("makeXferReq", err, errlen, [&]() -> int {
        if (a == nullptr || local == nullptr || remote == nullptr || lidx == nullptr || ridx == nullptr || n == 0 ||
            out == nullptr || (op != KVS_READ && op != KVS_WRITE) || local->owner != a || remote->owner != a) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "makeXferReq: bad argument");
        }
        *out = nullptr;
        std::vector<int> li(lidx, lidx + n);
        std::vector<int> ri(ridx, ridx + n);
        nixl_opt_args_t args = backendArgs(a);
        nixlXferReqH *req = nullptr;
        nixl_xfer_op_t xop = op == KVS_READ ? NIXL_READ : NIXL_WRITE;
        nixl_status_t st = a->agent->makeXferReq(xop, local->h, li, remote->h, ri, req, &args);
        if (st != NIXL_SUCCESS || req == nullptr) {
            return failed(err, errlen, st != NIXL_SUCCESS ? static_cast<int>(st) : static_cast<int>(NIXL_ERR_UNKNOWN),
                          std::string("makeXferReq ") + (op == KVS_READ ? "READ" : "WRITE") + " of " +
                              std::to_string(n) + " descriptor pairs");
        }
        auto x = new (std::nothrow) kvs_xfer;
        if (x == nullptr) {
            a->agent->releaseXferReq(req);
            return failed(err, errlen, KVS_ERR_NO_MEMORY, "makeXferReq: out of memory");
        }
        x->owner = a;
        x->req = req;
        *out = x;
        return NIXL_SUCCESS;
    });
}

int kvs_xfer_post(kvs_xfer *x, int has_notif, const char *notif, size_t notiflen, char *err, size_t errlen) {
    return guarded("postXferReq", err, errlen, [&]() -> int {
        if (x == nullptr || x->req == nullptr || (has_notif && notif == nullptr && notiflen > 0)) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "postXferReq: bad argument");
        }
        nixl_opt_args_t args = backendArgs(x->owner);
        if (has_notif) {
            args.hasNotif = true;
            args.notifMsg.assign(notif == nullptr ? "" : notif, notiflen);
        }
        nixl_status_t st = x->owner->agent->postXferReq(x->req, &args);
        if (st < 0) {
            forgetOnHandleLoss(x, st);
            return failed(err, errlen, st, "postXferReq");
        }
        return st;
    });
}

int kvs_xfer_status(kvs_xfer *x, char *err, size_t errlen) {
    return guarded("getXferStatus", err, errlen, [&]() -> int {
        if (x == nullptr || x->req == nullptr) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "getXferStatus: no request");
        }
        nixl_status_t st = x->owner->agent->getXferStatus(x->req);
        if (st < 0) {
            forgetOnHandleLoss(x, st);
            return failed(err, errlen, st, "getXferStatus");
        }
        return st;
    });
}

int kvs_xfer_telemetry(kvs_xfer *x, uint64_t *start_us, uint64_t *post_us, uint64_t *xfer_us, uint64_t *bytes,
                       uint64_t *descs, char *err, size_t errlen) {
    return guarded("getXferTelemetry", err, errlen, [&]() -> int {
        if (x == nullptr || x->req == nullptr || start_us == nullptr || post_us == nullptr || xfer_us == nullptr ||
            bytes == nullptr || descs == nullptr) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "getXferTelemetry: bad argument");
        }
        nixl_xfer_telem_t t{};
        nixl_status_t st = x->owner->agent->getXferTelemetry(x->req, t);
        if (st != NIXL_SUCCESS) {
            return failed(err, errlen, st, "getXferTelemetry");
        }
        auto since = std::chrono::duration_cast<std::chrono::microseconds>(t.startTime.time_since_epoch()).count();
        *start_us = static_cast<uint64_t>(since < 0 ? 0 : since);
        *post_us = static_cast<uint64_t>(std::max<int64_t>(t.postDuration.count(), 0));
        *xfer_us = static_cast<uint64_t>(std::max<int64_t>(t.xferDuration.count(), 0));
        *bytes = static_cast<uint64_t>(t.totalBytes);
        *descs = static_cast<uint64_t>(t.descCount);
        return NIXL_SUCCESS;
    });
}

int kvs_xfer_free(kvs_xfer *x, char *err, size_t errlen) {
    if (x == nullptr) {
        return NIXL_SUCCESS;
    }
    int st = guarded("releaseXferReq", err, errlen, [&]() -> int {
        if (x->req == nullptr) {
            return NIXL_SUCCESS;
        }
        nixl_status_t rst = x->owner->agent->releaseXferReq(x->req);
        if (rst != NIXL_SUCCESS) {
            return failed(err, errlen, rst, "releaseXferReq could not cancel the request; its handle is leaked");
        }
        return NIXL_SUCCESS;
    });
    delete x;
    return st;
}

int kvs_notifs(kvs_agent *a, void **buf, size_t *buflen, size_t *count, char *err, size_t errlen) {
    return guarded("getNotifs", err, errlen, [&]() -> int {
        if (a == nullptr || buf == nullptr || buflen == nullptr || count == nullptr) {
            return failed(err, errlen, KVS_ERR_ARGUMENT, "getNotifs: null argument");
        }
        *buf = nullptr;
        *buflen = 0;
        *count = 0;
        nixl_notifs_t got; // getNotifs appends to the map it is given
        nixl_opt_args_t args = backendArgs(a);
        nixl_status_t st = a->agent->getNotifs(got, &args);

        std::vector<std::pair<std::string, const std::vector<nixl_blob_t> *>> senders;
        for (const auto &kv : got) {
            senders.emplace_back(kv.first, &kv.second);
        }
        std::sort(senders.begin(), senders.end(),
                  [](const auto &x, const auto &y) { return x.first < y.first; });
        std::string out;
        size_t n = 0;
        for (const auto &s : senders) {
            for (const auto &msg : *s.second) {
                appendU32(out, static_cast<uint32_t>(s.first.size()));
                out += s.first;
                appendU32(out, static_cast<uint32_t>(msg.size()));
                out += msg;
                n++;
            }
        }
        if (n > 0) {
            void *p = std::malloc(out.size());
            if (p == nullptr) {
                return failed(err, errlen, KVS_ERR_NO_MEMORY, "getNotifs: out of memory");
            }
            std::memcpy(p, out.data(), out.size());
            *buf = p;
            *buflen = out.size();
            *count = n;
        }
        if (st != NIXL_SUCCESS) {
            return failed(err, errlen, st, "getNotifs");
        }
        return NIXL_SUCCESS;
    });
}

} // extern "C"
