#!/usr/bin/env bash
# throng against dnsperf (Debian's), both against the same unbound on this
# host (answers from local-data, no recursion; one thread pinned to core 0,
# the load generator pinned to core 1), over UDP, TCP and TLS (dnsperf's
# "dot"):
#  1. maximum answered qps at the same sockets and outstanding-query limit
#     (dnsperf -c C -q Q; throng --closed-loop -c C --window Q/C);
#  2. both tools' latency at the same offered load (half of dnsperf's
#     maximum; dnsperf -Q, throng -r).
# Usage: bench/dnsperf.sh [SECONDS] [SOCKETS] [OUTSTANDING]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
conns=${2:-10}
outstanding=${3:-100}
for p in unbound dnsperf; do
  command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] ||
    { echo "$p is needed: apt-get install $p" >&2; exit 1; }
done
cargo build --release --quiet
bin=$PWD/target/release/throng
work=$(mktemp -d)
unbound_pid=
trap '[ -n "$unbound_pid" ] && kill "$unbound_pid" 2>/dev/null; rm -rf "$work"' EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port); tls_port=$(free_port)
python3 - "$work" <<'PY'
import sys, subprocess
d = sys.argv[1]
# A throw-away certificate for unbound's TLS port.
subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-nodes", "-days", "1", "-subj", "/CN=localhost", "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost", "-addext", "basicConstraints=critical,CA:FALSE",
                "-keyout", f"{d}/key.pem", "-out", f"{d}/cert.pem"], check=True, capture_output=True)
PY
# shellcheck source=bench/lib.sh
. bench/lib.sh
unbound_conf "$port" "$work" "  interface: 127.0.0.1@$tls_port
  tls-port: $tls_port
  tls-service-key: \"$work/key.pem\"
  tls-service-pem: \"$work/cert.pem\"
  incoming-num-tcp: 1024" >"$work/unbound.conf"
taskset -c 0 unbound -d -c "$work/unbound.conf" 2>"$work/unbound.log" &
unbound_pid=$!
until grep -q "start of service" "$work/unbound.log"; do
  kill -0 "$unbound_pid" 2>/dev/null || { cat "$work/unbound.log" >&2; exit 1; }
  sleep 0.05
done
echo "www.example.test A" >"$work/queries"
window=$(( (outstanding + conns - 1) / conns ))

# dnsperf MODE [QPS] -> "qps mean_us"
dnsperf_run() {
  local p=$port; [ "$1" = dot ] && p=$tls_port
  local limit=(); [ -n "${2:-}" ] && limit=(-Q "$2")
  taskset -c 1 dnsperf -s 127.0.0.1 -p "$p" -m "$1" -d "$work/queries" -c "$conns" \
    -q "$outstanding" -l "$secs" -T 1 "${limit[@]}" >"$work/dnsperf.out" 2>&1 || true
  python3 - "$work/dnsperf.out" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
qps = float(re.search(r"Queries per second:\s+([\d.]+)", t).group(1))
lat = float(re.search(r"Average Latency \(s\):\s+([\d.]+)", t).group(1))
lost = int(re.search(r"Queries lost:\s+(\d+)", t).group(1))
print(f"{qps:.0f} {lat * 1e6:.0f} - - {lost}")
PY
}

# throng TRANSPORT [QPS] -> "qps mean_us p50_us p99_us errors"
throng_run() {
  local target=127.0.0.1:$port tls=()
  [ "$1" = tls ] && { target=127.0.0.1:$tls_port; tls=(--tls-ca "$work/cert.pem"); }
  local load=(--closed-loop --window "$window"); [ -n "${2:-}" ] && load=(-r "$2")
  taskset -c 1 "$bin" client "$target" --transport "$1" "${tls[@]}" --qname www.example.test \
    -c "$conns" "${load[@]}" -w 1 -T "${secs}s" -q --json "$work/t.json" >/dev/null 2>&1 || true
  python3 - "$work/t.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
q, l = r["queries"], r["latency"]["response_time_us"]
errs = q["timed_out"] + sum(q["errors"].values())
print(f"{q['answered'] / q['seconds']:.0f} {l['mean']:.0f} {l['p50']} {l['p99']} {errs}")
PY
}

echo "machine: $(nproc) cores, $(uname -r); unbound $(unbound -V | head -1 | cut -d' ' -f2) (1 thread, core 0); $(dnsperf -h 2>&1 | grep Version); load on core 1"
echo "$conns sockets, $outstanding outstanding (throng: --window $window), $secs s per run"
printf "%-5s %-9s %10s %9s %8s %8s %7s\n" mode tool qps mean_us p50_us p99_us lost
for mode in udp tcp tls; do
  dmode=$mode; [ "$mode" = tls ] && dmode=dot
  read -r dq dm dp50 dp99 dlost < <(dnsperf_run "$dmode")
  read -r tq tm tp50 tp99 terr < <(throng_run "$mode")
  printf "%-5s %-9s %10s %9s %8s %8s %7s\n" "$mode" dnsperf "$dq" "$dm" "$dp50" "$dp99" "$dlost"
  printf "%-5s %-9s %10s %9s %8s %8s %7s   ratio %.2f\n" "$mode" throng "$tq" "$tm" "$tp50" "$tp99" "$terr" \
    "$(echo "$tq / $dq" | bc -l)"
  half=$(( dq / 2 ))
  read -r dq2 dm2 _ _ dlost2 < <(dnsperf_run "$dmode" "$half")
  read -r tq2 tm2 tp502 tp992 terr2 < <(throng_run "$mode" "$half")
  printf "%-5s %-9s %10s %9s %8s %8s %7s   (offered %s/s)\n" "$mode" dnsperf "$dq2" "$dm2" - - "$dlost2" "$half"
  printf "%-5s %-9s %10s %9s %8s %8s %7s   (offered %s/s)\n" "$mode" throng "$tq2" "$tm2" "$tp502" "$tp992" "$terr2" "$half"
done
