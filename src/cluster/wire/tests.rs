//! The bus format against cluster.h's layout, Redis's length checks, and a model:
//! whatever `encode` writes, `decode` reads back unchanged, and no input bytes make
//! `decode` panic.

use super::*;
use crate::cluster::flags;
use proptest::prelude::*;

fn name(c: u8) -> NodeName {
    NodeName([c; NAME_LEN])
}

fn header() -> Header {
    let mut slots = Box::new([0u8; BITMAP_LEN]);
    set_slot(&mut slots, 0);
    set_slot(&mut slots, 16383);
    Header {
        port: 0x1234,
        current_epoch: 0x0102030405060708,
        config_epoch: 0x1112131415161718,
        offset: 0x2122232425262728,
        sender: name(b'a'),
        slots,
        master: name(b'b'),
        ip: ip_field("10.0.0.1"),
        pport: 0x3132,
        cport: 0x4142,
        flags: flags::MASTER | flags::MYSELF,
        state: 1,
        mflags: [mflags0::PAUSED, 0, 0],
    }
}

fn gossip(c: u8) -> Gossip {
    Gossip {
        name: name(c),
        ping_sent: 0x51525354,
        pong_received: 0x61626364,
        ip: ip_field("127.0.0.1"),
        port: 7000,
        cport: 17000,
        flags: flags::REPLICA,
        pport: 0,
    }
}

fn bytes_of(body: Body) -> Vec<u8> {
    let mut out = Vec::new();
    encode(
        &Message {
            header: header(),
            body,
        },
        &mut out,
    );
    out
}

#[test]
fn header_fields_sit_at_cluster_h_offsets() {
    let b = bytes_of(Body::MfStart);
    assert_eq!(b.len(), HEADER_LEN);
    assert_eq!(&b[0..4], b"RCmb");
    assert_eq!(&b[4..8], &(HEADER_LEN as u32).to_be_bytes());
    assert_eq!(&b[8..10], &[0, 1]);
    assert_eq!(&b[10..12], &[0x12, 0x34]);
    assert_eq!(&b[12..14], &kind::MFSTART.to_be_bytes());
    assert_eq!(&b[14..16], &[0, 0]);
    assert_eq!(&b[16..24], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        &b[24..32],
        &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]
    );
    assert_eq!(
        &b[32..40],
        &[0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28]
    );
    assert_eq!(&b[40..80], &[b'a'; 40]);
    // Slot 0 is bit 0 of the first byte, slot 16383 bit 7 of the last.
    assert_eq!(b[80], 1);
    assert_eq!(b[80 + 2047], 0x80);
    assert_eq!(&b[2128..2168], &[b'b'; 40]);
    assert_eq!(&b[2168..2176], b"10.0.0.1");
    assert!(b[2176..2214].iter().all(|&x| x == 0));
    assert_eq!(&b[2214..2216], &[0, 0]);
    assert!(b[2216..2246].iter().all(|&x| x == 0));
    assert_eq!(&b[2246..2248], &[0x31, 0x32]);
    assert_eq!(&b[2248..2250], &[0x41, 0x42]);
    assert_eq!(
        &b[2250..2252],
        &(flags::MASTER | flags::MYSELF).to_be_bytes()
    );
    assert_eq!(b[2252], 1);
    assert_eq!(&b[2253..2256], &[mflags0::PAUSED, 0, 0]);
}

#[test]
fn gossip_entries_follow_the_header_104_bytes_each() {
    let b = bytes_of(Body::Ping(PingBody {
        gossip: vec![gossip(b'c'), gossip(b'd')],
        extensions: vec![],
    }));
    assert_eq!(b.len(), HEADER_LEN + 2 * GOSSIP_LEN);
    assert_eq!(&b[14..16], &[0, 2]);
    let g = &b[HEADER_LEN + GOSSIP_LEN..];
    assert_eq!(&g[..40], &[b'd'; 40]);
    assert_eq!(&g[40..44], &[0x51, 0x52, 0x53, 0x54]);
    assert_eq!(&g[44..48], &[0x61, 0x62, 0x63, 0x64]);
    assert_eq!(&g[48..57], b"127.0.0.1");
    assert_eq!(&g[94..96], &7000u16.to_be_bytes());
    assert_eq!(&g[96..98], &17000u16.to_be_bytes());
    assert_eq!(&g[98..100], &flags::REPLICA.to_be_bytes());
    assert_eq!(&g[100..104], &[0, 0, 0, 0]);
}

#[test]
fn hostname_extension_is_a_padded_c_string() {
    // EIGHT_BYTE_ALIGN(len + 1) after an 8-byte extension header.
    for (hostname, ext_len) in [("abc", 16), ("abcdefg", 16), ("abcdefgh", 24)] {
        let body = PingBody {
            gossip: vec![],
            extensions: vec![Extension::Hostname(hostname.into())],
        };
        let b = bytes_of(Body::Pong(body.clone()));
        assert_eq!(b.len(), HEADER_LEN + ext_len, "{hostname}");
        assert_eq!(&b[2214..2216], &[0, 1]);
        assert_eq!(b[2253] & mflags0::EXT_DATA, mflags0::EXT_DATA);
        let ext = &b[HEADER_LEN..];
        assert_eq!(&ext[..4], &(ext_len as u32).to_be_bytes());
        assert_eq!(&ext[4..8], &[0, 0, 0, 0]);
        assert_eq!(&ext[8..8 + hostname.len()], hostname.as_bytes());
        assert!(ext[8 + hostname.len()..].iter().all(|&x| x == 0));
        assert_eq!(decode(&b).map(|m| m.body), Ok(Body::Pong(body)));
    }
}

#[test]
fn every_body_reads_back() {
    let mut slots = Box::new([0u8; BITMAP_LEN]);
    set_slot(&mut slots, 5000);
    let bodies = vec![
        Body::Meet(PingBody {
            gossip: vec![gossip(b'e')],
            extensions: vec![Extension::Hostname(b"h".to_vec())],
        }),
        Body::Fail { about: name(b'f') },
        Body::Publish {
            channel: b"news".to_vec(),
            message: b"hello".to_vec(),
        },
        Body::PublishShard {
            channel: vec![],
            message: vec![0; 3],
        },
        Body::FailoverAuthRequest,
        Body::FailoverAuthAck,
        Body::Update {
            config_epoch: 9,
            node: name(b'9'),
            slots,
        },
        Body::Module {
            module_id: 77,
            kind: 3,
            payload: b"xyz".to_vec(),
        },
        Body::Unknown {
            kind: 42,
            data: b"future".to_vec(),
        },
    ];
    for body in bodies {
        let b = bytes_of(body.clone());
        let m = decode(&b).unwrap_or_else(|e| panic!("{body:?}: {e}"));
        assert_eq!(m.header, header());
        assert_eq!(m.body, body);
    }
}

#[test]
fn publish_is_lengths_then_channel_then_message() {
    let b = bytes_of(Body::Publish {
        channel: b"ch".to_vec(),
        message: b"msg".to_vec(),
    });
    assert_eq!(&b[HEADER_LEN..], b"\0\0\0\x02\0\0\0\x03chmsg");
}

#[test]
fn frame_len_wants_eight_bytes_a_signature_and_a_whole_header() {
    let b = bytes_of(Body::FailoverAuthAck);
    assert_eq!(frame_len(&b[..7]), Ok(None));
    assert_eq!(frame_len(&b[..8]), Ok(Some(HEADER_LEN)));
    let mut bad = b.clone();
    bad[0] = b'X';
    assert_eq!(frame_len(&bad), Err(BadFrame));
    let mut short = b.clone();
    short[4..8].copy_from_slice(&((HEADER_LEN - 1) as u32).to_be_bytes());
    assert_eq!(frame_len(&short), Err(BadFrame));
    let mut huge = b;
    huge[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(frame_len(&huge), Err(BadFrame));
}

#[test]
fn wrong_version_and_wrong_lengths_are_ignored_with_redis_log_lines() {
    let mut b = bytes_of(Body::Fail { about: name(b'f') });
    b[9] = 2;
    assert_eq!(decode(&b), Err(Malformed::Version(2)));

    let mut b = bytes_of(Body::Fail { about: name(b'f') });
    b.push(0);
    let err = decode(&b).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Received invalid fail packet of length 2297 but expected length 2296"
    );

    // A PING announcing one more gossip entry than it carries.
    let mut b = bytes_of(Body::Ping(PingBody {
        gossip: vec![gossip(b'c')],
        extensions: vec![],
    }));
    b[15] = 2;
    assert_eq!(
        decode(&b),
        Err(Malformed::Length {
            kind: kind::PING,
            got: HEADER_LEN + GOSSIP_LEN,
            expected: HEADER_LEN + 2 * GOSSIP_LEN
        })
    );

    // A PUBLISH whose lengths overflow 32 bits is refused, not wrapped around.
    let mut b = bytes_of(Body::Publish {
        channel: vec![],
        message: vec![],
    });
    b[HEADER_LEN..HEADER_LEN + 8].copy_from_slice(&[0xff; 8]);
    assert!(matches!(decode(&b), Err(Malformed::Length { .. })));
}

#[test]
fn broken_extensions_are_refused_without_reading_past_the_message() {
    let ping = || {
        bytes_of(Body::Ping(PingBody {
            gossip: vec![],
            extensions: vec![Extension::Hostname(b"abc".to_vec())],
        }))
    };

    let mut b = ping();
    b[HEADER_LEN + 3] = 12;
    assert_eq!(
        decode(&b).unwrap_err().to_string(),
        "Received a ping packet without proper padding (12 bytes)"
    );

    let mut b = ping();
    b[HEADER_LEN + 3] = 0;
    assert_eq!(
        decode(&b),
        Err(Malformed::ExtensionTooShort {
            kind: kind::PING,
            len: 0
        })
    );

    let mut b = ping();
    b[HEADER_LEN + 3] = 24;
    assert_eq!(
        decode(&b).unwrap_err().to_string(),
        format!("Received invalid ping packet with extension data that exceeds total packet length ({})", HEADER_LEN + 16)
    );

    // Two extensions announced, one present.
    let mut b = ping();
    b[2215] = 2;
    assert!(matches!(
        decode(&b),
        Err(Malformed::ExtensionOverrun { .. })
    ));
}

#[test]
fn extensions_count_only_with_the_ext_data_flag() {
    // Without EXT_DATA the bytes after the gossip are not extensions, so a message
    // that has any is the wrong length (Redis's explen ignores them the same way).
    let mut b = bytes_of(Body::Ping(PingBody {
        gossip: vec![],
        extensions: vec![Extension::Hostname(b"abc".to_vec())],
    }));
    b[2253] &= !mflags0::EXT_DATA;
    assert!(matches!(decode(&b), Err(Malformed::Length { .. })));
}

fn arb_name() -> impl Strategy<Value = NodeName> {
    prop::array::uniform32(any::<u8>()).prop_flat_map(|head| {
        prop::array::uniform8(any::<u8>()).prop_map(move |tail| {
            let mut n = [0u8; NAME_LEN];
            n[..32].copy_from_slice(&head);
            n[32..].copy_from_slice(&tail);
            NodeName(n)
        })
    })
}

fn arb_ip() -> impl Strategy<Value = [u8; IP_LEN]> {
    "[0-9a-f:.]{0,45}".prop_map(|s| ip_field(&s))
}

fn arb_slots() -> impl Strategy<Value = Box<SlotBitmap>> {
    prop::collection::vec(0..SLOTS, 0..40).prop_map(|slots| {
        let mut bitmap = Box::new([0u8; BITMAP_LEN]);
        for s in slots {
            set_slot(&mut bitmap, s);
        }
        bitmap
    })
}

fn arb_header() -> impl Strategy<Value = Header> {
    (
        (
            any::<u16>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            arb_name(),
            arb_slots(),
        ),
        (
            arb_name(),
            arb_ip(),
            any::<u16>(),
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            any::<[u8; 3]>(),
        ),
    )
        .prop_map(
            |(
                (port, current_epoch, config_epoch, offset, sender, slots),
                (master, ip, pport, cport, flags, state, mut mflags),
            )| {
                mflags[0] &= !mflags0::EXT_DATA;
                Header {
                    port,
                    current_epoch,
                    config_epoch,
                    offset,
                    sender,
                    slots,
                    master,
                    ip,
                    pport,
                    cport,
                    flags,
                    state,
                    mflags,
                }
            },
        )
}

fn arb_gossip() -> impl Strategy<Value = Gossip> {
    (
        arb_name(),
        any::<u32>(),
        any::<u32>(),
        arb_ip(),
        any::<[u16; 4]>(),
    )
        .prop_map(
            |(name, ping_sent, pong_received, ip, [port, cport, flags, pport])| Gossip {
                name,
                ping_sent,
                pong_received,
                ip,
                port,
                cport,
                flags,
                pport,
            },
        )
}

fn arb_extension() -> impl Strategy<Value = Extension> {
    prop_oneof![
        prop::collection::vec(1u8..=255, 0..64).prop_map(Extension::Hostname),
        // Unknown extensions come back with their padding: generate them padded.
        (1u16.., prop::collection::vec(any::<u64>(), 0..4)).prop_map(|(kind, words)| {
            Extension::Unknown {
                kind,
                data: words.iter().flat_map(|w| w.to_be_bytes()).collect(),
            }
        }),
    ]
}

fn arb_body() -> impl Strategy<Value = Body> {
    let ping = || {
        (
            prop::collection::vec(arb_gossip(), 0..5),
            prop::collection::vec(arb_extension(), 0..3),
        )
            .prop_map(|(gossip, extensions)| PingBody { gossip, extensions })
    };
    let bytes = || prop::collection::vec(any::<u8>(), 0..64);
    prop_oneof![
        ping().prop_map(Body::Ping),
        ping().prop_map(Body::Pong),
        ping().prop_map(Body::Meet),
        arb_name().prop_map(|about| Body::Fail { about }),
        (bytes(), bytes()).prop_map(|(channel, message)| Body::Publish { channel, message }),
        (bytes(), bytes()).prop_map(|(channel, message)| Body::PublishShard { channel, message }),
        Just(Body::FailoverAuthRequest),
        Just(Body::FailoverAuthAck),
        Just(Body::MfStart),
        (any::<u64>(), arb_name(), arb_slots()).prop_map(|(config_epoch, node, slots)| {
            Body::Update {
                config_epoch,
                node,
                slots,
            }
        }),
        (any::<u64>(), any::<u8>(), bytes()).prop_map(|(module_id, kind, payload)| Body::Module {
            module_id,
            kind,
            payload
        }),
        (11u16.., bytes()).prop_map(|(kind, data)| Body::Unknown { kind, data }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn what_encode_writes_decode_reads_back(header in arb_header(), body in arb_body()) {
        let message = Message { header, body };
        let mut bytes = Vec::new();
        encode(&message, &mut bytes);
        prop_assert_eq!(frame_len(&bytes), Ok(Some(bytes.len())));
        prop_assert_eq!(decode(&bytes), Ok(message));
    }

    #[test]
    fn no_bytes_make_decode_panic(
        kind in 0u16..12,
        count in 0u16..4,
        extensions in 0u16..4,
        mflag in any::<u8>(),
        tail in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut bytes = bytes_of(Body::MfStart);
        bytes[12..14].copy_from_slice(&kind.to_be_bytes());
        bytes[14..16].copy_from_slice(&count.to_be_bytes());
        bytes[2214..2216].copy_from_slice(&extensions.to_be_bytes());
        bytes[2253] = mflag;
        bytes.extend_from_slice(&tail);
        let _ = decode(&bytes);
    }
}
