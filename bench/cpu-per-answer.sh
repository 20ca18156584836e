#!/usr/bin/env bash
# Client CPU per DNS answer at a fixed offered rate: throng (exact pacing,
# the default, and --slack 1ms), flame (DNS-OARC's flamethrower, sends in
# bursts per timer tick) and dnsperf (Debian's), each against the same
# unbound (local-data, no recursion, one thread) with the same query file.
#
#   udp  RATE queries/s over 256 UDP sockets (dnsperf -c 256; flame -c 256
#        with bursts of 10 per generator timed to make RATE, and flame's
#        defaults, 10 generators with -Q capping their bursts)
#   tcp  RATE queries/s over CONNS TCP connections for throng, and over
#        256 as dnsperf (it opens 256 at most; flame's TCP opens a
#        connection per burst, so it is left out of the TCP rows). Once
#        more than half its TCP slots (incoming-num-tcp) are taken, unbound
#        cuts its idle timeout to 200 ms and closes connections nothing
#        was asked on for that long; throng then opens replacements, and a
#        row of 10,000 connections measured mostly connects (28,000-95,000
#        in 10 s). So unbound gets twice CONNS slots, as many as its fds
#        allow (its outgoing sockets, unused here, cut to a few), and CONNS
#        is cut to half of them when it must be. Each throng run's
#        connections attempted are on stderr: CONNS when none was closed.
#
# CPU is user+sys of the client's whole process tree (/usr/bin/time,
# which counts the children it waited for), divided by the answers the
# client counted. Each row is the median of REPEAT runs, the runs of the
# tools alternated (the machine's other load then weighs on each alike);
# the range is the lowest and highest of the runs. Latency: p50/p99 of the
# response time (throng: from the due time); flame and dnsperf print only
# a mean, shown as p50 "~mean".
#
# THRONG_BASE=<another throng build> adds its default UDP row
# ("throng-base"), run right after throng's in each round, and the ratio
# of the two per round: this build against an earlier one, in the same
# invocation (the machine's hour weighs on both alike).
#
# flame: $FLAME, else ~/.cache/throng-peers/flamethrower-0.12/build/flame,
# else ../shared/peers/build-flame.sh builds it; without it the table says
# so and compares with dnsperf alone.
# Usage: bench/cpu-per-answer.sh [SECONDS] [RATE] [CONNS] [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rate=${2:-20000}
conns=${3:-10000}
repeat=${4:-3}
sockets=256
for p in unbound dnsperf /usr/bin/time; do
  command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] ||
    { echo "$p is needed: apt-get install ${p##*/}" >&2; exit 1; }
done
flame=${FLAME:-$HOME/.cache/throng-peers/flamethrower-0.12/build/flame}
if [ ! -x "$flame" ]; then
  flame=
  if [ -x ../shared/peers/build-flame.sh ]; then
    flame=$(../shared/peers/build-flame.sh 2>/dev/null | tail -1) || flame=
  fi
  [ -x "$flame" ] || { echo "flame not found (set FLAME or see ../shared/peers/build-flame.sh): dnsperf alone" >&2; flame=; }
fi
if [ -z "${THRONG_BIN:-}" ]; then
  cargo build --release --quiet
fi
bin=${THRONG_BIN:-$PWD/target/release/throng}
# 10,000 connections need as many fds on each side: say so when it bites.
fds=$(ulimit -Hn)
ulimit -n "$fds"
slots=$(( 2 * conns + 256 ))
if [ "$slots" -gt $(( fds - 100 )) ]; then
  slots=$(( fds - 100 ))
  if [ "$conns" -gt $(( slots / 2 - 50 )) ]; then
    echo "fd limit $fds: unbound has $slots TCP slots, TCP with $(( slots / 2 - 50 )) connections (at most half the slots) instead of $conns" >&2
    conns=$(( slots / 2 - 50 ))
  fi
fi
work=$(mktemp -d)
unbound_pid=
trap '[ -n "$unbound_pid" ] && kill "$unbound_pid" 2>/dev/null; rm -rf "$work"' EXIT INT TERM

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# shellcheck source=bench/lib.sh
. bench/lib.sh
unbound_conf "$port" "$work" "  incoming-num-tcp: $slots
  tcp-idle-timeout: 120000
  outgoing-range: 32
  outgoing-num-tcp: 1" >"$work/unbound.conf"
taskset -c 0 unbound -d -c "$work/unbound.conf" 2>"$work/unbound.log" &
unbound_pid=$!
until grep -q "start of service" "$work/unbound.log"; do
  kill -0 "$unbound_pid" 2>/dev/null || { cat "$work/unbound.log" >&2; exit 1; }
  sleep 0.05
done
echo "www.example.test A" >"$work/queries"

# Each run prints "answers cpu_s achieved_qps p50_us p99_us lag_p99_us"
# (send lag: throng's alone, "-" for the others).
# (The last line: a failed run's file starts with its exit status.)
cpu() { tail -1 "$work/time" | awk '{ printf "%.3f", $1 + $2 }'; }

throng_run() { # TRANSPORT CONNS [throng flags]
  local transport=$1 c=$2
  shift 2
  # (A run that fails writes no file: the last run's must not stand in.)
  rm -f "$work/t.json"
  /usr/bin/time -o "$work/time" -f '%U %S' taskset -c 1 "${tbin:-$bin}" client "127.0.0.1:$port" \
    --transport "$transport" --proto dns --qnames "$work/queries" -c "$c" -r "$rate" -w 1 \
    -T "${secs}s" --connect-rate 20k -q --json "$work/t.json" "$@" >/dev/null 2>&1 || true
  python3 - "$work/t.json" "$(cpu)" <<'PY'
import json, os, sys
if not os.path.exists(sys.argv[1]):
    print(0, sys.argv[2], 0, "-", "-", "-")
    print("  (the run failed: no result)", file=sys.stderr)
    sys.exit()
r = json.load(open(sys.argv[1]))
q, l = r["queries"], r["latency"]["response_time_us"]
lag = r["latency"].get("send_lag_us") or {}
print(q["answered"], sys.argv[2], f"{q['answered'] / q['seconds']:.0f}", l["p50"], l["p99"], lag.get("p99", "-"))
print(f"  ({r['connections']['attempted']} connections attempted)", file=sys.stderr)
PY
}

flame_run() { # GENERATORS [flame flags]
  local c=$1
  shift
  /usr/bin/time -o "$work/time" -f '%U %S' taskset -c 1 "$flame" 127.0.0.1 -p "$port" -P udp \
    -c "$c" -Q "$rate" -l "$secs" -f "$work/queries" -v 0 -o "$work/flame.json" "$@" \
    >"$work/flame.out" 2>&1 || true
  python3 - "$work/flame.json" "$(cpu)" <<'PY'
import json, sys
# One JSON object per line: a run header, a line per generator and period
# (its answers and their mean), a line per period with the totals so far.
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gens = [r for r in rows if "trafgen_id" in r and r.get("period_r_count")]
total = [r for r in rows if "total_r_count" in r][-1]
n = sum(r["period_r_count"] for r in gens)
mean_ms = sum(r["period_r_count"] * r["period_response_avg_ms"] for r in gens) / max(n, 1)
# flame gives a mean, no percentiles: shown as p50 "~mean".
print(total["total_r_count"], sys.argv[2], total["total_qps_r_avg"], f"~{mean_ms * 1000:.0f}", "-", "-")
PY
}

dnsperf_run() { # MODE
  /usr/bin/time -o "$work/time" -f '%U %S' taskset -c 1 dnsperf -s 127.0.0.1 -p "$port" -m "$1" \
    -d "$work/queries" -c "$sockets" -Q "$rate" -l "$secs" -T 1 >"$work/dnsperf.out" 2>&1 || true
  python3 - "$work/dnsperf.out" "$(cpu)" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
done = int(re.search(r"Queries completed:\s+(\d+)", t).group(1))
qps = float(re.search(r"Queries per second:\s+([\d.]+)", t).group(1))
lat = float(re.search(r"Average Latency \(s\):\s+([\d.]+)", t).group(1))
print(done, sys.argv[2], f"{qps:.0f}", f"~{lat * 1e6:.0f}", "-", "-")
PY
}

# The cases: name and command, alternated within each round.
cases=("udp throng")
if [ -n "${THRONG_BASE:-}" ]; then
  [ -x "$THRONG_BASE" ] || { echo "THRONG_BASE=$THRONG_BASE is not an executable" >&2; exit 1; }
  cases+=("udp throng-base")
fi
cases+=("udp throng-slack1ms")
[ -n "$flame" ] && cases+=("udp flame-c256" "udp flame-c10")
cases+=("udp dnsperf" "tcp throng" "tcp throng-slack1ms" "tcp throng-c256" "tcp throng-c256-slack1ms" "tcp dnsperf")
run_case() {
  case "$1 $2" in
    "udp throng") throng_run udp "$sockets" ;;
    "udp throng-base") tbin=$THRONG_BASE throng_run udp "$sockets" ;;
    "udp throng-slack1ms") throng_run udp "$sockets" --slack 1ms ;;
    # 256 generators (a socket each), each a burst of 10 every 128 ms:
    # 20,000/s from the ticks themselves.
    "udp flame-c256") flame_run "$sockets" -q 10 -d $(( sockets * 10 * 1000 / rate )) ;;
    # flame's defaults: 10 generators, bursts of 10 every 1 ms, -Q caps.
    "udp flame-c10") flame_run 10 ;;
    "udp dnsperf") dnsperf_run udp ;;
    "tcp throng") throng_run tcp "$conns" ;;
    "tcp throng-slack1ms") throng_run tcp "$conns" --slack 1ms ;;
    "tcp throng-c256") throng_run tcp "$sockets" ;;
    "tcp throng-c256-slack1ms") throng_run tcp "$sockets" --slack 1ms ;;
    "tcp dnsperf") dnsperf_run tcp ;;
  esac
}
for ((i = 1; i <= repeat; i++)); do
  for c in "${cases[@]}"; do
    set -- $c
    read -r answers cpu_s qps p50 p99 lag < <(run_case "$1" "$2" 2>>"$work/notes")
    echo "$1 $2 $answers $cpu_s $qps $p50 $p99 $lag" >>"$work/runs"
    echo "round $i: $1 $2: $answers answers, ${cpu_s}s CPU, $qps/s, p50 $p50 p99 $p99 send lag p99 $lag $(tail -1 "$work/notes" 2>/dev/null)" >&2
    : >"$work/notes"
  done
done

echo "machine: $(nproc) cores, $(uname -r); unbound $(unbound -V | head -1 | cut -d' ' -f2) (1 thread, core 0); clients on core 1"
echo "offered $rate/s for $secs s; UDP: $sockets sockets; TCP: throng $conns connections, dnsperf $sockets; median of $repeat (range)"
[ -n "$flame" ] || echo "flame: not available here, dnsperf alone"
python3 - "$work/runs" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    mode, tool, answers, cpu, qps, p50, p99, lag = line.split()
    rows.setdefault((mode, tool), []).append((int(answers), float(cpu), int(qps), p50, p99, lag))
# CPU µs per answer of one run (a run with no answers: infinite).
per = lambda r: r[1] * 1e6 / r[0] if r[0] else float("inf")
print(f"{'mode':<5} {'client':<20} {'CPU us/answer':>14} {'range':>14} {'answers/s':>10} {'p50 us':>8} {'p99 us':>8} {'lag p99':>8}")
for (mode, tool), rs in rows.items():
    each = [per(r) for r in rs]
    med = statistics.median(each)
    mid = sorted(rs, key=per)[len(rs) // 2]
    rng = f"{min(each):.1f}-{max(each):.1f}"
    print(f"{mode:<5} {tool:<20} {med:>14.1f} {rng:>14} {statistics.median(r[2] for r in rs):>10.0f} {mid[3]:>8} {mid[4]:>8} {mid[5]:>8}")
# This build against THRONG_BASE, round by round.
new, base = rows.get(("udp", "throng")), rows.get(("udp", "throng-base"))
if new and base:
    ratios = [per(a) / per(b) if per(b) else float("inf") for a, b in zip(new, base)]
    lags = [f"{a[5]}/{b[5]}" for a, b in zip(new, base)]
    print("udp throng / throng-base, CPU per answer by round:",
          " ".join(f"{x:.3f}" for x in ratios), f"(median {statistics.median(ratios):.3f});",
          "send lag p99 (us) by round:", " ".join(lags))
PY
