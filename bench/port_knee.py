#!/usr/bin/env python3
"""connect() cost against connections per (source, destination) pair.

Opens blocking TCP connections from 127.0.0.1 (or from S source addresses
127.0.0.1, .2, ... in turn; ephemeral port picked inside connect(),
IP_BIND_ADDRESS_NO_PORT, as throng does) to one 127.0.0.1:PORT
until the kernel's local port ranges are used up (EADDRNOTAVAIL), a cap is
reached or a time budget runs out, and times every connect(). A process may
hold at most ~20,000 fds, so the sockets are opened by worker processes run
one after the other, each holding its sockets until the run ends.

Python 3 stdlib only. Meant to run inside a private network namespace with a
server listening on 127.0.0.1:PORT (bench/port-knee.sh sets that up).

  port_knee.py measure --port P --label L --runs N --json OUT [--cap N]
               [--budget S] [--bucket 500] [--per-proc 18000] [--sources 1]
  port_knee.py summary A.json [B.json ...]
  port_knee.py csv A.json [B.json ...] > curve.csv
  port_knee.py svg A.json [B.json ...] > curve.svg
"""
import argparse
import array
import ctypes
import errno
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

IP_BIND_ADDRESS_NO_PORT = 24


def port_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = map(int, f.read().split())
    return lo, hi


def sockstat_tcp():
    """(inuse, tw) of TCP in this network namespace."""
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                w = line.split()
                d = dict(zip(w[1::2], map(int, w[2::2])))
                return d.get("inuse", 0), d.get("tw", 0)
    return 0, 0


# ---------------------------------------------------------------- worker

def source(i, sources):
    """The source address of connection number i: 127.0.0.1, .2, ... in
    turn (every 127/8 address is on lo; each has its own port space)."""
    return f"127.0.0.{1 + i % sources}"


def worker(port, count, deadline_ns, bucket, out_path, first=0, sources=1):
    """Opens up to `count` connections (numbers first.. of the run, from
    `sources` source addresses in turn), writes the timings, holds them
    until stdin closes or says anything, then closes them with RST (no
    TIME_WAIT)."""
    try:  # die with the orchestrator
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks = []
    starts = array.array("q")   # perf_counter_ns before socket()
    durs = array.array("q")     # connect() duration, ns
    ends = array.array("q")     # perf_counter_ns after connect()
    reason = "count"
    dst = ("127.0.0.1", port)
    pc = time.perf_counter_ns
    try:
        for i in range(count):
            t0 = pc()
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            s.bind((source(first + i, sources), 0))
            a = pc()
            try:
                s.connect(dst)
            except OSError as e:
                s.close()
                reason = errno.errorcode.get(e.errno, str(e.errno))
                break
            b = pc()
            socks.append(s)
            starts.append(t0)
            durs.append(b - a)
            ends.append(b)
            if (i + 1) % bucket == 0 and b > deadline_ns:
                reason = "budget"
                break
    except OSError as e:  # socket() itself: EMFILE, ENFILE, ENOBUFS
        reason = errno.errorcode.get(e.errno, str(e.errno))
    # the local ports the kernel picked (read after the timed loop)
    ports = array.array("q", (s.getsockname()[1] for s in socks))
    with open(out_path, "wb") as f:
        for a in (starts, durs, ends, ports):
            a.tofile(f)
    sys.stdout.write(f"done {len(socks)} {reason}\n")
    sys.stdout.flush()
    sys.stdin.readline()
    lg = (1).to_bytes(4, "little") + (0).to_bytes(4, "little")  # l_onoff 1, l_linger 0
    for s in socks:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, lg)
        except OSError:
            pass
        s.close()


# ----------------------------------------------------------- orchestrator

def wait_quiet(base_inuse, timeout=30.0):
    """Waits until the namespace's TCP sockets are back to the listeners and
    no TIME_WAIT is left, so each run starts from an empty port table."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        inuse, tw = sockstat_tcp()
        if inuse <= base_inuse and tw == 0:
            return True
        time.sleep(0.1)
    return False


def one_run(args, workdir, run_no, base_inuse):
    lo, hi = port_range()
    size = hi - lo + 1
    # one more than the ranges: ends on EADDRNOTAVAIL
    cap = args.cap or size * args.sources + 1
    deadline = time.perf_counter_ns() + int(args.budget * 1e9)
    procs = []
    starts = array.array("q")
    durs = array.array("q")
    ends = array.array("q")
    ports = array.array("q")
    reason = "cap"
    t_begin = time.monotonic()
    try:
        held = 0
        while held < cap:
            n = min(args.per_proc, cap - held)
            out = os.path.join(workdir, f"{args.label}.{run_no}.{len(procs)}.bin")
            p = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "_worker", str(args.port),
                 str(n), str(deadline), str(args.bucket), out, str(held), str(args.sources)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            procs.append(p)
            line = p.stdout.readline().split()
            if len(line) != 3 or line[0] != "done":
                raise RuntimeError(f"worker {p.pid} said {line!r}")
            got, why = int(line[1]), line[2]
            with open(out, "rb") as f:
                for a in (starts, durs, ends, ports):
                    a.fromfile(f, got)
            os.unlink(out)
            held += got
            if why != "count":
                reason = why
                break
    finally:
        for p in procs:
            try:
                p.stdin.close()   # the worker closes its sockets and exits
            except OSError:
                pass
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    elapsed = time.monotonic() - t_begin
    quiet = wait_quiet(base_inuse)
    # connect() takes ports of one parity first: where the other one starts
    first_parity = ports[0] % 2 if ports else 0
    switch = next((i for i, p in enumerate(ports) if p % 2 != first_parity), None)
    n_first = sum(1 for p in range(lo, hi + 1) if p % 2 == first_parity)
    # buckets of args.bucket connections (full ones only)
    b = args.bucket
    rows = []
    for k in range(len(durs) // b):
        i, j = k * b, (k + 1) * b
        seg = sorted(durs[i:j])
        # wall time: the first socket() of the bucket to the end of its last
        # connect() (socket(), setsockopt(), bind() and Python included)
        wall = ends[j - 1] - starts[i]
        rows.append({
            "held": i,
            "rate": b / (wall / 1e9),
            "mean_us": sum(seg) / b / 1e3,
            "p99_us": seg[math.ceil(0.99 * b) - 1] / 1e3,
        })
    return {"run": run_no, "range": [lo, hi], "size": size, "sources": args.sources,
            "opened": len(durs),
            "stop": reason, "seconds": round(elapsed, 2), "quiet_after": quiet,
            "workers": len(procs), "first_parity": "odd" if first_parity else "even",
            "ports_of_that_parity": n_first, "other_parity_from": switch,
            "buckets": rows}


def measure(args):
    lo, hi = port_range()
    size = hi - lo + 1
    base_inuse, _ = sockstat_tcp()
    workdir = tempfile.mkdtemp(prefix="port-knee.")
    runs = []
    try:
        for r in range(args.runs):
            if not wait_quiet(base_inuse):
                print("warning: sockets of an earlier run still there", file=sys.stderr)
            if r:
                time.sleep(args.settle)  # the kernel frees the last run's sockets (RCU)
            with open("/proc/loadavg") as f:
                load = f.read().split()[0]
            res = one_run(args, workdir, r + 1, base_inuse)
            res["loadavg_before"] = float(load)
            with open("/proc/loadavg") as f:
                res["loadavg_after"] = float(f.read().split()[0])
            runs.append(res)
            print(f"{args.label} run {r + 1}: range {lo}-{hi} ({size} ports), opened "
                  f"{res['opened']} ({res['opened'] / size:.1%}), stop {res['stop']}, "
                  f"{res['seconds']} s, {res['workers']} worker processes, "
                  f"load before {load}, after {res['loadavg_after']}", flush=True)
    finally:
        os.rmdir(workdir)
    result = {"label": args.label, "range": [lo, hi], "size": size, "bucket": args.bucket,
              "sources": args.sources,
              "kernel": os.uname().release, "runs": runs, "median": median_curve(runs)}
    with open(args.json, "w") as f:
        json.dump(result, f)
    return result


def median_curve(runs):
    """Per bucket, the median over the runs that reached it."""
    by = {}
    for r in runs:
        for row in r["buckets"]:
            by.setdefault(row["held"], []).append(row)
    out = []
    for held in sorted(by):
        rs = by[held]
        out.append({
            "held": held, "n": len(rs),
            "rate": statistics.median(x["rate"] for x in rs),
            "mean_us": statistics.median(x["mean_us"] for x in rs),
            "p99_us": statistics.median(x["p99_us"] for x in rs),
            "rate_min": min(x["rate"] for x in rs), "rate_max": max(x["rate"] for x in rs),
        })
    return out


# ---------------------------------------------------------------- summary

START_BUCKETS = 4          # the start rate: median of the first 4 buckets (2,000 connections)
RATE_FRAC = 0.5            # fast: >= 50% of the start rate ...
P99_LIMIT_US = 1000.0      # ... and p99 connect() under 1 ms


def knee(curve, size, bucket):
    """The fast region from the start of the range: buckets at >= RATE_FRAC
    of the start rate with p99 under P99_LIMIT_US, up to the first two slow
    buckets in a row. Also what the buckets past it cost."""
    start_rate = statistics.median(r["rate"] for r in curve[:START_BUCKETS])
    start_mean = statistics.median(r["mean_us"] for r in curve[:START_BUCKETS])
    ok = [r["rate"] >= RATE_FRAC * start_rate and r["p99_us"] < P99_LIMIT_US for r in curve]
    # the first slow bucket followed by another slow one (or the last one):
    # a lone slow bucket is a scheduling hiccup on this shared machine
    first_bad = next((i for i, v in enumerate(ok)
                      if not v and (i + 1 == len(ok) or not ok[i + 1])), None)
    dips = sum(1 for v in ok[:first_bad] if not v)
    if first_bad is None:
        held = curve[-1]["held"] + bucket if curve else 0
        past = []
    else:
        held = curve[first_bad]["held"]   # held when the first slow bucket starts
        past = curve[first_bad + 1:]      # the straddling bucket left out
    k = {"start_rate": start_rate, "start_mean_us": start_mean, "knee": held,
         "knee_frac": held / size, "first_bad": first_bad, "dips": dips}
    if past:
        k["past_rate"] = statistics.median(r["rate"] for r in past)
        k["past_mean_us"] = statistics.median(r["mean_us"] for r in past)
        k["past_p99_us"] = statistics.median(r["p99_us"] for r in past)
        k["past_to"] = past[-1]["held"] + bucket
    return k


def first_bad_seen(k):
    """Whether the curve reached a slow region (else the knee is where the
    run ended)."""
    return k["first_bad"] is not None


def summary(paths):
    results = [json.load(open(p)) for p in paths]
    for res in results:
        # the fractions are of the ports of all the pairs: each pair's fill
        size, b = res["size"] * res.get("sources", 1), res["bucket"]
        curve = res["median"]
        k = knee(curve, size, b)
        lo, hi = res["range"]
        srcs = res.get("sources", 1)
        ports = f"{res['size']} ports" + (f" from each of {srcs} sources" if srcs > 1 else "")
        print(f"\n{res['label']}: port range {lo}-{hi} ({ports}), kernel "
              f"{res['kernel']}, {len(res['runs'])} runs, buckets of {b}; "
              f"table: medians over the runs")
        for r in res["runs"]:
            kr = knee(r["buckets"], size, b)
            print(f"  run {r['run']}: opened {r['opened']} ({r['opened'] / size:.1%}), stop "
                  f"{r['stop']} after {r['seconds']} s, load {r['loadavg_before']}..{r['loadavg_after']}; "
                  f"start {kr['start_rate']:.0f}/s mean {kr['start_mean_us']:.1f} us; fast up "
                  f"to {kr['knee']}" + (f" ({kr['dips']} lone slow bucket(s) before)"
                                        if kr["dips"] else "") + f"; {r['first_parity']} ports ({r['ports_of_that_parity']}) "
                  f"first, the other parity from connection #{r['other_parity_from']}")
        print(f"  {'held':>7} {'frac':>6} {'conn/s':>8} {'(min..max)':>15} {'mean_us':>8} "
              f"{'p99_us':>8}")
        near = set()
        if k["first_bad"] is not None:
            near = set(range(k["first_bad"] - 2, k["first_bad"] + 3))
        step = size * 0.05
        nxt = 0.0
        for i, r in enumerate(curve):
            if r["held"] >= nxt or i in near or i == len(curve) - 1:
                rng = f"({r['rate_min']:.0f}..{r['rate_max']:.0f})"
                print(f"  {r['held']:>7} {r['held'] / size:>6.1%} {r['rate']:>8.0f} "
                      f"{rng:>15} {r['mean_us']:>8.1f} {r['p99_us']:>8.1f}"
                      + ("" if r["n"] == len(res["runs"]) else f"  ({r['n']} runs)"))
                while nxt <= r["held"]:
                    nxt += step
        print(f"  start (first {START_BUCKETS * b} connections): {k['start_rate']:.0f} "
              f"connects/s, mean connect() {k['start_mean_us']:.1f} us")
        print(f"  knee: fast (>= {RATE_FRAC:.0%} of the start rate, p99 < {P99_LIMIT_US:.0f} us) "
              f"up to {k['knee']} connections"
              + (f" ({k['knee'] // srcs} per pair)" if srcs > 1 else " of the pair")
              + f" ({k['knee_frac']:.1%} of the range)"
              + ("" if first_bad_seen(k) else ": the run never slowed")
              + (f"; {k['dips']} lone slow bucket(s) before it" if k["dips"] else ""))
        if "past_rate" in k:
            print(f"  past it (to {k['past_to']}, {k['past_to'] / size:.1%}): "
                  f"{k['past_rate']:.0f} connects/s, mean {k['past_mean_us']:.0f} us, "
                  f"p99 {k['past_p99_us']:.0f} us (medians over those buckets)")


# ------------------------------------------------------------ csv and svg

def points(res):
    """(held in all, held per pair, fill of each pair, row) of each bucket
    of the median curve: with S sources in turn, each pair holds held / S."""
    size, srcs = res["size"], res.get("sources", 1)
    for r in res["median"]:
        per = r["held"] / srcs
        yield r["held"], per, per / size, r


def csv_out(results, f):
    f.write("label,sources,range_size,held,held_per_pair,pair_fill,connects_per_s,"
            "connects_per_s_min,connects_per_s_max,mean_us,p99_us,runs\n")
    for res in results:
        for held, per, fill, r in points(res):
            f.write(f"{res['label']},{res.get('sources', 1)},{res['size']},{held},{per:.0f},"
                    f"{fill:.4f},{r['rate']:.0f},{r['rate_min']:.0f},{r['rate_max']:.0f},"
                    f"{r['mean_us']:.1f},{r['p99_us']:.1f},{r['n']}\n")


def svg_out(results, f):
    """A line per result: connects/s (median of the runs, one process on
    one core) against how full each (source, destination) pair's port
    range is. Python's stdlib only."""
    w, h, left, right, top, bottom = 760, 420, 70, 190, 30, 50
    pw, ph = w - left - right, h - top - bottom
    ymax = max((r["rate"] for res in results for r in res["median"]), default=1.0)
    ystep = 10 ** math.floor(math.log10(ymax)) if ymax > 0 else 1
    while ymax / ystep > 8:
        ystep *= 2
    ytop = math.ceil(ymax / ystep) * ystep
    X = lambda fill: left + pw * min(fill, 1.0)
    Y = lambda rate: top + ph * (1 - rate / ytop)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="14">connect() rate against the fill of '
           f'each (source, destination) pair</text>']
    for i in range(0, 11):
        x = X(i / 10)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{i * 10}%</text>')
    y = 0
    while y <= ytop:
        yy = Y(y)
        out.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{y:,.0f}</text>')
        y += ystep
    out.append(f'<text x="{left + pw / 2}" y="{h - 10}" text-anchor="middle">ports of the '
               f'range in use by the pair</text>')
    out.append(f'<text transform="translate(16 {top + ph / 2}) rotate(-90)" '
               f'text-anchor="middle">connects/s (one core)</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    for k, res in enumerate(results):
        c = colors[k % len(colors)]
        pts = " ".join(f"{X(fill):.1f},{Y(r['rate']):.1f}" for _, _, fill, r in points(res))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.5"/>')
        ly = top + 14 + 18 * k
        out.append(f'<line x1="{left + pw + 12}" y1="{ly - 4}" x2="{left + pw + 32}" '
                   f'y2="{ly - 4}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{left + pw + 38}" y="{ly}">{res["label"]}</text>')
    out.append("</svg>")
    f.write("\n".join(out) + "\n")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        _, _, port, count, deadline, bucket, out, first, sources = sys.argv
        worker(int(port), int(count), int(deadline), int(bucket), out, int(first), int(sources))
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--label", required=True)
    m.add_argument("--runs", type=int, default=3)
    m.add_argument("--json", required=True)
    m.add_argument("--cap", type=int, default=0, help="connections per run (0: the range)")
    m.add_argument("--budget", type=float, default=60.0, help="seconds of connecting per run")
    m.add_argument("--settle", type=float, default=3.0, help="seconds of pause between runs")
    m.add_argument("--bucket", type=int, default=500)
    m.add_argument("--per-proc", type=int, default=18000)
    m.add_argument("--sources", type=int, default=1,
                   help="source addresses used in turn (127.0.0.1, .2, ...)")
    s = sub.add_parser("summary")
    s.add_argument("json", nargs="+")
    c = sub.add_parser("csv", help="the median curves as CSV on stdout")
    c.add_argument("json", nargs="+")
    g = sub.add_parser("svg", help="connects/s against each pair's fill, as SVG on stdout")
    g.add_argument("json", nargs="+")
    args = ap.parse_args()
    if args.cmd == "measure":  # a bucket never spans two workers
        args.per_proc -= args.per_proc % args.bucket
    # SIGTERM: unwind (the finally blocks close the workers' pipes)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.cmd == "measure":
        measure(args)
    elif args.cmd == "csv":
        csv_out([json.load(open(p)) for p in args.json], sys.stdout)
    elif args.cmd == "svg":
        svg_out([json.load(open(p)) for p in args.json], sys.stdout)
    else:
        summary(args.json)


if __name__ == "__main__":
    main()
