//! Feeds arbitrary bytes to the two AOF readers the server runs at start — the
//! manifest parser and the command reader — and checks that nothing panics, that a
//! manifest that parses renders to text that parses back to it, and that the
//! command reader never claims an offset past the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera::persistence::aof_reader::{CommandReader, Next};
use tessera::persistence::manifest::Manifest;

fuzz_target!(|data: &[u8]| {
    manifest_round_trip(data);
    read_commands(data);
});

/// Parse, render, parse again. What Redis itself cannot read back is left out: an
/// empty list (an empty file), an empty name (nothing between two spaces), a name
/// with a single quote (written unquoted, it opens a quote), a line that grew past
/// 1024 bytes in rendering (escapes, a saturated sequence number).
fn manifest_round_trip(data: &[u8]) {
    let Ok(m) = Manifest::parse(data) else {
        return;
    };
    let text = m.render();
    let all = m.base.iter().chain(&m.history).chain(&m.incrs);
    let unreadable = |name: &str| name.is_empty() || name.contains('\'');
    if text.is_empty()
        || all.map(|f| f.name.as_str()).any(unreadable)
        || text.lines().any(|l| l.len() >= 1024)
    {
        return;
    }
    let back = Manifest::parse(text.as_bytes()).expect("a rendered manifest parses");
    assert_eq!(back, m);
}

/// Reads commands until the end or an error.
fn read_commands(data: &[u8]) {
    let mut r = CommandReader::new(data, 0);
    while let Ok(Next::Command(_)) = r.next() {}
    assert!(r.offset() <= r.position());
    assert!(r.position() <= data.len() as u64);
}
