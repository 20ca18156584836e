#!/usr/bin/env bash
# The WebSocket client beside raw TCP, against throng's own servers on
# loopback (one server worker each):
#   1. closed-loop echo messages/s: `--proto ws` against `--mode websocket`
#      and `--proto echo` against `--mode echo`, 100 connections, one client
#      worker, 64-byte messages, PAIRS alternated pairs of SECONDS each;
#      the ratio ws/raw pair by pair (target >= 0.8);
#   2. push at 20 ms to 2,000 and 5,000 clients, over WebSocket and over
#      TCP: the share received, jitter and one-way delay p99;
#   3. client user-space bytes per held connection: RSS of one client
#      process holding 10,000 connections minus holding 1,000, over 9,000;
#      upgraded WebSocket connections beside plain TCP ones; and the ramp
#      rate (handshake included).
# Usage: bench/ws-client.sh [PAIRS] [SECONDS]   THRONG_BIN names another build.
set -euo pipefail
pairs=${1:-5}
secs=${2:-4}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
[ -n "${THRONG_BIN:-}" ] || cargo build --release --quiet
bin=${THRONG_BIN:-$here/target/release/throng}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# Starts `throng server ARGS...` on a free port; prints the port.
serve() {
  local log="$work/server.$RANDOM"
  "$bin" server --listen 127.0.0.1:0 --processes 1 "$@" >"$log" 2>&1 &
  pids+=("$!")
  until grep -qs '^listen backlog' "$log"; do sleep 0.05; done
  sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\) (tcp)$/\1/p' "$log"
}

# A key of a result: json FILE PYTHON-EXPRESSION-ON-d
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

echo "== closed-loop echo, 100 connections, ${secs}s a run"
e=$(serve --mode echo --workers 1)
w=$(serve --mode websocket --workers 1)
for i in $(seq "$pairs"); do
  "$bin" client "127.0.0.1:$e" --proto echo -c 100 --closed-loop -w 1 -T "${secs}s" \
    --processes 1 -q --json "$work/e.json" >/dev/null 2>&1 || true
  "$bin" client "127.0.0.1:$w" --proto ws -c 100 --closed-loop -w 1 -T "${secs}s" \
    --processes 1 -q --json "$work/w.json" >/dev/null 2>&1 || true
  re=$(json "$work/e.json" "round(d['queries']['rate_achieved'])")
  rw=$(json "$work/w.json" "round(d['queries']['rate_achieved'])")
  echo "pair $i: raw $re/s  websocket $rw/s  ratio $(python3 -c "print(round($rw/$re, 3))")"
done

echo "== push at 20 ms, 10 s"
for c in 2000 5000; do
  for over in websocket tcp; do
    p=$(serve --mode push --push-over "$over" --every 20ms)
    "$bin" client "127.0.0.1:$p" --proto push --push-over "$over" --every 20ms -c "$c" \
      --connect-rate 5000 -T 10s --processes 1 -q --json "$work/p.json" >/dev/null 2>&1 || true
    json "$work/p.json" "'$c $over: received %.3f%%, jitter p99 %d us, delay p99 %d us, failed %d' % (
      100 * d['push']['received'] / max(1, d['push']['expected']), d['push']['jitter_us']['p99'],
      d['push']['delay_us']['p99'], sum(d['connections']['failed'].values()))"
  done
done

echo "== client bytes per held connection (10,000 vs 1,000)"
rss() { # PROTO PORT COUNT: the client's VmRSS (kB) once its ramp is done
  "$bin" client "127.0.0.1:$2" --proto "$1" -c "$3" --connect-rate 20000 -T 6s --processes 1 \
    -q --json "$work/m.$1.$3.json" >/dev/null 2>&1 &
  local c=$!
  sleep 4.5
  awk '/^VmRSS:/ {print $2}' "/proc/$c/status"
  wait "$c" || true
}
w=$(serve --mode websocket)
e=$(serve --mode echo)
for proto in ws echo; do
  port=$w
  [ "$proto" = echo ] && port=$e
  a=$(rss "$proto" "$port" 1000)
  b=$(rss "$proto" "$port" 10000)
  rate=$(json "$work/m.$proto.10000.json" "round(d['connections']['connect_rate'])")
  echo "$proto: $(( (b - a) * 1024 / 9000 )) bytes per connection; ramp $rate connections/s"
done
