#!/usr/bin/env bash
# Query-rate accuracy: does throng send the rate asked for, and what
# latency does it see, against `throng server` on the same host?
# Server and client are pinned to one core each (server core 0, client
# core 1) so neither steals the other's time. For each connection count the
# script runs the target rates, then steps the rate up to find the highest
# at which >= 99% of the target is still achieved, and the highest at which
# that holds with a response-time p99 of at most 1 ms.
# Last, over 2,000 connections of 64-byte echo on the same server: the
# floor client's window-1 rate (bench/baseline/client.c, a closed loop on
# raw epoll) against throng's highest paced rate with response p99 <= 1 ms
# (steps of 5% of the floor's rate, from 100% down), and the ratio (issue
# 31 point 3); beside it the floor's own paced client (client.c's paced
# mode: raw epoll, a timerfd, Poisson arrivals as throng's default)
# searched the same way, which tells what a paced client reaches here.
# Usage: bench/traffic-accuracy.sh [SECONDS]   ONLY=paced: that part alone.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
cargo build --release --quiet
bin=target/release/throng
work=$(mktemp -d)
srv= esrv=
trap 'kill $srv $esrv 2>/dev/null || true; rm -rf "$work"' EXIT

# paced_vs_floor: the last part (see the top).
paced_vs_floor() {
  gcc -O2 -o "$work/floor" bench/baseline/client.c -lm
  taskset -c 0 "$bin" server --listen 127.0.0.1:0 --workers 1 --mode echo >"$work/echo.out" 2>&1 &
  esrv=$!
  until grep -q '^listen backlog' "$work/echo.out"; do sleep 0.05; done
  local port
  port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\) (tcp)$/\1/p' "$work/echo.out")
  local floor
  floor=$(taskset -c 1 "$work/floor" load 127.0.0.1 "$port" 2000 1 "$secs" echo 64 |
    sed -n 's/.*rate \([0-9]*\)$/\1/p')
  echo "floor client, 2000 connections, window 1: $floor/s"
  printf "%6s %9s %8s %8s %9s %8s\n" conns rate achieved p50_us p99_us cpu/s
  # The highest passing step, searched from the floor's rate down: the
  # tail is not monotonic in the rate. On this VM a paced run at a tenth
  # of the floor's rate had p99 6-11 ms and one at half of it 0.4 ms: at
  # low rates both sides sleep between queries, and a core woken from
  # idle answers late (send lag p99 1.5 ms at 6,000/s against 65 us at
  # 30,000/s, against the floor server as well as throng's). The search
  # upward used to end there. The first step down that passes twice in a
  # row is the figure: a p99 near 1 ms passes or fails by chance, and a
  # stall of the machine inside a run fails a step (the next one down
  # then decides).
  local best fbest
  best=$(search run_throng "$port" "$floor")
  fbest=$(search run_floor "$port" "$floor")
  awk -v b="$best" -v p="$fbest" -v f="$floor" 'BEGIN {
    printf "over 2000 connections, p99 <= 1 ms: throng paced up to %d/s, %.2fx the floor'"'"'s window-1 %d/s;", b, b / f, f
    printf " the floor paced up to %d/s (%.2fx); throng / floor paced %.2f\n", p, p / f, p ? b / p : 0 }'
}

# run_throng PORT RATE / run_floor PORT RATE: one paced run over 2,000
# connections, as a line of `run`'s columns.
run_throng() { run 2000 "$2" "127.0.0.1:$1" --proto echo --size 64; }
run_floor() {
  local out cpu
  out=$(/usr/bin/time -f "%U %S" -o "$work/ftime" taskset -c 1 "$work/floor" paced 127.0.0.1 "$1" 2000 "$2" "$secs" 64)
  cpu=$(awk '{print $1 + $2}' "$work/ftime")
  awk -v r="$2" -v cpu="$cpu" -v secs="$secs" '{for (i = 1; i < NF; i++) v[$i] = $(i + 1)
    printf "%6s %9.0f %7.2f%% %8s %9s %8.2f  (floor paced)\n", 2000, r, 100 * v["rate"] / r, v["p50_us"], v["p99_us"], cpu / secs}' <<<"$out"
}

# search RUNNER PORT FLOOR: the highest step (percent of FLOOR, from 100
# down) whose p99 is at most 1 ms twice in a row; the runs go to stderr.
search() {
  local pct line p99 rate
  for pct in 100 95 90 85 80 75 70 65 60 55 50 45 40 35 30 25 20 15 10; do
    rate=$(($3 * pct / 100))
    line=$("$1" "$2" "$rate")
    echo "$line" >&2
    p99=$(awk '{print $5}' <<<"$line")
    if [ "$p99" -le 1000 ]; then
      line=$("$1" "$2" "$rate")
      echo "$line  (again)" >&2
      p99=$(awk '{print $5}' <<<"$line")
      if [ "$p99" -le 1000 ]; then
        echo "$rate"
        return
      fi
    fi
  done
  echo 0
}
taskset -c 0 "$bin" server --listen 127.0.0.1:0 --workers 1 >"$work/server.out" 2>&1 &
srv=$!
until grep -q '^listen backlog' "$work/server.out"; do sleep 0.05; done
target=$(sed -n 's/^listening on \(127\.0\.0\.1:[0-9]*\) (tcp)$/\1/p' "$work/server.out")

# run CONNS RATE [TARGET FLAGS...] -> one line: conns rate achieved% p50
# p99 client-cpu-s
run() {
  local json="$work/r.json" c=$1 r=$2
  shift 2
  local to=${1:-$target}
  shift || true
  /usr/bin/time -f "%U %S" -o "$work/time" taskset -c 1 "$bin" client "$to" -w 1 \
    -c "$c" -r "$r" -T "${secs}s" -q --json "$json" "$@" >/dev/null || true
  read -r user sys <"$work/time"
  python3 - "$json" "$c" "$r" "$user" "$sys" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
q, l = r["queries"], r["latency"]["response_time_us"]
pct = 100 * q["rate_achieved"] / q["rate_target"]
cpu = float(sys.argv[4]) + float(sys.argv[5])
print(f"{sys.argv[2]:>6} {float(sys.argv[3]):>9.0f} {pct:7.2f}% {l['p50']:>8} {l['p99']:>9} {cpu / q['seconds']:>8.2f}")
PY
}

echo "machine: $(nproc) cores, $(uname -r); $secs s per run; server core 0, client core 1"
if [ "${ONLY:-}" = paced ]; then
  paced_vs_floor
  exit 0
fi
printf "%6s %9s %8s %8s %9s %8s\n" conns rate achieved p50_us p99_us cpu/s
run 5 300000
run 2000 200000
for conns in 5 2000; do
  best=0
  strict=0
  for rate in 50000 100000 150000 200000 250000 300000 350000 400000 450000 500000; do
    line=$(run "$conns" "$rate")
    echo "$line"
    pct=$(awk '{print $3+0}' <<<"$line")
    p99=$(awk '{print $5}' <<<"$line")
    if awk -v p="$pct" 'BEGIN {exit !(p >= 99)}'; then best=$rate; else break; fi
    if [ "$p99" -le 1000 ] && [ "$strict" = "$((rate - 50000))" ]; then strict=$rate; fi
  done
  echo "over $conns connections: >= 99% achieved up to $best/s; with p99 <= 1 ms too, up to $strict/s"
done
paced_vs_floor
