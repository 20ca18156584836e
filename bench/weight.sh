#!/usr/bin/env bash
# A process's own weight: `throng server` on loopback and `throng client`
# holding 100 connections to it (then the same with 1,000 echo queries/s
# over them), each side's memory read from /proc once the ramp is done:
# RSS (what `ps` shows), its anonymous part (the process's own memory),
# its file part (the binary and libraries, shared with every other process
# mapping them) and PSS (shared pages divided among their processes).
# THRONG_BIN names another build (before/after); BEFORE names a second
# one, measured alternately with the first in the same invocation.
# Usage: bench/weight.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-2}
[ -n "${THRONG_BIN:-}" ] || cargo build --release --quiet
bins=("${THRONG_BIN:-target/release/throng}")
[ -n "${BEFORE:-}" ] && bins+=("$BEFORE")
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# kB of VmRSS, RssAnon, RssFile and Pss of pid $1.
mem() {
  echo "$(awk '/^(VmRSS|RssAnon|RssFile):/ {printf "%s ", $2}' "/proc/$1/status")$(awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup")"
}

printf "%-28s %-26s %8s %8s %8s %8s\n" build case rss_kB anon_kB file_kB pss_kB
for r in $(seq "$runs"); do
  for bin in "${bins[@]}"; do
    for case in hold traffic; do
      "$bin" server --listen 127.0.0.1:0 >"$work/server.out" 2>&1 &
      srv=$!
      pids=("$srv")
      until grep -q '^listen backlog' "$work/server.out"; do
        kill -0 "$srv" 2>/dev/null || { cat "$work/server.out"; exit 1; }
        sleep 0.05
      done
      target=$(sed -n 's/^listening on \(127\.0\.0\.1:[0-9]*\) (tcp)$/\1/p' "$work/server.out")
      extra=()
      [ "$case" = traffic ] && extra=(-r 1000 --proto echo)
      mkfifo "$work/err"
      "$bin" client "$target" -c 100 -T 4s "${extra[@]}" >/dev/null 2>"$work/err" &
      cli=$!
      pids+=("$cli")
      while read -r line; do
        case $line in *"ramp done"*) break ;; esac
      done <"$work/err"
      cat "$work/err" >/dev/null &
      sleep 2 # a second or two of its traffic (or of holding)
      read -r crss canon cfile cpss <<<"$(mem "$cli")"
      read -r srss sanon sfile spss <<<"$(mem "$srv")"
      wait "$cli" || true
      kill "$srv"
      wait "$srv" || true
      rm -f "$work/err"
      printf "%-28s %-26s %8s %8s %8s %8s\n" "$bin" "client, 100 conns, $case" "$crss" "$canon" "$cfile" "$cpss"
      printf "%-28s %-26s %8s %8s %8s %8s\n" "$bin" "server, 100 conns, $case" "$srss" "$sanon" "$sfile" "$spss"
    done
  done
done
