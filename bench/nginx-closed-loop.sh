#!/usr/bin/env bash
# A closed loop against nginx with its default keepalive_requests (1000: it
# closes each keep-alive connection after 1,000 requests), as a user runs
# it, beside wrk on the same nginx in the same run, in a fresh network
# namespace this script creates (only `lo` up, no sysctl changed), with
# default flags. Prints each tool's rate and p50/p99, throng's mean response
# time against Little's law (connections / answered rate), and nginx's own
# count of requests (stub_status) against throng's answered count.
# Usage: bench/nginx-closed-loop.sh [CONNECTIONS] [SECONDS]   (64, 5)
set -euo pipefail
conns=${1:-64}
secs=${2:-5}
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
echo "nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), $(nproc) cores, $conns connections, ${secs}s, namespace untuned"
wrk -t2 -c"$conns" -d"${secs}s" --latency http://127.0.0.1:8089/ > "$dir/wrk.txt"
w_rate=$(awk '/Requests\/sec/ { print $2 }' "$dir/wrk.txt")
w_p50=$(awk '$1 == "50%" { print $2 }' "$dir/wrk.txt")
w_p99=$(awk '$1 == "99%" { print $2 }' "$dir/wrk.txt")
before=$(requests)
"$bin" client 127.0.0.1:8089 --proto http --closed-loop -c "$conns" -T "${secs}s" -q --json "$dir/r.json" > "$dir/throng.txt" || true
after=$(requests)
python3 - "$dir/r.json" "$w_rate" "$w_p50" "$w_p99" "$conns" "$((after - before - 1))" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
w_rate, w_p50, w_p99, conns, served = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
q, lat = r["queries"], r["latency"]["response_time_us"]
little = conns / q["rate_achieved"] * 1e6
print(f"wrk     {float(w_rate):>9.0f}/s  p50 {w_p50}  p99 {w_p99}")
print(f"throng  {q['rate_achieved']:>9.0f}/s  p50 {lat['p50']}us  p99 {lat['p99']}us  "
      f"mean {lat['mean']:.0f}us; Little's law {little:.0f}us ({100 * (lat['mean'] / little - 1):+.1f}%)")
print(f"throng answered {q['answered']}, nginx counted {served} requests in its run; "
      f"peer closed {r['connections']['peer_closed']}, errors {sum(q['errors'].values())}, "
      f"client cpu {r['client']['cpu_pct']:.0f}% ({r['client']['cpu_us_per_answer']:.1f} us/answer), "
      f"checks {'PASS' if all(c['pass'] for c in r['checks']) else 'FAIL'}")
EOF
