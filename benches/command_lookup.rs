//! Command-table lookup (src/commands/table.rs): name -> spec, once per request.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tessera::commands::table;

fn bench(c: &mut Criterion) {
    // Force the lazily built table before measuring.
    assert!(table::lookup(b"get").is_some());
    let mut g = c.benchmark_group("command_lookup");
    for name in [&b"GET"[..], b"get", b"ZRANGEBYSCORE", b"nosuchcommand"] {
        let label = String::from_utf8_lossy(name).into_owned();
        g.bench_function(label, |b| {
            b.iter(|| table::lookup(black_box(name)).is_some())
        });
    }
    let mixed: Vec<&[u8]> = vec![b"GET", b"SET", b"hset", b"LPUSH", b"zadd", b"Incr", b"MGET"];
    g.bench_function("mixed_7", |b| {
        b.iter(|| {
            mixed
                .iter()
                .filter(|n| table::lookup(black_box(n)).is_some())
                .count()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
