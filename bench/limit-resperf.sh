#!/usr/bin/env bash
# `throng limit --find rate` over UDP beside resperf (dnsperf's package), on
# the same unbound (one thread, local-data, no recursion) with the same
# query file, in a private network namespace this script creates (stock
# sysctls; only `lo` is brought up). resperf ramps to 200,000 qps over 20 s,
# then holds its last rate 20 s (-c), as 20 clients (-C 20: 20 sockets), the
# query file read again and again (-R), and reports its maximum throughput;
# throng searches on 20 sockets with 3 s steps to 5% (checks: at most 1%
# lost or timed out, as
# resperf counts loss), once with the default pacing and once with
# --slack 1ms (queries due within 1 ms go out together: the client's cost
# per query falls, and with it the chance that the client is the limit).
# Two layouts: as a user starts them (no pinning: unbound and the tool share
# both cores), and unbound pinned to core 0 with each tool on core 1.
# Prints each tool's maximum, throng's limit line and reason, and the ratio.
# Usage: bench/limit-resperf.sh [RUNS]   THRONG_BIN names another build.
set -euo pipefail
runs=${1:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${THRONG_IN_NETNS:-}" ]; then
  cd "$here"
  [ -n "${THRONG_BIN:-}" ] || cargo build --release --quiet
  for p in unbound resperf; do
    command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] ||
      { echo "$p is needed: apt-get install ${p/resperf/dnsperf}" >&2; exit 1; }
  done
  THRONG_IN_NETNS=1 exec unshare -n -- "$0" "$@"
fi
cd "$here"
bin=${THRONG_BIN:-$here/target/release/throng}
export PATH="$PATH:/usr/sbin"
work=$(mktemp -d)
unbound_pid=
trap '[ -n "$unbound_pid" ] && kill "$unbound_pid" 2>/dev/null; rm -rf "$work"' EXIT INT TERM
ip link set lo up
port=5300
# shellcheck source=bench/lib.sh
. "$here/bench/lib.sh"
unbound_conf "$port" "$work" >"$work/unbound.conf"
unbound -d -c "$work/unbound.conf" 2>"$work/unbound.log" &
unbound_pid=$!
until grep -q "start of service" "$work/unbound.log"; do
  kill -0 "$unbound_pid" 2>/dev/null || { cat "$work/unbound.log" >&2; exit 1; }
  sleep 0.05
done
echo "www.example.test A" >"$work/q.txt"
echo "www.example.test" >"$work/names"
echo "unbound $(unbound -V | head -1 | cut -d' ' -f2) (1 thread), $(nproc) cores, $("$bin" --version); stock namespace"
for layout in shared pinned; do
pin=()
if [ "$layout" = pinned ]; then
  taskset -a -p -c 0 "$unbound_pid" >/dev/null
  pin=(taskset -c 1)
fi
echo "== $layout: $([ "$layout" = pinned ] && echo 'unbound on core 0, each tool on core 1' || echo 'no pinning')"
for r in $(seq "$runs"); do
  "${pin[@]}" resperf -s 127.0.0.1 -p "$port" -d "$work/q.txt" -R -C 20 -m 200000 -r 20 -c 20 -t 2 -P "$work/resperf.gnuplot" >"$work/resperf.out" 2>&1 || true
  rmax=$(sed -n 's/^ *Maximum throughput: *\([0-9.]*\) qps.*/\1/p' "$work/resperf.out")
  echo "run $r resperf: maximum throughput ${rmax:-?} qps; $(grep -m1 -i 'lost at that point' "$work/resperf.out" | sed 's/^ *//'); $(grep -m1 -i 'fell behind' "$work/resperf.out" | sed 's/^ *//')"
  for pacing in default slack; do
    extra=()
    [ "$pacing" = slack ] && extra=(--slack 1ms)
    start=$SECONDS
    "${pin[@]}" "$bin" limit "127.0.0.1:$port" --find rate --transport udp --proto dns --qnames "$work/names" \
      -c 20 -r 10k --step-time 3s --timeout 500ms "${extra[@]}" \
      --check 'queries.ok>=99%' --check 'queries.timed_out<=1%' \
      --json "$work/limit.json" >"$work/limit.out" 2>&1 || true
    lim=$(python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["limit"]; print(l.get("lower") or 0, l.get("upper") or 0, l.get("stable"), l.get("client_limited"))' "$work/limit.json" 2>/dev/null || echo "0 0 ? ?")
    read -r lower upper stable client <<<"$lim"
    echo "run $r throng ($pacing): $(grep -m1 '^limit' "$work/limit.out" | sed 's/  */ /g'), stable $stable, client-limited $client, $((SECONDS - start)) s"
    echo "    $(grep -m1 '^why' "$work/limit.out" | sed 's/  */ /g' | cut -c1-400)"
    [ -n "${rmax:-}" ] && python3 -c "import sys; l,r=float(sys.argv[1]),float(sys.argv[2]); print(f'    throng lower / resperf maximum: {l/r:.2f}')" "$lower" "$rmax"
  done
done
done
