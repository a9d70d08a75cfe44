#!/usr/bin/env bash
# eval-vs-redis.sh ROUNDS BIN... : EVAL cost, Tessera binaries against redis-server.
#
# Each round starts every binary (one shard, --cpus 1) and a redis-server pinned to
# CPU 1, drives two scripts with redis-benchmark on CPU 0 (10 clients, 100000 EVALs)
# and prints throughput and the server's CPU per EVAL (utime+stime of every thread of
# the process, so a helper thread, such as the Lua VM thread Tessera had before
# 9d67c28, is counted). Then, per binary, a script of 10000 SADDs on each of the two
# shards' keys (2 shards): the per-call cost of redis.call on the connection's own
# shard and on the other one.
set -u
rounds=${1:?usage: eval-vs-redis.sh ROUNDS BIN...}
shift
start() { # start NAME PORT -> pid
    if [ "$1" = redis ]; then
        taskset -c 1 redis-server --port "$2" --save '' --appendonly no >/dev/null 2>&1 &
    else
        "$1" --port "$2" --threads 1 --cpus 1 >/dev/null 2>&1 &
    fi
    echo $!
}
for r in $(seq "$rounds"); do
    for b in "$@" redis; do
        port=$((7800 + RANDOM % 100))
        pid=$(start "$b" "$port")
        sleep 0.5
        for w in "return 1|0" "return redis.call('incr',KEYS[1])|1 key"; do
            s=${w%|*}
            a=${w#*|}
            t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
            # shellcheck disable=SC2086
            out=$(taskset -c 0 redis-benchmark -p "$port" -n 100000 -c 10 -q eval "$s" $a | tr '\r' '\n' | tail -1)
            t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
            rps=$(echo "$out" | sed -E 's/.*: ([0-9.]+) requests.*/\1/')
            echo "round $r  $b  \"$s\"  rps=$rps  cpu_us_per_eval=$(echo "scale=1; ($t1-$t0)*10000/100000" | bc)"
        done
        kill "$pid"
        wait "$pid" 2>/dev/null
    done
done
for b in "$@"; do
    port=$((7900 + RANDOM % 100))
    "$b" --port "$port" --threads 2 >/dev/null 2>&1 &
    pid=$!
    sleep 0.5
    # A new redis-cli connection per script lands on either shard: the two figures of a
    # line are the connection's own shard and the other one, in some order.
    for _ in 1 2 3 4; do
        line="$b 10000 SADDs per key:"
        for k in bar foo; do
            us=$(redis-cli -p "$port" eval "redis.call('del',KEYS[1]) local t=redis.call('time') for i=1,10000 do redis.call('sadd',KEYS[1],i) end local t2=redis.call('time') return (t2[1]-t[1])*1000000+(t2[2]-t[2])" 1 "$k")
            line="$line $k $(echo "scale=2; $us/10000" | bc) us/call"
        done
        echo "$line"
    done
    kill "$pid"
    wait "$pid" 2>/dev/null
done
