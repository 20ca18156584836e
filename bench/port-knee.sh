#!/usr/bin/env bash
# connect() cost against the number of connections one (source, destination
# address:port) pair already holds. Inside a private network namespace this
# script creates (its sysctls never touch the host), `throng server --mode
# discard` listens on 127.0.0.1:4243 (4 processes) and bench/port_knee.py
# opens blocking connections 127.0.0.1 -> 127.0.0.1:4243 (IP_BIND_ADDRESS_NO_PORT,
# as throng does), holding them all, from worker processes run one after the
# other (~18,000 sockets each: the fd hard limit is 20,000), until connect()
# fails with EADDRNOTAVAIL or the per-run time budget is spent. Every
# connect() is timed; per bucket of 500 connections it reports connects/s,
# mean and p99 connect() time, medians over RUNS runs, and the knee (the
# last point where connect() runs at >= 50% of its start rate with p99 < 1 ms).
# Two variants: the namespace's default ip_local_port_range (no sysctl
# changed), then net.ipv4.ip_local_port_range="1024 65535" (namespace only).
# Traffic only to 127.0.0.1; no fs.* sysctl is changed.
# The server binary is copied first (target/ may be rebuilt meanwhile):
# THRONG_BIN=path uses that binary instead of a copy of target/release/throng.
# THRONG_KNEE_JSON=DIR keeps the raw results (default.json, wide.json) there.
# Usage: bench/port-knee.sh [RUNS] [BUDGET_SECONDS_PER_RUN]   (defaults 3, 30)
set -euo pipefail
runs=${1:-3}
budget=${2:-30}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ -z "${THRONG_IN_NETNS:-}" ]; then
  if [ -z "${THRONG_BIN:-}" ]; then
    cp "$here/target/release/throng" /tmp/throng-knee
    export THRONG_BIN=/tmp/throng-knee
  fi
  # A private network namespace: the port range set below is its own.
  THRONG_IN_NETNS=1 exec unshare -n -- "$0" "$@"
fi

bin=$THRONG_BIN
port=4243
work=$(mktemp -d)
# shellcheck source=bench/lib.sh
. "$here/bench/lib.sh"
ip link set lo up
discard_server_start "$bin" "$port" "$work"

echo "machine: $(nproc) cores, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: $(head -1 "$work/server.out")"
echo "$runs runs per variant, at most ${budget} s of connecting per run"
py=("$here/bench/port_knee.py")
python3 "${py[@]}" measure --port "$port" --label "default range" --runs "$runs" \
  --budget "$budget" --json "$work/default.json"
sysctl -qw net.ipv4.ip_local_port_range="1024 65535"
python3 "${py[@]}" measure --port "$port" --label "range 1024-65535" --runs "$runs" \
  --budget "$budget" --json "$work/wide.json"
python3 "${py[@]}" summary "$work/default.json" "$work/wide.json"
if [ -n "${THRONG_KNEE_JSON:-}" ]; then
  mkdir -p "$THRONG_KNEE_JSON"
  cp "$work/default.json" "$work/wide.json" "$THRONG_KNEE_JSON/"
fi
