#!/usr/bin/env bash
# Starts `throng server` (pong mode) on a free loopback port, talks to it
# over TCP with nothing but bash, then stops it with SIGTERM so it
# prints its final summary. Needs only cargo and bash.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/throng
out=$(mktemp)
trap 'kill "$pid" 2>/dev/null || true; rm -f "$out"' EXIT
"$bin" server --mode pong --listen 127.0.0.1:0 --stats >"$out" &
pid=$!
# The banner's last line is printed once every socket is bound.
until grep -q '^listen backlog' "$out"; do
  kill -0 "$pid" || { cat "$out"; exit 1; }
  sleep 0.05
done
cat "$out"
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\) (tcp)$/\1/p' "$out")
exec 3<>"/dev/tcp/127.0.0.1/$port"
for i in 1 2 3; do
  printf 'ping %s %s\n' "$i" "$(date +%s.%N)" >&3
  read -r reply <&3
  echo "tcp  > ping $i   < $reply"
done
exec 3>&-
kill -TERM "$pid"
wait "$pid"
tail -n +$(($(grep -c '' <<<"$(sed -n '1,/^listen backlog/p' "$out")") + 1)) "$out"
