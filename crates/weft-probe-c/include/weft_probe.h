/*
 * weft_probe.h — weft-probe for C and C++ (link libweft_probe_c.a with -lpthread -ldl -lm,
 * or libweft_probe_c.so).
 *
 * Tracepoints are static descriptors placed in the ELF section "weft_tracepoints"; every one
 * compiled into the program is listed by the registry (and exported to the agent), enabled or
 * not. A disabled tracepoint costs one relaxed byte load and a branch; its arguments are not
 * evaluated.
 *
 *   WEFT_TRACEPOINT(tp_write, "blocker.write", WEFT_DEBUG, "blocker", "offset:u64,len:u64", 0);
 *   WEFT_EVENT(tp_write, weft_u64(off), weft_u64(len));
 *
 *   WEFT_TRACEPOINT(tp_req, "gateway.request", WEFT_INFO, "gateway", "", WEFT_SPAN | WEFT_ALWAYS_ON);
 *   weft_span s = WEFT_SPAN_BEGIN(tp_req, WEFT_KIND_SERVER, &remote_parent_or_NULL);
 *   weft_span_annotate(&s, "sr");
 *   weft_span_end(&s);
 *
 * Spans must end in LIFO order on the thread that began them. Record layout and the agent
 * interface: see the weft-probe crate (module `layout`).
 */
#ifndef WEFT_PROBE_H
#define WEFT_PROBE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version of struct weft_tracepoint (descriptors of another version are refused). */
#define WEFT_TP_ABI 1

/* Levels: selecting level X switches every tracepoint at X or more severe. */
#define WEFT_ERROR 1
#define WEFT_WARN 2
#define WEFT_INFO 3
#define WEFT_DEBUG 4
#define WEFT_TRACE 5

/* Flags. */
#define WEFT_ALWAYS_ON 1  /* on at start; plain disables leave it on */
#define WEFT_SPAN 2       /* the tracepoint opens spans */
#define WEFT_DEFAULT_ON 4 /* on at start */

/* Span kinds. */
#define WEFT_KIND_INTERNAL 0
#define WEFT_KIND_SERVER 1
#define WEFT_KIND_CLIENT 2
#define WEFT_KIND_PRODUCER 3
#define WEFT_KIND_CONSUMER 4

/* Layout shared with Rust (weft_probe::Tracepoint). Treat as opaque. */
struct weft_tracepoint {
    uint8_t state; /* bit 0: enabled (atomic) */
    uint8_t level;
    uint8_t flags;
    uint8_t abi;
    uint32_t id; /* atomic; UINT32_MAX until registered */
    const char *name;
    const char *group;  /* "" for none */
    const char *fields; /* "name:type,..." (types i64 u64 f64 bool str bytes) */
    const char *file;
    uint32_t line;
    uint32_t reserved; /* 0; weft-probe keeps a Rust tracepoint's live-query pre-filter here */
};

#define WEFT__INIT(name, level, group, fields, flags)                                              \
    {((flags) & (WEFT_ALWAYS_ON | WEFT_DEFAULT_ON)) ? 1 : 0, (level), (flags), WEFT_TP_ABI,        \
     0xFFFFFFFFu, (name), (group), (fields), __FILE__, __LINE__, 0}

#define WEFT__ENTRY(var)                                                                            \
    static struct weft_tracepoint *const weft__entry_##var                                         \
        __attribute__((section("weft_tracepoints"), used, aligned(sizeof(void *)))) = &var

/* A file-local tracepoint (use at file scope or inside a function). */
#define WEFT_TRACEPOINT(var, name, level, group, fields, flags)                                    \
    static struct weft_tracepoint var = WEFT__INIT(name, level, group, fields, flags);             \
    WEFT__ENTRY(var)

/* A tracepoint visible to other files (declare it there with WEFT_TRACEPOINT_EXTERN). */
#define WEFT_TRACEPOINT_GLOBAL(var, name, level, group, fields, flags)                             \
    struct weft_tracepoint var = WEFT__INIT(name, level, group, fields, flags);                    \
    WEFT__ENTRY(var)
#define WEFT_TRACEPOINT_EXTERN(var) extern struct weft_tracepoint var

/* The disabled-path test: one relaxed load and a predictable branch. */
#define WEFT_ENABLED(tp) __builtin_expect(__atomic_load_n(&(tp).state, __ATOMIC_RELAXED) & 1, 0)

/* Field values. */
enum weft_type { WEFT_T_I64 = 1, WEFT_T_U64, WEFT_T_F64, WEFT_T_BOOL, WEFT_T_STR, WEFT_T_BYTES };

typedef struct weft_value {
    uint32_t type;
    uint32_t len;    /* str/bytes length */
    const char *key; /* NULL: positional (named by the field spec); else an inline key */
    union {
        int64_t i64;
        uint64_t u64;
        double f64;
        const void *ptr;
    } v;
} weft_value;

static inline weft_value weft_i64(int64_t x) { weft_value v; memset(&v, 0, sizeof v); v.type = WEFT_T_I64; v.v.i64 = x; return v; }
static inline weft_value weft_u64(uint64_t x) { weft_value v; memset(&v, 0, sizeof v); v.type = WEFT_T_U64; v.v.u64 = x; return v; }
static inline weft_value weft_f64(double x) { weft_value v; memset(&v, 0, sizeof v); v.type = WEFT_T_F64; v.v.f64 = x; return v; }
static inline weft_value weft_bool(int x) { weft_value v; memset(&v, 0, sizeof v); v.type = WEFT_T_BOOL; v.v.u64 = x ? 1 : 0; return v; }
static inline weft_value weft_strn(const char *s, size_t n) { weft_value v; memset(&v, 0, sizeof v); v.type = WEFT_T_STR; v.len = (uint32_t)n; v.v.ptr = s; return v; }
static inline weft_value weft_str(const char *s) { return weft_strn(s, s ? strlen(s) : 0); }
static inline weft_value weft_bytes(const void *p, size_t n) { weft_value v; memset(&v, 0, sizeof v); v.type = WEFT_T_BYTES; v.len = (uint32_t)n; v.v.ptr = p; return v; }
/* Attach an inline key to a value (key/value annotations). */
static inline weft_value weft_kv(const char *key, weft_value v) { v.key = key; return v; }

/* Record an event (slow path; use WEFT_EVENT). Invalid values are recorded as empty strings. */
void weft_emit(struct weft_tracepoint *tp, const weft_value *values, size_t n);

#define WEFT_EVENT(tp, ...)                                                                        \
    do {                                                                                           \
        if (WEFT_ENABLED(tp)) {                                                                    \
            const weft_value weft__v[] = {__VA_ARGS__};                                            \
            weft_emit(&(tp), weft__v, sizeof weft__v / sizeof weft__v[0]);                         \
        }                                                                                          \
    } while (0)
#define WEFT_EVENT0(tp)                                                                            \
    do {                                                                                           \
        if (WEFT_ENABLED(tp)) weft_emit(&(tp), NULL, 0);                                           \
    } while (0)

/* Context that crosses process boundaries. */
typedef struct weft_context {
    uint64_t trace_hi;
    uint64_t trace_lo;
    uint64_t span_id;
    uint8_t sampled;
} weft_context;

/* An open span, owned by the caller (treat as opaque). */
typedef struct weft_span {
    uint64_t trace_hi, trace_lo, span_id;
    uint64_t prev_trace_hi, prev_trace_lo, prev_span;
    uint32_t tp_id;
    uint32_t live;
} weft_span;

/* Begin a span (slow path; use WEFT_SPAN_BEGIN). parent: a remote context or NULL (the
 * thread's current span, or a new trace). */
weft_span weft_span_begin(struct weft_tracepoint *tp, int kind, const weft_context *parent);
static inline weft_span weft_span_disabled(void) { weft_span s; memset(&s, 0, sizeof s); return s; }
#define WEFT_SPAN_BEGIN(tp, kind, parent)                                                          \
    (WEFT_ENABLED(tp) ? weft_span_begin(&(tp), (kind), (parent)) : weft_span_disabled())

void weft_span_end(weft_span *s);
/* Timestamp annotation: "cs", "sr", "ss", "cr" or any text. */
void weft_span_annotate(const weft_span *s, const char *what);
/* Key/value annotations: values made with weft_kv(). */
void weft_span_kv(const weft_span *s, const weft_value *kvs, size_t n);
void weft_span_endpoint(const weft_span *s, const char *service, const char *ip, uint16_t port);
/* 1 and *out filled when the span records, else 0. */
int weft_span_context(const weft_span *s, weft_context *out);
/* The thread's current context: 1 when there is one. */
int weft_current_context(weft_context *out);

/* W3C traceparent (55 characters + NUL: out must hold 56) and B3 single header (51 + NUL: 52).
 * Return the length written, or -1. Extraction returns 0 on success, -1 on a malformed carrier. */
int weft_inject_traceparent(const weft_context *ctx, char *out, size_t cap);
int weft_extract_traceparent(const char *s, weft_context *out);
int weft_inject_b3(const weft_context *ctx, char *out, size_t cap);
int weft_extract_b3(const char *s, weft_context *out);

/* Runtime. service may be NULL. Returns 0. */
int weft_probe_init(const char *service);
/* Selector: "name", "glob*", "group:G", "level:debug", "all". Returns the number of tracepoints
 * matched, or -1 for a malformed selector. disable leaves always-on tracepoints on. */
int weft_probe_enable(const char *selector);
int weft_probe_disable(const char *selector);
int weft_probe_force_disable(const char *selector);
/* Mark a normal exit (records stay drainable). */
void weft_probe_shutdown(void);

/* In-process mode: drain this process's rings into a capture file every interval_ms.
 * Returns NULL on error. weft_capture_stop drains one last time and returns the records
 * written, or -1. */
void *weft_capture_start(const char *path, uint32_t interval_ms);
int64_t weft_capture_stop(void *capture);

/* Registry hook used by the constructor below. */
void weft_register_section(struct weft_tracepoint *const *start, struct weft_tracepoint *const *stop);

/* Every translation unit registers its module's section (the executable's, or the shared
 * library's that includes this header); duplicate ranges are ignored. */
extern struct weft_tracepoint *const __start_weft_tracepoints[] __attribute__((weak, visibility("hidden")));
extern struct weft_tracepoint *const __stop_weft_tracepoints[] __attribute__((weak, visibility("hidden")));
__attribute__((constructor, used)) static void weft__register_module(void) {
    if (__start_weft_tracepoints && __stop_weft_tracepoints)
        weft_register_section(__start_weft_tracepoints, __stop_weft_tracepoints);
}

#ifdef __cplusplus
}
#endif
#endif /* WEFT_PROBE_H */
