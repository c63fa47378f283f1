/* The LTTng-UST side of the weft-probe benchmark: loops of n tracepoint hits behind one call. */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "tp.h"

void weftbench_enabled(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) lttng_ust_tracepoint(weftbench, ev2, i, n);
}

void weftbench_disabled(uint64_t n) {
    for (uint64_t i = 0; i < n; i++) lttng_ust_tracepoint(weftbench, off, i, n);
}
