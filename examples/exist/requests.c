/* A small request-serving program whose function calls are known, for EXIST's capture tests.
 *
 *   requests OUT.jsonl [--seconds S] [--threads N] [--hot] [--mix K]
 *
 * N worker threads (default 2) serve requests for S seconds (default 3). Each request is an
 * application span ("GET /item", service "requests") written as one OTLP/JSON line to OUT.jsonl
 * when it ends, with the OS thread id (`thread.id`), CLOCK_REALTIME start/end in ns and its
 * number (`request.n`); inside it the worker calls
 *
 *   handle_request(n) -> parse_request(n)
 *                     -> lookup(n) -> compute(n)
 *
 * then sleeps 1 ms, so workers leave and re-enter the CPUs. With --hot one more thread calls
 * hot_tick(i) in a tight loop, outside any request (to fill a capture's buffer). With --mix K
 * the request mix shifts over time instead: in each 250 ms phase of the wall clock a request
 * is handle_request -> parse_request, OP -> compute with OP the phase's operation
 * (get_item, put_item, scan_items, delete_item, in turn), replica K running K phases ahead —
 * so replicas captured at the same moment see different parts of the mix (EXIST's merging).
 * Build: cc -O1 -o requests requests.c -lpthread
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static FILE *out;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t stop_at;
static volatile long sink;

static uint64_t now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long spin(long n, int rounds) {
    volatile long x = n;
    for (int k = 0; k < rounds; k++) x += k & 1;
    return x;
}

__attribute__((noinline)) long compute(long n) { return spin(n, 20000); }
__attribute__((noinline)) long lookup(long n) { return compute(n) + spin(n, 5000); }
__attribute__((noinline)) long parse_request(long n) { return spin(n, 5000); }
__attribute__((noinline)) long get_item(long n) { return compute(n); }
__attribute__((noinline)) long put_item(long n) { return compute(n) + 1; }
__attribute__((noinline)) long scan_items(long n) { return compute(n) + 2; }
__attribute__((noinline)) long delete_item(long n) { return compute(n) + 3; }
static long mix = -1;
static uint64_t now_ns(clockid_t c);
__attribute__((noinline)) long handle_request(long n) {
    if (mix < 0) return parse_request(n) + lookup(n);
    long (*ops[4])(long) = {get_item, put_item, scan_items, delete_item};
    return parse_request(n) + ops[(now_ns(CLOCK_REALTIME) / 250000000ull + (uint64_t)mix) % 4](n);
}
__attribute__((noinline)) long hot_tick(long i) { return i + 1; }

static void write_span(long n, long tid, uint64_t start, uint64_t end) {
    pthread_mutex_lock(&out_lock);
    fprintf(out,
            "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\","
            "\"value\":{\"stringValue\":\"requests\"}}]},\"scopeSpans\":[{\"spans\":[{"
            "\"traceId\":\"%032lx\",\"spanId\":\"%016lx\",\"name\":\"GET /item\",\"kind\":2,"
            "\"startTimeUnixNano\":\"%" PRIu64 "\",\"endTimeUnixNano\":\"%" PRIu64 "\","
            "\"attributes\":[{\"key\":\"thread.id\",\"value\":{\"intValue\":\"%ld\"}},"
            "{\"key\":\"request.n\",\"value\":{\"intValue\":\"%ld\"}}]}]}]}]}\n",
            (unsigned long)(0x5000 + n), (unsigned long)(0x9000 + n), start, end, tid, n);
    fflush(out);
    pthread_mutex_unlock(&out_lock);
}

static long next_n;

static void *worker(void *arg) {
    (void)arg;
    long tid = syscall(SYS_gettid);
    while (now_ns(CLOCK_MONOTONIC) < stop_at) {
        long n = __atomic_fetch_add(&next_n, 1, __ATOMIC_RELAXED);
        uint64_t start = now_ns(CLOCK_REALTIME);
        sink += handle_request(n);
        uint64_t end = now_ns(CLOCK_REALTIME);
        write_span(n, tid, start, end);
        struct timespec d = {0, 1000 * 1000};
        nanosleep(&d, NULL);
    }
    return NULL;
}

static void *hot(void *arg) {
    (void)arg;
    long i = 0;
    while (now_ns(CLOCK_MONOTONIC) < stop_at) sink += hot_tick(i++);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: requests OUT.jsonl [--seconds S] [--threads N] [--hot]\n");
        return 2;
    }
    double seconds = 3;
    int threads = 2, with_hot = 0;
    for (int a = 2; a < argc; a++) {
        if (!strcmp(argv[a], "--seconds") && a + 1 < argc) seconds = atof(argv[++a]);
        else if (!strcmp(argv[a], "--threads") && a + 1 < argc) threads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--hot")) with_hot = 1;
        else if (!strcmp(argv[a], "--mix") && a + 1 < argc) mix = atol(argv[++a]);
    }
    if (threads < 1 || threads > 64) return 2;
    out = fopen(argv[1], "w");
    if (!out) return 3;
    stop_at = now_ns(CLOCK_MONOTONIC) + (uint64_t)(seconds * 1e9);
    pthread_t th[65];
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, worker, NULL);
    if (with_hot) pthread_create(&th[threads], NULL, hot, NULL);
    for (int i = 0; i < threads + with_hot; i++) pthread_join(th[i], NULL);
    fclose(out);
    return 0;
}
