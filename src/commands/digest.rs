//! DEBUG DIGEST and DEBUG DIGEST-VALUE: a SHA-1 signature of the dataset, or of single
//! values, computed as Redis 7.0's debug.c computes it, so that the test suites
//! that compare datasets by digest (after a reload, between master and replica)
//! get the same answers here and can compare against a real Redis.
//!
//! Two primitives build everything:
//! - `xor`: digest ^= SHA1(data). Commutative, for what has no order (set members,
//!   hash fields, sorted-set members, the keys of a db). An element or key digest
//!   is itself fed to `xor` as data, so it is hashed once more before the xor, as
//!   Redis's `xorDigest(digest, eledigest, 20)` does.
//! - `mix`: xor, then digest = SHA1(digest). Order-sensitive, for sequences (list
//!   items, stream entries) and for the parts of one element.
//!
//! What goes in, per key (`value_digest`): the type number (big-endian u32, Redis's
//! OBJ_* numbering), the value as below, and the literal "!!expire!!" when the key
//! has a deadline (Redis 7.0 mixes in only that it has one, not the time). The
//! dataset digest starts from the key name, then xors every key's digest into its
//! db's share; each non-empty db first mixes its index into the running result.
//!
//! Values are digested through their ordinary iterators, in the text Redis would
//! produce: integers in decimal, scores as `%.17g`, stream IDs as `ms.seq`. Like
//! Redis 7.0, a stream's digest covers its entries only, not its consumer groups,
//! last ID or counters.

use super::GlobalCtx;
use crate::protocol::reply::format_double_g17;
use crate::scripting::sha1::sha1;
use crate::shard::multi::MultiShardOp;
use crate::storage::stream::StreamId;
use crate::storage::{Db, Entry, Value, NO_EXPIRE};

pub type Digest = [u8; 20];

/// Redis's OBJ_* type numbers, which go into every value's digest.
const OBJ_STRING: u32 = 0;
const OBJ_LIST: u32 = 1;
const OBJ_SET: u32 = 2;
const OBJ_ZSET: u32 = 3;
const OBJ_HASH: u32 = 4;
const OBJ_STREAM: u32 = 6;

/// digest ^= SHA1(data): order-independent accumulation.
fn xor(digest: &mut Digest, data: &[u8]) {
    xor_digest(digest, &sha1(data));
}

fn xor_digest(digest: &mut Digest, other: &Digest) {
    for (d, h) in digest.iter_mut().zip(other) {
        *d ^= h;
    }
}

/// digest = SHA1(digest ^ SHA1(data)): order-sensitive accumulation.
fn mix(digest: &mut Digest, data: &[u8]) {
    xor(digest, data);
    *digest = sha1(digest);
}

/// The digest of one element made of several parts (a hash field and its value, a
/// sorted-set member and its score), to be `xor`ed (hashed, then xored) into its
/// collection's digest.
fn element(parts: &[&[u8]]) -> Digest {
    let mut d = [0u8; 20];
    for p in parts {
        mix(&mut d, p);
    }
    d
}

/// Mixes `v` (and whether it expires) into `digest`: Redis's xorObjectDigest.
pub fn mix_value(digest: &mut Digest, v: &Value, expire_at: u64) {
    let ty = match v {
        Value::Str(_) => OBJ_STRING,
        Value::List(_) => OBJ_LIST,
        Value::Set(_) => OBJ_SET,
        Value::ZSet(_) => OBJ_ZSET,
        Value::Hash(_) => OBJ_HASH,
        Value::Stream(_) => OBJ_STREAM,
    };
    mix(digest, &ty.to_be_bytes());
    match v {
        Value::Str(s) => {
            let mut scratch = [0u8; 24];
            mix(digest, s.bytes(&mut scratch));
        }
        Value::List(l) => {
            for item in l.iter() {
                mix(digest, &item);
            }
        }
        Value::Set(s) => {
            for m in s.iter() {
                m.with_bytes(|b| xor(digest, b));
            }
        }
        Value::ZSet(z) => {
            let mut score = Vec::with_capacity(32);
            for (m, s) in z.iter() {
                score.clear();
                format_double_g17(s, &mut score);
                xor(digest, &element(&[m, &score]));
            }
        }
        Value::Hash(h) => {
            for (f, val) in h.iter() {
                let mut e = element(&[f, val]);
                // Redis 7.4 marks a field with a deadline (not the deadline itself).
                if h.field_expire(f).is_some() {
                    xor(&mut e, b"!!hexpire!!");
                }
                xor(digest, &e);
            }
        }
        Value::Stream(s) => {
            for e in s.range(StreamId::ZERO, StreamId::MAX, false) {
                mix(digest, format!("{}.{}", e.id.ms, e.id.seq).as_bytes());
                for part in e.fields() {
                    mix(digest, part);
                }
            }
        }
    }
    if expire_at != NO_EXPIRE {
        xor(digest, b"!!expire!!");
    }
}

/// DEBUG DIGEST-VALUE's digest of one value: no key name in it; zeros for no key.
pub fn value_digest(entry: Option<&Entry>) -> Digest {
    let mut d = [0u8; 20];
    if let Some(e) = entry {
        mix_value(&mut d, e.value(), e.expire_at());
    }
    d
}

/// One key's share of the dataset digest: its name, then its value.
pub fn key_digest(e: &Entry) -> Digest {
    let mut d = [0u8; 20];
    mix(&mut d, e.key());
    mix_value(&mut d, e.value(), e.expire_at());
    d
}

/// One shard's share of one db: how many keys it holds and the xor of the SHA-1s
/// of their key digests (which `combine` xors together as they are). Keys past their deadline but not yet deleted count, as Redis's walk of
/// its dict counts them.
pub fn db_share(db: &Db) -> (usize, Digest) {
    let mut acc = [0u8; 20];
    let mut n = 0;
    for idx in 0..db.slot_count() {
        // At time 0 no deadline has passed, so this visits every stored entry.
        db.for_each_in_slot(idx, 0, |e| {
            n += 1;
            xor(&mut acc, &key_digest(e));
        });
    }
    (n, acc)
}

/// The dataset digest from every shard's per-db shares (`shares[shard][db]`):
/// Redis's computeDatasetDigest, whose per-db xor does not care which shard
/// held a key.
pub fn combine(shares: &[Vec<(usize, Digest)>]) -> Digest {
    let mut out = [0u8; 20];
    let dbs = shares.iter().map(Vec::len).max().unwrap_or(0);
    for db in 0..dbs {
        let parts = shares.iter().filter_map(|s| s.get(db));
        if parts.clone().all(|(n, _)| *n == 0) {
            continue;
        }
        mix(&mut out, &(db as u32).to_be_bytes());
        for (_, d) in parts {
            xor_digest(&mut out, d);
        }
    }
    out
}

/// Lowercase hex, as DEBUG replies.
pub fn hex(d: &Digest) -> String {
    let mut s = String::with_capacity(40);
    for b in d {
        s.push(char::from(b"0123456789abcdef"[(b >> 4) as usize]));
        s.push(char::from(b"0123456789abcdef"[(b & 15) as usize]));
    }
    s
}

/// DEBUG DIGEST: every shard digests its share of every db under one lock of the
/// whole keyspace; this shard combines the shares in db order.
pub async fn debug_digest(g: &mut GlobalCtx<'_>) {
    let cell = g.session.cell.clone();
    let op = MultiShardOp::lock_all(g.owner(), &cell).await;
    let shares = op
        .on_each(&cell, |d| d.dbs.iter().map(db_share).collect::<Vec<_>>())
        .await;
    g.release(op).await;
    g.w().simple(&hex(&combine(&shares)));
}

/// DEBUG DIGEST-VALUE key...: one digest per key of the selected db, each asked of
/// the shard that owns the key; expired keys not yet deleted still count, as in Redis.
pub async fn debug_digest_value(g: &mut GlobalCtx<'_>) {
    let db = g.session.db;
    let cell = g.session.cell.clone();
    let keys: Vec<Vec<u8>> = g.args[2..].to_vec();
    let mut by_shard: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let shard = cell.shard_of(k);
        match by_shard.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, idx)) => idx.push(i),
            None => by_shard.push((shard, vec![i])),
        }
    }
    let mut digests = vec![[0u8; 20]; keys.len()];
    let op = MultiShardOp::lock_all(g.owner(), &cell).await;
    for (shard, idx) in by_shard {
        let asked: Vec<Vec<u8>> = idx.iter().map(|&i| keys[i].clone()).collect();
        let got = op
            .on(&cell, shard, move |d| {
                asked
                    .iter()
                    .map(|k| value_digest(d.dbs[db].peek(k)))
                    .collect::<Vec<_>>()
            })
            .await;
        for (i, d) in idx.into_iter().zip(got) {
            digests[i] = d;
        }
    }
    g.release(op).await;
    let mut w = g.w();
    w.array_len(digests.len());
    for d in &digests {
        w.simple(&hex(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_dataset_is_zeros() {
        assert_eq!(hex(&combine(&[vec![(0, [0; 20]); 16]])), "0".repeat(40));
        assert_eq!(hex(&value_digest(None)), "0".repeat(40));
    }

    /// Values taken from redis-server 7.0.15.
    #[test]
    fn matches_redis_on_known_values() {
        use crate::storage::hash::HashValue;
        use crate::storage::limits::EncodingLimits;
        use crate::storage::StrValue;
        let mut h = HashValue::new();
        let lim = EncodingLimits::default();
        for (f, v) in [(&b"f1"[..], &b"v1"[..]), (b"f2", b"2"), (b"3", b"three")] {
            h.set(f, v, &lim);
        }
        let mut d = [0u8; 20];
        mix_value(&mut d, &Value::Hash(Box::new(h)), NO_EXPIRE);
        assert_eq!(hex(&d), "14966f215804e658d44ad8c0079119fc3d843143");
        // DEBUG DIGEST of db 0 holding only k -> "v".
        let mut k = [0u8; 20];
        mix(&mut k, b"k");
        mix_value(&mut k, &Value::Str(StrValue::from_bytes(b"v")), NO_EXPIRE);
        let mut share = [0u8; 20];
        xor(&mut share, &k);
        assert_eq!(
            hex(&combine(&[vec![(1, share)]])),
            "264ccf65edec66bccfa7cc659414ccca432057d2"
        );
    }

    #[test]
    fn mix_is_ordered_and_xor_is_not() {
        let (mut a, mut b) = ([0u8; 20], [0u8; 20]);
        mix(&mut a, b"x");
        mix(&mut a, b"y");
        mix(&mut b, b"y");
        mix(&mut b, b"x");
        assert_ne!(a, b);
        let (mut a, mut b) = ([0u8; 20], [0u8; 20]);
        xor(&mut a, b"x");
        xor(&mut a, b"y");
        xor(&mut b, b"y");
        xor(&mut b, b"x");
        assert_eq!(a, b);
    }

    #[test]
    fn shares_combine_whatever_shard_holds_a_key() {
        let k1 = element(&[b"k1"]);
        let k2 = element(&[b"k2"]);
        let mut both = k1;
        xor_digest(&mut both, &k2);
        let split = combine(&[vec![(0, [0; 20]), (1, k1)], vec![(0, [0; 20]), (1, k2)]]);
        let one = combine(&[
            vec![(0, [0; 20]), (2, both)],
            vec![(0, [0; 20]), (0, [0; 20])],
        ]);
        assert_eq!(split, one);
        // The db index is part of the digest.
        let db0 = combine(&[vec![(2, both), (0, [0; 20])]]);
        assert_ne!(db0, one);
    }
}
