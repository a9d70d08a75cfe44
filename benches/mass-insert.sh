#!/usr/bin/env bash
# Mass insertion (issue 30, item 4): `redis-cli --pipe` of KEYS SET commands into an
# empty server, redis-server 7.0.15 and Tessera side by side, ROUNDS interleaved rounds,
# each into freshly started servers. For every run it prints the wall time and where the
# CPU went: the server's threads (/proc/PID/task/*/schedstat) and redis-cli's own
# user+system time. The ratio printed last is the median of the per-round
# Tessera/redis-server wall-time ratios.
#
#   benches/mass-insert.sh [KEYS] [ROUNDS] [THREADS] [VALUE_BYTES]   (defaults 1000000 3 2 10)
#
# TESSERA_ARGS adds options to Tessera's command line; TESSERA_BIN runs another build
# (default target/release/tessera). Needs redis-server and redis-cli
# (apt-get install redis-server redis-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin tessera -q
exec python3 - "${1:-1000000}" "${2:-3}" "${3:-2}" "${4:-10}" <<'PY'
import glob, os, resource, shlex, socket, statistics, subprocess, sys, tempfile, time

keys, rounds, threads, value_bytes = (int(a) for a in sys.argv[1:5])

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def cpu_s(pid):
    total = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            total += int(open(f).read().split()[0])
        except (OSError, IndexError, ValueError):
            pass  # a thread that just exited
    return total / 1e9

def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True).stdout.strip()

def start(name, port):
    if name == "redis-server":
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    else:
        binary = os.environ.get("TESSERA_BIN", "target/release/tessera")
        argv = [binary, "--port", str(port), "--threads", str(threads), "--save", ""]
        argv += shlex.split(os.environ.get("TESSERA_ARGS", ""))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if cli(port, "ping") == "PONG":
            return proc
        time.sleep(0.1)
    sys.exit(f"{name} on port {port} did not start")

def run_one(name, cmds):
    port = free_port()
    proc = start(name, port)
    try:
        before = cpu_s(proc.pid)
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        with open(cmds, "rb") as stdin:
            subprocess.run(["redis-cli", "-p", str(port), "--pipe"], stdin=stdin,
                           stdout=subprocess.DEVNULL, check=True)
        wall = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        server = cpu_s(proc.pid) - before
        count = int(cli(port, "dbsize"))
        if count != keys:
            sys.exit(f"{name} holds {count} keys, expected {keys}")
    finally:
        proc.kill()
        proc.wait()
    return wall, server, ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime

with tempfile.NamedTemporaryFile(suffix=".resp") as f:
    value = b"v" * value_bytes
    for i in range(keys):
        key = b"key:%012d" % i
        f.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, value_bytes, value))
    f.flush()
    tessera = f"tessera-{threads}-shards"
    print("%-18s %8s %13s %17s %10s" % ("server", "wall s", "server cpu s", "redis-cli usr+sys", "SETs/s"))
    ratios = []
    for _ in range(rounds):
        walls = {}
        for name in ("redis-server", tessera):
            wall, server, usr, sys_ = run_one(name, f.name)
            walls[name] = wall
            print("%-18s %8.3f %13.3f %8.3f+%.3f %10.0f" % (name, wall, server, usr, sys_, keys / wall), flush=True)
        ratios.append(walls[tessera] / walls["redis-server"])
    print("wall-time ratio tessera/redis per round:", " ".join("%.2f" % r for r in ratios))
    print("median: %.2f" % statistics.median(ratios))
PY
