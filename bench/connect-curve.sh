#!/usr/bin/env bash
# The kernel's connect() curve: connects/s of one process (one core) against
# how full the ephemeral port range of one (source, destination) pair is,
# and against the number of source addresses the same connections are
# spread over. In a private network namespace this script creates, with
# its default sysctls (nothing is changed), `throng server --mode discard`
# listens on 127.0.0.1:4243 and bench/port_knee.py times every connect()
# (blocking, IP_BIND_ADDRESS_NO_PORT as throng does), holding the
# connections in worker processes of ~18,000 sockets each:
#
#   - 1 source: to the end of the range (EADDRNOTAVAIL) or the budget;
#   - 2, 4 and 8 sources (127.0.0.1, .2, ... in turn): as many connections
#     as the range has ports, so that each pair fills to 1/S of it.
#
# If connect()'s cost follows each pair's fill only, the curves lie on one
# another when drawn against it; where they part, the sources cost too.
# Writes OUT/connect-curve.csv, OUT/connect-curve.svg and the raw JSON, and
# prints port_knee.py's summary (the knee of each variant).
# THRONG_BIN names the server binary (default: a copy of
# target/release/throng). Traffic to 127.0.0.0/8 only; no fs.* sysctl.
# Usage: bench/connect-curve.sh [RUNS] [BUDGET_SECONDS_PER_RUN] [OUT]
#        (defaults 1, 40, bench/connect-curve)
set -euo pipefail
runs=${1:-1}
budget=${2:-40}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${3:-$here/bench/connect-curve}

if [ -z "${THRONG_IN_NETNS:-}" ]; then
  if [ -z "${THRONG_BIN:-}" ]; then
    (cd "$here" && cargo build --release --quiet)
    cp "$here/target/release/throng" /tmp/throng-curve
    export THRONG_BIN=/tmp/throng-curve
  fi
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  THRONG_IN_NETNS=1 exec unshare -n -- "$0" "$runs" "$budget" "$out"
fi

bin=$THRONG_BIN
port=4243
work=$(mktemp -d)
# shellcheck source=bench/lib.sh
. "$here/bench/lib.sh"
ip link set lo up
discard_server_start "$bin" "$port" "$work"

read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
size=$((hi - lo + 1))
echo "machine: $(nproc) cores, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "port range $lo-$hi ($size ports, the namespace's default); $runs run(s) a variant, at most $budget s each"
py="$here/bench/port_knee.py"
jsons=()
for s in 1 2 4 8; do
  cap=()
  [ "$s" = 1 ] || cap=(--cap "$size")
  label="$s source$([ "$s" = 1 ] || echo s)"
  python3 "$py" measure --port "$port" --label "$label" --runs "$runs" --budget "$budget" \
    --sources "$s" "${cap[@]}" --json "$out/sources-$s.json"
  jsons+=("$out/sources-$s.json")
done
python3 "$py" summary "${jsons[@]}"
python3 "$py" csv "${jsons[@]}" >"$out/connect-curve.csv"
python3 "$py" svg "${jsons[@]}" >"$out/connect-curve.svg"
echo
echo "wrote $out/connect-curve.csv and $out/connect-curve.svg"
