#!/usr/bin/env python3
# Hash field expiration, Tessera against a redis-server 7.4 side by side (issue 29).
# Not run by CI: the machine's redis-server is 7.0.15, which has no field TTLs. Build
# 7.4.1 from a Redis checkout (`git archive 7.4.1 | tar x; make MALLOC=libc redis-server`),
# start it and Tessera with --enable-debug-command yes, then:
#
#   python3 tests/compat/hfe_vs_redis74.py REDIS_PORT TESSERA_PORT
#
# It FLUSHALLs both, runs the same HEXPIRE / HTTL / HPERSIST commands and errors on each
# (small and big hashes, fixed absolute deadlines so replies do not depend on timing),
# compares every reply, COMMAND INFO and DEBUG DIGEST-VALUE, and moves DUMP payloads
# both ways (a 7.4 payload's footer is rewritten to version 10, which Tessera accepts).
# Prints each difference and "diffs: N" at the end.
import socket, sys, time

def enc(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        if isinstance(a, str): a = a.encode()
        if isinstance(a, int): a = str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out

class C:
    def __init__(s, port):
        s.s = socket.create_connection(("127.0.0.1", port)); s.buf = b""
    def line(s):
        while b"\r\n" not in s.buf: s.buf += s.s.recv(65536)
        l, s.buf = s.buf.split(b"\r\n", 1); return l
    def exact(s, n):
        while len(s.buf) < n + 2: s.buf += s.s.recv(65536)
        d, s.buf = s.buf[:n], s.buf[n+2:]; return d
    def read(s):
        l = s.line(); t, r = l[:1], l[1:]
        if t == b"+": return r.decode()
        if t == b"-": return ("ERR", r.decode())
        if t == b":": return int(r)
        if t == b"$": n = int(r); return None if n < 0 else s.exact(n)
        if t == b"*": n = int(r); return None if n < 0 else [s.read() for _ in range(n)]
        raise Exception(l)
    def __call__(s, *a):
        s.s.sendall(enc(a)); return s.read()

crc_table = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x95AC9329AC4BC9B5 if c & 1 else c >> 1
    crc_table.append(c)
def crc64(data):
    crc = 0
    for b in data: crc = crc_table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc

r, t = C(int(sys.argv[1])), C(int(sys.argv[2]))
for c in (r, t): c("FLUSHALL"); c("DEBUG", "SET-ACTIVE-EXPIRE", "0")
far = 2524600800000
diffs = 0
def both(*a, show=False):
    global diffs
    x, y = r(*a), t(*a)
    if x != y:
        diffs += 1; print("DIFF", a, "\n  redis  ", x, "\n  tessera", y)
    elif show: print("same", a, x)
    return x
fields = lambda n: ["f%d" % i for i in range(n)]
for key, n in (("small", 5), ("big", 700)):
    both("HSET", key, *sum(([f, "v" + f] for f in fields(n)), []))
    both("HPEXPIREAT", key, far, "FIELDS", 3, "f1", "f3", "nope")
    both("HPEXPIREAT", key, far + 5, "NX", "FIELDS", 2, "f1", "f2")
    both("HPEXPIREAT", key, far - 5, "GT", "FIELDS", 2, "f1", "f2")
    both("HPEXPIREAT", key, far - 5, "LT", "FIELDS", 3, "f1", "f2", "f4")
    both("HPEXPIREAT", key, far + 9, "XX", "FIELDS", 2, "f0", "f3")
    both("HEXPIREAT", key, far // 1000 + 7, "FIELDS", 1, "f0")
    both("HPEXPIRETIME", key, "FIELDS", 6, "f0", "f1", "f2", "f3", "f4", "zz")
    both("HEXPIRETIME", key, "FIELDS", 6, "f0", "f1", "f2", "f3", "f4", "zz")
    both("HPERSIST", key, "FIELDS", 3, "f0", "f0", "zz")
    both("HTTL", key, "FIELDS", 2, "f4", "zz")
    both("HPEXPIREAT", key, 1, "FIELDS", 2, "f4", "zz")
    both("HLEN", key)
    both("OBJECT", "ENCODING", key)
    if key == "small": both("HGETALL", key)
    both("DEBUG", "DIGEST-VALUE", key, show=True)
# errors
for a in [("HEXPIRE","small","-1","FIELDS","1","f1"), ("HEXPIRE","small","281474976710","FIELDS","1","f1"),
          ("HPEXPIRE","small","10","FIELDS","0","f1"), ("HPEXPIRE","small","10","FIELDS","2","f1"),
          ("HPEXPIRE","small","10","XX","FIELD","1","f1"), ("HTTL","small","FIELDS","0","f1"),
          ("HTTL","small","FIELDS","a","f1"), ("HPERSIST","small","FIELDS","2","f1"),
          ("HEXPIRE","small","x","FIELDS","1","f1"), ("HPEXPIREAT","small","70368744177664","FIELDS","1","f1"),
          ("HEXPIRETIME","small","FIELDS","1")]:
    both(*a)
both("SET", "str", "x"); both("HTTL", "str", "FIELDS", 1, "a"); both("HEXPIRE", "str", "-1", "FIELDS", 1, "a")
both("HEXPIRE", "nokey", 10, "FIELDS", 2, "a", "b"); both("HPERSIST", "nokey", "FIELDS", 1, "a")
for name in ("hexpire", "httl", "hpersist", "hpexpiretime"):
    x, y = r("COMMAND", "INFO", name), t("COMMAND", "INFO", name)
    # compare arity, flags, first/last/step, acl categories
    if x[0][:7] != y[0][:7]: diffs += 1; print("DIFF COMMAND INFO", name, x[0][:7], y[0][:7])
# DUMP Tessera -> Redis 7.4
for key in ("small", "big"):
    p = t("DUMP", key)
    print("tessera dump", key, "type", p[0], "len", len(p))
    x = r("RESTORE", key + ":fromtessera", 0, p)
    print("  redis RESTORE:", x)
    a = r("HPEXPIRETIME", key + ":fromtessera", "FIELDS", 5, "f0", "f1", "f2", "f3", "f4")
    b = r("HPEXPIRETIME", key, "FIELDS", 5, "f0", "f1", "f2", "f3", "f4")
    print("  ttls equal:", a == b, a)
    print("  digest equal:", r("DEBUG", "DIGEST-VALUE", key + ":fromtessera") == r("DEBUG", "DIGEST-VALUE", key))
    # Redis 7.4 -> Tessera (footer version rewritten to 10, CRC redone)
    q = r("DUMP", key)
    body = q[:-10] + (10).to_bytes(2, "little")
    q2 = body + crc64(body).to_bytes(8, "little")
    print("redis dump", key, "type", q[0], "len", len(q))
    print("  tessera RESTORE:", t("RESTORE", key + ":fromredis", 0, q2))
    a = t("HPEXPIRETIME", key + ":fromredis", "FIELDS", 5, "f0", "f1", "f2", "f3", "f4")
    print("  ttls equal:", a == b, a)
    print("  HGETALL equal (sorted):", sorted(t("HGETALL", key + ":fromredis")) == sorted(r("HGETALL", key)))
print("diffs:", diffs)
