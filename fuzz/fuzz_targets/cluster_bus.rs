//! Feeds arbitrary bytes to the cluster bus reader, as a peer's link would: the
//! frame check must never panic or accept a length it cannot hold, and a message
//! that decodes must encode to bytes that decode to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera::cluster::wire;

fuzz_target!(|data: &[u8]| {
    let Ok(Some(len)) = wire::frame_len(data) else {
        // Also decode unframed input: decode checks lengths itself.
        let _ = wire::decode(data);
        return;
    };
    assert!(len >= wire::HEADER_LEN && len <= wire::MAX_MESSAGE_LEN);
    let Some(frame) = data.get(..len) else {
        return;
    };
    let Ok(message) = wire::decode(frame) else {
        return;
    };
    let mut again = Vec::new();
    wire::encode(&message, &mut again);
    let reread = wire::decode(&again).expect("what encode wrote must decode");
    assert_eq!(reread, message);
});
