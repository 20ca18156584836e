#!/usr/bin/env bash
# Server user-space memory per idle connection, WebSocket against echo:
# RSS of `throng server` (one process, one worker) holding N idle
# connections minus its RSS holding BASE, divided by the difference; once
# in --mode websocket (each connection upgraded, 101 read) and once in
# --mode echo (each connection past one echoed message). The connections
# are held by bench/ws_hold.py (Python's socket module, no WebSocket
# library needed). One process holds at most its fd limit, so N defaults
# to 10,000.
# Usage: bench/ws-memory.sh [N] [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000}
base=${2:-1000}
cargo build --release --quiet
bin=target/release/throng
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# RSS (kB) of a server in mode $1 holding $2 idle connections.
rss_holding() {
  local mode=$1 count=$2 flag=
  [ "$mode" = websocket ] && flag=--websocket
  "$bin" server --mode "$mode" --listen 127.0.0.1:0 --workers 1 --processes 1 \
    >"$work/server.$mode.$count" 2>&1 &
  local srv=$!
  pids+=("$srv")
  until grep -qs '^listen backlog' "$work/server.$mode.$count"; do sleep 0.05; done
  local port
  port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\) (tcp)$/\1/p' "$work/server.$mode.$count")
  local fifo="$work/hold.$mode.$count"
  mkfifo "$fifo" "$fifo.in"
  python3 bench/ws_hold.py 127.0.0.1 "$port" "$count" $flag <"$fifo.in" >"$fifo" &
  local holder=$!
  pids+=("$holder")
  exec 7>"$fifo.in"
  read -r _ <"$fifo"
  awk '/^VmRSS:/ {print $2}' "/proc/$srv/status"
  exec 7>&-
  wait "$holder" || true
  kill -TERM "$srv"
  wait "$srv" || true
}

for mode in echo websocket; do
  a=$(rss_holding "$mode" "$base")
  b=$(rss_holding "$mode" "$n")
  echo "$mode: server RSS ${a} kB holding $base, ${b} kB holding $n;" \
    "user-space bytes per idle connection: $(( (b - a) * 1024 / (n - base) ))"
done
