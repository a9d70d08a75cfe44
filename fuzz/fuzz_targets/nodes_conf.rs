//! Feeds arbitrary bytes to the nodes.conf reader a cluster node runs at start:
//! it must never panic, and a file it accepts must render to text that reads
//! back to the same table, and load into a node table without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera::cluster::nodes::NodeTable;
use tessera::cluster::nodes_conf;

fuzz_target!(|data: &[u8]| {
    let Ok(conf) = nodes_conf::parse(data) else {
        return;
    };
    let _ = NodeTable::from_conf(&conf, 0);
    let text = nodes_conf::render(&conf);
    let again = nodes_conf::parse(text.as_bytes()).expect("what render writes must parse");
    assert_eq!(nodes_conf::render(&again), text);
});
