#!/usr/bin/env bash
# Server push on this machine: `throng server --mode push` at 20 ms to 1k,
# 2k, 5k, 10k and 50k TCP clients, 10k UDP clients and 1k to 10k WebSocket
# clients (`--push-over websocket` both sides) (`throng client --proto push`,
# default flags otherwise), each for SECONDS (default 20), in a private
# network namespace with the kernel's default sysctls; then the same TCP
# loads (up to what one process's fds hold) against bench/baseline/push.c,
# a raw epoll server driven by a timerfd doing the same work: the floor.
#
# Per case: the share of the messages due that arrived, jitter and one-way
# delay p99 (client), the server's sends on time (within 1 ms of their
# slot), late and skipped (its summary), its CPU (% of one core, all its
# processes) and the messages per second received. Then the highest client
# count at which >= 99.9% arrived with jitter p99 <= 5 ms.
# Usage: bench/push.sh [SECONDS]   THRONG_BIN names another build.
set -euo pipefail
secs=${1:-20}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ -z "${THRONG_IN_NETNS:-}" ]; then
  cd "$here"
  cargo build --release --quiet
  mkdir -p target/bench-baseline
  gcc -O2 -Wall -pthread -o target/bench-baseline/push bench/baseline/push.c
  THRONG_IN_NETNS=1 exec unshare -n -- "$0" "$@"
fi

cd "$here"
bin=${THRONG_BIN:-$here/target/release/throng}
floor=$here/target/bench-baseline/push
work=$(mktemp -d)
port=4244
pids=()

# shellcheck source=bench/lib.sh
. "$here/bench/lib.sh"
# CPU ticks (user + system) of a process tree, children that ended included.
tree_ticks() {
  local total=0 p
  for p in $(tree_pids "$1"); do
    total=$((total + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
listening() {
  awk -v a="$(printf '0100007F:%04X' "$port")" '$2 == a && $4 == "0A" {f = 1} END {exit !f}' /proc/net/tcp
}
wait_listening() {
  local deadline=$((SECONDS + 30))
  until listening; do
    kill -0 "$1" 2>/dev/null || { echo "server exited"; exit 1; }
    [ "$SECONDS" -lt "$deadline" ] || { echo "server not listening after 30 s"; exit 1; }
    sleep 0.05
  done
}
cleanup() {
  local p
  for p in "${pids[@]}"; do
    for q in $(tree_pids "$p"); do kill -TERM "$q" 2>/dev/null || true; done
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip link set lo up
hz=$(getconf CLK_TCK)
echo "push: ${secs} s a case, 20 ms period, 160-byte payload; stock namespace" \
  "(ip_local_port_range $(tr '\t' ' ' </proc/sys/net/ipv4/ip_local_port_range)," \
  "fd limit $(ulimit -Sn)), $(nproc) cores, $("$bin" --version)"
printf "%-8s %-9s %7s %9s %9s %9s %9s %8s %8s %8s %10s\n" server case arrived lost \
  jitter_p99 delay_p99 on_time late skipped cpu_pct msgs_per_s | tee "$work/table"

# One case: SERVER (throng|floor) TRANSPORT CLIENTS.
run_case() {
  local kind=$1 transport=$2 n=$3 srv t0 t1 ticks0 udp=() over=() ctransport=$2
  [ "$transport" = udp ] && udp=(--udp)
  # ws: over WebSocket (TCP underneath).
  [ "$transport" = ws ] && over=(--push-over websocket) && ctransport=tcp
  if [ "$kind" = throng ]; then
    "$bin" server --mode push "${udp[@]}" "${over[@]}" --listen "127.0.0.1:$port" >"$work/server.out" 2>&1 &
  else
    "$floor" "$port" "$(nproc)" 20 160 $((secs + 60)) >"$work/server.out" 2>&1 &
  fi
  srv=$!
  pids=("$srv")
  wait_listening "$srv"
  ticks0=$(tree_ticks "$srv")
  t0=$SECONDS
  "$bin" client "127.0.0.1:$port" --proto push --transport "$ctransport" "${over[@]}" -c "$n" -T "${secs}s" \
    -q --json "$work/client.json" --check none >"$work/client.out" 2>&1 || true
  t1=$SECONDS
  local ticks=$(($(tree_ticks "$srv") - ticks0))
  kill -TERM "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  pids=()
  python3 - "$work/client.json" "$work/server.out" "$kind" "$transport" "$n" "$ticks" \
    "$hz" "$((t1 - t0))" <<'PY' | tee -a "$work/table"
import json, re, sys
path, server_out, kind, transport, n, ticks, hz, wall = sys.argv[1:]
try:
    r = json.load(open(path))
except (OSError, ValueError):
    print(f"{kind:<8} {transport} {n}: no client result")
    sys.exit(0)
p = r["push"]
out = open(server_out).read()
m = re.search(r"on time (\d+), late (\d+)", out) or re.search(r"on_time (\d+) late (\d+)", out)
on_time, late = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
s = re.search(r"skipped (\d+) on full sockets .*?, (\d+) a period behind", out)
skipped = int(s.group(1)) + int(s.group(2)) if s else int((re.search(r"skipped (\d+)", out) or [0, 0])[1])
due = on_time + late + skipped
arrived = 100.0 * p["received"] / max(p["expected"], 1)
delay = p.get("delay_us") or {}
cpu = 100.0 * int(ticks) / int(hz) / max(int(wall), 1)
secs = max(r["duration_s"], 1e-9)
print(f"{kind:<8} {transport}-{int(n)//1000}k".ljust(18) +
      f" {arrived:6.2f}% {p['lost']:9d} {p['jitter_us']['p99']/1000:7.1f}ms "
      f"{delay.get('p99', 0)/1000:7.1f}ms {100.0*on_time/max(due,1):8.2f}% {late:8d} {skipped:8d} "
      f"{cpu:7.0f}% {p['received']/secs:10.0f}")
PY
}

for n in 1000 2000 5000 10000 50000; do run_case throng tcp "$n"; done
run_case throng udp 10000
for n in 1000 2000 5000 10000; do run_case throng ws "$n"; done
# The floor: one process (its fds hold 10k, not 50k).
for n in 1000 2000 5000 10000; do run_case floor tcp "$n"; done

python3 - "$work/table" <<'PY'
import re, sys
best = None
for line in open(sys.argv[1]).read().splitlines()[1:]:
    f = line.split()
    if len(f) < 10 or f[0] != "throng":
        continue
    arrived, jitter = float(f[2].rstrip("%")), float(f[4].rstrip("ms"))
    n = int(re.search(r"-(\d+)k", f[1]).group(1)) * 1000
    if arrived >= 99.9 and jitter <= 5.0 and f[1].startswith("tcp"):
        best = max(best or 0, n)
print(f"highest TCP client count with >= 99.9% arrived and jitter p99 <= 5 ms: "
      f"{best if best else 'none of those tried'}")
PY
