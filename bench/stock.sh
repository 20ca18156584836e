#!/usr/bin/env bash
# What a user on a stock Linux machine sees with default flags: N connections
# (default 100,000) from `throng client` to `throng server` over loopback,
# held HOLD_SECONDS (default 5), then closed. It runs in a private network
# namespace this script creates, where it only brings `lo` up: NO sysctl is
# changed (that is the point; the namespace's port range, somaxconn and SYN
# backlog are printed at the start so the record shows they are stock).
# The server gets only --listen and the client only -c, --connect-rate 1m,
# -T and --json: everything else is throng's default.
#
# Reports established/N, failures, connect rate, connect p99 and the p99
# time spent inside connect(), user-space bytes per held connection for each
# side (anonymous memory, the Anonymous: line of /proc/PID/smaps_rollup, so
# the binary's pages that all processes share are not counted once per
# process: summed over the process tree at the peak of open connections,
# minus, for each process then in the tree, that of the side's first
# process while it was alone and idle, divided by the connections then open;
# the last sample at the peak, once the ramp has settled); beside it each
# side's whole process tree over the connections, nothing taken off, as
# RSS (what `ps` shows: the shared binary counted once per process) and PSS,
# the server's summary, and a line against the targets set for N=100,000:
# >= 30,000 connections/s, connect p99 <= 50 ms, <= 256 B per connection on
# each side. Missing a target is printed as 'missed' and does not fail;
# a failed connection, or fewer than N established, exits non-zero.
# Usage: bench/stock.sh [N] [HOLD_SECONDS]   (CI runs it with 50000)
# SERVER_ARGS and CLIENT_ARGS add flags to either side, THRONG_BIN names
# another build (before/after), for comparisons
# only: the stock figure is the one with none set.
set -euo pipefail
n=${1:-100000}
hold=${2:-5}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ -z "${THRONG_IN_NETNS:-}" ]; then
  cd "$here"
  cargo build --release --quiet
  # A private network namespace: a fresh loopback with the kernel's defaults.
  THRONG_IN_NETNS=1 exec unshare -n -- "$0" "$@"
fi

cd "$here"
bin=${THRONG_BIN:-$here/target/release/throng}
work=$(mktemp -d)
port=4242
pids=()

# shellcheck source=bench/lib.sh
. "$here/bench/lib.sh"
# Sums anonymous memory (kB) over a process and its descendants.
tree_rss() {
  local total=0 p kb
  for p in $(tree_pids "$1"); do
    kb=$(awk '/^Anonymous:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || true)
    total=$((total + ${kb:-0}))
  done
  echo "$total"
}
# Sums a smaps_rollup field (kB) over a process and its descendants: Rss
# (what `ps` shows, the shared binary and libraries once per process) or
# Pss (shared pages divided among the processes that map them).
tree_sum() {
  local total=0 p kb
  for p in $(tree_pids "$2"); do
    kb=$(awk -v f="$1:" '$1 == f {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || true)
    total=$((total + ${kb:-0}))
  done
  echo "$total"
}
tcp_inuse() { awk '/^TCP:/ {print $3}' /proc/net/sockstat; }
# Is something listening on 127.0.0.1:$port in this namespace? (No connect,
# so the server's accepted count stays exactly N.)
listening() {
  awk -v a="$(printf '0100007F:%04X' "$port")" '$2 == a && $4 == "0A" {f = 1} END {exit !f}' /proc/net/tcp
}

cleanup() {
  local all=() p
  for p in "${pids[@]}"; do all+=($(tree_pids "$p")); done
  for p in "${all[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  sleep 0.2
  for p in "${all[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip link set lo up
echo "stock namespace: ip_local_port_range $(tr '\t' ' ' </proc/sys/net/ipv4/ip_local_port_range)," \
  "somaxconn $(cat /proc/sys/net/core/somaxconn)," \
  "tcp_max_syn_backlog $(cat /proc/sys/net/ipv4/tcp_max_syn_backlog)," \
  "fd limit $(ulimit -Sn) (hard $(ulimit -Hn)), $(nproc) cores; N=$n, hold ${hold}s"

"$bin" server --listen "127.0.0.1:$port" ${SERVER_ARGS:-} >"$work/server.out" 2>&1 &
srv=$!
pids+=("$srv")
deadline=$((SECONDS + 30))
until grep -qE '^listen backlog|listening on' "$work/server.out" || listening; do
  kill -0 "$srv" 2>/dev/null || { echo "server exited:"; cat "$work/server.out"; exit 1; }
  [ "$SECONDS" -lt "$deadline" ] || { echo "server not listening after 30 s:"; cat "$work/server.out"; exit 1; }
  sleep 0.05
done
sleep 1
sed 's/^/server: /' "$work/server.out" | cut -c1-200
server_base=$(tree_rss "$srv")
inuse_base=$(tcp_inuse)

"$bin" client "127.0.0.1:$port" -c "$n" --connect-rate 1m -T "${hold}s" --json "$work/client.json" ${CLIENT_ARGS:-} \
  >"$work/client.out" 2>"$work/client.err" &
cli=$!
pids+=("$cli")
start=$SECONDS
limit=$((hold + 60 + n / 1000))
# The fixed cost of one client process: its memory while it is still alone,
# before any child process starts (the last such sample; its preflight
# opens and closes a few thousand sockets to measure kernel memory, so the
# socket count cannot tell when the ramp starts).
client_base=0
while kill -0 "$cli" 2>/dev/null && [ "$(tree_pids "$cli" | wc -l)" -le 1 ] && [ $((SECONDS - start)) -lt "$limit" ]; do
  r=$(tree_rss "$cli")
  [ "$(tree_pids "$cli" | wc -l)" -le 1 ] && [ "$r" -gt 0 ] && client_base=$r
  sleep 0.01
done

printf "%7s %9s %14s %14s %12s\n" time_s open client_anon_MB server_anon_MB tcp_sockets
whole="0 0 0 0"
peak_open=0 peak_client=0 peak_server=0 timed_out=0 last_print=-1 procs_client=1 procs_server=1
while kill -0 "$cli" 2>/dev/null; do
  line=$(grep -E '^ *[0-9]+s +open' "$work/client.err" | tail -1 || true)
  open=$(sed -n 's/.*open \([0-9]*\).*/\1/p' <<<"$line")
  open=${open:-0}
  c=$(tree_rss "$cli"); s=$(tree_rss "$srv")
  # The last sample at the peak while both ends of every connection are
  # still open: the memory once the ramp has settled (right at its end the
  # deadline queues and buffers of the last connects are still there).
  if [ "$open" -gt 0 ] && [ "$open" -ge "$peak_open" ] \
    && [ $(( $(tcp_inuse) - inuse_base )) -ge $((2 * open)) ]; then
    peak_open=$open peak_client=$c peak_server=$s
    whole="$(tree_sum Rss "$cli") $(tree_sum Rss "$srv") $(tree_sum Pss "$cli") $(tree_sum Pss "$srv")"
    procs_client=$(tree_pids "$cli" | wc -l) procs_server=$(tree_pids "$srv" | wc -l)
  fi
  t=$((SECONDS - start))
  if [ "$t" -ne "$last_print" ]; then
    printf "%7d %9d %14.1f %14.1f %12d\n" "$t" "$open" "$(echo "$c/1024" | bc -l)" \
      "$(echo "$s/1024" | bc -l)" "$(( $(tcp_inuse) - inuse_base ))"
    last_print=$t
  fi
  if [ "$t" -ge "$limit" ]; then
    echo "client still running after ${limit} s: stopping it"
    timed_out=1
    kill -TERM "$cli" 2>/dev/null || true
    break
  fi
  sleep 0.5
done
rc=0
wait "$cli" || rc=$?
pids=("$srv")
kill -TERM "$srv" 2>/dev/null || true
wait "$srv" || true
pids=()

sed -n '/^throng client:/q; s/^/client: /p' "$work/client.out" | cut -c1-200
echo "client summary:"
sed -n '/^throng client:/,$p' "$work/client.out" | cut -c1-200
[ -s "$work/client.json" ] || { echo "no client JSON (client exit code $rc)"; tail -20 "$work/client.err"; exit 1; }

# Bytes per held connection, from kB of anonymous memory; the held count is the open count
# at the sampled peak (or the JSON's peak when no progress line was read).
ok=0
python3 - "$work/client.json" "$n" "$peak_open" "$client_base" "$peak_client" "$server_base" \
  "$peak_server" "$work/server.out" "$procs_client" "$procs_server" $whole <<'PY' || ok=$?
import json, sys
path, n, peak_open, cb, cp, sb, sp, server_out, pc, ps = sys.argv[1:11]
crss, srss, cpss, spss = map(int, sys.argv[11:15])
n, peak_open, cb, cp, sb, sp, pc, ps = map(int, (n, peak_open, cb, cp, sb, sp, pc, ps))
r = json.load(open(path)); c = r["connections"]
failed = sum(c["failed"].values())
held = peak_open or c.get("peak", 0) or 1
why = ", ".join(f"{k} {v}" for k, v in c["failed"].items() if v)
rate = c["connect_rate"]; p99 = c["connect_time_us"]["p99"]
sys_p99 = c.get("connect_syscall_us", {}).get("p99")
# Each process of a side costs about what one idle process does (binary,
# threads, allocator); the rest is per connection.
cbpc = (cp - pc * cb) * 1024 // held; sbpc = (sp - ps * sb) * 1024 // held
craw = (cp - cb) * 1024 // held; sraw = (sp - sb) * 1024 // held
print(f"established {c['established']}/{n}")
print(f"failed {failed}" + (f" ({why})" if why else ""))
print(f"connect rate {rate:.0f}/s")
print(f"connect p99 {p99} us")
print(f"connect-syscall p99 {sys_p99 if sys_p99 is not None else 'n/a'}" + (" us" if sys_p99 is not None else ""))
print(f"client user-space bytes per held connection: {cbpc} ({cp} kB in {pc} processes at {held} open, "
      f"less {pc} x {cb} kB of one idle process; {craw} counting only the first process's)")
print(f"server user-space bytes per held connection: {sbpc} ({sp} kB in {ps} processes at {held} open, "
      f"less {ps} x {sb} kB of one idle process; {sraw} counting only the first process's)")
# What a user pays with nothing taken off: each side's whole tree at the
# peak over the connections, RSS (every process's binary and libraries
# counted in full) and PSS (shared pages counted once over the processes).
for side, rss, pss, procs in (("client", crss, cpss, pc), ("server", srss, spss, ps)):
    print(f"{side} whole-tree RSS per held connection: {rss * 1024 // held} "
          f"({rss} kB in {procs} processes); PSS {pss * 1024 // held} ({pss} kB)")
summary = False
for line in open(server_out, errors="replace"):
    summary = summary or line.startswith("throng server: stopped")
    if summary and any(w in line for w in ("accepted", "processes", "overflows")):
        print("server " + line.strip()[:200])
def mark(good): return "ok" if good else "missed"
print(f"targets{'' if n == 100000 else ' (set for N=100000)'}: "
      f"connect rate {rate:.0f}/s >= 30000 {mark(rate >= 30000)}; "
      f"connect p99 {p99} us <= 50000 {mark(p99 <= 50000)}; "
      f"client {cbpc} B/conn <= 256 {mark(cbpc <= 256)}; "
      f"server {sbpc} B/conn <= 256 {mark(sbpc <= 256)}")
sys.exit(0 if c["established"] == n and failed == 0 else 1)
PY
[ "$timed_out" -eq 0 ] || { echo "FAIL: the client did not finish in time"; exit 1; }
[ "$ok" -eq 0 ] || { echo "FAIL: not every connection was established (client exit code $rc)"; exit 1; }
[ "$rc" -eq 0 ] || { echo "FAIL: client exit code $rc"; exit 1; }
