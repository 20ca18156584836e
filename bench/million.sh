#!/usr/bin/env bash
# N connections (default 1,000,000) on this one machine: `throng server` and
# `throng client`, one command each, over loopback inside a private network
# namespace this script creates (so its sysctls never touch the host). Each
# connection pings every INTERVAL (default 60 s; every connection's
# first ping falls within one interval) while the connections are held, then all
# close. Reports per step: time to reach it, client and server RSS (summed
# over their processes), kernel memory (the growth of Slab, and of TCP
# sockets in use, both host-wide figures), and at the end
# ping latency and user-space bytes per held connection for each side.
# First, the floor connector's rate for the same N (see below).
# Usage: bench/million.sh [N] [HOLD_SECONDS] [INTERVAL]   (CI: 50000 11 10s)
set -euo pipefail
n=${1:-1000000}
hold=${2:-60}
interval=${3:-60s}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ -z "${THRONG_IN_NETNS:-}" ]; then
  cd "$here"
  cargo build --release --quiet
  # A private network namespace: net.* sysctls set below are its own.
  THRONG_IN_NETNS=1 exec unshare -n -- "$0" "$@"
fi

cd "$here"
bin=$here/target/release/throng
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # KEEP=DIR keeps the run's outputs (the server's whole summary, the
  # client's, its JSON result).
  [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && { cp "$work"/*.out "$work"/*.err "$work"/*.json "$KEEP"/ 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip link set lo up
sysctl -qw net.core.somaxconn=65535
sysctl -qw net.ipv4.tcp_max_syn_backlog=65535
sysctl -qw net.ipv4.ip_local_port_range="1024 65535"

# Sums VmRSS (kB) over a process and its children.
tree_rss() {
  local total=0 p
  for p in "$1" $(ps -eo pid=,ppid= | awk -v p="$1" '$2==p {print $1}'); do
    local kb
    kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
    total=$((total + ${kb:-0}))
  done
  echo "$total"
}
slab_kb() { awk '/^Slab:/ {print $2}' /proc/meminfo; }
tcp_inuse() { awk '/^TCP:/ {print $3}' /proc/net/sockstat; }

# The floor: the raw-epoll connector of bench/baseline/client.c opens the
# same N against a server of its own in this namespace, from other source
# addresses (127.1.0.K, 19,000 each, one process each, as many at a time
# as there are cores, each holding its connections until all are up), so
# that the ramp below has a figure beside it: what connect() and the
# server allow here without throng's client. (All at once, 53 of them
# with 1,024 handshakes in flight each overflowed the server's queues:
# 6,833/s.) Its server is stopped and the kernel given time to free its
# sockets before throng's starts. FLOOR=0 leaves it out.
# start_server PORT OUT: a pong server for N on PORT, its pid in $started
# once it listens.
start_server() {
  "$bin" server --mode pong --listen "127.0.0.1:$1" --max-connections "$n" >"$2" 2>&1 &
  started=$!
  pids+=("$started")
  until grep -q '^listen backlog' "$2"; do
    kill -0 "$started" 2>/dev/null || { cat "$2"; exit 1; }
    sleep 0.05
  done
}

floor_rate=
if [ "${FLOOR:-1}" != 0 ]; then
  gcc -O2 -o "$work/floor" bench/baseline/client.c -lm
  start_server 4243 "$work/floor-server.out"
  fsrv=$started
  each=19000 left=$n k=0 fouts=() at_once=$(nproc)
  fstart=$(date +%s.%N)
  while [ "$left" -gt 0 ]; do
    k=$((k + 1)); c=$((left < each ? left : each)); left=$((left - c))
    "$work/floor" connect "127.1.$((k / 250)).$((k % 250 + 1))" 127.0.0.1 4243 "$c" hold >"$work/floor.$k" &
    fouts+=($!) pids+=($!)
    # (Each prints its line once its connections are up, then holds.)
    while [ "$(cat "$work"/floor.* | wc -l)" -le $((k - at_once)) ]; do sleep 0.02; done
  done
  until [ "$(cat "$work"/floor.* | wc -l)" -ge "$k" ]; do sleep 0.02; done
  fend=$(date +%s.%N)
  up=$(cat "$work"/floor.* | awk '{up += $2; failed += $4} END {print up + 0, failed + 0}')
  floor_rate=$(echo "${up% *} / ($fend - $fstart)" | bc)
  echo "floor connector: ${up% *} established, ${up#* } failed by $k processes, $at_once at a time, in $(echo "$fend - $fstart" | bc) s: $floor_rate connections/s"
  kill -TERM "${fouts[@]}" "$fsrv"; wait "${fouts[@]}" "$fsrv" 2>/dev/null || true
  pids=()
  sleep 5
fi

start_server 4242 "$work/server.out"
srv=$started
head -1 "$work/server.out"
sleep 1
server_base=$(tree_rss "$srv")
slab_base=$(slab_kb)
inuse_base=$(tcp_inuse)
start=$(date +%s.%N)

step=$(( n >= 1000000 ? 100000 : (n >= 100000 ? 10000 : 5000) ))
"$bin" client 127.0.0.1:4242 -c "$n" --connect-rate 100k --proto ping --interval "$interval" \
  -T "${hold}s" --timeout 5s --json "$work/client.json" >"$work/client.out" 2>"$work/client.err" &
cli=$!
pids+=("$cli")
sleep 0.5
client_base=$(tree_rss "$cli")

printf "%9s %8s %12s %12s %12s %12s\n" connections time_s client_rss_MB server_rss_MB slab_MB tcp_sockets
next=$step
peak_client=0
peak_server=0
while kill -0 "$cli" 2>/dev/null; do
  line=$(grep -E '^ *[0-9]+s +open' "$work/client.err" | tail -1 || true)
  open=$(sed -n 's/.*open \([0-9]*\).*/\1/p' <<<"$line")
  open=${open:-0}
  c=$(tree_rss "$cli"); s=$(tree_rss "$srv")
  [ "$c" -gt "$peak_client" ] && peak_client=$c && peak_open_c=$open
  [ "$s" -gt "$peak_server" ] && peak_server=$s && peak_open_s=$open
  while [ "$open" -ge "$next" ] && [ "$next" -le "$n" ]; do
    t=$(echo "$(date +%s.%N) - $start" | bc)
    printf "%9d %8.1f %12.1f %12.1f %12.1f %12d\n" "$next" "$t" "$(echo "$c/1024" | bc -l)" \
      "$(echo "$s/1024" | bc -l)" "$(echo "($(slab_kb)-$slab_base)/1024" | bc -l)" "$(( $(tcp_inuse) - inuse_base ))"
    next=$((next + step))
  done
  sleep 0.5
done
rc=0
wait "$cli" || rc=$?
pids=("$srv")
end=$(date +%s.%N)
grep -E 'established|failed|ramp|connect time|queries|sent|answers|response|timed|check' "$work/client.out" || true
grep -E '^throng: ' "$work/client.err" || true
ok=0
python3 - "$work/client.json" "$n" <<'PY' || ok=$?
import json, sys
r = json.load(open(sys.argv[1])); n = int(sys.argv[2])
c, q, l = r["connections"], r["queries"], r["latency"]["response_time_us"]
print(f"established {c['established']} of {n}, verified {c['verified']}, failed "
      f"{sum(c['failed'].values())} (half_open {c['failed']['half_open']}), "
      f"ping timeouts {q['timed_out']}, ping p50 {l['p50']} us, p99 {l['p99']} us, "
      f"connect rate {c['connect_rate']:.0f}/s")
# A connection whose first ping falls after the hold (the hold as long as
# the interval) is idle, not unverified: the server's count of accepted
# connections, checked below, says whether it holds it.
idle = c.get("idle", 0)
if idle:
    print(f"idle {idle} (their first ping was due after the hold)")
ok = (c["established"] == n and c["verified"] + idle == n and c["unverified"] == 0
      and sum(c["failed"].values()) == 0 and q["timed_out"] == 0)
sys.exit(0 if ok else 1)
PY
if [ -n "$floor_rate" ]; then
  rate=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["connections"]["connect_rate"]))' "$work/client.json" 2>/dev/null || echo 0)
  echo "ramp $rate/s against the floor connector's $floor_rate/s: $(echo "scale=2; $rate / $floor_rate" | bc)x"
fi
held=${peak_open_c:-$n}
echo "client user-space bytes per held connection: $(( (peak_client - client_base) * 1024 / (held > 0 ? held : 1) ))"
echo "server user-space bytes per held connection: $(( (peak_server - server_base) * 1024 / (${peak_open_s:-$n} > 0 ? ${peak_open_s:-$n} : 1) ))"
echo "kernel memory at peak: see slab_MB above; whole run $(echo "$end - $start" | bc) s"
kill -TERM "$srv"; wait "$srv" || true
pids=()
grep -E 'accepted|spread|hand-over' "$work/server.out" | cut -c1-160
# Every connection held: the server shed none (a shed one is replaced by
# the client, so the counts of connections alone do not show it).
if grep -E 'errors .*out of fds' "$work/server.out"; then echo "the server shed connections"; ok=1; fi
[ "$rc" -eq 0 ] && [ "$ok" -eq 0 ]
