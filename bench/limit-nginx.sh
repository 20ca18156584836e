#!/usr/bin/env bash
# `throng limit --find rate --proto http` against nginx in its stock shape
# (worker_processes auto, worker_connections 768, keepalive_requests at its
# default of 1,000), beside wrk on the same nginx in the same run, in a
# fresh network namespace this script creates (only `lo` up, no sysctl
# changed). Three figures over the same 100 connections: wrk's rate (one
# request in flight per connection, as fast as answers come), throng's
# limit with --window 1 (one in flight per connection, as wrk), and
# throng's limit with its default window (requests pipelined). Each limit
# is printed with its reason, and checked against nginx's own count of the
# requests it served (stub_status) during the search.
# Usage: bench/limit-nginx.sh [STEP_TIME] [WRK_SECONDS]   (5s, 10)
set -euo pipefail
step=${1:-5s}
secs=${2:-10}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${THRONG_BIN:-$here/target/release/throng}
[ -x "$bin" ] || (cd "$here" && cargo build --release -q)
command -v nginx >/dev/null || { echo "nginx is needed (apt-get install nginx-light)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 1; }

if [ "${INSIDE_NS:-}" != 1 ]; then
  exec unshare -n env INSIDE_NS=1 "$0" "$@"
fi
ip link set lo up
dir=$(mktemp -d)
trap 'kill "$(cat "$dir/nginx.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$dir"' EXIT
# shellcheck source=bench/lib.sh
. "$here/bench/lib.sh"
nginx_start "$dir" 8089
requests() { nginx_requests 8089; }
echo "nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), $(nproc) cores, 100 connections, steps of $step, $("$bin" --version); namespace untuned"
wrk_rate() {
  wrk -t1 -c100 -d"${secs}s" http://127.0.0.1:8089/ | awk '/Requests\/sec/ { printf "%.0f", $2 }'
}
echo "wrk -t1 -c100 -d${secs}s: $(wrk_rate)/s"
for window in 1 default; do
  extra=()
  [ "$window" = 1 ] && extra=(--window 1)
  before=$(requests)
  start=$SECONDS
  "$bin" limit 127.0.0.1:8089 --find rate --proto http -c 100 --step-time "$step" "${extra[@]}" \
    --json "$dir/limit.json" > "$dir/limit.txt" 2>&1 || true
  after=$(requests)
  echo "throng limit, window $window ($((SECONDS - start)) s):"
  grep -E '^(limit|why|  +unstable)' "$dir/limit.txt" | sed 's/^/    /' | cut -c1-300
  python3 - "$dir/limit.json" "$((after - before - 1))" <<'EOF'
import json, sys
f = json.load(open(sys.argv[1]))
served = int(sys.argv[2])
answered = sum(s.get("answered") or 0 for h in f.get("held_runs", []) for s in h["per_second"])
answered += sum((s["result"] or {}).get("queries", {}).get("answered", 0)
                for s in f["steps"] if not s["held"] and s["result"])
steps = len(f["steps"])
print(f"    {steps} steps; throng answered {answered} in all, nginx counted {served} requests "
      f"({100 * (answered / max(served, 1) - 1):+.2f}%)")
EOF
done
echo "wrk -t1 -c100 -d${secs}s again: $(wrk_rate)/s"
