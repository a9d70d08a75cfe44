//! Reply encoding (src/protocol/reply.rs): the last thing every request costs.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tessera::protocol::reply::{Protocol, ReplyWriter};

fn bench(c: &mut Criterion) {
    let value = vec![b'v'; 32];
    let members: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("member:{i}").into_bytes())
        .collect();
    let mut g = c.benchmark_group("reply_encoding");
    let mut out = Vec::with_capacity(64 * 1024);
    g.bench_function("ok", |b| {
        b.iter(|| {
            out.clear();
            ReplyWriter::new(&mut out, Protocol::Resp2).ok();
            black_box(out.len())
        })
    });
    g.bench_function("bulk_32b", |b| {
        b.iter(|| {
            out.clear();
            ReplyWriter::new(&mut out, Protocol::Resp2).bulk(black_box(&value));
            black_box(out.len())
        })
    });
    g.bench_function("integer", |b| {
        let mut n = 0i64;
        b.iter(|| {
            out.clear();
            n = n.wrapping_add(7919);
            ReplyWriter::new(&mut out, Protocol::Resp2).integer(black_box(n));
            black_box(out.len())
        })
    });
    g.bench_function("double_resp3", |b| {
        b.iter(|| {
            out.clear();
            ReplyWriter::new(&mut out, Protocol::Resp3).double(black_box(1234.5678e-3));
            black_box(out.len())
        })
    });
    g.bench_function("array_100_bulks", |b| {
        b.iter(|| {
            out.clear();
            let mut w = ReplyWriter::new(&mut out, Protocol::Resp2);
            w.array_len(members.len());
            for m in &members {
                w.bulk(m);
            }
            black_box(out.len())
        })
    });
    g.bench_function("map_50_pairs_resp3", |b| {
        b.iter(|| {
            out.clear();
            let mut w = ReplyWriter::new(&mut out, Protocol::Resp3);
            w.map_len(50);
            for pair in members.chunks(2) {
                w.bulk(&pair[0]);
                w.bulk(&pair[1]);
            }
            black_box(out.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
