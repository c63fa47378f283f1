/* A syscall-heavy loop for measuring capture overhead: `syscalls N` calls getppid() N times
 * and prints the loop's own elapsed CLOCK_MONOTONIC time in ns (so tracer start-up and
 * post-processing are not counted). Build: cc -O2 -o syscalls syscalls.c */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
    return 0;
}
