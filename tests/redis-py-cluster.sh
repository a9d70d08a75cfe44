#!/usr/bin/env bash
# redis-py's cluster tests (tests/test_cluster.py of redis-py 5.2.1) against a Tessera
# cluster and against a redis-server 7.0.15 cluster built the same way (3 masters, 3
# replicas, redis-cli --cluster create, all on loopback). Fails unless Tessera passes at
# least 95% of the tests that pass against redis-server (issue 27's yardstick).
#
#   tests/redis-py-cluster.sh [TESSERA_BINARY]
#
# redis-py's source (its tests are not in the wheel) and pytest go into a virtualenv
# under ${XDG_CACHE_HOME:-~/.cache}/tessera-redis-py, fetched from PyPI on first use.
# Prints the tests that pass on redis-server but not on Tessera, then one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-$PWD/target/release/tessera}"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/tessera-redis-py"
VERSION=5.2.1
SRC="$CACHE/redis-$VERSION"
VENV="$CACHE/venv"

if [ ! -x "$VENV/bin/pytest" ] || [ ! -d "$SRC/tests" ]; then
    echo "== redis-py $VERSION and pytest into $CACHE"
    mkdir -p "$CACHE"
    python3 -m venv "$VENV"
    (cd "$CACHE" && "$VENV/bin/pip" download -q --no-binary :all: --no-deps "redis==$VERSION")
    tar -xzf "$CACHE/redis-$VERSION.tar.gz" -C "$CACHE"
    "$VENV/bin/pip" install -q pytest packaging "$CACHE/redis-$VERSION.tar.gz"
fi

# Six consecutive ports whose cluster bus ports (+10000) are free too, and so are
# the ports redis-py's test_address_remap binds its proxies to (+1000, bound late in
# the run, and its SO_REUSEADDR is set after the bind). Those stay below the kernel's
# ephemeral range (32768 up), so no connection made during the run can hold them:
# with bases up to 40000 that test failed now and then with an OSError.
base_port() {
    python3 - <<'EOF'
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
for _ in range(200):
    b = random.randrange(20000, 31000)
    if all(free(b + i) and free(b + 1000 + i) and free(b + 10000 + i) for i in range(6)):
        print(b); break
EOF
}

WORK=$(mktemp -d)
# The nodes' pids, in a file: `cluster` runs in a command substitution's subshell.
cleanup() {
    if [ -f "$WORK/pids" ]; then
        xargs -r kill -9 <"$WORK/pids" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# cluster NAME BINARY: starts six nodes and joins them; prints the first port.
cluster() {
    local name=$1 bin=$2 base nodes=""
    base=$(base_port)
    for i in 0 1 2 3 4 5; do
        local port=$((base + i)) dir="$WORK/$name/$i"
        mkdir -p "$dir"
        (cd "$dir" && exec "$bin" --port "$port" --cluster-enabled yes --save "" \
            --cluster-node-timeout 5000 --logfile "$dir/log" >/dev/null 2>&1) &
        echo $! >>"$WORK/pids"
        nodes="$nodes 127.0.0.1:$port"
    done
    for i in 0 1 2 3 4 5; do
        for _ in $(seq 50); do redis-cli -p $((base + i)) ping >/dev/null 2>&1 && break; sleep 0.1; done
    done
    # shellcheck disable=SC2086
    redis-cli --cluster create $nodes --cluster-replicas 1 --cluster-yes >"$WORK/$name.create" 2>&1
    for _ in $(seq 120); do
        local ok=0
        for i in 0 1 2 3 4 5; do
            redis-cli -p $((base + i)) cluster info 2>/dev/null | grep -q 'cluster_state:ok' && ok=$((ok + 1))
        done
        [ "$ok" = 6 ] && break
        sleep 0.5
    done
    echo "$base"
}

# passed NAME PORT: the ids of the tests that pass against that cluster.
passed() {
    (cd "$SRC" && timeout 900 "$VENV/bin/python" -m pytest tests/test_cluster.py \
        -p no:cacheprovider -q -rA --redis-url="redis://127.0.0.1:$2/0" >"$WORK/$1.pytest" 2>&1) || true
    grep '^PASSED ' "$WORK/$1.pytest" | awk '{print $2}' | sort -u
}

REDIS_PORT=$(cluster redis /usr/bin/redis-server)
TESS_PORT=$(cluster tessera "$BIN")
passed redis "$REDIS_PORT" >"$WORK/redis.passed"
passed tessera "$TESS_PORT" >"$WORK/tessera.passed"
theirs=$(wc -l <"$WORK/redis.passed")
both=$(comm -12 "$WORK/redis.passed" "$WORK/tessera.passed" | wc -l)
comm -23 "$WORK/redis.passed" "$WORK/tessera.passed" | sed 's/^/  passes on redis-server only: /'
tail -1 "$WORK/tessera.pytest"
echo "redis-py cluster tests: Tessera passes $both of the $theirs that pass on redis-server 7.0.15"
if [ "$theirs" -lt 100 ] || [ $((both * 100)) -lt $((theirs * 95)) ]; then
    echo "redis-py cluster tests: below 95% (or the redis-server run broke: $theirs passed)" >&2
    exit 1
fi
