#!/bin/bash
# benches/aof-fsync.sh [SECONDS] [ROUNDS]
#
# What the AOF's fsync policy costs: SETs only (32-byte values, 100k keys), 50
# connections, closed loop at pipeline 1 and 16, with the AOF off, `appendfsync no`,
# `everysec` and `always`; redis-server 7.0.15 and tessera --threads 2 one after the
# other, each in a fresh directory on the same disk. ROUNDS runs per cell, reported
# one by one (on a 2-core host the client shares the cores, so runs move by 5-10%).
# Needs redis-server, redis-cli and target/release/{tessera,tessera-bench}.
# ONLY=tessera skips redis-server; POLICIES="off everysec" and PIPELINES="16" narrow
# the grid.
set -u
SECS=${1:-10}
ROUNDS=${2:-2}
B=/tmp/aof-bench; rm -rf $B; mkdir -p $B
T=${TESSERA:-target/release/tessera}
BENCH=${BENCH:-target/release/tessera-bench}
PORT=7612

start() { # name policy
  local dir=$B/$1-$2; rm -rf $dir; mkdir -p $dir
  local aof="--appendonly yes --appendfsync $2"
  [ "$2" = off ] && aof="--appendonly no"
  if [ "$1" = redis ]; then
    redis-server --port $PORT --dir $dir --save "" $aof --daemonize no > $dir/log 2>&1 &
  else
    $T --port $PORT --threads 2 --dir $dir --save "" $aof > $dir/log 2>&1 &
  fi
  for _ in $(seq 100); do redis-cli -p $PORT ping 2>/dev/null | grep -q PONG && return; sleep 0.05; done
  echo "server $1 did not start"; exit 1
}
stop() { redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; sleep 0.5; }
run() { # pipeline
  $BENCH -p $PORT -t 1 -c 50 --ratio 1:0 --pipeline $1 --test-time $SECS --quiet 2>&1 |
    awk '$1=="TOTAL" {printf "%d ops/s, p99 %s us", $2, $7}'
}

SERVERS="redis tessera"
[ "${ONLY:-}" = tessera ] && SERVERS=tessera
echo "# $(date -u +%F) $(nproc) CPUs, $(uname -r); $SECS s per run, 50 connections, SET 32 B"
for name in $SERVERS; do
  for policy in ${POLICIES:-off no everysec always}; do
    start $name $policy
    for p in ${PIPELINES:-1 16}; do
      for r in $(seq $ROUNDS); do
        echo "$name appendfsync=$policy P=$p round $r: $(run $p)"
      done
    done
    stop
  done
done
