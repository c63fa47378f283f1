#!/usr/bin/env bash
# EXIST's overhead table: a real server under its own load tool, four variants in the same run:
#   none      no tracing;
#   perf      `perf record -a -F 3999 -g` for the whole run (EXIST's sampling baseline);
#   bpftrace  bpftrace counting every `raw_syscalls:sys_enter` per process for the whole run
#             (EXIST's eBPF baseline);
#   exist     one `weft exist capture --every EVERY --rounds …` process: a PERIOD window of
#             uprobes on FUNCS in the server every EVERY seconds (duty cycle PERIOD/EVERY; the
#             first window half an interval into the run), nothing attached in between, within
#             BUDGET bytes of capture buffers; each window's spans written to a file.
# Servers (SERVER=):
#   nginx        Debian's nginx, one worker, under `ab -k -c CLIENTS` (4 KiB page); exist traces
#                the worker.
#   redis        Debian's redis-server (no persistence) under `redis-benchmark -c CLIENTS -l`
#                (SET and GET in turns, 100k random keys, 64-byte values); exist traces it.
#   archipelago  the workspace's example service (four tiers as processes) under its own
#                closed-loop clients (`archipelago run`); exist traces the mapper tier.
#
# Columns of the table (medians over RUNS runs of SECS seconds; variants alternate within each
# repetition, in rotating order, so the machine's drift hits them alike):
#   req/s          the load tool's throughput (nginx: ab; redis: commands the server processed
#                  per second, from INFO; archipelago: its clients' ops/s);
#   server CPU     the server's processes' utime+stime over the load, per request;
#   tracer CPU     the tracer process's whole CPU from its start to its exit (perf's and
#                  bpftrace's start-up and finishing; every weft window, its set-up and release,
#                  weaving and writing its spans), per request of the run;
#   overhead       (server CPU + tracer CPU) per request against `none`'s server CPU per request;
#   throughput     req/s against `none`;
#   × perf, × bpftrace   that baseline's overhead divided by this row's (how many times less);
#   peak RSS       the tracer process's peak resident memory (GNU time);
#   buffers        exist: the largest capture's peak held bytes (kernel rings + kept records) and
#                  its granted per-core buffers (never above BUDGET).
#
#   sudo SERVER=nginx RUNS=5 SECS=20 PERIOD=1s EVERY=10 WEFT=target/release/weft scripts/exist-overhead.sh
#   MODE=windows (nginx, redis): the exist variant alone, its windows' effect measured inside
#              each run against the seconds around them (see the MODE=windows block below)
#   WEFT       the weft binary (default: $CARGO_TARGET_DIR/debug/weft, built if missing)
#   ARCHIPELAGO  the archipelago binary (default: the debug build next to WEFT's profile)
#   FUNCS      functions to probe (globs over the symbol table's names, comma-separated; a
#              default per server; Rust's are mangled: archipelago's are `*11archipelago6mapper6Mapper*`)
# Needs root (perf, bpftrace, uprobes), nginx + apache2-utils, redis-server + redis-tools,
# linux-perf, bpftrace, GNU time.
set -euo pipefail
cd "$(dirname "$0")/.."
server=${SERVER:-nginx}; runs=${RUNS:-5}; secs=${SECS:-20}; clients=${CLIENTS:-8}
period=${PERIOD:-1s}; every=${EVERY:-10}; budget=${BUDGET:-64MiB}
target=${CARGO_TARGET_DIR:-target}
weft=${WEFT:-$target/debug/weft}
case $server in
  nginx) need=(nginx ab); funcs=${FUNCS:-ngx_http_handler,ngx_http_core_run_phases,ngx_http_send_header,ngx_http_output_filter,ngx_http_finalize_request} ;;
  redis) need=(redis-server redis-benchmark redis-cli); funcs=${FUNCS:-processCommand,call,addReply,lookupKeyRead,setCommand} ;;
  archipelago) need=(); funcs=${FUNCS:-*11archipelago6mapper6Mapper*} ;;
  *) echo "SERVER=$server: give nginx, redis or archipelago" >&2; exit 2 ;;
esac
for tool in "${need[@]}" perf bpftrace /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "$tool is missing" >&2; exit 2; }
done
[ -x "$weft" ] || cargo build -q -p weft
if [ "$server" = archipelago ]; then
  arch=${ARCHIPELAGO:-$target/debug/archipelago}
  [ -x "$arch" ] || cargo build -q -p archipelago
fi
work=$(mktemp -d /tmp/exist-overhead.XXXXXX)
chmod 755 "$work"   # nginx's worker runs as an unprivileged user
hz=$(getconf CLK_TCK)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
srv=""
cleanup() { [ -n "$srv" ] && { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; }; rm -rf "$work"; }
trap cleanup EXIT

cpu_of() { awk -v hz="$hz" '{sub(/.*\) /,""); split($0,f," "); printf "%.4f", (f[12]+f[13])/hz}' "/proc/$1/stat"; }
sum_cpu() { local t=0 p; for p in "$@"; do t=$(awk -v a="$t" -v b="$(cpu_of "$p")" 'BEGIN{print a+b}'); done; echo "$t"; }
field() { awk -v k="$1" -F: '$1==k {gsub(/^ +| \[.*$/,"",$2); print $2}'; }

# The server, up for the whole script (archipelago: started by each run), and `measure`:
# the load for $secs seconds -> "requests req/s server_cpu_seconds".
case $server in
  nginx)
    mkdir -p "$work/html" "$work/logs"; chmod 755 "$work/html"
    head -c 3072 /dev/urandom | base64 > "$work/html/index.html"; chmod 644 "$work/html/index.html"
    cat > "$work/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $work/logs/error.log;
pid $work/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  server { listen 127.0.0.1:$port; root $work/html; location = /weft-status { stub_status; } }
}
EOF
    nginx -p "$work" -c "$work/nginx.conf" & srv=$!
    for _ in $(seq 100); do worker=$(pgrep -P "$srv" || true); [ -n "$worker" ] && break; sleep 0.05; done
    [ -n "$worker" ] || { echo "nginx did not start: $(cat "$work/logs/error.log")" >&2; exit 1; }
    version="nginx $(nginx -v 2>&1 | sed 's/.*\///') under ab -k -c $clients"
    target_pid() { echo "$worker"; }
    poll_args() { echo "nginx http://127.0.0.1:$port/weft-status $srv,$worker"; }
    measure() {
      local c0 c1 out
      c0=$(sum_cpu "$srv" "$worker")
      out=$(ab -q -k -c "$clients" -t "$secs" -n 100000000 "http://127.0.0.1:$port/index.html" 2>&1)
      c1=$(sum_cpu "$srv" "$worker")
      if echo "$out" | grep -q "Non-2xx responses"; then echo "nginx answered errors: $out" >&2; exit 1; fi
      echo "$(echo "$out" | field "Complete requests") $(echo "$out" | field "Requests per second") $(awk -v a="$c0" -v b="$c1" 'BEGIN{print b-a}')"
    } ;;
  redis)
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
      --logfile "$work/redis.log" & srv=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break; sleep 0.05; done
    version="redis $(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/') under redis-benchmark -c $clients (SET/GET)"
    target_pid() { echo "$srv"; }
    poll_args() { echo "redis 127.0.0.1:$port $srv"; }
    commands() { redis-cli -p "$port" info stats | tr -d '\r' | awk -F: '$1=="total_commands_processed"{print $2}'; }
    measure() {
      local c0 c1 n0 n1 t0 t1
      c0=$(cpu_of "$srv"); n0=$(commands); t0=$(date +%s.%N)
      timeout -s INT "$secs" redis-benchmark -p "$port" -c "$clients" -n 100000 -t set,get -r 100000 -d 64 -l -q \
        > /dev/null 2>&1 || true
      t1=$(date +%s.%N); n1=$(commands); c1=$(cpu_of "$srv")
      awk -v a="$n0" -v b="$n1" -v s="$t0" -v e="$t1" -v c0="$c0" -v c1="$c1" \
        'BEGIN{printf "%d %.2f %.4f\n", b-a, (b-a)/(e-s), c1-c0}'
    } ;;
  archipelago)
    version="archipelago ($arch) under its closed-loop clients, $clients"
    # The mapper tier of the run that is starting.
    target_pid() {
      local run="" p
      for _ in $(seq 600); do
        run=$(cat "$work/run.pid" 2>/dev/null || true)
        if [ -n "$run" ]; then
          for p in $(pgrep -P "$run" || true); do
            tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q "^[^ ]* mapper " && { echo "$p"; return; }
          done
        fi
        sleep 0.05
      done
    }
    measure() {
      local out
      rm -rf "$work/data"
      "$arch" run --dir "$work/data" --seconds "$secs" --clients "$clients" > "$work/run.out" 2>&1 &
      echo $! > "$work/run.pid"
      wait "$(cat "$work/run.pid")" || { echo "archipelago failed: $(cat "$work/run.out")" >&2; exit 1; }
      rm -f "$work/run.pid"
      out=$(tail -1 "$work/run.out")
      echo "$out" | awk '{for(i=1;i<NF;i++){if($i=="ops")n=$(i+1); if($i=="ops/s")r=$(i+1); if($i=="tier_cpu_us/op")c=$(i+1)}}
        END{printf "%d %s %.4f\n", n, r, c*n/1e6}'
    } ;;
esac

# A tracer under GNU time (its CPU and peak RSS go to $work/time): "$@" after $1 seconds.
start_tracer() {
  local delay=$1; shift
  ( sleep "$delay"; exec /usr/bin/time -f "%U %S %M" -o "$work/time" "$@" > /dev/null 2> "$work/tracer.log" ) &
  tp=$!
}
# Stops the tracer $tp (SIGINT to the program under time) and waits for it; sets `tracer` to
# "cpu_seconds peak_rss_bytes".
stop_tracer() {
  local child
  child=$(pgrep -P "$tp" || true)
  if [ -n "$child" ] && [ "$(cat "/proc/$tp/comm" 2>/dev/null)" = time ]; then kill -INT $child; else kill "$tp" 2>/dev/null || true; fi
  wait "$tp" 2>/dev/null || true
  if [ -s "$work/time" ]; then tracer=$(awk 'END{printf "%.4f %d\n", $1+$2, $3*1024}' "$work/time"); else tracer="0 0"; fi
}

# `weft exist capture --every` on the target, under GNU time, after $1 seconds; sets `tp`.
start_exist() {
  rm -f "$work"/exist*.pb
  ( sleep "$1"; pid=$(target_pid)
    exec /usr/bin/time -f "%U %S %M" -o "$work/time" "$weft" exist capture --pid "$pid" --period "$period" \
      --every "$every" --rounds 1000000 --functions "$funcs" --budget "$budget" --out "$work/exist.pb" > /dev/null \
      2> "$work/exist.log" ) & tp=$!
}

run() { # variant -> "req/s server_us/req tracer_us/req peak_rss buffers_peak buffers_granted"
  local v=$1 tp="" tracer="0 0" n rps c half
  rm -f "$work/time"
  half=$(awk -v e="$every" 'BEGIN{print e/2}')
  case $v in
    perf) start_tracer 0 perf record -q -a -F 3999 -g -o "$work/perf.data"; sleep 1 ;;
    bpftrace) start_tracer 0 bpftrace -e 'tracepoint:raw_syscalls:sys_enter { @[pid] = count(); }' -o /dev/null; sleep 2 ;;
    exist) start_exist "$half" ;;
  esac
  read -r n rps c < <(measure)
  if [ -n "$tp" ]; then stop_tracer; fi
  local bufs="- -"
  if [ "$v" = exist ]; then
    bufs=$(awk '/^weft exist: series:/{for(i=1;i<NF;i++){if($i=="buffers")p=$(i+1); if($i=="of")g=$(i+1)}} END{print (p==""?"-":p), (g==""?"-":g)}' "$work/exist.log")
    grep -E "^weft exist: (round|CPU|series|WARNING)|^[Ee]rror" "$work/exist.log" | sed 's/^/    /' >&2 || true
  fi
  rm -f "$work/perf.data" "$work"/exist*.pb
  read -r tcpu rss <<< "$tracer"
  awk -v n="$n" -v r="$rps" -v c="$c" -v t="$tcpu" -v m="$rss" -v b="$bufs" \
    'BEGIN{printf "%s %.3f %.3f %d %s\n", r, c*1e6/n, t*1e6/n, m, b}'
}

# MODE=windows: only the exist variant, with the server's request counter and CPU sampled every
# 50 ms; each window's effect is measured against the seconds around it in the same run, and
# the same estimate at control points halfway between windows gives its noise
# (scripts/exist-windows.py says how).
if [ "${MODE:-table}" = windows ]; then
  [ "$server" != archipelago ] || { echo "MODE=windows: nginx or redis" >&2; exit 2; }
  echo "$version; $runs runs × ${secs}s each; exist: $period every ${every}s, uprobes on $funcs, budget $budget; weft: $weft; within-run windows"
  echo
  for i in $(seq "$runs"); do
    rm -f "$work/time" "$work/samples"
    # shellcheck disable=SC2046 # poll_args is three words
    python3 scripts/exist-windows.py sample $(poll_args) 0.05 "$work/samples" & poller=$!
    tp=""; start_exist 5
    read -r n rps c < <(measure)
    tracer="0 0"; stop_tracer
    kill "$poller"; wait "$poller" 2>/dev/null || true
    echo "run $i: $n requests, $rps req/s; $(python3 scripts/exist-windows.py analyse "$work/samples" "$work/exist.log" "${tracer%% *}")"
  done
  exit 0
fi

declare -A thr cpu tcpu rss bpeak bgrant
order=(none perf bpftrace exist)
for i in $(seq "$runs"); do
  r=$(( (i - 1) % ${#order[@]} ))
  for v in "${order[@]:r}" "${order[@]:0:r}"; do
    read -r t c tc m bp bg < <(run "$v")
    echo "run $i $v: $t req/s, server $c µs/req, tracer $tc µs/req, tracer peak RSS $m B, buffers $bp of $bg B" >&2
    thr[$v]+="$t "; cpu[$v]+="$c "; tcpu[$v]+="$tc "; rss[$v]+="$m "
    if [ "$v" = exist ]; then bpeak[$v]+="$bp "; bgrant[$v]+="$bg "; fi
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$0} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
maxof() { tr ' ' '\n' | grep -E '^[0-9]+$' | sort -g | tail -1; }
mib() { awk -v b="$1" 'BEGIN{if(b=="") print "–"; else printf "%.1f MiB", b/1048576}'; }
base_t=$(echo "${thr[none]}" | median); base_c=$(echo "${cpu[none]}" | median)
declare -A ovh
for v in "${order[@]}"; do
  ovh[$v]=$(awk -v c="$(echo "${cpu[$v]}" | median)" -v t="$(echo "${tcpu[$v]}" | median)" -v b="$base_c" \
    'BEGIN{printf "%.4f", (c+t)/b-1}')
done
echo
echo "$version; $runs runs × ${secs}s each; exist: $period every ${every}s, uprobes on $funcs, budget $budget; weft: $weft"
echo
echo "| variant | req/s | server CPU µs/req | tracer CPU µs/req | overhead | throughput | × perf | × bpftrace | tracer peak RSS | capture buffers (peak / granted) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for v in "${order[@]}"; do
  t=$(echo "${thr[$v]}" | median); c=$(echo "${cpu[$v]}" | median); tc=$(echo "${tcpu[$v]}" | median)
  case $v in
    none) name=none ;;
    perf) name='`perf record -a -F 3999 -g`' ;;
    bpftrace) name='bpftrace on `raw_syscalls:sys_enter`' ;;
    exist) name="\`weft exist capture\`, $period every ${every}s" ;;
  esac
  ratio() { # baseline's overhead / this row's
    [ "$v" = exist ] || { echo "–"; return; }
    awk -v b="${ovh[$1]}" -v o="${ovh[exist]}" 'BEGIN{ if (o<=0) print "∞"; else printf "%.1f×", b/o }'
  }
  if [ "$v" = none ]; then pct="–"; tcs="–"; rs="–"
  else
    pct=$(awk -v o="${ovh[$v]}" 'BEGIN{printf "%+.2f %%", o*100}'); tcs=$tc
    rs=$(mib "$(echo "${rss[$v]}" | maxof)")
  fi
  bufs="–"
  if [ "$v" = exist ]; then bufs="$(mib "$(echo "${bpeak[$v]}" | maxof)") / $(mib "$(echo "${bgrant[$v]}" | maxof)")"; fi
  printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" "$name" "$t" "$c" "$tcs" "$pct" \
    "$(awk -v a="$t" -v b="$base_t" 'BEGIN{printf "%+.1f %%", (a/b-1)*100}')" "$(ratio perf)" "$(ratio bpftrace)" "$rs" "$bufs"
done
