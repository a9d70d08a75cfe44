# Sourced by the benches/*.sh comparisons: starts a redis-server and a Tessera side by
# side on free loopback ports (their ports in $rport and $tport; $threads shards) and
# stops both when the calling script exits, removing $scratch too if the caller set it.

side_by_side_pids=()
side_by_side_stop() {
    for p in "${side_by_side_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ -n "${scratch:-}" ]; then rm -rf "$scratch"; fi
}
trap side_by_side_stop EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_ready() {
    for _ in $(seq 100); do
        redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "server on port $1 did not start" >&2
    exit 1
}

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
side_by_side_pids+=($!)
tport=$(free_port)
target/release/tessera --port "$tport" --threads "$threads" >/dev/null 2>&1 &
side_by_side_pids+=($!)
wait_ready "$rport"
wait_ready "$tport"
