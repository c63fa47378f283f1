/* A small program whose kernel behaviour is known, for weft's kernel-capture tests.
 *
 *   workload OUT.json [--wait-stdin] [--calls N]
 *
 * It runs phases, each inside an application span written as OTLP/JSON to OUT.json with the
 * OS thread id (`thread.id`) and CLOCK_REALTIME start/end in ns, plus the thread's own CPU
 * time spent in the span (`workload.cpu_ns`, CLOCK_THREAD_CPUTIME_ID) as a reference:
 *
 *   sleep      4 x nanosleep(50 ms)                  -> off CPU, sleeping in nanosleep
 *   pipe-read  read() on a pipe a helper thread      -> off CPU, blocked in read
 *              writes to after 200 ms
 *   spin       200 ms busy loop, no system calls     -> on CPU (or runnable when preempted)
 *   getppid    1000 x getppid()                      -> exactly 1000 getppid syscalls
 *   calls      N x work_unit(i) (default 50)          -> a uprobe target: returns i * 3 + 1
 *
 * With --wait-stdin it first reads one byte from stdin, so tracers can attach before the
 * measured phases start. Build: cc -O1 -o workload workload.c -lpthread
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

static uint64_t now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct span {
    const char *name;
    uint64_t id, parent, start, end, cpu_ns;
};

static struct span spans[16];
static int nspans;
static uint64_t cpu_at_start[16];

static int span_begin(const char *name, int parent) {
    int i = nspans++;
    spans[i].name = name;
    spans[i].id = 0x1000 + (uint64_t)i;
    spans[i].parent = parent >= 0 ? spans[parent].id : 0;
    cpu_at_start[i] = now_ns(CLOCK_THREAD_CPUTIME_ID);
    spans[i].start = now_ns(CLOCK_REALTIME);
    return i;
}

static void span_end(int i) {
    spans[i].end = now_ns(CLOCK_REALTIME);
    spans[i].cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_at_start[i];
}

static int pipefd[2];

static void *writer(void *arg) {
    (void)arg;
    struct timespec d = {0, 200 * 1000 * 1000};
    nanosleep(&d, NULL);
    if (write(pipefd[1], "x", 1) != 1) abort();
    return NULL;
}

__attribute__((noinline)) long work_unit(long i) {
    volatile long x = i;
    for (int k = 0; k < 1000; k++) x += k & 1;
    return i * 3 + 1 + (x - x);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: workload OUT.json [--wait-stdin] [--calls N]\n");
        return 2;
    }
    int wait_stdin = 0;
    long calls = 50;
    for (int a = 2; a < argc; a++) {
        if (!strcmp(argv[a], "--wait-stdin")) wait_stdin = 1;
        else if (!strcmp(argv[a], "--calls") && a + 1 < argc) calls = atol(argv[++a]);
    }
    if (wait_stdin) {
        char c;
        if (read(0, &c, 1) < 0) return 3;
    }
    long tid = syscall(SYS_gettid);
    int root = span_begin("workload", -1);

    int s = span_begin("sleep", root);
    for (int i = 0; i < 4; i++) {
        struct timespec d = {0, 50 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
    span_end(s);

    if (pipe(pipefd)) return 4;
    pthread_t th;
    s = span_begin("pipe-read", root);
    pthread_create(&th, NULL, writer, NULL);
    char buf[4];
    if (read(pipefd[0], buf, 1) != 1) return 5;
    span_end(s);
    pthread_join(th, NULL);

    s = span_begin("spin", root);
    uint64_t until = now_ns(CLOCK_MONOTONIC) + 200ull * 1000 * 1000;
    volatile uint64_t spins = 0;
    while (now_ns(CLOCK_MONOTONIC) < until) spins++;
    span_end(s);

    s = span_begin("getppid", root);
    for (int i = 0; i < 1000; i++) syscall(SYS_getppid);
    span_end(s);

    s = span_begin("calls", root);
    long sum = 0;
    for (long i = 0; i < calls; i++) sum += work_unit(i);
    span_end(s);
    span_end(root);

    FILE *f = fopen(argv[1], "w");
    if (!f) return 6;
    fprintf(f, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\","
               "\"value\":{\"stringValue\":\"workload\"}},{\"key\":\"process.pid\",\"value\":"
               "{\"intValue\":\"%d\"}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"workload\"},\"spans\":[",
            (int)getpid());
    for (int i = 0; i < nspans; i++) {
        char parent[64] = "";
        if (spans[i].parent) snprintf(parent, sizeof parent, "\"parentSpanId\":\"%016" PRIx64 "\",", spans[i].parent);
        fprintf(f,
                "%s{\"traceId\":\"%032x\",\"spanId\":\"%016" PRIx64 "\",%s"
                "\"name\":\"%s\",\"kind\":1,\"startTimeUnixNano\":\"%" PRIu64 "\","
                "\"endTimeUnixNano\":\"%" PRIu64 "\",\"attributes\":[{\"key\":\"thread.id\","
                "\"value\":{\"intValue\":\"%ld\"}},{\"key\":\"workload.cpu_ns\",\"value\":"
                "{\"intValue\":\"%" PRIu64 "\"}}]}",
                i ? "," : "", 0xabc, spans[i].id, parent, spans[i].name, spans[i].start, spans[i].end, tid,
                spans[i].cpu_ns);
    }
    fprintf(f, "]}]}]}\n");
    fclose(f);
    printf("sum=%ld tid=%ld\n", sum, tid);
    return 0;
}
