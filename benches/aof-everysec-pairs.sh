#!/bin/bash
# benches/aof-everysec-pairs.sh [PAIRS] [SECONDS]
#
# Issue 25's everysec check, measured in interleaved pairs: two tessera --threads 2
# servers run side by side, one with the AOF off and one with `appendfsync everysec`
# (automatic rewrites on, at Redis's defaults), and tessera-bench (SET, 50
# connections, P=16, 100k keys, 32-byte values) loads them in turn for SECONDS each,
# the order swapped every pair. On a 2-core host whose speed drifts by 10-20% within
# minutes, a pair's two runs see the same host; the script prints each pair's ratio,
# the server's CPU per request (utime + stime over requests) for each run, and the
# ratio of the sums. EXTRA="..." adds options to the everysec server; TESSERA=path
# picks the binary.
set -u
N=${1:-10}
SECS=${2:-5}
T=${TESSERA:-target/release/tessera}
BENCH=${BENCH:-target/release/tessera-bench}
B=/tmp/aof-pairs; rm -rf $B; mkdir -p $B/off $B/everysec
$T --port 7621 --threads 2 --dir $B/off --save "" --appendonly no > $B/off/log 2>&1 &
OFF=$!
# shellcheck disable=SC2086
$T --port 7622 --threads 2 --dir $B/everysec --save "" --appendonly yes --appendfsync everysec ${EXTRA:-} > $B/everysec/log 2>&1 &
ES=$!
trap 'kill $OFF $ES 2>/dev/null; wait' EXIT
for p in 7621 7622; do
  for _ in $(seq 100); do redis-cli -p $p ping 2>/dev/null | grep -q PONG && break; sleep 0.05; done
done
TCK=$(getconf CLK_TCK)
run() { # port pid -> "ops/s ns-of-server-CPU-per-request"
  local a b ops
  a=$(awk '{print $14+$15}' /proc/$2/stat)
  ops=$($BENCH -p $1 -t 1 -c 50 --ratio 1:0 --pipeline 16 --test-time $SECS --quiet 2>&1 | awk '$1=="TOTAL" {printf "%d", $2}')
  b=$(awk '{print $14+$15}' /proc/$2/stat)
  echo "$ops $(( (b - a) * 1000000000 / TCK / (ops * SECS) ))"
}
run 7621 $OFF > /dev/null; run 7622 $ES > /dev/null   # warm-up: 100k keys in both
so=0; se=0; co=0; ce=0
for i in $(seq $N); do
  if [ $((i % 2)) = 1 ]; then o=$(run 7621 $OFF); e=$(run 7622 $ES); else e=$(run 7622 $ES); o=$(run 7621 $OFF); fi
  set -- $o $e
  echo "pair $i: off $1 ops/s ($2 ns/req), everysec $3 ops/s ($4 ns/req), ratio $(echo "scale=3; $3 / $1" | bc)"
  so=$((so + $1)); se=$((se + $3)); co=$((co + $2)); ce=$((ce + $4))
done
echo "all: off $((so / N)) ops/s ($((co / N)) ns/req), everysec $((se / N)) ops/s ($((ce / N)) ns/req), ratio $(echo "scale=3; $se / $so" | bc)"
