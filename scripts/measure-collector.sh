#!/usr/bin/env bash
# Re-measures the collector/store figures of the README's Performance section (release build;
# the first build of DataFusion in release takes ~20 min on 2 cores). Run it on a quiet machine.
#
#   scripts/measure-collector.sh            # 10M spans for the storage figures
#   SPANS=1000000 scripts/measure-collector.sh
#
# 1. weft-store's storage benchmark: bytes on disk per span (peer: the same spans as OTLP
#    protobuf and gzipped OTLP), trace-by-id latency, a GROUP BY over all spans (peer: the same
#    GROUP BY on the same rows in SQLite, through python3's sqlite3 module, in the same run).
# 2. weft-store's ingest_cpu example: the same pipeline without HTTP in one process, CPU per span.
# 3. Durable ingest of OTLP/HTTP protobuf into a release `weft serve` (fsync every 100 ms), driven
#    by `weft loadgen`: spans stored per CPU-second of the server process.
# 4. Load above capacity: a small buffer and fsync before every acknowledgement, more senders
#    than it takes: refusals (429/503) are counted and the server's memory stays bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weft-target-release}"
SPANS="${SPANS:-10000000}"
LOAD_SPANS="${LOAD_SPANS:-3000000}"

cargo build --release -p weft
bin="$CARGO_TARGET_DIR/release/weft"

echo "== storage benchmark ($SPANS spans)"
WEFT_BENCH_SPANS="$SPANS" cargo bench -p weft-store --bench storage

echo "== durable ingest pipeline in one process (decode + WAL + flush, no HTTP, no load generator)"
cargo run --release -q -p weft-store --example ingest_cpu -- 2000000

serve() { # serve DIR extra-flags... → sets $pid; listens on 127.0.0.1:24318 (OTLP/HTTP), 127.0.0.1:26686 (query)
  local dir=$1; shift
  "$bin" serve --data-dir "$dir" --otlp-http 127.0.0.1:24318 --otlp-grpc off --zipkin off --http 127.0.0.1:26686 "$@" \
    > "$dir.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -sf http://127.0.0.1:26686/api/status > /dev/null && return 0
    sleep 0.1
  done
  cat "$dir.log"; return 1
}
stop() { kill -TERM "$pid"; wait "$pid" || true; }

echo "== durable OTLP/HTTP protobuf ingest ($LOAD_SPANS spans, fsync every 100 ms)"
d1=$(mktemp -d)
serve "$d1"
"$bin" loadgen --quiet --url http://127.0.0.1:24318 --metrics-url http://127.0.0.1:26686 --spans "$LOAD_SPANS" --connections 4 --batch 512
"$bin" loadgen --quiet --url http://127.0.0.1:24318 --metrics-url http://127.0.0.1:26686 --spans "$LOAD_SPANS" --connections 4 --batch 512 --gzip
stop
echo "   on disk: $(du -sh "$d1" | cut -f1)"

echo "== load above capacity (--max-buffer 32MiB, --fsync always, 16 senders)"
d2=$(mktemp -d)
serve "$d2" --max-buffer 32MiB --flush-size 16MiB --fsync always --max-inflight 32MiB
"$bin" loadgen --quiet --url http://127.0.0.1:24318 --metrics-url http://127.0.0.1:26686 --spans "$LOAD_SPANS" --connections 16 --batch 2048
stop
rm -rf "$d1" "$d2" "$d1.log" "$d2.log"
