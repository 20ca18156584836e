#!/usr/bin/env bash
# User-space memory per held client connection: RSS of `throng client`
# holding N connections minus RSS holding a baseline count, divided by the
# difference. Both runs target one `throng server` on loopback, in the same
# invocation. One process may hold at most its fd hard limit (20,000 on the
# development machines), so N defaults to 19,000.
# Usage: bench/client-memory.sh [N] [BASELINE]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-19000}
base=${2:-1000}
cargo build --release --quiet
bin=target/release/throng
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

"$bin" server --listen 127.0.0.1:0 >"$work/server.out" 2>&1 &
pids+=($!)
until grep -q '^listen backlog' "$work/server.out"; do sleep 0.05; done
target=$(sed -n 's/^listening on \(127\.0\.0\.1:[0-9]*\) (tcp)$/\1/p' "$work/server.out")

# Holds $1 connections, prints the client's VmRSS in kB once the ramp is done.
held_rss() {
  local fifo="$work/err.$1"
  mkfifo "$fifo"
  "$bin" client "$target" -c "$1" --hold --connect-rate 20k >/dev/null 2>"$fifo" &
  local pid=$!
  pids+=("$pid")
  while read -r line; do
    case $line in *"ramp done"*) break ;; esac
  done <"$fifo"
  awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"
  kill -TERM "$pid"
  cat "$fifo" >/dev/null
  wait "$pid" || true
}

rss_base=$(held_rss "$base")
rss_n=$(held_rss "$n")
per=$(( (rss_n - rss_base) * 1024 / (n - base) ))
echo "client RSS: ${rss_base} kB holding $base, ${rss_n} kB holding $n"
echo "user-space memory per held connection: ${per} bytes"
