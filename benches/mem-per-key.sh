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
. benches/side-by-side.sh
scratch=$(mktemp -d)
python3 - "$keys" "$value_bytes" >"$scratch/cmds" <<'PY'
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

measure() { # name port
    local empty full count
    empty=$(used_memory "$2")
    redis-cli -p "$2" --pipe <"$scratch/cmds" >/dev/null
    count=$(redis-cli -p "$2" dbsize | tr -d '\r')
    [ "$count" = "$keys" ] || { echo "$1 holds $count keys, expected $keys" >&2; exit 1; }
    full=$(used_memory "$2")
    echo "$1 $empty $full"
}


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
