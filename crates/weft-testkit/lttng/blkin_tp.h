/*
 * A BlkKin-style provider: the `zipkin` events and fields BlkKin records (trace name, endpoint,
 * trace/span/parent ids, then an annotation or a key/value), written for weft's tests with the
 * LTTng-UST 2.13 API.
 */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER zipkin
#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./blkin_tp.h"

#if !defined(WEFT_BLKIN_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define WEFT_BLKIN_TP_H

#include <lttng/tracepoint.h>
#include <stdint.h>

#define WEFT_ZIPKIN_ARGS \
	const char *, trace_name, const char *, service, int, port, const char *, ip, \
	long, trace, long, span, long, parent_span

#define WEFT_ZIPKIN_FIELDS \
	lttng_ust_field_string(trace_name, trace_name) \
	lttng_ust_field_string(service_name, service) \
	lttng_ust_field_integer(int, port_no, port) \
	lttng_ust_field_string(ip, ip) \
	lttng_ust_field_integer(long, trace_id, trace) \
	lttng_ust_field_integer(long, span_id, span) \
	lttng_ust_field_integer(long, parent_span_id, parent_span)

LTTNG_UST_TRACEPOINT_EVENT(zipkin, timestamp,
	LTTNG_UST_TP_ARGS(WEFT_ZIPKIN_ARGS, const char *, event),
	LTTNG_UST_TP_FIELDS(WEFT_ZIPKIN_FIELDS lttng_ust_field_string(event, event))
)

LTTNG_UST_TRACEPOINT_EVENT(zipkin, keyval_string,
	LTTNG_UST_TP_ARGS(WEFT_ZIPKIN_ARGS, const char *, key, const char *, val),
	LTTNG_UST_TP_FIELDS(WEFT_ZIPKIN_FIELDS lttng_ust_field_string(key, key) lttng_ust_field_string(val, val))
)

LTTNG_UST_TRACEPOINT_EVENT(zipkin, keyval_integer,
	LTTNG_UST_TP_ARGS(WEFT_ZIPKIN_ARGS, const char *, key, int64_t, val),
	LTTNG_UST_TP_FIELDS(WEFT_ZIPKIN_FIELDS lttng_ust_field_string(key, key) lttng_ust_field_integer(int64_t, val, val))
)

#endif /* WEFT_BLKIN_TP_H */

#include <lttng/tracepoint-event.h>
