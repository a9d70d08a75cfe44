#!/bin/bash
# benches/bgsave-under-load.sh [KEYS] [SECONDS]
#
# BGSAVE of KEYS small keys (DEBUG POPULATE, 10-byte values) while tessera-bench
# loads the server open loop at half of what it answers closed loop, redis-server
# 7.0.15 and tessera --threads 2 side by side, one after the other:
#   1. GETs only: p99 over SECONDS without a save, then over SECONDS with a BGSAVE
#      started one second in (the save must end inside the window);
#   2. 1 SET : 10 GET at the same rate, BGSAVE one second in: the peak memory above
#      what the server held before the save. For Tessera its RSS; for redis-server its
#      RSS plus the fork child's private dirty pages (the copy-on-write), sampled
#      every 50 ms, and the child's own report (rdb_last_cow_size).
# Needs redis-server, redis-cli and target/release/{tessera,tessera-bench}.
# ROUNDS (default 3): pairs of windows per server; the per-round ratios and their
# median are printed (the host moves one window's p99 by 2x on its own). CONTROL=1
# runs the same rounds with no BGSAVE in the second window of each pair.
# ONLY=tessera skips redis-server.
set -u
K=${1:-10000000}
SECS=${2:-20}
B=/tmp/bgsave-bench; rm -rf $B; mkdir -p $B/r $B/t
T=${TESSERA:-target/release/tessera}
BENCH=${BENCH:-target/release/tessera-bench}
PORT=7611

rss_kb() { awk '/^VmRSS/ {print $2}' /proc/$1/status 2>/dev/null || echo 0; }
child_dirty_kb() {
  local c; c=$(cat /proc/$1/task/*/children 2>/dev/null | tr ' ' '\n' | grep -m1 .)
  [ -n "$c" ] && awk '/^Private_Dirty/ {s+=$2} END {print s+0}' /proc/$c/smaps_rollup 2>/dev/null || echo 0
}
# Samples the memory of server $1 (plus its fork child's dirty pages when $2 = fork)
# every 50 ms until $B/stop exists; prints the peak in kB.
sample_peak() {
  local peak=0 now
  while [ ! -e $B/stop ]; do
    now=$(rss_kb $1)
    [ "$2" = fork ] && now=$((now + $(child_dirty_kb $1)))
    [ "$now" -gt "$peak" ] && peak=$now
    sleep 0.05
  done
  echo $peak
}
# Waits for the save to end with one redis-cli asking every 100 ms. Not a new
# redis-cli and grep every 50 ms: each such process takes 2-3 ms of CPU to start,
# which on a 2-CPU host delays the shards and the client (perf sched timehist, issue
# 25's nineteenth session) and made the save window's p99 up to twice what the save
# itself costs.
wait_bgsave() {
  redis-cli -p $PORT -r -1 -i 0.1 info persistence 2>/dev/null | awk '/rdb_bgsave_in_progress:0/ {exit}'
}
p99() { awk '$1=="TOTAL" {print $7}' "$1"; }
max_us() { awk '$1=="TOTAL" {print $10}' "$1"; }

measure() { # name pid kind(fork|tessera)
  local name=$1 pid=$2 kind=$3
  redis-cli -p $PORT debug populate $K key 10 >/dev/null
  local full rate
  full=$($BENCH -p $PORT -t 1 -c 50 --ratio 0:1 --key-max $((K-1)) --test-time 5 --quiet 2>&1 | awk '$1=="TOTAL" {print int($2)}')
  rate=$((full / 2))
  echo "== $name: $K keys, rss $(( $(rss_kb $pid) / 1024 )) MB; closed loop $full GET/s, load at $rate/s"
  local bench round s e
  # Alternating pairs: on a small host the client shares the cores, and one run's
  # p99 moves by several times from run to run.
  local ratios=""
  for round in $(seq ${ROUNDS:-3}); do
    $BENCH -p $PORT -t 1 -c 50 --ratio 0:1 --key-max $((K-1)) --rate $rate --test-time $SECS --quiet > $B/$name-quiet.txt 2>&1
    echo "$name round $round GET p99 without BGSAVE: $(p99 $B/$name-quiet.txt) us (max $(max_us $B/$name-quiet.txt) us)"
    $BENCH -p $PORT -t 1 -c 50 --ratio 0:1 --key-max $((K-1)) --rate $rate --test-time $SECS --quiet > $B/$name-save.txt 2>&1 &
    bench=$!
    if [ -n "${CONTROL:-}" ]; then
      # The control: the same two windows with no save in the second, to show how
      # far the host alone moves one window's p99 from the next.
      s=$(date +%s%N); e=$s
    else
      sleep 1; s=$(date +%s%N); redis-cli -p $PORT bgsave >/dev/null; wait_bgsave; e=$(date +%s%N)
    fi
    wait $bench
    echo "$name round $round GET p99 with BGSAVE:    $(p99 $B/$name-save.txt) us (max $(max_us $B/$name-save.txt) us); BGSAVE took $(( (e - s) / 1000000 )) ms"
    ratios="$ratios $(awk -v a="$(p99 $B/$name-save.txt)" -v b="$(p99 $B/$name-quiet.txt)" 'BEGIN {printf "%.2f", a / b}')"
  done
  echo "$name p99 with / without BGSAVE per round:$ratios; median $(echo $ratios | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}')"
  local before; before=$(rss_kb $pid)
  rm -f $B/stop; sample_peak $pid $kind > $B/$name-peak.txt &
  local sampler=$!
  $BENCH -p $PORT -t 1 -c 50 --ratio 1:10 -d 10 --key-max $((K-1)) --rate $rate --test-time $SECS --quiet > $B/$name-write.txt 2>&1 &
  bench=$!
  sleep 1; redis-cli -p $PORT bgsave >/dev/null; wait_bgsave
  wait $bench; touch $B/stop; wait $sampler
  local peak; peak=$(cat $B/$name-peak.txt)
  echo "$name 1:10 SET:GET, BGSAVE: memory before $((before / 1024)) MB, peak $((peak / 1024)) MB, growth $(( (peak - before) * 1000 / before / 10 )).$(( (peak - before) * 1000 / before % 10 ))%; $(redis-cli -p $PORT info persistence | grep -E 'rdb_last_cow_size' | tr -d '\r')"
}

if [ "${ONLY:-}" != tessera ]; then
  redis-server --port $PORT --dir $B/r --save "" --daemonize yes --logfile $B/r.log --enable-debug-command yes
  sleep 0.5
  measure redis-server "$(pgrep -f "redis-server .*:$PORT" | head -1)" fork
  redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; sleep 1
fi

$T --port $PORT --threads 2 --dir $B/t --save "" --enable-debug-command yes > $B/t.log 2>&1 &
for _ in $(seq 100); do redis-cli -p $PORT ping 2>/dev/null | grep -q PONG && break; sleep 0.05; done
measure tessera $! tessera
redis-cli -p $PORT shutdown nosave >/dev/null 2>&1
