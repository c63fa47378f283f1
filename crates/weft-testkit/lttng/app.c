/*
 * weft's LTTng test program.
 *
 *   app ALL SMALL BLKIN [SALT [HOLD]]
 *
 * ALL: `weft_test:all_types` events (every field type, values varying with the index);
 * SMALL: `weft_test:small` events; BLKIN: 1 to emit the BlkKin scenario below (twice the
 * number of times given); SALT: XORed into the scenario's trace ids (0 by default), so
 * several runs give distinct traces; HOLD: a file to wait for (at most 10 minutes) before
 * exiting, so the program still runs while a viewer reads what it emitted. Prints nothing;
 * exits 0.
 *
 * BlkKin scenario (trace 0x1234567890abcdef): client `rbd` (10.0.0.1:6800) sends `osd_op`
 * span 0x11 (cs, key/value object=rbd_data.1, cr); server `osd.0` (10.0.0.2:6801) logs the
 * same span (sr, journal_write, key/value bytes=4096, ss); `osd.0` runs a local child span
 * 0x22 `encode` (encode start, key/value ratio_pct=50, encode end). A second trace with a
 * negative 64-bit id (0xfedcba9876543210) has one local span -5 (start, end).
 */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "weft_tp.h"
#include "blkin_tp.h"

#include <stdlib.h>
#include <unistd.h>
#include <time.h>

static void pause_us(long us) {
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	nanosleep(&ts, NULL);
}

static void blkin(long salt) {
	const long t = 0x1234567890abcdefL ^ salt, s = 0x11, child = 0x22;
	lttng_ust_tracepoint(zipkin, timestamp, "osd_op", "rbd", 6800, "10.0.0.1", t, s, 0, "cs");
	lttng_ust_tracepoint(zipkin, keyval_string, "osd_op", "rbd", 6800, "10.0.0.1", t, s, 0, "object", "rbd_data.1");
	pause_us(200);
	lttng_ust_tracepoint(zipkin, timestamp, "osd_op", "osd.0", 6801, "10.0.0.2", t, s, 0, "sr");
	pause_us(100);
	lttng_ust_tracepoint(zipkin, timestamp, "osd_op", "osd.0", 6801, "10.0.0.2", t, s, 0, "journal_write");
	lttng_ust_tracepoint(zipkin, keyval_integer, "osd_op", "osd.0", 6801, "10.0.0.2", t, s, 0, "bytes", 4096);
	lttng_ust_tracepoint(zipkin, timestamp, "encode", "osd.0", 6801, "10.0.0.2", t, child, s, "encode start");
	lttng_ust_tracepoint(zipkin, keyval_integer, "encode", "osd.0", 6801, "10.0.0.2", t, child, s, "ratio_pct", 50);
	pause_us(100);
	lttng_ust_tracepoint(zipkin, timestamp, "encode", "osd.0", 6801, "10.0.0.2", t, child, s, "encode end");
	lttng_ust_tracepoint(zipkin, timestamp, "osd_op", "osd.0", 6801, "10.0.0.2", t, s, 0, "ss");
	pause_us(200);
	lttng_ust_tracepoint(zipkin, timestamp, "osd_op", "rbd", 6800, "10.0.0.1", t, s, 0, "cr");

	const long neg = (long)0xfedcba9876543210UL ^ salt;
	lttng_ust_tracepoint(zipkin, timestamp, "scrub", "osd.1", 0, "", neg, -5, 0, "start");
	pause_us(50);
	lttng_ust_tracepoint(zipkin, timestamp, "scrub", "osd.1", 0, "", neg, -5, 0, "end");
}

int main(int argc, char **argv) {
	long all = argc > 1 ? atol(argv[1]) : 10;
	long small = argc > 2 ? atol(argv[2]) : 0;
	int with_blkin = argc > 3 ? atoi(argv[3]) : 0;
	long salt = argc > 4 ? atol(argv[4]) : 0;
	const char *hold = argc > 5 ? argv[5] : NULL;
	static const char *strings[] = { "hello", "", "a\"quoted\\string", "tab\there", "caf\xc3\xa9" };
	int32_t arr[3];
	uint16_t arrx[2] = { 0xbeef, 0x0102 };
	uint8_t seq[6] = { 1, 2, 0xfe, 4, 5, 0 };
	int64_t seq64[3] = { -1, 1LL << 62, 0 };
	for (long i = 0; i < all; i++) {
		arr[0] = -1; arr[1] = (int32_t)i; arr[2] = (int32_t)(i * 1000);
		struct weft_all a = {
			.i8 = (int8_t)(-5 - i), .u8 = (uint8_t)(200 + i), .i16 = (int16_t)(-300 * (i + 1)),
			.u16 = (uint16_t)(60000 + i), .i32 = (int32_t)(-70000 - i), .u32 = 0xdeadbeefu + (uint32_t)i,
			.i64 = -(1LL << 40) - i, .u64 = 0xfedcba9876543210ULL + (uint64_t)i,
			.f = 1.5f + (float)i, .d = 2.25 + (double)i / 3.0, .s = strings[i % 5], .txt = (i % 3) ? "weft-txt" : "ab\0cdefg",
			.color = (i % 4 == 0) ? 0 : (i % 4 == 1) ? 3 : (i % 4 == 2) ? 100 : (i % 8 == 3 ? -7 : 42),
			.level = (unsigned int)(i % 17), .arr = arr, .arrx = arrx, .seq = seq,
			.seq_len = (unsigned int)(i % 6), .seq64 = seq64, .seq64_len = (unsigned int)(i % 4),
		};
		lttng_ust_tracepoint(weft_test, all_types, &a);
		if (i % 50 == 49)
			pause_us(10);
	}
	for (long i = 0; i < small; i++)
		lttng_ust_tracepoint(weft_test, small, (int)i);
	for (int k = 0; k < with_blkin; k++)
		blkin(salt);
	for (int i = 0; hold && i < 60000 && access(hold, F_OK) != 0; i++)
		pause_us(10000);
	return 0;
}
