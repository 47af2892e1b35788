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

/*
 * kvs_xfer_new creates a transfer request of op (KVS_READ or KVS_WRITE) from
 * n descriptor pairs: local buffer laddr[i] on device ldev and the remote
 * agent's buffer raddr[i] on device rdev, len[i] bytes each, all of memory
 * kind mem. Every buffer must lie inside memory registered with the local
 * agent or, for the remote side, described by the peer's loaded metadata.
 */
int kvs_xfer_new(kvs_agent *a, int op, const char *remote, int mem, const uint64_t *laddr, const uint64_t *raddr,
                 const uint64_t *len, uint64_t ldev, uint64_t rdev, size_t n, kvs_xfer **out, char *err,
                 size_t errlen);

/*
 * kvs_xfer_post posts the request; with has_notif != 0 the remote agent is
 * sent notif (notiflen bytes) when the transfer completes. It returns
 * NIXL_SUCCESS when the transfer completed inside the call, NIXL_IN_PROG
 * when it is under way, or an error.
 */
int kvs_xfer_post(kvs_xfer *x, int has_notif, const char *notif, size_t notiflen, char *err, size_t errlen);

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
