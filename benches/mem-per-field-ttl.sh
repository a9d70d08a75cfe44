#!/usr/bin/env bash
# Memory per hash field TTL (issue 29): HASHES hashes of FIELDS fields each, INFO
# memory's used_memory before the hashes, after them, and after HPEXPIRE gave every
# field a TTL. Prints bytes per field without and with a TTL. redis-server 7.0 has no
# field TTLs, so there is no side-by-side figure.
#
#   benches/mem-per-field-ttl.sh [HASHES] [FIELDS] [TESSERA]   (defaults 100 1000, release)
#
# Needs redis-cli.
set -euo pipefail
cd "$(dirname "$0")/.."
hashes=${1:-100}
fields=${2:-1000}
bin=${3:-}
if [ -z "$bin" ]; then
    cargo build --release --bin tessera -q
    bin=${CARGO_TARGET_DIR:-target}/release/tessera
fi
scratch=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
"$bin" --port "$port" --threads 1 --save "" --dir "$scratch" >"$scratch/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$scratch"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
mem() { redis-cli -p "$port" info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p'; }
commands() { # $1: HSET or HPEXPIRE
    python3 - "$1" "$hashes" "$fields" <<'PY'
import sys
cmd, h, f = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(h):
    names = " ".join(f"field:{j}" for j in range(f))
    if cmd == "HSET":
        print(f"HSET h{i} " + " ".join(f"field:{j} v{j}" for j in range(f)))
    else:
        print(f"HPEXPIRE h{i} 100000000 FIELDS {f} {names}")
PY
}
base=$(mem)
commands HSET | redis-cli -p "$port" >/dev/null
plain=$(mem)
encoding=$(redis-cli -p "$port" object encoding h0)
commands HPEXPIRE | redis-cli -p "$port" >/dev/null
with_ttl=$(mem)
n=$((hashes * fields))
echo "$hashes hashes x $fields fields ($encoding -> $(redis-cli -p "$port" object encoding h0)):" \
    "used_memory $base / $plain / $with_ttl," \
    "$(((plain - base) / n)) bytes per field, +$(((with_ttl - plain) / n)) per field TTL"
