//go:build nixl && cgo

/*
 * nixl_shim.h is kvscope's C interface to NIXL's C++ agent (nixlAgent), so
 * that Go can call it through cgo. It is our own code, written against the
 * headers NIXL installs (nixl.h and the headers it includes); no NIXL source
 * is copied here. The header is plain C: the Go side includes it, and only
 * nixl_shim.cpp sees NIXL's C++ types.
 *
 * Status codes: every call that can fail returns an int that is NIXL's
 * nixl_status_t value (0 NIXL_SUCCESS, 1 NIXL_IN_PROG, negative errors such
 * as -3 NIXL_ERR_BACKEND), or one of the shim's own codes below, which lie
 * outside NIXL's range. On failure the call writes a NUL-terminated message
 * into err (at most errlen bytes, errlen > 0). No C++ exception crosses this
 * interface: each entry point catches them and reports KVS_ERR_EXCEPTION.
 */
#ifndef KVSCOPE_NIXL_SHIM_H
#define KVSCOPE_NIXL_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The shim's own status codes. */
enum {
	KVS_ERR_EXCEPTION = -1000, /* a C++ exception reached the shim */
	KVS_ERR_NO_MEMORY = -1001, /* an allocation failed */
	KVS_ERR_ARGUMENT = -1002,  /* the shim refused an argument */
};

/* Memory kinds, equal to NIXL's nixl_mem_t values. */
enum {
	KVS_MEM_DRAM = 0,
	KVS_MEM_VRAM = 1,
};

/* Operations, equal to NIXL's nixl_xfer_op_t values (initiator's view). */
enum {
	KVS_READ = 0,
	KVS_WRITE = 1,
};

/* kvs_agent is one nixlAgent with one backend created on it. */
typedef struct kvs_agent kvs_agent;

/* kvs_xfer is one transfer request (nixlXferReqH) of an agent. */
typedef struct kvs_xfer kvs_xfer;

/*
 * kvs_agent_new creates an agent named name and creates the backend plugin
 * named backend ("UCX") on it with the plugin's default parameters. With
 * prog_thread != 0 the agent runs NIXL's progress thread.
 */
int kvs_agent_new(const char *name, const char *backend, int prog_thread, kvs_agent **out, char *err, size_t errlen);

/* kvs_agent_free destroys an agent (and its backend). NULL is ignored. */
void kvs_agent_free(kvs_agent *a);

/* kvs_mem_alloc allocates bytes of zeroed, page-aligned host memory. */
int kvs_mem_alloc(uint64_t bytes, void **out, char *err, size_t errlen);

/* kvs_mem_free frees what kvs_mem_alloc returned. NULL is ignored. */
void kvs_mem_free(void *p);

/*
 * kvs_register registers n buffers of one memory kind with the agent's
 * backend: buffer i starts at addr[i], is len[i] bytes, on device dev[i].
 * kvs_deregister removes exactly such a list again.
 */
int kvs_register(kvs_agent *a, int mem, const uint64_t *addr, const uint64_t *len, const uint64_t *dev, size_t n,
                 char *err, size_t errlen);
int kvs_deregister(kvs_agent *a, int mem, const uint64_t *addr, const uint64_t *len, const uint64_t *dev, size_t n,
                   char *err, size_t errlen);

/*
 * kvs_local_md returns the agent's metadata blob (binary) in a buffer
 * allocated with malloc: the caller frees it with kvs_buf_free.
 */
int kvs_local_md(kvs_agent *a, void **md, size_t *mdlen, char *err, size_t errlen);

/* kvs_buf_free frees a buffer the shim returned. NULL is ignored. */
void kvs_buf_free(void *p);

/*
 * kvs_load_md loads a peer's metadata blob into the agent and writes the
 * peer agent's name, NUL-terminated, into name (namelen bytes).
 */
int kvs_load_md(kvs_agent *a, const void *md, size_t mdlen, char *name, size_t namelen, char *err, size_t errlen);

/* kvs_invalidate_md drops a peer's metadata from the agent. */
int kvs_invalidate_md(kvs_agent *a, const char *remote, char *err, size_t errlen);

/* kvs_dlist is one prepared descriptor list (nixlDlistH) of an agent. */
typedef struct kvs_dlist kvs_dlist;

/*
 * kvs_dlist_prep prepares n descriptors of memory kind mem for transfer
 * requests (prepXferDlist): descriptor i is len[i] bytes at addr[i] on
 * device dev. With remote == NULL they are the agent's own memory (the
 * initiator side, NIXL_INIT_AGENT); otherwise they lie in the named peer's
 * memory, as its loaded metadata describes it. Every descriptor must lie
 * inside registered memory.
 */
int kvs_dlist_prep(kvs_agent *a, const char *remote, int mem, const uint64_t *addr, const uint64_t *len, uint64_t dev,
                   size_t n, kvs_dlist **out, char *err, size_t errlen);

/* kvs_dlist_free releases a prepared list (releasedDlistH) and frees d. NULL is ignored. */
int kvs_dlist_free(kvs_dlist *d, char *err, size_t errlen);

/*
 * kvs_xfer_make creates a transfer request of op (KVS_READ or KVS_WRITE)
 * from n index pairs into two prepared lists of the same agent
 * (makeXferReq): entry lidx[i] of local moves with entry ridx[i] of remote.
 * NIXL merges consecutive indices that are back to back on both sides.
 */
int kvs_xfer_make(kvs_agent *a, int op, const kvs_dlist *local, const int32_t *lidx, const kvs_dlist *remote,
                  const int32_t *ridx, size_t n, kvs_xfer **out, char *err, size_t errlen);

/*
 * kvs_xfer_post posts the request; with has_notif != 0 the remote agent is
 * sent notif (notiflen bytes) when the transfer completes. It returns
 * NIXL_SUCCESS when the transfer completed inside the call, NIXL_IN_PROG
 * when it is under way, or an error.
 */
int kvs_xfer_post(kvs_xfer *x, int has_notif, const char *notif, size_t notiflen, char *err, size_t errlen);

/*
 * kvs_xfer_telemetry reads NIXL's telemetry of a completed request (agents
 * capture it: captureTelemetry): when it was posted (microseconds since the
 * epoch of NIXL's clock), how long the post took, how long the transfer
 * took, its bytes and its descriptor count after NIXL merged contiguous
 * descriptors.
 */
int kvs_xfer_telemetry(kvs_xfer *x, uint64_t *start_us, uint64_t *post_us, uint64_t *xfer_us, uint64_t *bytes,
                       uint64_t *descs, char *err, size_t errlen);

/* kvs_xfer_status is the request's state: NIXL_SUCCESS, NIXL_IN_PROG or an error. */
int kvs_xfer_status(kvs_xfer *x, char *err, size_t errlen);

/*
 * kvs_xfer_free releases the request (NIXL cancels it if it is still under
 * way) and frees x, whatever the status returned. NULL is ignored.
 */
int kvs_xfer_free(kvs_xfer *x, char *err, size_t errlen);

/*
 * kvs_notifs takes the notifications the agent received since the last call.
 * They are returned in one malloc'd buffer (free with kvs_buf_free) of count
 * records, each a uint32_t sender-name length, the sender's name, a uint32_t
 * message length and the message, lengths in host byte order, records
 * ordered by sender. A negative status may come with records: NIXL collects
 * from every backend it can and reports the last failure.
 */
int kvs_notifs(kvs_agent *a, void **buf, size_t *buflen, size_t *count, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* KVSCOPE_NIXL_SHIM_H */
