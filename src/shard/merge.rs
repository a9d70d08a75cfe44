//! Reply merging for commands split across shards (MGET, MSET, DEL ... whose keys
//! span shards): the per-shard parts become the one reply the client expects.

use crate::commands::Merge;
use crate::protocol::reply::ReplyWriter;

/// Combines the per-key replies of a split command into the reply the client expects.
pub fn merge_replies<'a>(
    merge: Merge,
    pieces: impl Iterator<Item = &'a [u8]> + Clone,
    count: usize,
    w: &mut ReplyWriter,
) {
    if merge != Merge::Array {
        if let Some(err) = pieces.clone().find(|p| p.first() == Some(&b'-')) {
            w.out.extend_from_slice(err);
            return;
        }
    }
    match merge {
        Merge::Array => {
            w.array_len(count);
            for p in pieces {
                w.out.extend_from_slice(p);
            }
        }
        Merge::Sum => {
            let total: i64 = pieces
                .filter_map(|p| p.strip_prefix(b":"))
                .filter_map(|p| std::str::from_utf8(p).ok()?.trim_end().parse::<i64>().ok())
                .sum();
            w.integer(total);
        }
        Merge::Ok => w.ok(),
    }
}
