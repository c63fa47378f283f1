#!/usr/bin/env bash
# Instructions per durable span, counted with cachegrind: the durable ingest pipeline of
# `weft-store/examples/ingest_cpu` (OTLP protobuf decode, span → Arrow, WAL append, flushes to
# Parquet) without HTTP. Unlike CPU time on a shared 2-vCPU VM (±8–10 % between runs of the same
# binary), the count is the same on every run, so it shows changes of a few percent. It does not
# see cache misses or page faults: confirm a gain with alternating CPU-time runs as well.
#
#   scripts/count-instructions.sh            # 300,000 spans, ~30 s
#   SPANS=1000000 scripts/count-instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weft-target-release}"
SPANS="${SPANS:-300000}"
command -v valgrind > /dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p weft-store --example ingest_cpu
bin="$CARGO_TARGET_DIR/release/examples/ingest_cpu"

# count N → "instructions spans": the whole process, and the spans it appended.
count() {
  local out
  out=$(valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$bin" "$1" 2>&1)
  echo "$(sed -n 's/.*I *refs: *//p' <<< "$out" | tr -d ,) $(sed -n 's/^\([0-9]*\) spans:.*/\1/p' <<< "$out")"
}
# The set-up (encoding 256 requests, opening and closing the store) is counted with one request
# appended and subtracted.
read -r base_i base_n <<< "$(count 1)"
read -r all_i all_n <<< "$(count "$SPANS")"
echo "$(( (all_i - base_i) / (all_n - base_n) )) instructions per span" \
  "($((all_n - base_n)) spans; set-up of $base_i instructions subtracted)"
