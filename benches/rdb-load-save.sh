#!/bin/bash
# benches/rdb-load-save.sh KEYS VALSIZE : SAVE and load times, redis-server 7.0.15 vs tessera, same file
set -u
K=$1; V=$2; B=/tmp/lb; rm -rf $B; mkdir -p $B/r $B/t1 $B/t2
T=${TESSERA:-target/release/tessera}
ms() { date +%s%N | cut -c1-13; }
redis-server --port 7601 --dir $B/r --save "" --daemonize yes --logfile $B/r.log --enable-debug-command yes; sleep 0.5
redis-cli -p 7601 debug populate $K key $V >/dev/null
s=$(ms); redis-cli -p 7601 save >/dev/null; e=$(ms); echo "redis-server SAVE: $((e-s)) ms, file $(stat -c %s $B/r/dump.rdb) bytes"
redis-cli -p 7601 shutdown nosave >/dev/null 2>&1; sleep 0.5
cp $B/r/dump.rdb $B/t1/; cp $B/r/dump.rdb $B/t2/
redis-server --port 7601 --dir $B/r --save "" --daemonize yes --logfile $B/r2.log; 
for _ in $(seq 600); do redis-cli -p 7601 ping 2>/dev/null | grep -q PONG && break; sleep 0.05; done
echo "redis-server load: $(grep -o 'DB loaded from disk: [0-9.]* seconds' $B/r2.log)  rss $(redis-cli -p 7601 info memory | grep used_memory_rss_human)"
redis-cli -p 7601 shutdown nosave >/dev/null 2>&1
for th in 1 2; do
  $T --port 7602 --threads $th --dir $B/t$th --save "" > $B/t$th.log 2>&1 &
  for _ in $(seq 600); do redis-cli -p 7602 ping 2>/dev/null | grep -q PONG && break; sleep 0.05; done
  echo "tessera --threads $th load: $(grep -o 'DB loaded from disk: [0-9.]* seconds' $B/t$th.log)  dbsize $(redis-cli -p 7602 dbsize) rss $(redis-cli -p 7602 info memory | grep used_memory_rss_human)"
  s=$(ms); redis-cli -p 7602 save >/dev/null; e=$(ms); echo "tessera --threads $th SAVE: $((e-s)) ms, file $(stat -c %s $B/t$th/dump.rdb) bytes"
  redis-cli -p 7602 shutdown nosave >/dev/null 2>&1; sleep 0.5
done
