#!/usr/bin/env bash
# Eviction hit ratio, Tessera against redis-server 7.0 in one run (issue 6): a Zipf GET/SET
# load over a key space ten times what maxmemory holds, under allkeys-lru and allkeys-lfu.
# For each server and policy: a SET-only warm-up fills the cache past the limit, stats are
# reset, then a 1:1 GET/SET run is measured; used_memory is sampled once a second.
#
#   benches/hit-ratio.sh [MAXMEMORY] [SECONDS] [THREADS]     (defaults 32mb 20 2)
#
# Needs redis-server and redis-cli (apt-get install redis-server redis-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
maxmemory=${1:-32mb}
seconds=${2:-20}
threads=${3:-2}
cargo build --release --bin tessera --bin tessera-bench -q
stat() { # port section field
    redis-cli -p "$1" info "$2" | tr -d '\r' | sed -n "s/^$3://p"
}

load() { # port ratio seconds seed
    target/release/tessera-bench -p "$1" --ratio "$2" --key-pattern zipf:0.99 \
        --key-max 999999 -d 100 --test-time "$3" -t 2 -c 8 --pipeline 16 --quiet \
        --seed "$4" >/dev/null 2>&1
}

run() { # name port policy
    local port=$2 samples peak hits misses
    redis-cli -p "$port" flushall >/dev/null
    redis-cli -p "$port" config set maxmemory "$maxmemory" >/dev/null
    redis-cli -p "$port" config set maxmemory-policy "$3" >/dev/null
    load "$port" 1:0 10 7
    redis-cli -p "$port" config resetstat >/dev/null
    samples=$(mktemp)
    (for _ in $(seq "$seconds"); do stat "$port" memory used_memory; sleep 1; done) >"$samples" &
    load "$port" 1:1 "$seconds" 11
    wait $!
    peak=$(sort -n "$samples" | tail -1)
    rm -f "$samples"
    hits=$(stat "$port" stats keyspace_hits)
    misses=$(stat "$port" stats keyspace_misses)
    printf '%-18s %-12s %7s %9s %13s %16s\n' "$1" "$3" \
        "$(python3 -c "print('%.4f' % ($hits / max(1, $hits + $misses)))")" \
        "$(redis-cli -p "$port" dbsize | tr -d '\r')" \
        "$(stat "$port" stats evicted_keys)" "$peak"
}

. benches/side-by-side.sh

echo "maxmemory $maxmemory, Zipf 0.99 over 1,000,000 keys, 100-byte values, SET:GET 1:1, ${seconds}s"
printf '%-18s %-12s %7s %9s %13s %16s\n' server policy hit keys evicted max_used_memory
for policy in allkeys-lru allkeys-lfu; do
    run "tessera-${threads}-shards" "$tport" "$policy"
    run redis-server "$rport" "$policy"
done
