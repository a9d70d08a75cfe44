#!/usr/bin/env bash
# multicore-lab.sh OUTDIR [SECTION...] : the checks that need a machine with CPUs to spare
# for the load generator (16 or more CPUs; the 2-CPU CI machine cannot give the client a
# CPU of its own when Tessera runs two shards).
#
# Needs on PATH: tessera, tessera-bench, redis-server, redis-benchmark, taskset, python3,
# and bench-vs-redis (shared/tools). Sections, in this order unless named:
#   twoshard  issue 2: P=16 server CPU per request, two shards (keys on both) vs one
#   gate      issue 7: bench-vs-redis default workload list, one shard, P=1 and P=16
#   openloop  issue 7: tessera-bench open loop at 50% of redis-server's one-core peak
#   scaling   throughput and server CPU per request as shards grow 1 -> 2 -> 4 -> 8
#   p1profile issue 7: where a P=1 request's server CPU goes, Tessera vs redis-server
#             (perf, from PERF or PATH; TCP segments per request from /proc/net/snmp)
# Each section writes OUTDIR/<section>.txt as it goes, so a run cut short keeps what it had.
# CPU plan: the load generator runs on the low CPUs, servers on the highest ones, so the
# client never shares a CPU with a shard. LAB_QUICK=1 shrinks every count (smoke test),
# LAB_ROUNDS=N overrides the number of interleaved rounds.
set -u
out=${1:?usage: multicore-lab.sh OUTDIR [twoshard|gate|openloop|scaling]...}
shift
sections=${*:-twoshard gate openloop scaling}
mkdir -p "$out"
ncpu=$(nproc)
last=$((ncpu - 1))
quick=${LAB_QUICK:-0}
if [ "$quick" = 1 ]; then
    req_p1=20000 req_p16=100000 rounds=1 secs=2
else
    req_p1=300000 req_p16=500000 rounds=3 secs=10
fi
rounds=${LAB_ROUNDS:-$rounds}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Server CPU time of every thread of PID, in nanoseconds.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s+=$1} END {printf "%.0f\n", s}'; }

wait_ping() {
    for _ in $(seq 100); do
        [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    return 1
}

# start_server NAME PORT CPUS -> pid on stdout (NAME: redis, or tessera with SHARDS)
start_server() {
    local name=$1 port=$2 cpus=$3 shards=${4:-1}
    if [ "$name" = redis ]; then
        taskset -c "$cpus" redis-server --port "$port" --save '' --appendonly no \
            --dir /tmp >/dev/null 2>&1 &
    else
        tessera --port "$port" --threads "$shards" --cpus "$cpus" >"$out/tessera-$port.log" 2>&1 &
    fi
    echo $!
    wait_ping "$port" || echo "server $name on $port did not answer" >&2
}

machine() {
    {
        echo "# $(date -u +%FT%TZ) $(uname -r) nproc=$ncpu"
        lscpu | grep -E '^(Model name|Thread|Core|Socket|NUMA node)' || true
        for c in 0 1 "$last"; do
            echo "cpu$c siblings: $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null)"
        done
    } >"$out/machine.txt"
}

twoshard() {
    local f=$out/twoshard.txt tests=ping_mbulk,set,get,incr,mset
    echo "# one shard on CPU $last; two shards on CPUs $((last - 1)),$last; client on CPU 0" >"$f"
    for spec in "1 $last" "2 $((last - 1)),$last"; do
        set -- $spec
        echo "## tessera --threads $1 --cpus $2 (redis-server on CPU $last)" >>"$f"
        bench-vs-redis --cmd "tessera --port {port} --threads $1 --cpus $2" \
            --server-cpus "$last" --client-cpus 0 --pipeline 16 --tests "$tests" \
            --rounds "$rounds" --requests "$req_p16" >>"$f" 2>&1
    done
}

gate() {
    local f=$out/gate.txt
    echo "# issue 7 gate: one shard on CPU $last, redis-server on CPU $last, client on CPU 0" >"$f"
    bench-vs-redis --cmd "tessera --port {port} --threads 1 --cpus $last" \
        --server-cpus "$last" --client-cpus 0 --rounds "$rounds" --requests "$req_p1" \
        --json "$out/gate.json" >>"$f" 2>&1
}

# tessera-bench summary line: achieved ops/s and the all-commands percentiles.
bench_line() {
    python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["commands"]["ALL"]
p = t["latency_us"]
print(f'ops/s {t["ops_per_sec"]:>9.0f}  ' +
      "  ".join(f"{k} {v:>9.0f}" for k, v in p.items() if k != "mean"))
EOF
}

openloop() {
    local f=$out/openloop.txt rp tp rate peak
    local common=(--threads 2 --clients 25 --ratio 1:10 --key-max 99999 --quiet)
    rp=$(free_port)
    tp=$(free_port)
    local rpid tpid
    rpid=$(start_server redis "$rp" "$last")
    tpid=$(start_server tessera "$tp" "$last" 1)
    # The client keeps off the servers' CPU: two CPUs of its own where the machine has
    # them, CPU 0 alone on a machine of two (the CI-sized VM).
    local ccpus=0,1
    [ "$ncpu" -lt 4 ] && ccpus=0
    echo "# servers on CPU $last, tessera-bench on CPUs $ccpus (2 threads x 25 connections)" >"$f"
    for p in "$rp" "$tp"; do
        taskset -c "$ccpus" tessera-bench --port "$p" --threads 2 --clients 25 --ratio 1:0 \
            --key-pattern sequential --key-max 99999 --requests 2000 --quiet >/dev/null
    done
    taskset -c "$ccpus" tessera-bench --port "$rp" "${common[@]}" --test-time "$secs" \
        --json "$out/peak-redis.json" >/dev/null
    taskset -c "$ccpus" tessera-bench --port "$tp" "${common[@]}" --test-time "$secs" \
        --json "$out/peak-tessera.json" >/dev/null
    echo "closed-loop peak redis:   $(bench_line "$out/peak-redis.json")" >>"$f"
    echo "closed-loop peak tessera: $(bench_line "$out/peak-tessera.json")" >>"$f"
    peak=$(python3 -c "import json; print(int(json.load(open('$out/peak-redis.json'))['commands']['ALL']['ops_per_sec']))")
    rate=$((peak / 2))
    echo "# open loop at $rate requests/s (50% of redis-server's peak)" >>"$f"
    # Odd rounds run redis-server first, even rounds Tessera first: a machine whose noise
    # drifts during the run then does not always favour the same server.
    local order
    for r in $(seq "$rounds"); do
        order="redis tessera"
        [ $((r % 2)) = 0 ] && order="tessera redis"
        for s in $order; do
            local p=$rp
            [ $s = tessera ] && p=$tp
            taskset -c "$ccpus" tessera-bench --port "$p" "${common[@]}" --test-time "$secs" \
                --rate "$rate" --json "$out/open-$s-$r.json" >/dev/null
            echo "round $r $s  $(bench_line "$out/open-$s-$r.json")" >>"$f"
        done
    done
    kill "$rpid" "$tpid"
    wait "$rpid" "$tpid" 2>/dev/null
}

scaling() {
    local f=$out/scaling.txt n cpus port pid c0 c1
    local clients=$((ncpu / 2))
    echo "# tessera-bench on CPUs 0-$((clients - 1)) ($clients threads x 25 connections," \
        "pipeline 16, 1:10 SET:GET, 100000 keys), servers on the top CPUs" >"$f"
    for n in redis 1 2 4 8; do
        [ "$n" != redis ] && [ "$n" -gt "$clients" ] && continue
        port=$(free_port)
        if [ "$n" = redis ]; then
            cpus=$last
            pid=$(start_server redis "$port" "$cpus")
        else
            cpus=$((ncpu - n))-$last
            pid=$(start_server tessera "$port" "$cpus" "$n")
        fi
        taskset -c 0-$((clients - 1)) tessera-bench --port "$port" --threads "$clients" \
            --clients 25 --ratio 1:0 --key-pattern sequential --key-max 99999 \
            --requests $((100000 / clients / 25 + 1)) --pipeline 16 --quiet >/dev/null
        c0=$(cpu_ns "$pid")
        taskset -c 0-$((clients - 1)) tessera-bench --port "$port" --threads "$clients" \
            --clients 25 --ratio 1:10 --key-max 99999 --pipeline 16 --test-time "$secs" \
            --quiet --json "$out/scale-$n.json" >/dev/null
        c1=$(cpu_ns "$pid")
        python3 - "$out/scale-$n.json" "$n" "$cpus" "$c0" "$c1" >>"$f" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["commands"]["ALL"]
ops = t["ops_per_sec"]
n = t["count"]
print(f"{sys.argv[2]:>6} shards  cpus {sys.argv[3]:<6} ops/s {ops:>10.0f}  "
      f"server ns/op {(int(sys.argv[5]) - int(sys.argv[4])) / n:>7.0f}")
EOF
        kill "$pid"
        wait "$pid" 2>/dev/null
    done
}

# TCP segments sent and received by the whole machine so far (loopback counts both ends).
tcp_segs() { awk '/^Tcp: [0-9]/ {print $11 + $12}' /proc/net/snmp; }

p1profile() {
    local f=$out/p1profile.txt perf=${PERF:-perf} reqs=$((req_p1 * 2)) s port pid ppid c0 c1 g0 g1
    echo "# one server on CPU $last, redis-benchmark -t get -P 1 -c 50 on CPU 0;" \
        "perf -e cpu-clock -g of the server during the run" >"$f"
    for s in redis tessera; do
        port=$(free_port)
        pid=$(start_server "$s" "$port" "$last" 1)
        taskset -c 0 redis-benchmark -p "$port" -t get -n 50000 -c 50 -P 1 -r 100000 -q >/dev/null
        "$perf" record -e cpu-clock -g -p "$pid" -o "$out/p1-$s.data" 2>>"$out/perf.err" &
        ppid=$!
        sleep 0.5
        c0=$(cpu_ns "$pid")
        g0=$(tcp_segs)
        taskset -c 0 redis-benchmark -p "$port" -t get -n "$reqs" -c 50 -P 1 -r 100000 -q \
            | tr '\r' '\n' | tail -1 >>"$f"
        c1=$(cpu_ns "$pid")
        g1=$(tcp_segs)
        kill -INT "$ppid"
        wait "$ppid" 2>/dev/null
        {
            echo "## $s: server ns/op $(((c1 - c0) / reqs)), TCP segments per request" \
                "(both ends) $(python3 -c "print(round(($g1 - $g0) / $reqs, 2))")"
            "$perf" report -i "$out/p1-$s.data" --no-children --sort dso 2>/dev/null \
                | grep '%' | grep -v '^#' | grep -v -- '--' | head -4
            "$perf" report -i "$out/p1-$s.data" --children --sort sym 2>/dev/null \
                | grep -E '\] (tcp_sendmsg|tcp_recvmsg|net_rx_action|do_epoll_wait|schedule)$'
        } >>"$f"
        rm -f "$out/p1-$s.data"
        kill "$pid"
        wait "$pid" 2>/dev/null
    done
}

machine
for s in $sections; do
    echo "== $s $(date -u +%T)"
    "$s"
done
echo "== done $(date -u +%T)"
