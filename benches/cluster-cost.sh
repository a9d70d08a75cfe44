#!/usr/bin/env bash
# cluster-cost.sh ROUNDS TESTS REQUESTS [BINARY]: what cluster mode costs per request.
# For each round, runs BINARY --threads 1 --cpus 1 standalone, then as a one-node cluster
# that serves all 16384 slots (cluster-enabled yes, CLUSTER ADDSLOTSRANGE 0 16383), and
# runs redis-benchmark -t TEST -n REQUESTS -P ${P:-16} -c 50 -r 100000 on CPU ${CLIENT:-0}
# against each: every request then passes the cluster check and is served locally, so
# the difference is the check itself. Prints throughput and the server's CPU time per
# request (all its threads, the bus thread included, from schedstat).
#   benches/cluster-cost.sh 3 set,get 400000
set -u
rounds=$1 tests=$2 reqs=$3 bin=${4:-target/release/tessera}
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s+=$1} END {printf "%.0f", s}'; }
for r in $(seq "$rounds"); do
    for mode in standalone cluster; do
        dir=$(mktemp -d)
        port=$((20000 + RANDOM % 10000))
        extra=()
        [ "$mode" = cluster ] && extra=(--cluster-enabled yes)
        (cd "$dir" && exec "$OLDPWD/$bin" --port "$port" --threads 1 --cpus 1 --save "" \
            "${extra[@]}" >/dev/null 2>&1) &
        pid=$!
        for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
        if [ "$mode" = cluster ]; then
            redis-cli -p "$port" cluster addslotsrange 0 16383 >/dev/null
            for _ in $(seq 100); do
                redis-cli -p "$port" cluster info | grep -q cluster_state:ok && break
                sleep 0.1
            done
        fi
        for t in ${tests//,/ }; do
            c0=$(cpu_ns "$pid")
            rps=$(taskset -c "${CLIENT:-0}" redis-benchmark -p "$port" -t "$t" -n "$reqs" \
                -P "${P:-16}" -c 50 -r 100000 -q --csv | tail -1 | cut -d, -f2 | tr -d '"')
            c1=$(cpu_ns "$pid")
            printf "r%s %-10s %-5s rps=%9.0f ns/op=%5d\n" "$r" "$mode" "$t" "$rps" \
                $(((c1 - c0) / reqs))
        done
        kill "$pid"
        wait "$pid" 2>/dev/null
        rm -rf "$dir"
    done
done
