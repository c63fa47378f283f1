/*
 * weft-probe from C: tracepoints (one always-on, one default-on, some off), run-time enabling,
 * events from several threads, a client span and a server span linked through a W3C
 * traceparent, annotations, key/values and an endpoint.
 *
 *   cc -O2 -I crates/weft-probe-c/include examples/c-probe/main.c \
 *      target/debug/libweft_probe_c.a -lpthread -ldl -lm -o c-probe
 *   ./c-probe capture.wcap      # in-process mode: drain into a capture file
 *   ./c-probe -                 # agent mode only (WEFT_PROBE_MODE=shm WEFT_PROBE_DIR=...)
 *
 * Exit status 0 when every check passed; prints the client traceparent.
 */
#include "weft_probe.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

WEFT_TRACEPOINT(tp_request, "cprobe.request", WEFT_INFO, "cprobe", "path:str", WEFT_SPAN | WEFT_ALWAYS_ON);
WEFT_TRACEPOINT(tp_server, "cprobe.server", WEFT_INFO, "cprobe", "", WEFT_SPAN | WEFT_DEFAULT_ON);
WEFT_TRACEPOINT(tp_io, "cprobe.io", WEFT_DEBUG, "cprobe.io", "offset:u64,len:u64,thread:i64", 0);
WEFT_TRACEPOINT(tp_never, "cprobe.never", WEFT_TRACE, "cprobe.off", "", 0);

#define THREADS 3
#define PER_THREAD 200

static int evaluated;
static uint64_t count_eval(void) { evaluated++; return 1; }

static void *worker(void *arg) {
    long t = (long)arg;
    for (uint64_t i = 0; i < PER_THREAD; i++)
        WEFT_EVENT(tp_io, weft_u64(i), weft_u64(512), weft_i64(t));
    return NULL;
}

int main(int argc, char **argv) {
    const char *capture_path = argc > 1 ? argv[1] : "-";
    int failures = 0;
    weft_probe_init("c-probe-example");
    void *cap = NULL;
    if (strcmp(capture_path, "-") != 0) {
        cap = weft_capture_start(capture_path, 5);
        if (!cap) { fprintf(stderr, "capture_start failed\n"); return 2; }
    }

    /* disabled: nothing recorded, arguments not evaluated */
    for (int i = 0; i < 10; i++) WEFT_EVENT(tp_io, weft_u64(count_eval()), weft_u64(0), weft_i64(-1));
    WEFT_EVENT0(tp_never);
    if (evaluated != 0) { fprintf(stderr, "disabled tracepoint evaluated its arguments\n"); failures++; }

    /* switch a group on at run time */
    if (weft_probe_enable("group:cprobe.io") != 1) { fprintf(stderr, "enable matched != 1\n"); failures++; }
    if (weft_probe_enable("level:") != -1) { fprintf(stderr, "bad selector accepted\n"); failures++; }
    /* always-on survives a plain disable */
    weft_probe_disable("group:cprobe");
    if (!WEFT_ENABLED(tp_request)) { fprintf(stderr, "always-on tracepoint was disabled\n"); failures++; }
    weft_probe_enable("cprobe.server");

    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    for (long t = 0; t < THREADS; t++) pthread_join(th[t], NULL);

    /* client span → traceparent → server span (as if in another process) */
    weft_span client = WEFT_SPAN_BEGIN(tp_request, WEFT_KIND_CLIENT, NULL);
    weft_span_annotate(&client, "cs");
    weft_span_endpoint(&client, "c-probe-example", "127.0.0.1", 9000);
    weft_value kvs[] = {weft_kv("volume", weft_str("vol7")), weft_kv("bytes", weft_u64(4096))};
    weft_span_kv(&client, kvs, 2);
    weft_context cctx, cur;
    char header[56];
    if (!weft_span_context(&client, &cctx)) { fprintf(stderr, "client span not recording\n"); failures++; }
    if (!weft_current_context(&cur) || cur.span_id != cctx.span_id) { fprintf(stderr, "current context != client\n"); failures++; }
    if (weft_inject_traceparent(&cctx, header, sizeof header) != 55) { fprintf(stderr, "inject failed\n"); failures++; }
    weft_context remote;
    if (weft_extract_traceparent(header, &remote) != 0 || remote.span_id != cctx.span_id) { fprintf(stderr, "extract failed\n"); failures++; }
    if (weft_extract_traceparent("00-zz-00-01", &remote) != -1) { fprintf(stderr, "garbage traceparent accepted\n"); failures++; }
    char b3[52];
    weft_context b3ctx;
    if (weft_inject_b3(&cctx, b3, sizeof b3) != 51 || weft_extract_b3(b3, &b3ctx) != 0 || b3ctx.trace_lo != cctx.trace_lo) {
        fprintf(stderr, "b3 round trip failed\n"); failures++;
    }
    {
        weft_span server = WEFT_SPAN_BEGIN(tp_server, WEFT_KIND_SERVER, &remote);
        weft_span_annotate(&server, "sr");
        WEFT_EVENT(tp_io, weft_u64(777), weft_u64(1), weft_i64(99));
        weft_span_annotate(&server, "ss");
        weft_span_end(&server);
    }
    weft_span_annotate(&client, "cr");
    weft_span_end(&client);
    if (weft_current_context(&cur)) { fprintf(stderr, "context not restored\n"); failures++; }

    printf("%s\n", header);
    if (cap) {
        int64_t n = weft_capture_stop(cap);
        if (n < THREADS * PER_THREAD) { fprintf(stderr, "capture wrote %lld records\n", (long long)n); failures++; }
    }
    weft_probe_shutdown();
    return failures ? 1 : 0;
}
