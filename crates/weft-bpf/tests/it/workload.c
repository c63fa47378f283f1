/* weft-bpf's uprobe workload: waits for a line on stdin (the probes are attached by then),
 * calls weft_work(i % 300) 1000 times and weft_nap(1200 us) 5 times, weft_nap(5000 us) 3
 * times, then exits. */
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline, noclone)) long weft_work(long n) {
    __asm__ volatile("" ::: "memory");
    return n * 3;
}

__attribute__((noinline, noclone)) int weft_nap(int us) {
    usleep(us);
    return us;
}

int main(void) {
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    long total = 0;
    for (int i = 0; i < 1000; i++) total += weft_work(i % 300);
    for (int i = 0; i < 5; i++) weft_nap(1200);
    for (int i = 0; i < 3; i++) weft_nap(5000);
    printf("%ld\n", total);
    return 0;
}
