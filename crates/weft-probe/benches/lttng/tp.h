/* LTTng-UST provider for the weft-probe benchmark (compiled at bench time, never in normal builds). */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER weftbench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./tp.h"

#if !defined(WEFTBENCH_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define WEFTBENCH_TP_H

#include <lttng/tracepoint.h>
#include <stdint.h>

LTTNG_UST_TRACEPOINT_EVENT(weftbench, ev2,
    LTTNG_UST_TP_ARGS(uint64_t, a, uint64_t, b),
    LTTNG_UST_TP_FIELDS(
        lttng_ust_field_integer(uint64_t, a, a)
        lttng_ust_field_integer(uint64_t, b, b)))

LTTNG_UST_TRACEPOINT_EVENT(weftbench, off,
    LTTNG_UST_TP_ARGS(uint64_t, a, uint64_t, b),
    LTTNG_UST_TP_FIELDS(
        lttng_ust_field_integer(uint64_t, a, a)
        lttng_ust_field_integer(uint64_t, b, b)))

#endif

#include <lttng/tracepoint-event.h>
