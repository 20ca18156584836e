#!/usr/bin/env bash
# User-space instructions per answer of `throng client`, counted exactly by
# callgrind, for four cases against a peer on 127.0.0.1 (port 0, read back):
#
#   echo-tcp-w16  closed loop, window 16, echo over TCP, the recipe of
#                 bench/RESULTS.md (2026-11-22, client per-answer work),
#                 against the raw-epoll baseline server
#   dns-tcp       open loop at 1,000 queries/s, DNS over TCP, throng server
#   dns-udp       the same over UDP
#   echo-tls-w16  closed loop, window 16, echo over TLS, throng server --tls
#
# Each case runs twice with different counts; the figure is
# (Ir2 - Ir1) / (answers2 - answers1), so the start (ramp, TLS handshakes,
# the report) cancels out. Ir is callgrind's summary over the client's
# threads, and over the forked child that runs chronyc for the report's
# environment (the same in both runs). Answers are queries.answered of the
# client's --json. A figure depends on timing where a loop turn's work
# does (how many answers one read finds): window 16 moves by 1-3% between
# runs. The open-loop rate is low enough that callgrind's client keeps up
# with it: at 5,000/s the figures moved with the load of other processes
# (UDP by up to half, and lost answers), at 1,000/s by 5-7% on a busy
# machine, under 1% on a quiet one.
#
# Prints `case  answers  instructions/answer` per case on stdout (answers:
# the difference between the two runs), each run's totals on stderr.
# THRONG_BIN names another build (before/after a change); by default
# target/profiling/throng is built (the release code with line tables, so
# that callgrind_annotate names functions and lines). Takes about 3 minutes on 2 cores.
# Usage: bench/instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind not found" >&2; exit 1; }
if [ -z "${THRONG_BIN:-}" ]; then
  cargo build --profile profiling --quiet
fi
bin=${THRONG_BIN:-target/profiling/throng}
mkdir -p target/bench-baseline
gcc -O2 -Wall -pthread -o target/bench-baseline/server bench/baseline/server.c
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# Starts a peer (output in $work/$1.out) and waits for its line matching $2.
# Sets peer_out.
start_peer() {
  local name=$1 ready=$2
  shift 2
  peer_out="$work/$name.out"
  : >"$peer_out"
  "$@" >"$peer_out" 2>&1 &
  local pid=$!
  pids+=("$pid")
  until grep -q "$ready" "$peer_out"; do
    kill -0 "$pid" 2>/dev/null || { cat "$peer_out" >&2; exit 1; }
    sleep 0.05
  done
}

# Runs the client under callgrind: case name, count, client arguments.
# Sets ir and answered.
run() {
  local name=$1 count=$2
  shift 2
  local out="$work/$name.$count" start=$SECONDS
  if ! valgrind --tool=callgrind --callgrind-out-file="$out.cg.%p" \
    "$bin" client "$@" -q --json "$out.json" >"$out.log" 2>&1; then
    cat "$out.log" >&2
    exit 1
  fi
  ir=$(awk '/^summary:/ {s += $2} END {print s}' "$out".cg.*)
  answered=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["queries"]["answered"])' "$out.json")
  echo "  $name: count $count, $answered answers, $ir instructions, $((SECONDS - start)) s" >&2
}

# Case name, the two counts, client arguments with COUNT where the count goes.
measure() {
  local name=$1 n1=$2 n2=$3
  shift 3
  local ir1 a1
  run "$name" "$n1" "${@//COUNT/$n1}"
  ir1=$ir a1=$answered
  run "$name" "$n2" "${@//COUNT/$n2}"
  awk -v name="$name" -v i1="$ir1" -v i2="$ir" -v a1="$a1" -v a2="$answered" \
    'BEGIN { printf "%-14s %8d  %.1f\n", name, a2 - a1, (i2 - i1) / (a2 - a1) }'
}

printf '%-14s %8s  %s\n' case answers instructions/answer

# --messages ends no run: both last the full -T 60s (as the recipe does).
# Counts are multiples of the window: with --window 16 a connection sends
# --messages rounded up to one (5000 sends 5008).
start_peer baseline '^listening on' target/bench-baseline/server 0 1 echo
target=$(sed -n 's/^listening on \(127\.0\.0\.1:[0-9]*\)$/\1/p' "$peer_out")
measure echo-tcp-w16 4000 20000 "$target" --proto echo --size 64 -c 16 \
  --closed-loop --window 16 -w 1 --messages COUNT -T 60s

start_peer dns '^listen backlog' "$bin" server --listen 127.0.0.1:0 --workers 1 --mode dns --udp
target=$(sed -n 's/^listening on \(127\.0\.0\.1:[0-9]*\) (tcp)$/\1/p' "$peer_out")
measure dns-tcp 5000 15000 "$target" --proto dns -c 16 -r 1000 -w 1 \
  --queries COUNT -T 60s
measure dns-udp 5000 15000 "$target" --transport udp --proto dns -c 16 -r 1000 -w 1 \
  --queries COUNT -T 60s

start_peer tls '^listen backlog' "$bin" server --listen 127.0.0.1:0 --workers 1 --tls
target=$(sed -n 's/^listening on \(127\.0\.0\.1:[0-9]*\) (tcp, tls)$/\1/p' "$peer_out")
ca=$(sed -n 's/^tls: clients trust it with --transport tls --tls-ca \([^ ]*\) .*/\1/p' "$peer_out")
measure echo-tls-w16 80000 240000 "$target" --transport tls --tls-ca "$ca" --proto echo \
  --size 64 -c 16 --closed-loop --window 16 -w 1 --queries COUNT -T 60s
