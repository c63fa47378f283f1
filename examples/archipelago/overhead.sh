#!/usr/bin/env bash
# Overhead of weft-probe on archipelago: the same service built with probes compiled out
# (`--no-default-features`, "off") versus with its default tracepoint set enabled:
#   on+agent  the probes record into shared memory and a weft agent (release build, spooling
#             to local disk, no collector) drains them — the whole node-local cost;
#   on        the probes record into private memory, no agent (rings fill, then drop) — the
#             instrumentation alone.
# Each run: the four tiers as processes, closed-loop clients through the gateway (4 KiB
# requests, 30 % reads) for SECS seconds after a 0.5 s warm-up. Two figures per run:
# throughput (ops/s) and the tiers' CPU time per request (utime+stime from /proc, which moves
# less than throughput on a shared machine); for on+agent also the agent's CPU per request.
# Variants alternate within each repetition (in rotating order); medians are compared.
#
#   RUNS=7 SECS=10 CLIENTS=8 examples/archipelago/overhead.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${RUNS:-7}; secs=${SECS:-10}; clients=${CLIENTS:-8}
target=${CARGO_TARGET_DIR:-target}
work=$(mktemp -d /tmp/archipelago-overhead.XXXXXX)
trap 'rm -rf "$work"' EXIT

cargo build -q --release -p archipelago --no-default-features
cp "$target/release/archipelago" "$work/archipelago-off"
cargo build -q --release -p archipelago
cp "$target/release/archipelago" "$work/archipelago-on"
cargo build -q --release -p weft-agent --bin weft-agent
cp "$target/release/weft-agent" "$work/agent"
hz=$(getconf CLK_TCK)

field() { awk -v k="$1" '{for(i=1;i<=NF;i++) if($i==k) print $(i+1)}'; }
cpu_of() { awk -v hz="$hz" '{sub(/.*\) /,""); split($0,f," "); print (f[12]+f[13])/hz}' "/proc/$1/stat"; }

run() { # variant -> "ops/s tier_cpu_us/op agent_cpu_us/op"
  local v=$1 out agent_cpu=0
  case $v in
    off) out=$(WEFT_PROBE_DIR="$work/none" "$work/archipelago-off" run --dir "$work/data" --seconds "$secs" --clients "$clients") ;;
    on) out=$(WEFT_PROBE_DIR="$work/none" "$work/archipelago-on" run --dir "$work/data" --seconds "$secs" --clients "$clients") ;;
    on+agent)
      rm -rf "$work/spool"
      "$work/agent" --quiet --collector off --metrics off --probe-dir "$work/probes" --spool-dir "$work/spool" \
        --spool-size 256MiB > "$work/agent.out" &
      local ap=$!
      while ! grep -q "Ctrl-C stops" "$work/agent.out" 2>/dev/null; do sleep 0.05; done
      out=$(WEFT_PROBE_DIR="$work/probes" "$work/archipelago-on" run --dir "$work/data" --seconds "$secs" --clients "$clients")
      sleep 0.5
      agent_cpu=$(cpu_of "$ap")
      kill "$ap"; wait "$ap" || true
      echo "  agent: $(tail -1 "$work/agent.out")" >&2 ;;
  esac
  rm -rf "$work/data"
  local ops; ops=$(echo "$out" | field ops)
  echo "$(echo "$out" | field ops/s) $(echo "$out" | field tier_cpu_us/op) $(awk -v c="$agent_cpu" -v n="$ops" 'BEGIN{printf "%.2f", c*1e6/n}')"
}

declare -A thr cpu acpu
order=(off on+agent on)
for i in $(seq "$runs"); do
  # rotate the order each repetition, so drift in the machine's load hits every variant alike
  r=$(( (i - 1) % 3 ))
  for v in "${order[@]:r}" "${order[@]:0:r}"; do
    read -r t c a < <(run "$v")
    thr[$v]+="$t "; cpu[$v]+="$c "; acpu[$v]+="$a "
    echo "run $i $v: $t ops/s, tiers $c us CPU/op${a:+, agent $a us CPU/op}" >&2
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
t_off=$(echo "${thr[off]}" | median); c_off=$(echo "${cpu[off]}" | median)
for v in off on+agent on; do
  t=$(echo "${thr[$v]}" | median); c=$(echo "${cpu[$v]}" | median); a=$(echo "${acpu[$v]}" | median)
  awk -v v="$v" -v t="$t" -v c="$c" -v a="$a" -v t0="$t_off" -v c0="$c_off" 'BEGIN {
    printf "%-9s median %8.1f ops/s (%+.2f %%)  tiers %.2f us CPU/op (%+.2f %%)", v, t, (t-t0)/t0*100, c, (c-c0)/c0*100
    if (a > 0) printf "  agent %.2f us CPU/op", a
    printf "\n" }'
done
for v in off on+agent on; do echo "$v ops/s: ${thr[$v]}  tiers us/op: ${cpu[$v]}"; done
