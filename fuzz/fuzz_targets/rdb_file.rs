//! Feeds arbitrary bytes to the RDB file reader that loads `dump.rdb` at start and
//! checks that nothing panics and that skipping a value (what shards that do not own
//! a key do) always lands where decoding it does (`walk_both_ways`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Most inputs would die at the magic: give every input a valid header.
    let mut file = b"REDIS0010".to_vec();
    file.extend_from_slice(data);
    tessera::storage::rdb::records::walk_both_ways(&file);
});
