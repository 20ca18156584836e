#!/usr/bin/env bash
# throng --proto redis beside redis-benchmark on the same redis-server
# (stock but for its port and no persistence) in the same run, in a fresh
# network namespace this script creates (only `lo` up, no sysctl changed):
# the same commands, connections, pipeline depth and count, each tool in
# turn. Prints each tool's rate, p50/p99 and CPU per answer (user +
# system of the tool's process, from getrusage), and the server's own
# count of the commands each run made (INFO commandstats) against the
# tool's.
# Each tool gets THREADS threads (redis-benchmark --threads, throng
# --workers): one by default, so that the two loops are set core for core.
# Usage: bench/redis.sh [CONNECTIONS] [REQUESTS] [ROUNDS] [THREADS]   (50, 200000, 2, 1)
set -euo pipefail
conns=${1:-50}
requests=${2:-200000}
rounds=${3:-2}
threads=${4:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${THRONG_BIN:-$here/target/release/throng}
[ -x "$bin" ] || (cd "$here" && cargo build --release -q)
for p in redis-server redis-benchmark redis-cli; do
  command -v "$p" >/dev/null || { echo "$p is needed (apt-get install redis-server redis-tools)" >&2; exit 1; }
done

if [ "${INSIDE_NS:-}" != 1 ]; then
  exec unshare -n env INSIDE_NS=1 "$0" "$@"
fi
ip link set lo up
dir=$(mktemp -d)
port=6390
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
  --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir"
trap 'kill "$(cat "$dir/redis.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done

# The calls of one command in INFO commandstats.
calls() {
  redis-cli -p "$port" info commandstats | tr -d '\r' |
    awk -F'[:=,]' -v c="cmdstat_$1" '$1 == c { print $3; found = 1 } END { if (!found) print 0 }'
}
# CPU seconds (user + system) of the command run, on stderr's last line.
cpu() {
  python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=False)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"cpu {r.ru_utime + r.ru_stime:.3f}", file=sys.stderr)' "$@"
}

echo "redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $(nproc) cores, $conns connections, $requests requests a run, $threads thread(s) a tool, namespace untuned"
printf '%-8s %-10s %-16s %10s %9s %9s %10s %9s\n' round case tool "rate/s" p50 p99 "cpu us/q" "server"
# case name, redis-benchmark's test, pipeline, throng's commands
cases=(
  "ping-p1|ping_mbulk|1|PING"
  "ping-p16|ping_mbulk|16|PING"
  "set-p16|set|16|SET key:__rand_int__ xxx"
  "get-p16|get|16|GET key:__rand_int__"
)
for round in $(seq 1 "$rounds"); do
  for c in "${cases[@]}"; do
    IFS='|' read -r name test pipe command <<<"$c"
    stat=${command%% *}; stat=${stat,,}
    before=$(calls "$stat")
    cpu redis-benchmark -p "$port" -c "$conns" -n "$requests" -P "$pipe" -r 100000 -t "$test" --threads "$threads" --csv \
      > "$dir/rb.csv" 2> "$dir/rb.err"
    served=$(( $(calls "$stat") - before ))
    awk -F'","' -v n="$name" -v r="$round" -v s="$served" -v q="$requests" \
      -v t="$(awk '/^cpu/ { print $2 }' "$dir/rb.err")" '
      NR == 2 { gsub(/"/, "", $0); split($0, f, ",")
                printf "%-8s %-10s %-16s %10.0f %7.3fms %7.3fms %10.2f %9d\n",
                  r, n, "redis-benchmark", f[2], f[5], f[7], t * 1e6 / q, s }' "$dir/rb.csv"
    before=$(calls "$stat")
    cpu "$bin" client "127.0.0.1:$port" --proto redis --redis-command "$command" --redis-keys 100000 \
      --closed-loop -c "$conns" --window "$pipe" --workers "$threads" --queries "$requests" -T 60s -q \
      --json "$dir/t.json" > /dev/null 2> "$dir/t.err" || true
    served=$(( $(calls "$stat") - before ))
    python3 - "$dir/t.json" "$round" "$name" "$served" \
      "$(awk '/^cpu/ { print $2 }' "$dir/t.err")" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rnd, name, served, cpu = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
q, lat = r["queries"], r["latency"]["response_time_us"]
print(f"{rnd:<8} {name:<10} {'throng':<16} {q['rate_achieved']:>10.0f} "
      f"{lat['p50'] / 1000:>7.3f}ms {lat['p99'] / 1000:>7.3f}ms {cpu * 1e6 / max(q['answered'], 1):>10.2f} "
      f"{served:>9d}  (answered {q['answered']}, errors {sum(q['errors'].values())}, "
      f"failed {sum(q.get('failed_answers', {}).values())})")
EOF
  done
done
