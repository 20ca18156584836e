#!/usr/bin/env bash
# A process's own weight: `throng server` on loopback and `throng client`
# holding 100, then 10,000 connections to it (each also with 1,000 echo
# queries/s over them), each side's memory read from /proc once the ramp
# is done: RSS (what `ps` shows), its anonymous part (the process's own
# memory), its file part (the binary and libraries, shared with every other
# process mapping them), PSS (shared pages divided among their processes)
# and USS (the pages this process alone maps: what ending it frees). Then
# the bytes of USS per connection, from the difference of the two sizes.
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

sizes=(100 10000)
# kB of VmRSS, RssAnon, RssFile, Pss and USS (Private_Clean +
# Private_Dirty) of pid $1.
mem() {
  echo "$(awk '/^(VmRSS|RssAnon|RssFile):/ {printf "%s ", $2}' "/proc/$1/status")$(
    awk '/^Pss:/ {p = $2} /^Private_(Clean|Dirty):/ {u += $2} END {print p, u}' "/proc/$1/smaps_rollup")"
}

printf "%-28s %-30s %8s %8s %8s %8s %8s\n" build case rss_kB anon_kB file_kB pss_kB uss_kB
for r in $(seq "$runs"); do
  for bin in "${bins[@]}"; do
    for case in hold traffic; do
      for n in "${sizes[@]}"; do
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
        "$bin" client "$target" -c "$n" -T 4s "${extra[@]}" >/dev/null 2>"$work/err" &
        cli=$!
        pids+=("$cli")
        while read -r line; do
          case $line in *"ramp done"*) break ;; esac
        done <"$work/err"
        cat "$work/err" >/dev/null &
        sleep 2 # a second or two of its traffic (or of holding)
        read -r crss canon cfile cpss cuss <<<"$(mem "$cli")"
        read -r srss sanon sfile spss suss <<<"$(mem "$srv")"
        wait "$cli" || true
        kill "$srv"
        wait "$srv" || true
        rm -f "$work/err"
        printf "%-28s %-30s %8s %8s %8s %8s %8s\n" "$bin" "client, $n conns, $case" "$crss" "$canon" "$cfile" "$cpss" "$cuss"
        printf "%-28s %-30s %8s %8s %8s %8s %8s\n" "$bin" "server, $n conns, $case" "$srss" "$sanon" "$sfile" "$spss" "$suss"
        echo "$r $bin $case $n $cuss $suss" >>"$work/uss"
      done
    done
  done
done
# Bytes of USS per connection: (USS at the larger size - at the smaller)
# over the connections between them, each run on its own line.
echo
printf "%-28s %-10s %4s %14s %14s\n" build case run client_B/conn server_B/conn
awk -v lo="${sizes[0]}" -v hi="${sizes[1]}" '
  { k = $2 " " $3 " " $1; if ($4 == lo) { c0[k] = $5; s0[k] = $6 } else { c1[k] = $5; s1[k] = $6 }; if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
  END { for (i = 1; i <= n; i++) { k = order[i]; split(k, f, " ");
    printf "%-28s %-10s %4s %14.0f %14.0f\n", f[1], f[2], f[3], (c1[k] - c0[k]) * 1024 / (hi - lo), (s1[k] - s0[k]) * 1024 / (hi - lo) } }' "$work/uss"
