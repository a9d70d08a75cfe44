#!/usr/bin/env bash
# Memory per key, Tessera against redis-server 7.0 side by side (issue 6): KEYS SETs of
# key:NNNNNNNNNNNN with VALUE_BYTES-byte values piped into each with redis-cli --pipe,
# then INFO memory's used_memory. Prints bytes per key and the Tessera/Redis ratio.
#
#   benches/mem-per-key.sh [KEYS] [VALUE_BYTES] [THREADS]     (defaults 1000000 10 2)
#
# Needs redis-server and redis-cli (apt-get install redis-server redis-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
keys=${1:-1000000}
value_bytes=${2:-10}
threads=${3:-2}
cargo build --release --bin tessera -q
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

python3 - "$keys" "$value_bytes" >"$tmp/cmds" <<'PY'
import sys
n, d = int(sys.argv[1]), int(sys.argv[2])
value = b"v" * d
out = sys.stdout.buffer
for i in range(n):
    key = b"key:%012d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, d, value))
PY

used_memory() {
    redis-cli -p "$1" info memory | tr -d '\r' | sed -n 's/^used_memory://p'
}

wait_ready() {
    for _ in $(seq 100); do
        redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "server on port $1 did not start" >&2
    exit 1
}

measure() { # name port
    local empty full count
    empty=$(used_memory "$2")
    redis-cli -p "$2" --pipe <"$tmp/cmds" >/dev/null
    count=$(redis-cli -p "$2" dbsize | tr -d '\r')
    [ "$count" = "$keys" ] || { echo "$1 holds $count keys, expected $keys" >&2; exit 1; }
    full=$(used_memory "$2")
    echo "$1 $empty $full"
}

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
pids+=($!)
tport=$(free_port)
target/release/tessera --port "$tport" --threads "$threads" >/dev/null 2>&1 &
pids+=($!)
wait_ready "$rport"
wait_ready "$tport"

{
    measure redis-server "$rport"
    measure "tessera-${threads}-shards" "$tport"
} | python3 -c '
import sys
rows = [l.split() for l in sys.stdin]
keys = int(sys.argv[1])
print("%-22s %14s %16s %9s" % ("server", "used empty", "used with keys", "per key"))
for name, empty, full in rows:
    print("%-22s %14s %16s %8.1f B" % (name, empty, full, (int(full) - int(empty)) / keys))
redis, tessera = int(rows[0][2]), int(rows[1][2])
print("used_memory ratio tessera/redis: %.3f" % (tessera / redis))
' "$keys"
