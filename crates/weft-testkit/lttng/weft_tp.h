/* weft's test tracepoint provider: one event with every LTTng-UST field type, and a small one. */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER weft_test
#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./weft_tp.h"

#if !defined(WEFT_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define WEFT_TP_H

#include <lttng/tracepoint.h>
#include <stdint.h>

#ifndef WEFT_ALL_ARGS
#define WEFT_ALL_ARGS
struct weft_all {
	int8_t i8; uint8_t u8; int16_t i16; uint16_t u16; int32_t i32; uint32_t u32;
	int64_t i64; uint64_t u64; float f; double d; const char *s; const char *txt; int color; unsigned int level;
	const int32_t *arr; const uint16_t *arrx; const uint8_t *seq; unsigned int seq_len;
	const int64_t *seq64; unsigned int seq64_len;
};
#endif

LTTNG_UST_TRACEPOINT_ENUM(weft_test, color,
	LTTNG_UST_TP_ENUM_VALUES(
		lttng_ust_field_enum_value("RED", 0)
		lttng_ust_field_enum_range("GREEN", 1, 5)
		lttng_ust_field_enum_value("BLUE", 100)
		lttng_ust_field_enum_value("NEGATIVE", -7)
	)
)

LTTNG_UST_TRACEPOINT_ENUM(weft_test, level,
	LTTNG_UST_TP_ENUM_VALUES(
		lttng_ust_field_enum_auto("LOW")
		lttng_ust_field_enum_auto("MID")
		lttng_ust_field_enum_range("HIGH", 10, 20)
		lttng_ust_field_enum_value("ALSO_HIGH", 15)
	)
)

LTTNG_UST_TRACEPOINT_EVENT(weft_test, all_types,
	LTTNG_UST_TP_ARGS(const struct weft_all *, a),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_integer(int8_t, i8, a->i8)
		lttng_ust_field_integer(uint8_t, u8, a->u8)
		lttng_ust_field_integer(int16_t, i16, a->i16)
		lttng_ust_field_integer(uint16_t, u16, a->u16)
		lttng_ust_field_integer(int32_t, i32, a->i32)
		lttng_ust_field_integer_hex(uint32_t, u32x, a->u32)
		lttng_ust_field_integer(int64_t, i64, a->i64)
		lttng_ust_field_integer(uint64_t, u64, a->u64)
		lttng_ust_field_integer_hex(uint64_t, u64x, a->u64)
		lttng_ust_field_integer_network(uint32_t, net32, a->u32)
		lttng_ust_field_integer_network_hex(int16_t, net16x, a->i16)
		lttng_ust_field_float(float, f, a->f)
		lttng_ust_field_float(double, d, a->d)
		lttng_ust_field_string(s, a->s)
		lttng_ust_field_enum(weft_test, color, int, color, a->color)
		lttng_ust_field_enum(weft_test, level, unsigned int, level, a->level)
		lttng_ust_field_array(int32_t, arr, a->arr, 3)
		lttng_ust_field_array_hex(uint16_t, arrx, a->arrx, 2)
		lttng_ust_field_array_network(uint16_t, arrnet, a->arrx, 2)
		lttng_ust_field_array_text(char, txt, a->txt, 4)
		lttng_ust_field_sequence(uint8_t, seq, a->seq, unsigned int, a->seq_len)
		lttng_ust_field_sequence_hex(uint8_t, seqx, a->seq, unsigned int, a->seq_len)
		lttng_ust_field_sequence_text(char, seqtxt, a->txt, unsigned int, a->seq_len)
		lttng_ust_field_sequence(int64_t, seq64, a->seq64, uint8_t, a->seq64_len)
	)
)

LTTNG_UST_TRACEPOINT_EVENT(weft_test, small,
	LTTNG_UST_TP_ARGS(int, v),
	LTTNG_UST_TP_FIELDS(lttng_ust_field_integer(int, v, v))
)

#endif /* WEFT_TP_H */

#include <lttng/tracepoint-event.h>
