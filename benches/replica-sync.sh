#!/usr/bin/env bash
# Replication costs, side by side with redis-server 7.0.15 (issue 26):
#   1. full sync of N keys (DEBUG POPULATE N key 10) from a redis-server master: the
#      time from REPLICAOF to master_link_status:up, for a redis-server replica and a
#      `tessera --threads 2` replica, one after the other, with each
#      repl-diskless-load of LOADS (default "disabled swapdb": the payload saved to a
#      file first, or parsed as it arrives);
#   2. the master's SET rate at P=16 (redis-benchmark, 50 clients, 32-byte values,
#      1M requests) with no replica and with one replica attached: redis-server with a
#      redis-server replica, then Tessera with a Tessera replica. On a 2-CPU host the
#      replica and the client share the CPUs with the master, so the rate mixes the
#      three; the master's own CPU time per SET (utime+stime of its process, all
#      threads, from /proc/PID/stat around the run) is printed beside it and isolates
#      the master's cost of feeding a replica.
# Usage: benches/replica-sync.sh [N] (default 5000000); SKIP_SYNC=1 runs part 2 only,
# SYNC_ONLY=1 part 1 only; TESSERA_BIN=path runs that binary instead of building
# target/release/tessera (A/B of two builds).
# Nothing else should run.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5000000}
BIN=${TESSERA_BIN:-target/release/tessera}
[ -n "${TESSERA_BIN:-}" ] || cargo build --release --quiet
DIR=$(mktemp -d)
mkdir -p "$DIR/redis" "$DIR/tessera"
trap 'redis-cli -p 7401 shutdown nosave >/dev/null 2>&1 || true; redis-cli -p 7402 shutdown nosave >/dev/null 2>&1 || true; redis-cli -p 7403 shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
wait_up() { until redis-cli -p "$1" ping >/dev/null 2>&1; do sleep 0.05; done; }
link_up() { until redis-cli -p "$1" info replication 2>/dev/null | grep -q master_link_status:up; do sleep 0.02; done; }
now() { date +%s.%N; }

if [ -z "${SKIP_SYNC:-}" ]; then
redis-server --port 7401 --save "" --dir "$DIR" --enable-debug-command yes --repl-diskless-sync-delay 0 --daemonize yes --logfile "$DIR/m.log"
wait_up 7401
redis-cli -p 7401 debug populate "$N" key 10 >/dev/null
echo "master: $(redis-cli -p 7401 dbsize) keys, used_memory $(redis-cli -p 7401 info memory | grep '^used_memory_human' | tr -d '\r')"
for load in ${LOADS:-disabled swapdb}; do
for who in redis tessera; do
    mkdir -p "$DIR/$who"
    if [ $who = redis ]; then
        redis-server --port 7402 --save "" --dir "$DIR/$who" --daemonize yes --logfile "$DIR/$who.log" \
            --repl-diskless-load "$load"
    else
        $BIN --port 7402 --threads 2 --save "" --dir "$DIR/$who" --logfile "$DIR/$who.log" \
            --repl-diskless-load "$load" &
    fi
    wait_up 7402
    t0=$(now)
    redis-cli -p 7402 replicaof 127.0.0.1 7401 >/dev/null
    link_up 7402
    t1=$(now)
    echo "$who replica (repl-diskless-load $load): full sync of $(redis-cli -p 7402 dbsize) keys in $(echo "$t1 - $t0" | bc) s"
    redis-cli -p 7402 shutdown nosave >/dev/null 2>&1 || true
    # The next replica needs the port: a big dataset takes a while to free.
    while redis-cli -p 7402 ping >/dev/null 2>&1; do sleep 0.1; done
    sleep 0.5
done
done
redis-cli -p 7401 shutdown nosave >/dev/null 2>&1 || true
fi
[ -n "${SYNC_ONLY:-}" ] && exit 0

REQUESTS=1000000
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
bench() {
    local pid t0 t1 rate
    pid=$(redis-cli -p 7401 info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')
    t0=$(cpu_ticks "$pid")
    rate=$(redis-benchmark -p 7401 -t set -P 16 -c 50 -n $REQUESTS -r 100000 -d 32 -q | grep -o 'SET: [0-9.]* requests per second')
    t1=$(cpu_ticks "$pid")
    echo "$rate; master CPU $(echo "scale=3; ($t1 - $t0) * 1000000 / $(getconf CLK_TCK) / $REQUESTS" | bc) us/SET"
}
redis-server --port 7401 --save "" --dir "$DIR" --repl-diskless-sync-delay 0 --daemonize yes --logfile "$DIR/m2.log"
wait_up 7401
echo "redis master, no replica: $(bench)"
redis-server --port 7403 --save "" --dir "$DIR/redis" --replicaof 127.0.0.1 7401 --daemonize yes --logfile "$DIR/r2.log"
link_up 7403
echo "redis master, one replica: $(bench)"
redis-cli -p 7403 shutdown nosave >/dev/null 2>&1 || true
redis-cli -p 7401 shutdown nosave >/dev/null 2>&1 || true
sleep 0.5

$BIN --port 7401 --threads 2 --save "" --dir "$DIR" --repl-diskless-sync-delay 0 --logfile "$DIR/tm.log" &
wait_up 7401
echo "tessera master, no replica: $(bench)"
$BIN --port 7403 --threads 2 --save "" --dir "$DIR/tessera" --replicaof 127.0.0.1 7401 --logfile "$DIR/tr.log" &
link_up 7403
echo "tessera master, one replica: $(bench)"
redis-cli -p 7403 shutdown nosave >/dev/null 2>&1 || true
sleep 0.5
echo "tessera master, no replica again (the backlog stays): $(bench)"
