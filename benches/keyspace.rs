//! Keyspace get/insert (src/storage/keyspace.rs): one shard's hash tables.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use hashbrown::DefaultHashBuilder;
use std::hint::black_box;
use tessera::slot::SLOT_COUNT as SLOTS;
use tessera::storage::keyspace::{Db, NO_EXPIRE};
use tessera::storage::value::{StrValue, Value};

const KEYS: usize = 100_000;

fn keys() -> Vec<Vec<u8>> {
    (0..KEYS)
        .map(|i| format!("key:{i:08}").into_bytes())
        .collect()
}

/// A Db owning every slot (one shard), filled with `keys`.
fn filled(keys: &[Vec<u8>]) -> Db {
    let mut db = Db::new(0, SLOTS, DefaultHashBuilder::default());
    for k in keys {
        db.insert(k, Value::Str(StrValue::from_bytes(b"value")), NO_EXPIRE, 0);
    }
    db
}

fn bench(c: &mut Criterion) {
    let keys = keys();
    let mut db = filled(&keys);
    let mut g = c.benchmark_group("keyspace");
    let mut i = 0usize;
    g.bench_function("get_hit_100k", |b| {
        b.iter(|| {
            // A stride co-prime to KEYS walks the keys in a cache-unfriendly order.
            i = (i + 7919) % KEYS;
            db.get(black_box(&keys[i]), 1).is_some()
        })
    });
    g.bench_function("get_miss_100k", |b| {
        b.iter(|| db.get(black_box(b"key:missing"), 1).is_some())
    });
    g.bench_function("insert_overwrite_100k", |b| {
        b.iter(|| {
            i = (i + 7919) % KEYS;
            db.insert(
                black_box(&keys[i]),
                Value::Str(StrValue::from_bytes(b"value2")),
                NO_EXPIRE,
                0,
            )
            .is_some()
        })
    });
    g.bench_function("insert_fresh_10k", |b| {
        b.iter_batched(
            || Db::new(0, SLOTS, DefaultHashBuilder::default()),
            |mut db| {
                for k in &keys[..10_000] {
                    db.insert(k, Value::Str(StrValue::from_bytes(b"v")), NO_EXPIRE, 0);
                }
                db.len()
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
