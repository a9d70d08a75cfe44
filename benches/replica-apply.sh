#!/usr/bin/env bash
# How fast a Tessera replica applies a Tessera master's cross-shard writes (issue 26).
# A multi-key write whose keys span shards reaches replicas as one MULTI/EXEC block,
# which the replica runs as a transaction over every shard. The replica
# (`tessera --threads 2`) is stopped (SIGSTOP) while redis-benchmark sends N MSETs of
# 10 random keys (50 clients, P=16) to the master (`tessera --threads 2`), so the
# stream waits in the master's replication buffer; then it is resumed, and the time
# until its applied offset reaches the master's is its rate alone, with the host's
# CPUs to itself. Prints the master's rate too (client and master sharing the CPUs).
# Usage: benches/replica-apply.sh [N] [ROUNDS] (default 100000, 1); TESSERA_BIN=path
# runs that binary instead of building target/release/tessera (A/B of two builds).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
ROUNDS=${2:-1}
BIN=${TESSERA_BIN:-target/release/tessera}
[ -n "${TESSERA_BIN:-}" ] || cargo build --release --quiet
DIR=$(mktemp -d)
trap 'redis-cli -p 7411 shutdown nosave >/dev/null 2>&1 || true; redis-cli -p 7412 shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
wait_up() { until redis-cli -p "$1" ping >/dev/null 2>&1; do sleep 0.05; done; }
field() { redis-cli -p "$1" info replication | tr -d '\r' | sed -n "s/^$2://p"; }
now() { date +%s.%N; }
ARGS=()
for i in $(seq 10); do ARGS+=("k$i:__rand_int__" "v$i"); done

for round in $(seq "$ROUNDS"); do
    rm -rf "$DIR/m" "$DIR/r"
    mkdir -p "$DIR/m" "$DIR/r"
    $BIN --port 7411 --threads 2 --save "" --dir "$DIR/m" --logfile "$DIR/m.log" &
    $BIN --port 7412 --threads 2 --save "" --dir "$DIR/r" --logfile "$DIR/r.log" &
    replica=$!
    wait_up 7411
    wait_up 7412
    redis-cli -p 7412 replicaof 127.0.0.1 7411 >/dev/null
    until [ "$(field 7412 master_link_status)" = up ]; do sleep 0.05; done
    kill -STOP "$replica"
    t0=$(now)
    redis-benchmark -p 7411 -c 50 -P 16 -n "$N" -r 1000000 -q mset "${ARGS[@]}" > "$DIR/bench.out"
    t1=$(now)
    target=$(field 7411 master_repl_offset)
    kill -CONT "$replica"
    until [ "$(field 7412 slave_repl_offset)" -ge "$target" ]; do sleep 0.01; done
    t2=$(now)
    echo "round $round: master $(echo "$N / ($t1 - $t0)" | bc) MSETs/s;" \
        "replica applied them in $(echo "$t2 - $t1" | bc) s: $(echo "$N / ($t2 - $t1)" | bc) transactions/s;" \
        "keys master $(redis-cli -p 7411 dbsize) replica $(redis-cli -p 7412 dbsize)"
    redis-cli -p 7411 shutdown nosave >/dev/null 2>&1 || true
    redis-cli -p 7412 shutdown nosave >/dev/null 2>&1 || true
    while redis-cli -p 7411 ping >/dev/null 2>&1 || redis-cli -p 7412 ping >/dev/null 2>&1; do sleep 0.1; done
done
