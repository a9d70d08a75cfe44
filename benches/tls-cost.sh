#!/usr/bin/env bash
# tls-cost.sh ROUNDS REQUESTS [TESSERA_BINARY] : what TLS costs per request, Tessera
# and redis-server side by side. Makes a CA and a server certificate with openssl,
# starts `tessera --threads 1` and `redis-server` (both pinned to CPU ${SERVER_CPU:-1},
# each with a plaintext port and a tls-port, tls-auth-clients no), and for each round
# runs redis-benchmark -t set,get -n REQUESTS -P ${P:-16} -c 50 -r 100000 on CPU
# ${CLIENT:-0} against each server's plaintext and TLS port, interleaved. Prints
# throughput and the server's CPU time per request (all its threads, from schedstat),
# then the server's CPU time per handshake: full ones (openssl s_time -new, TLSv1.3
# and TLSv1.2) and resumed ones (-reuse), ${HANDSHAKE_SECS:-3} seconds each.
# Needs openssl, redis-server, redis-benchmark (Debian's, built with TLS) on PATH.
#   benches/tls-cost.sh 3 400000
set -u
rounds=$1 reqs=$2 bin=${3:-target/release/tessera}
work=$(mktemp -d)
trap 'kill $tpid $rpid 2>/dev/null; rm -rf "$work"' EXIT
(
    cd "$work" || exit 1
    printf '[s]\nsubjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n' >ext.cnf
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -sha256 -key ca.key -days 2 -subj /CN=bench-ca -out ca.crt
    openssl genrsa -out server.key 2048 2>/dev/null
    openssl req -new -key server.key -subj /CN=bench -out server.csr
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
        -extfile ext.cnf -extensions s -out server.crt 2>/dev/null
) || exit 1
tls=(--tls-cert-file "$work/server.crt" --tls-key-file "$work/server.key"
    --tls-ca-cert-file "$work/ca.crt" --tls-auth-clients no)
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s+=$1} END {printf "%.0f", s}'; }
tport=$((7000 + RANDOM % 500)) rport=$((7500 + RANDOM % 500))
taskset -c "${SERVER_CPU:-1}" "$bin" --port "$tport" --tls-port $((tport + 1)) "${tls[@]}" \
    --threads 1 --save "" --dir "$work" >/dev/null 2>&1 &
tpid=$!
taskset -c "${SERVER_CPU:-1}" redis-server --port "$rport" --tls-port $((rport + 1)) "${tls[@]}" \
    --save "" --appendonly no --dir "$work" >/dev/null 2>&1 &
rpid=$!
for p in $tport $rport; do
    for _ in $(seq 50); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
run() { # name pid port tls-args...
    local name=$1 pid=$2 port=$3
    shift 3
    for t in set get; do
        local c0 c1 rps
        c0=$(cpu_ns "$pid")
        rps=$(taskset -c "${CLIENT:-0}" redis-benchmark -p "$port" "$@" -t "$t" -n "$reqs" \
            -P "${P:-16}" -c 50 -r 100000 -q --csv | tail -1 | cut -d, -f2 | tr -d '"')
        c1=$(cpu_ns "$pid")
        printf "r%s %-16s %-4s rps=%9.0f ns/op=%5d\n" "$r" "$name" "$t" "$rps" \
            $(((c1 - c0) / reqs))
    done
}
for r in $(seq "$rounds"); do
    run tessera-plain $tpid $tport
    run tessera-tls $tpid $((tport + 1)) --tls --cacert "$work/ca.crt"
    run redis-plain $rpid $rport
    run redis-tls $rpid $((rport + 1)) --tls --cacert "$work/ca.crt"
done
handshakes() { # name pid port
    local name=$1 pid=$2 port=$3
    # Resumption measured with TLSv1.2: s_time's TLSv1.3 -reuse never resumes (it
    # ends before the session ticket comes), against either server.
    for mode in "new tls1_3" "new tls1_2" "reuse tls1_2"; do
        local c0 c1 n
        set -- $mode
        c0=$(cpu_ns "$pid")
        n=$(taskset -c "${CLIENT:-0}" openssl s_time -connect "127.0.0.1:$port" -CAfile "$work/ca.crt" \
            -"$1" -"$2" -time "${HANDSHAKE_SECS:-3}" 2>/dev/null | awk '/connections in/ {print $1; exit}')
        c1=$(cpu_ns "$pid")
        printf "%-16s handshake-%-5s %-6s n=%6d server_us/handshake=%6.1f\n" "$name" "$1" "$2" "${n:-0}" \
            "$(echo "($c1 - $c0) / ${n:-1} / 1000" | bc -l)"
    done
}
handshakes tessera-tls $tpid $((tport + 1))
handshakes redis-tls $rpid $((rport + 1))
