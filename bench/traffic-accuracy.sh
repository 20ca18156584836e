#!/usr/bin/env bash
# Query-rate accuracy: does throng send the rate asked for, and what
# latency does it see, against `throng server` on the same host?
# Server and client are pinned to one core each (server core 0, client
# core 1) so neither steals the other's time. For each connection count the
# script runs the target rates, then steps the rate up to find the highest
# at which >= 99% of the target is still achieved, and the highest at which
# that holds with a response-time p99 of at most 1 ms.
# Usage: bench/traffic-accuracy.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
cargo build --release --quiet
bin=target/release/throng
work=$(mktemp -d)
trap 'kill "$srv" 2>/dev/null || true; rm -rf "$work"' EXIT
taskset -c 0 "$bin" server --listen 127.0.0.1:0 --workers 1 >"$work/server.out" 2>&1 &
srv=$!
until grep -q '^listen backlog' "$work/server.out"; do sleep 0.05; done
target=$(sed -n 's/^listening on \(127\.0\.0\.1:[0-9]*\) (tcp)$/\1/p' "$work/server.out")

# run CONNS RATE -> one line: conns rate achieved% p50 p99 client-cpu-s
run() {
  local json="$work/r.json"
  /usr/bin/time -f "%U %S" -o "$work/time" taskset -c 1 "$bin" client "$target" -w 1 \
    -c "$1" -r "$2" -T "${secs}s" -q --json "$json" >/dev/null || true
  read -r user sys <"$work/time"
  python3 - "$json" "$1" "$2" "$user" "$sys" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
q, l = r["queries"], r["latency"]["response_time_us"]
pct = 100 * q["rate_achieved"] / q["rate_target"]
cpu = float(sys.argv[4]) + float(sys.argv[5])
print(f"{sys.argv[2]:>6} {float(sys.argv[3]):>9.0f} {pct:7.2f}% {l['p50']:>8} {l['p99']:>9} {cpu / q['seconds']:>8.2f}")
PY
}

echo "machine: $(nproc) cores, $(uname -r); $secs s per run; server core 0, client core 1"
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
