#!/usr/bin/env python3
"""EXIST's overhead measured inside one run (`MODE=windows` of scripts/exist-overhead.sh).

Three parts:

  sample KIND ADDR PIDS INTERVAL OUT
      Until killed, every INTERVAL seconds appends "unix_ns requests server_cpu_s" to OUT:
      the server's request counter (KIND redis: INFO's total_commands_processed on ADDR
      host:port, over one connection kept open; nginx: stub_status' requests at ADDR, a URL,
      one request per sample) and the utime+stime of the comma-separated PIDS.

  analyse SAMPLES EXIST_LOG TRACER_CPU_S [PRE POST]
      Lines the samples up with the windows `weft exist capture --every` logged ("round N:
      window S..E ns"). For each window, the affected span is [S - PRE, E + POST] (default
      0.5 s and 1 s: the window, its set-up, release, weaving and writing, which take tens of
      ms), its baseline the rates of the 2 s before and the 2 s after it (with a window every
      10 s neither the span nor its baseline reaches another window or control span). Lost requests = baseline rate x span -
      requests served in it (as service time: divided by the run's rate); extra server CPU =
      CPU in the span - baseline CPU per request x requests served in it. The same is computed
      for control spans placed halfway between windows, where nothing is traced: their spread
      is the estimator's noise (± is one standard error of the mean over the windows). Prints
      the cost per window, and what it averages to with one window every 10 s and every 100 s
      (the tracer's CPU counted per window, its start-up included).

  selftest
      The analysis on a synthetic run whose effect is known (run by weft's tests).
"""

import bisect
import os
import re
import socket
import statistics
import sys
import time
import urllib.request

HZ = os.sysconf("SC_CLK_TCK")


def server_cpu(pids):
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / HZ
        except (OSError, IndexError, ValueError):
            pass
    return total


def sample(kind, addr, pids, interval, out):
    pids = [p for p in pids.split(",") if p]
    if kind == "redis":
        host, port = addr.rsplit(":", 1)
        conn = socket.create_connection((host, int(port)))
        buf = conn.makefile("rb")

        def requests():
            conn.sendall(b"INFO stats\r\n")
            header = buf.readline()  # $<len>
            body = buf.read(int(header[1:]) + 2).decode()
            m = re.search(r"total_commands_processed:(\d+)", body)
            return int(m.group(1)) if m else 0
    else:
        def requests():
            with urllib.request.urlopen(addr, timeout=2) as r:
                lines = r.read().decode().splitlines()
            return int(lines[2].split()[2])  # " accepts handled requests"
    with open(out, "w") as f:
        while True:
            t = time.time_ns()
            f.write(f"{t} {requests()} {server_cpu(pids):.4f}\n")
            f.flush()
            time.sleep(max(0.0, interval - (time.time_ns() - t) / 1e9))


def analyse(samples_path, log_path, tracer_cpu, pre=0.5, post=1.0, base=2.0):
    samples = []
    with open(samples_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                samples.append((int(parts[0]) / 1e9, int(parts[1]), float(parts[2])))
    # The load's span: from the first sample before the counter moves to the last that moves it.
    moving = [i for i, (a, b) in enumerate(zip(samples, samples[1:])) if b[1] > a[1]]
    if moving:
        samples = samples[moving[0] : moving[-1] + 2]
    windows = []
    with open(log_path) as f:
        for line in f:
            m = re.search(r"round \d+: window (\d+)\.\.(\d+) ns", line)
            if m:
                windows.append((int(m.group(1)) / 1e9, int(m.group(2)) / 1e9))
    if len(samples) < 10 or not windows:
        print(f"error=too few samples ({len(samples)}) or windows ({len(windows)})")
        return None

    times = [t for t, _, _ in samples]

    def at(t):
        """(requests, server CPU) at time t, interpolated; None outside the samples."""
        i = bisect.bisect_right(times, t)
        if i == 0 or i == len(samples) and t > times[-1]:
            return None
        (t0, r0, c0), (t1, r1, c1) = samples[i - 1], samples[min(i, len(samples) - 1)]
        f = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
        return r0 + (r1 - r0) * f, c0 + (c1 - c0) * f

    def counts(a, b):
        """Requests and server CPU between times a and b; None outside the samples."""
        pa, pb = at(a), at(b)
        if pa is None or pb is None:
            return None
        return pb[0] - pa[0], pb[1] - pa[1]

    def effect(s, e):
        """(lost requests, extra server CPU s, requests served) of the span around [s, e]."""
        a, b = s - pre, e + post
        before, after, inside = counts(a - base, a), counts(b, b + base), counts(a, b)
        if None in (before, after, inside):
            return None
        rate = (before[0] + after[0]) / (2 * base)
        cpu_per_req = (before[1] + after[1]) / max(before[0] + after[0], 1)
        return rate * (b - a) - inside[0], inside[1] - cpu_per_req * inside[0], inside[0]

    real = [x for x in (effect(s, e) for s, e in windows) if x]
    gap = statistics.median(b[0] - a[0] for a, b in zip(windows, windows[1:])) if len(windows) > 1 else 10.0
    control = [x for x in (effect(s + gap / 2, e + gap / 2) for s, e in windows) if x]
    if not real or len(control) < 2:
        print(f"error=too few measurable windows ({len(real)}) or control spans ({len(control)})")
        return None
    seconds = samples[-1][0] - samples[0][0]
    rate = (samples[-1][1] - samples[0][1]) / seconds  # requests per second
    cpu_rate = (samples[-1][2] - samples[0][2]) / seconds  # server CPU seconds per second
    mean = statistics.mean
    # Per window: service time lost (lost requests at the run's rate), extra server CPU, and the
    # tracer's CPU (its whole process, start-up included, divided among the windows).
    lost_s = [x[0] / rate for x in real]
    extra_s = [x[1] for x in real]
    tracer_s = tracer_cpu / len(windows)
    c_lost_s = [x[0] / rate for x in control]
    c_extra_s = [x[1] for x in control]

    def pct_at(every, lost, extra):
        """Average overhead over a run with one window every `every` seconds, in %."""
        return 100 * lost / every, 100 * (extra + tracer_s) / (cpu_rate * every)

    figures = {"windows": len(real), "lost_s": mean(lost_s), "control_lost_s": mean(c_lost_s),
               "control_lost_sd": statistics.stdev(c_lost_s), "extra_s": mean(extra_s)}
    print(
        f"{seconds:.0f} s, {rate:.0f} req/s, server {cpu_rate:.2f} CPU; {len(real)} windows: "
        f"service lost {1e3 * mean(lost_s):.1f} ms per window (control spans: {1e3 * mean(c_lost_s):+.1f} "
        f"± {1e3 * statistics.stdev(c_lost_s):.1f} ms), "
        f"extra server CPU {1e3 * mean(extra_s):.1f} ms (control: {1e3 * mean(c_extra_s):+.1f} "
        f"± {1e3 * statistics.stdev(c_extra_s):.1f} ms), tracer CPU {1e3 * tracer_s:.1f} ms"
    )
    for every in (10, 100):
        lost, cpu = pct_at(every, mean(lost_s), mean(extra_s))
        n = len(real) ** 0.5
        noise_lost = 100 * statistics.stdev(c_lost_s) / n / every
        noise_cpu = 100 * statistics.stdev(c_extra_s) / n / (cpu_rate * every)
        print(f"  one window every {every} s: throughput {lost:.3f} % ± {noise_lost:.3f}, CPU {cpu:.3f} % ± {noise_cpu:.3f}")
    return figures


def selftest():
    """The estimator on a synthetic run with a known effect: 100 ms windows every 10 s that
    serve 40 % of the requests and cost 30 % more CPU, 3 % noise per 50 ms sample."""
    import random
    import tempfile

    rng = random.Random(7)
    t0 = 1_800_000_000 * 10**9
    windows = [(t0 + int((5 + 10 * k) * 1e9), t0 + int((5.1 + 10 * k) * 1e9)) for k in range(12)]
    with tempfile.TemporaryDirectory() as d:
        samples, log = os.path.join(d, "samples"), os.path.join(d, "exist.log")
        req, cpu = 0, 0.0
        with open(samples, "w") as f:
            for i in range(2500):
                t = t0 + i * 50_000_000
                inside = any(a <= t < b for a, b in windows)
                req += int(80000 * 0.05 * (0.4 if inside else 1.0) * rng.gauss(1, 0.03))
                cpu += 0.05 * 0.75 * (1.3 if inside else 1.0)
                f.write(f"{t} {req} {cpu:.4f}\n")
        with open(log, "w") as f:
            for n, (a, b) in enumerate(windows):
                f.write(f"weft exist: round {n + 1}: window {a}..{b} ns (Unix time)\n")
        got = analyse(samples, log, 0.6)
    assert got and got["windows"] == 12, got
    assert abs(got["lost_s"] - 0.060) < 0.010, got  # 60 % of 100 ms lost
    assert abs(got["control_lost_s"]) < 3 * got["control_lost_sd"], got  # controls: no effect
    assert 0.05 < got["extra_s"] < 0.09, got  # 97.5 ms of CPU in the window for 40 % of its requests: 67.5 ms extra
    print("selftest: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["selftest"]:
        selftest()
    elif len(sys.argv) >= 7 and sys.argv[1] == "sample":
        sample(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6])
    elif len(sys.argv) >= 5 and sys.argv[1] == "analyse":
        extra = [float(x) for x in sys.argv[5:7]]
        analyse(sys.argv[2], sys.argv[3], float(sys.argv[4]), *extra)
    else:
        sys.exit(__doc__)
