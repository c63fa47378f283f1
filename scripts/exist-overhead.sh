#!/usr/bin/env bash
# EXIST's overhead table: nginx (Debian's, one worker) under ApacheBench, with
#   none      no tracing;
#   perf      `perf record -a -F 3999 -g` for the whole run (EXIST's sampling baseline);
#   bpftrace  bpftrace counting every `raw_syscalls:sys_enter` per process for the whole run
#             (EXIST's eBPF baseline);
#   exist     `weft exist capture` of the worker, a PERIOD window every EVERY seconds
#             (software backend: uprobes on FUNCS), the rest of the time untraced.
# Per run: ab's throughput (requests/s) and nginx's CPU per request (master + worker
# utime+stime from /proc over the run), plus the tracer's own CPU per request (perf,
# bpftrace, or the weft exist processes). Variants alternate within each repetition, in
# rotating order, so the machine's drift hits them alike; the medians are printed, and each
# variant's throughput and nginx CPU against `none` of the same repetitions.
#
#   sudo RUNS=5 SECS=20 CLIENTS=8 scripts/exist-overhead.sh        # needs root (perf, uprobes)
#   WEFT=/path/to/weft  (default: $CARGO_TARGET_DIR/debug/weft, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}; secs=${SECS:-20}; clients=${CLIENTS:-8}
period=${PERIOD:-1s}; every=${EVERY:-10}
funcs=${FUNCS:-ngx_http_handler,ngx_http_core_run_phases,ngx_http_send_header,ngx_http_output_filter,ngx_http_finalize_request}
target=${CARGO_TARGET_DIR:-target}
weft=${WEFT:-$target/debug/weft}
for tool in nginx ab perf bpftrace; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install nginx apache2-utils linux-perf bpftrace)" >&2; exit 2; }
done
[ -x "$weft" ] || cargo build -q -p weft
work=$(mktemp -d /tmp/exist-overhead.XXXXXX)
hz=$(getconf CLK_TCK)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/html" "$work/logs"
chmod 755 "$work" "$work/html"   # the worker runs as an unprivileged user
head -c 3072 /dev/urandom | base64 > "$work/html/index.html"   # 4 KiB
chmod 644 "$work/html/index.html"
cat > "$work/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $work/logs/error.log;
pid $work/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  server { listen 127.0.0.1:$port; root $work/html; }
}
EOF
nginx -p "$work" -c "$work/nginx.conf" &
master=$!
trap 'kill $master 2>/dev/null; wait $master 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do worker=$(pgrep -P "$master" || true); [ -n "$worker" ] && break; sleep 0.05; done
[ -n "$worker" ] || { echo "nginx did not start: $(cat "$work/logs/error.log")" >&2; exit 1; }
url="http://127.0.0.1:$port/index.html"

cpu_of() { awk -v hz="$hz" '{sub(/.*\) /,""); split($0,f," "); printf "%.4f", (f[12]+f[13])/hz}' "/proc/$1/stat"; }
nginx_cpu() { awk -v a="$(cpu_of "$master")" -v b="$(cpu_of "$worker")" 'BEGIN{printf "%.4f", a+b}'; }
field() { awk -v k="$1" -F: '$1==k {gsub(/^ +| \[.*$/,"",$2); print $2}'; }

run() { # variant -> "req/s nginx_us/req tracer_us/req"
  local v=$1 tp="" tracer=0 out c0 c1
  case $v in
    perf) perf record -q -a -F 3999 -g -o "$work/perf.data" 2>/dev/null & tp=$!; sleep 1 ;;
    bpftrace) bpftrace -e 'tracepoint:raw_syscalls:sys_enter { @[pid] = count(); }' > /dev/null 2>&1 & tp=$!; sleep 2 ;;
    exist)
      rm -f "$work/stop"
      ( # a window every $every s, the first after half an interval, until $work/stop; then
        # the CPU of the windows (this subshell's reaped children) goes to $work/times
        sleep "$(awk -v e="$every" 'BEGIN{print e/2}')"
        while [ ! -e "$work/stop" ]; do
          "$weft" exist capture --pid "$worker" --period "$period" --functions "$funcs" \
            --out "$work/exist.json" >> "$work/exist.log" 2>&1 || true
          for _ in $(seq $((every * 10))); do [ -e "$work/stop" ] && break; sleep 0.1; done
        done
        times > "$work/times" ) & tp=$! ;;
  esac
  c0=$(nginx_cpu)
  out=$(ab -q -k -c "$clients" -t "$secs" -n 100000000 "$url" 2>&1)
  c1=$(nginx_cpu)
  if [ -n "$tp" ]; then
    if [ "$v" = exist ]; then
      touch "$work/stop"; wait "$tp"
      # `times`: children's user and system time, as 0m1.234s 0m0.567s
      tracer=$(awk '{t=0; for(i=1;i<=2;i++){split($i,p,"m"); t+=p[1]*60+p[2]}} END{printf "%.4f", t}' "$work/times")
    else
      tracer=$(cpu_of "$tp")
      kill -TERM "$tp"; wait "$tp" 2>/dev/null || true
    fi
  fi
  rm -f "$work/perf.data" "$work/exist.json"
  local n rps
  if echo "$out" | grep -q "Non-2xx responses"; then echo "nginx answered errors: $out" >&2; exit 1; fi
  n=$(echo "$out" | field "Complete requests")
  rps=$(echo "$out" | field "Requests per second")
  awk -v n="$n" -v r="$rps" -v c="$(awk -v a="$c0" -v b="$c1" 'BEGIN{print b-a}')" -v t="$tracer" \
    'BEGIN{printf "%s %.2f %.2f\n", r, c*1e6/n, t*1e6/n}'
}

declare -A thr cpu tcpu
order=(none perf bpftrace exist)
for i in $(seq "$runs"); do
  r=$(( (i - 1) % ${#order[@]} ))
  for v in "${order[@]:r}" "${order[@]:0:r}"; do
    read -r t c tc < <(run "$v")
    echo "run $i $v: $t req/s, nginx $c us/req, tracer $tc us/req" >&2
    thr[$v]+="$t "; cpu[$v]+="$c "; tcpu[$v]+="$tc "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$0} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "nginx $(nginx -v 2>&1 | sed 's/.*\///'), ab -k -c $clients -t $secs, $runs runs each, exist: $period every ${every}s on $(echo "$funcs" | tr ',' '\n' | wc -l) functions"
printf "| %-9s | %12s | %16s | %18s | %14s | %14s |\n" tracing "req/s" "nginx CPU µs/req" "tracer CPU µs/req" "throughput" "nginx CPU/req"
base_t=$(echo "${thr[none]}" | median); base_c=$(echo "${cpu[none]}" | median)
for v in "${order[@]}"; do
  t=$(echo "${thr[$v]}" | median); c=$(echo "${cpu[$v]}" | median); tc=$(echo "${tcpu[$v]}" | median)
  printf "| %-9s | %12s | %16s | %18s | %13.1f%% | %13.1f%% |\n" "$v" "$t" "$c" "$tc" \
    "$(awk -v a="$t" -v b="$base_t" 'BEGIN{print (a/b-1)*100}')" "$(awk -v a="$c" -v b="$base_c" 'BEGIN{print (a/b-1)*100}')"
done
