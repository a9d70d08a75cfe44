#!/usr/bin/env bash
# ab.sh ROUNDS TESTS REQUESTS NAME:BINARY:SHARDS:CPUS... : A/B of Tessera binaries.
# For each round and each configuration, starts BINARY --threads SHARDS --cpus CPUS,
# runs redis-benchmark -t TEST -n REQUESTS -P ${P:-16} -c 50 -r 100000 on CPU
# ${CLIENT:-0} for each of the comma-separated TESTS, and prints throughput and the
# server's CPU time per request (all its threads, from schedstat). Rounds interleave
# the binaries so a drifting machine does not favour one. Needs redis-benchmark and
# redis-cli on PATH. Example:
#   benches/ab.sh 3 set,get 400000 old:/tmp/tessera-old:1:1 new:target/release/tessera:1:1
set -u
rounds=$1 tests=$2 reqs=$3
shift 3
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s+=$1} END {printf "%.0f", s}'; }
for r in $(seq "$rounds"); do
    for c in "$@"; do
        IFS=: read -r name bin shards cpus <<<"$c"
        port=$((7000 + RANDOM % 1000))
        "$bin" --port "$port" --threads "$shards" --cpus "$cpus" --save "" --dir "${TMPDIR:-/tmp}" >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
        for t in ${tests//,/ }; do
            c0=$(cpu_ns "$pid")
            rps=$(taskset -c "${CLIENT:-0}" redis-benchmark -p "$port" -t "$t" -n "$reqs" \
                -P "${P:-16}" -c 50 -r 100000 -q --csv | tail -1 | cut -d, -f2 | tr -d '"')
            c1=$(cpu_ns "$pid")
            printf "r%s %-12s %-10s rps=%9.0f ns/op=%5d\n" "$r" "$name" "$t" "$rps" \
                $(((c1 - c0) / reqs))
        done
        kill "$pid"
        wait "$pid" 2>/dev/null
    done
done
