//! Payload tests: Redis 7.0.15's own DUMP output, byte for byte, plus round trips
//! and corruption of every encoding.

use std::collections::HashSet;

use super::decode::Reader;
use super::encode::{build_list_nodes, write_len, ListNode, LIST_NODE_MAX_BYTES};
use super::*;
use crate::util::string2ll;
use proptest::prelude::*;

// Payloads captured with `DUMP` from redis-server 7.0.15 (default config unless
// noted). The values they hold are rebuilt by the functions below.
const S_HELLO: &str = "000568656c6c6f0a006372df766534200a";
const S_EMPTY: &str = "00000a005d9b5c400f7fa2da";
const S_INT00: &str = "00c07b0a0048e253e1007a67b9";
const S_INT01: &str = "00c0ff0a000c937e2485089dc5";
const S_INT02: &str = "00c0000a009840a778f8500308";
const S_INT03: &str = "00c07f0a000db5eb315254c514";
const S_INT04: &str = "00c180000a00eb7ab3b510cf4b65";
const S_INT05: &str = "00c0800a009966326d2f0c5bd9";
const S_INT06: &str = "00c17fff0a001760822854808480";
const S_INT07: &str = "00c1ff000a00dcaf7b93bdf01337";
const S_INT08: &str = "00c100010a000a5ed39cadb650eb";
const S_INT09: &str = "00c1ff7f0a00495a37da17f4d52b";
const S_INT10: &str = "00c2008000000a0045d82eedd5bda910";
const S_INT11: &str = "00c100800a00b540064753bb1ace";
const S_INT12: &str = "00c2ff7fffff0a00aee34c4d06c68536";
const S_INT13: &str = "00c2ffffff7f0a002c74e59ee02eada1";
const S_INT14: &str = "000a323134373438333634380a00e7b129a34c1d76ee";
const S_INT15: &str = "00c2000000800a00c74f873e33558187";
const S_INT16: &str = "000b2d323134373438333634390a00c261377908f2028c";
const S_INT17: &str = "0004303132330a000ae40c929e3b6422";
const S_INT18: &str = "00022b310a00c286f0d7439aee6f";
const S_INT19: &str = "00022d300a00d5411fd9d6d050cc";
const S_INT20: &str = "000b31323334353637383930310a00304e52d727176510";
const S_INT21: &str = "000231200a0016fd33f0b380b43c";
const S_REP20: &str = "001461616161616161616161616161616161616161610a0083b46b5e1b11acf1";
const S_REP21: &str = "00c30615016161e00a000a00fd0cb36807413f68";
const S_LZF: &str = "00c3094064016161e057000161610a00e8a3b507b06df271";
const S_300RAND: &str = concat!(
    "00412c6c82a562cb808d10d632be89c8513ebf6c929f34ddfa8c9f63c9960ef6e348a3528c8a3fcc2f044e39",
    "a3fc5b94492f8f032e7549a20098f95befd61248a23cd7a8168839e91f803558fac9f6095d9c927919701323",
    "42aa04168bad0ae6dbb1855ddcb4749032b8fe38a6684b514a33dbbfe6476d5eeadf9e9a24b268ab923be928",
    "5bda9693c08fdb43ecc4699f455f0c891e9118b378c54b315ef26e3465a93f6127625c36a9e54d42ca5da87e",
    "07b03fcb76a87206397b81f3780420e5427a2084a0c14cf5d665d475ab6f50afbf0af92d8b45ebbfb95afa1a",
    "47e61756f9c1e2d24ec2ba071c80f8a69615be3b1548d6e25560f5cf002fdaa74a9d5ec200044323c67053f2",
    "65ec5bcbfd6aea47eb340f464e8a8f24a2328fc61768e4ff67c3b1388f16e7173114605b11457b0a00017ea1",
    "a517837d0b",
);
const S_300PAT: &str = concat!(
    "00c324412c1a61686f76636a7178656c737a676e7562697077646b7279666d7461e0ff19a11d01676e0a008a",
    "dcf384414c2264",
);
const S_70000PAT: &str = concat!(
    "00c3433d80000111701a61686f76636a7178656c737a676e7562697077646b7279666d7461e0ff19e1ff1de2",
    "ff21e3ff25e4ff29e5ff2de6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
    "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
    "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6",
    "ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
    "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
    "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6",
    "ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
    "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
    "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6",
    "ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
    "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
    "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6",
    "ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
    "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
    "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6",
    "ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31",
    "e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff",
    "31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6023101",
    "71780a00639de17f2098e789",
);
const L_SMALL: &str = concat!(
    "1201021f1f00000005008161028162027b01dff9028b68656c6c6f20776f726c640cff0a005eb1a8fa80b168",
    "74",
);
const L_ENC: &str = concat!(
    "120102c3413154db1fdb140000160000017f01c08002dfff02d00002cfff02f1001003f1008003f1ff117f03",
    "f200800004f200008004f2ffff7f04f32009030005f3ff200b0205f400400c2000000940094000028009f420",
    "194000087f098330303704bf78e035000340e04079e036001f42e0641c53bc589e61807b8db3f8e040c1e7da",
    "3fc471c93b70e87c31756a4bbe1f7544d0a448454a037509a983d38ad3b769faaeecd6c7e1fa138b56417d6e",
    "4dd31f43055fead9d2d1a340143eab3198bca6166d14acbf275b1214574156d1fbe0d01f2cc29f504c317866",
    "f0881300004144474a4d505356594245484b4e5154575a430646494c4f525558e0ff19e1ff1de2ff21e3ff25",
    "e4ff29e5ff2de6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6ff31e6d5",
    "3102278dff0a00c0ee117271bb4b13",
);
const L_MULTI: &str = concat!(
    "12030213130000000300826530038265310382653203ff0213130000000300826533038265340382653503ff",
    "020f0f00000002008265360382653703ff0a00e1eef01989675ddb",
);
const L_PLAIN: &str = concat!(
    "1204020f0f000000010086736d616c6c3107ff01c3093c015050e02f00015050020f0f000000010086736d61",
    "6c6c3207ff014050cd23d24f714274e744343237b93290f511f6425f98e64459ff203e8985083ffdf6050055",
    "3abc0e05cd02184bdb89c4ccd67e187951267eb3280a07875ee4cfe72c9c1c6a5c60a846ff68688243ce3f96",
    "0a00cd3241894ed69ab1",
);
const SET_SMALL: &str = "020306636865727279056170706c650662616e616e610a003ec8a798171fc9d9";
const SET_INT: &str =
    "0b1c04000000050000009cffffff010000000200000003000000701101000a009f4dd5a629d01743";
const SET_INT64: &str = "0b180800000002000000000efad5feffffff01000000000000000a009c139e07ea35a37e";
const SET_INT16: &str = "0b0c0200000002000000d4fe01000a000c5b1a134e1fcf0a";
const H_SMALL: &str = concat!(
    "10242400000006008266310382763103826632031601846e616d6505877465737365726108ff0a00cc0c3084",
    "d242a19d",
);
const H_HT: &str = "04030163c0fd0161c00101620374776f0a000574ff29ef8e9d12";
const Z_SMALL: &str = concat!(
    "112222000000060085746872656506dffd02836f6e650401018374776f0483322e3504ff0a00dd9062a681e0",
    "4f33",
);
const Z_SKIP: &str = concat!(
    "050603626967000000000000f07f0374776f0000000000000440036f6e65000000000000f03f0574656e7468",
    "9a9999999999b93f05746872656500000000000008c005736d616c6c000000000000f0ff0a000e1109587428",
    "2620",
);

/// Footer (version + CRC) of the DUMP of `prng(70000, 2)`, type byte and length
/// prefix `00 80 00011170`: a 32-bit raw length.
const S_70000RAND_HEAD: &str = "008000011170";
const S_70000RAND_FOOTER: &str = "0a009948c13c615bcd60";

pub(super) fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("valid hex"))
        .collect()
}

/// Same generator as the capture script: a 64-bit LCG, top byte of each step.
pub(super) fn prng(n: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 56) as u8
        })
        .collect()
}

/// `chr(ord(base) + (i * step) % 26)` for i in 0..n.
fn pattern(n: usize, base: u8, step: usize) -> Vec<u8> {
    (0..n).map(|i| base + ((i * step) % 26) as u8).collect()
}

pub(super) fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn strs(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| b(s)).collect()
}

fn with_footer(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    finish_payload(&mut out, 0);
    out
}

fn restored(payload_hex: &str) -> DumpValue {
    restore(&hex(payload_hex)).expect("payload restores")
}

fn sorted_set(v: DumpValue) -> Vec<Vec<u8>> {
    match v {
        DumpValue::Set(mut m) => {
            m.sort();
            m
        }
        other => panic!("not a set: {other:?}"),
    }
}

fn sorted_hash(v: DumpValue) -> Vec<(Vec<u8>, Vec<u8>)> {
    match v {
        DumpValue::Hash(mut p) => {
            p.sort();
            p
        }
        other => panic!("not a hash: {other:?}"),
    }
}

fn sorted_zset(v: DumpValue) -> Vec<(Vec<u8>, u64)> {
    match v {
        DumpValue::ZSet(e) => {
            let mut e: Vec<_> = e.into_iter().map(|(m, s)| (m, s.to_bits())).collect();
            e.sort();
            e
        }
        other => panic!("not a zset: {other:?}"),
    }
}

fn zset(entries: &[(&str, f64)]) -> Vec<(Vec<u8>, u64)> {
    let mut e: Vec<_> = entries.iter().map(|(m, s)| (b(m), s.to_bits())).collect();
    e.sort();
    e
}

// ---- Strings: exact bytes and restore --------------------------------------

const INT_CASES: [(&str, &str); 22] = [
    (S_INT00, "123"),
    (S_INT01, "-1"),
    (S_INT02, "0"),
    (S_INT03, "127"),
    (S_INT04, "128"),
    (S_INT05, "-128"),
    (S_INT06, "-129"),
    (S_INT07, "255"),
    (S_INT08, "256"),
    (S_INT09, "32767"),
    (S_INT10, "32768"),
    (S_INT11, "-32768"),
    (S_INT12, "-32769"),
    (S_INT13, "2147483647"),
    (S_INT14, "2147483648"),
    (S_INT15, "-2147483648"),
    (S_INT16, "-2147483649"),
    (S_INT17, "0123"),
    (S_INT18, "+1"),
    (S_INT19, "-0"),
    (S_INT20, "12345678901"),
    (S_INT21, "1 "),
];

#[test]
fn string_vectors_match_redis_exactly() {
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        (S_HELLO, b("hello")),
        (S_EMPTY, b("")),
        (S_REP20, vec![b'a'; 20]),
        (S_300RAND, prng(300, 1)),
    ];
    cases.extend(INT_CASES.iter().map(|(h, v)| (*h, b(v))));
    for (payload, value) in cases {
        assert_eq!(
            dump(&DumpValue::Str(value.clone())),
            hex(payload),
            "{value:?}"
        );
        assert_eq!(restored(payload), DumpValue::Str(value));
    }
}

#[test]
fn dump_string_appends_a_payload() {
    let mut out = b"prefix".to_vec();
    dump_string(b"hello", &mut out);
    assert_eq!(&out[..6], b"prefix");
    assert_eq!(out[6..], hex(S_HELLO));
}

#[test]
fn lzf_string_vectors_restore() {
    let cases = [
        (S_REP21, vec![b'a'; 21]),
        (S_LZF, vec![b'a'; 100]),
        (S_300PAT, pattern(300, b'a', 7)),
        (S_70000PAT, pattern(70000, b'a', 7)),
    ];
    for (payload, value) in cases {
        assert_eq!(restored(payload), DumpValue::Str(value.clone()));
        let ours = dump(&DumpValue::Str(value.clone()));
        assert_eq!(ours[1], 0xC3, "compressed like Redis");
        assert_eq!(restore(&ours), Ok(DumpValue::Str(value)));
    }
}

#[test]
fn large_raw_string_matches_redis_exactly() {
    let value = prng(70000, 2);
    let mut expected = hex(S_70000RAND_HEAD);
    expected.extend_from_slice(&value);
    expected.extend(hex(S_70000RAND_FOOTER));
    assert_eq!(dump(&DumpValue::Str(value.clone())), expected);
    assert_eq!(restore(&expected), Ok(DumpValue::Str(value)));
}

// ---- Collections ------------------------------------------------------------

fn l_enc_items() -> Vec<Vec<u8>> {
    let mut items = strs(&[
        "0",
        "127",
        "128",
        "-1",
        "-4096",
        "4095",
        "4096",
        "-32768",
        "32767",
        "32768",
        "-8388608",
        "8388607",
        "8388608",
        "2147483647",
        "2147483648",
        "-9223372036854775808",
        "9223372036854775807",
        "007",
    ]);
    items.push(vec![b'x'; 63]);
    items.push(vec![b'y'; 64]);
    items.push(prng(100, 3));
    items.push(pattern(5000, b'A', 3));
    items
}

#[test]
fn list_vectors_restore() {
    let l_small = strs(&["a", "b", "123", "-7", "hello world"]);
    assert_eq!(restored(L_SMALL), DumpValue::List(l_small.clone()));
    assert_eq!(dump(&DumpValue::List(l_small)), hex(L_SMALL));
    assert_eq!(restored(L_ENC), DumpValue::List(l_enc_items()));
    let multi: Vec<Vec<u8>> = (0..8).map(|i| format!("e{i}").into_bytes()).collect();
    assert_eq!(restored(L_MULTI), DumpValue::List(multi));
    let plain = vec![b("small1"), vec![b'P'; 60], b("small2"), prng(80, 5)];
    assert_eq!(restored(L_PLAIN), DumpValue::List(plain.clone()));
    // Redis wrote L_PLAIN after DEBUG QUICKLIST-PACKED-THRESHOLD below 60 bytes: with
    // such a threshold our bytes are its bytes.
    crate::storage::list::set_packed_threshold(50);
    assert_eq!(dump(&DumpValue::List(plain)), hex(L_PLAIN));
}

/// Our listpack encoder produces Redis's exact bytes (the node inside `L_ENC`).
#[test]
fn listpack_encoding_matches_redis() {
    let DumpValue::List(items) = dump_then_restore(&DumpValue::List(l_enc_items())) else {
        panic!("list expected");
    };
    assert_eq!(items, l_enc_items());
    let payload = hex(L_ENC);
    let mut r = Reader::new(&payload[3..payload.len() - FOOTER_LEN]);
    let redis_lp = r.string().expect("node");
    let mut ours = listpack::Builder::new();
    for item in l_enc_items() {
        ours.push(&listpack::Entry::from_bytes(&item));
    }
    assert_eq!(ours.finish(), redis_lp);
}

fn dump_then_restore(v: &DumpValue) -> DumpValue {
    restore(&dump(v)).expect("round trip")
}

#[test]
fn set_vectors_restore() {
    let expect = strs(&["apple", "banana", "cherry"]);
    assert_eq!(sorted_set(restored(SET_SMALL)), expect);
    let ints = strs(&["-100", "1", "2", "3", "70000"]);
    assert_eq!(restored(SET_INT), DumpValue::Set(ints.clone()));
    let shuffled = strs(&["3", "70000", "1", "-100", "2"]);
    assert_eq!(dump(&DumpValue::Set(shuffled)), hex(SET_INT));
    let int64 = strs(&["-5000000000", "1"]);
    assert_eq!(restored(SET_INT64), DumpValue::Set(int64.clone()));
    assert_eq!(dump(&DumpValue::Set(int64)), hex(SET_INT64));
    let int16 = strs(&["-300", "1"]);
    assert_eq!(restored(SET_INT16), DumpValue::Set(int16.clone()));
    assert_eq!(dump(&DumpValue::Set(int16)), hex(SET_INT16));
}

#[test]
fn hash_vectors_restore() {
    let small = vec![
        (b("f1"), b("v1")),
        (b("f2"), b("22")),
        (b("name"), b("tessera")),
    ];
    assert_eq!(restored(H_SMALL), DumpValue::Hash(small.clone()));
    assert_eq!(dump(&DumpValue::Hash(small)), hex(H_SMALL));
    let ht = vec![(b("a"), b("1")), (b("b"), b("two")), (b("c"), b("-3"))];
    assert_eq!(sorted_hash(restored(H_HT)), ht);
}

#[test]
fn zset_vectors_restore() {
    let small = [("three", -3.0), ("one", 1.0), ("two", 2.5)];
    assert_eq!(sorted_zset(restored(Z_SMALL)), zset(&small));
    let entries: Vec<(Vec<u8>, f64)> = small.iter().map(|(m, s)| (b(m), *s)).collect();
    // Listed out of order: the listpack must still come out sorted, as in Redis.
    let shuffled = vec![entries[2].clone(), entries[0].clone(), entries[1].clone()];
    assert_eq!(dump(&DumpValue::ZSet(shuffled)), hex(Z_SMALL));
    let skip = [
        ("big", f64::INFINITY),
        ("two", 2.5),
        ("one", 1.0),
        ("tenth", 0.1),
        ("three", -3.0),
        ("small", f64::NEG_INFINITY),
    ];
    assert_eq!(sorted_zset(restored(Z_SKIP)), zset(&skip));
}

#[test]
fn zset_scores_survive_listpack_text_form() {
    let scores = [
        0.0,
        -0.0,
        0.1,
        -2.5,
        1e300,
        -1e-300,
        4_503_599_627_370_496.0,
        -4_503_599_627_370_495.0,
        123_456_789.0,
        f64::MIN_POSITIVE,
        f64::MAX,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let entries: Vec<(Vec<u8>, f64)> = scores
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("m{i}").into_bytes(), *s))
        .collect();
    let payload = dump(&DumpValue::ZSet(entries.clone()));
    assert_eq!(payload[0], TYPE_ZSET_LISTPACK);
    let expected: Vec<(Vec<u8>, u64)> = {
        let mut e: Vec<_> = entries
            .iter()
            .map(|(m, s)| (m.clone(), s.to_bits()))
            .collect();
        e.sort();
        e
    };
    assert_eq!(sorted_zset(restore(&payload).expect("restores")), expected);
}

#[test]
fn large_collections_use_generic_encodings() {
    let members: Vec<Vec<u8>> = (0..600).map(|i| format!("{i}").into_bytes()).collect();
    let payload = dump(&DumpValue::Set(members.clone()));
    assert_eq!(payload[0], TYPE_SET);
    assert_eq!(sorted_set(restore(&payload).expect("set")), {
        let mut m = members.clone();
        m.sort();
        m
    });
    let pairs: Vec<_> = members.iter().map(|m| (m.clone(), m.clone())).collect();
    let payload = dump(&DumpValue::Hash(pairs.clone()));
    assert_eq!(payload[0], TYPE_HASH);
    assert_eq!(restore(&payload), Ok(DumpValue::Hash(pairs)));
    let entries: Vec<_> = members.iter().map(|m| (m.clone(), 1.5)).collect();
    let payload = dump(&DumpValue::ZSet(entries.clone()));
    assert_eq!(payload[0], TYPE_ZSET_2);
    assert_eq!(restore(&payload), Ok(DumpValue::ZSet(entries)));
}

#[test]
fn long_lists_split_into_nodes() {
    let items: Vec<Vec<u8>> = (0..5000)
        .map(|i| format!("element-{i}-{}", "z".repeat(i % 40)).into_bytes())
        .collect();
    let nodes = build_list_nodes(&items);
    assert!(nodes.len() > 10);
    for node in &nodes {
        match node {
            ListNode::Packed(lp) => assert!(lp.len() <= LIST_NODE_MAX_BYTES),
            ListNode::Plain(_) => panic!("unexpected plain node"),
        }
    }
    let big = vec![vec![b'q'; 20000], b("x"), prng(9000, 4)];
    for list in [items, big] {
        let value = DumpValue::List(list);
        assert_eq!(dump_then_restore(&value), value);
    }
}

// ---- Legacy encodings (hand-built) ------------------------------------------

/// Builds a ziplist with Redis's encodings.
fn ziplist(entries: &[&[u8]]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut prev = 0usize;
    let mut tail = 10usize;
    for e in entries {
        let start = body.len();
        tail = 10 + start;
        if prev < 254 {
            body.push(prev as u8);
        } else {
            body.push(254);
            body.extend_from_slice(&(prev as u32).to_le_bytes());
        }
        zip_payload(&mut body, e);
        prev = body.len() - start;
    }
    let mut out = Vec::new();
    out.extend_from_slice(&((body.len() + 11) as u32).to_le_bytes());
    out.extend_from_slice(&(tail as u32).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend(body);
    out.push(0xFF);
    out
}

fn zip_payload(out: &mut Vec<u8>, e: &[u8]) {
    match string2ll(e) {
        Some(v @ 0..=12) => out.push(0xF1 + v as u8),
        Some(v) if i8::try_from(v).is_ok() => {
            out.push(0xFE);
            out.push(v as u8);
        }
        Some(v) if i16::try_from(v).is_ok() => {
            out.push(0xC0);
            out.extend_from_slice(&(v as i16).to_le_bytes());
        }
        Some(v) if (-(1 << 23)..(1 << 23)).contains(&v) => {
            out.push(0xF0);
            out.extend_from_slice(&v.to_le_bytes()[..3]);
        }
        Some(v) if i32::try_from(v).is_ok() => {
            out.push(0xD0);
            out.extend_from_slice(&(v as i32).to_le_bytes());
        }
        Some(v) => {
            out.push(0xE0);
            out.extend_from_slice(&v.to_le_bytes());
        }
        None if e.len() < 64 => {
            out.push(e.len() as u8);
            out.extend_from_slice(e);
        }
        None if e.len() < 16384 => {
            out.push(0x40 | (e.len() >> 8) as u8);
            out.push(e.len() as u8);
            out.extend_from_slice(e);
        }
        None => {
            out.push(0x80);
            out.extend_from_slice(&(e.len() as u32).to_be_bytes());
            out.extend_from_slice(e);
        }
    }
}

fn raw_string(out: &mut Vec<u8>, s: &[u8]) {
    write_len(out, s.len());
    out.extend_from_slice(s);
}

fn zip_values() -> Vec<Vec<u8>> {
    let mut v = strs(&[
        "0",
        "12",
        "13",
        "-1",
        "127",
        "-128",
        "300",
        "-32768",
        "40000",
        "-8388608",
        "8388608",
        "2147483647",
        "-2147483649",
        "9223372036854775807",
        "abc",
        "",
    ]);
    v.push(vec![b'w'; 300]);
    v.push(b("after-big"));
    v
}

#[test]
fn restores_ziplist_types() {
    let values = zip_values();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let zl = ziplist(&refs);
    let mut body = vec![TYPE_LIST_ZIPLIST];
    write_string(&mut body, &zl);
    assert_eq!(
        restore(&with_footer(&body)),
        Ok(DumpValue::List(values.clone()))
    );

    let mut body = vec![TYPE_LIST_QUICKLIST];
    write_len(&mut body, 2);
    write_string(&mut body, &zl);
    raw_string(&mut body, &ziplist(&[b"tail"]));
    let mut expected = values.clone();
    expected.push(b("tail"));
    assert_eq!(restore(&with_footer(&body)), Ok(DumpValue::List(expected)));

    let zl = ziplist(&[b"f", b"1", b"g", b"hello"]);
    let mut body = vec![TYPE_HASH_ZIPLIST];
    raw_string(&mut body, &zl);
    let pairs = vec![(b("f"), b("1")), (b("g"), b("hello"))];
    assert_eq!(restore(&with_footer(&body)), Ok(DumpValue::Hash(pairs)));

    let zl = ziplist(&[b"a", b"-5", b"b", b"2.5", b"c", b"inf"]);
    let mut body = vec![TYPE_ZSET_ZIPLIST];
    raw_string(&mut body, &zl);
    let entries = vec![(b("a"), -5.0), (b("b"), 2.5), (b("c"), f64::INFINITY)];
    assert_eq!(restore(&with_footer(&body)), Ok(DumpValue::ZSet(entries)));
}

#[test]
fn restores_linked_list_and_old_zset() {
    let mut body = vec![TYPE_LIST];
    write_len(&mut body, 3);
    for s in [&b"x"[..], b"42", &[b'r'; 40]] {
        write_string(&mut body, s);
    }
    let expected = vec![b("x"), b("42"), vec![b'r'; 40]];
    assert_eq!(restore(&with_footer(&body)), Ok(DumpValue::List(expected)));

    let mut body = vec![TYPE_ZSET];
    write_len(&mut body, 3);
    for (m, score) in [(&b"a"[..], &b"1.5"[..]), (b"b", b"-2e3"), (b"c", b"")] {
        write_string(&mut body, m);
        if score.is_empty() {
            body.push(255);
        } else {
            body.push(score.len() as u8);
            body.extend_from_slice(score);
        }
    }
    let entries = vec![
        (b("a"), 1.5),
        (b("b"), -2000.0),
        (b("c"), f64::NEG_INFINITY),
    ];
    assert_eq!(restore(&with_footer(&body)), Ok(DumpValue::ZSet(entries)));
}

// ---- Errors -------------------------------------------------------------------

#[test]
fn footer_errors_are_bad_payload() {
    let good = hex(S_HELLO);
    assert_eq!(restore(&[]), Err(RestoreError::BadPayload));
    assert_eq!(restore(&good[..9]), Err(RestoreError::BadPayload));
    let mut bad_crc = good.clone();
    *bad_crc.last_mut().expect("non-empty") ^= 1;
    assert_eq!(restore(&bad_crc), Err(RestoreError::BadPayload));
    let mut bad_body = good.clone();
    bad_body[3] ^= 1;
    assert_eq!(restore(&bad_body), Err(RestoreError::BadPayload));

    let body = &good[..good.len() - FOOTER_LEN];
    let with_version = |v: u16| {
        let mut p = body.to_vec();
        p.extend_from_slice(&v.to_le_bytes());
        let crc = crc64(0, &p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    };
    assert_eq!(restore(&with_version(11)), Err(RestoreError::BadPayload));
    assert_eq!(restore(&with_version(9)), Ok(DumpValue::Str(b("hello"))));
    assert_eq!(
        RestoreError::BadPayload.message(),
        "ERR DUMP payload version or checksum are wrong"
    );
    assert_eq!(RestoreError::Corrupt.message(), "ERR Bad data format");
}

#[test]
fn semantic_errors_are_corrupt() {
    let corrupt = |body: &[u8]| restore(&with_footer(body));
    assert_eq!(corrupt(&[]), Err(RestoreError::Corrupt));
    assert_eq!(corrupt(&[6, 0]), Err(RestoreError::Corrupt), "module type");
    assert_eq!(
        corrupt(&[0, 1, b'a', 0]),
        Err(RestoreError::Corrupt),
        "trailing"
    );
    assert_eq!(corrupt(&[0, 0xC4]), Err(RestoreError::Corrupt), "bad enc");
    assert_eq!(corrupt(&[TYPE_SET, 0]), Err(RestoreError::Empty), "empty");
    assert_eq!(
        corrupt(&[TYPE_SET, 2, 1, b'a', 1, b'a']),
        Err(RestoreError::Corrupt)
    );
    assert_eq!(
        corrupt(&[TYPE_HASH, 1, 0xC5, 1, b'v']),
        Err(RestoreError::Corrupt)
    );
    let mut nan = vec![TYPE_ZSET_2, 1, 1, b'm'];
    nan.extend_from_slice(&f64::NAN.to_le_bytes());
    assert_eq!(corrupt(&nan), Err(RestoreError::Corrupt));
    assert_eq!(
        corrupt(&[TYPE_ZSET, 1, 1, b'm', 253]),
        Err(RestoreError::Corrupt)
    );
    // Huge counts with no data must fail fast without allocating.
    let huge = [
        TYPE_LIST, 0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    ];
    assert_eq!(corrupt(&huge), Err(RestoreError::Corrupt));
    let huge_lzf = [TYPE_STRING, 0xC3, 2, 0x80, 0xff, 0xff, 0xff, 0xff, 0, b'a'];
    assert_eq!(corrupt(&huge_lzf), Err(RestoreError::Corrupt));
    let empty_lp = listpack::Builder::new().finish();
    let mut body = vec![TYPE_HASH_LISTPACK];
    raw_string(&mut body, &empty_lp);
    assert_eq!(corrupt(&body), Err(RestoreError::Empty));
    let mut body = vec![TYPE_LIST_QUICKLIST_2, 1, 2];
    raw_string(&mut body, &empty_lp);
    assert_eq!(corrupt(&body), Err(RestoreError::Empty), "only empty nodes");
}

// ---- Property tests ----------------------------------------------------------

fn element() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string().into_bytes()),
        (-200i64..200).prop_map(|v| v.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..80),
        (1usize..200, any::<u8>()).prop_map(|(n, c)| vec![c; n]),
        proptest::collection::vec(any::<u8>(), 4000..5000),
        "[a-c]{0,300}".prop_map(String::into_bytes),
    ]
}

fn score() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("not NaN", |s| !s.is_nan()),
        (-1000i64..1000).prop_map(|v| v as f64),
        (-1000i64..1000).prop_map(|v| v as f64 / 8.0),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
    ]
}

fn unique(items: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

fn value() -> impl Strategy<Value = DumpValue> {
    let elems = |max| proptest::collection::vec(element(), 1..max);
    let int_set = proptest::collection::vec(any::<i32>(), 1..600)
        .prop_map(|v| v.into_iter().map(|i| i.to_string().into_bytes()).collect());
    prop_oneof![
        element().prop_map(DumpValue::Str),
        elems(60).prop_map(DumpValue::List),
        elems(60).prop_map(|v| DumpValue::Set(unique(v))),
        int_set.prop_map(|v| DumpValue::Set(unique(v))),
        (elems(60), proptest::collection::vec(element(), 60))
            .prop_map(|(f, v)| { DumpValue::Hash(unique(f).into_iter().zip(v).collect()) }),
        (elems(150), proptest::collection::vec(score(), 150))
            .prop_map(|(m, s)| { DumpValue::ZSet(unique(m).into_iter().zip(s).collect()) }),
    ]
}

/// Sets come back sorted when stored as intsets; compare them as sets.
fn normalized(v: DumpValue) -> DumpValue {
    match v {
        DumpValue::Set(mut m) => {
            m.sort();
            DumpValue::Set(m)
        }
        DumpValue::ZSet(e) => {
            let mut e: Vec<_> = e
                .into_iter()
                .map(|(m, s)| (m, s.to_bits() as f64))
                .collect();
            e.sort_by(|a, b| a.0.cmp(&b.0));
            DumpValue::ZSet(e)
        }
        other => other,
    }
}

fn mutate(payload: &mut Vec<u8>, ops: &[(usize, u8, u8)]) {
    for &(pos, byte, op) in ops {
        if payload.is_empty() {
            payload.push(byte);
            continue;
        }
        let at = pos % payload.len();
        match op % 4 {
            0 => payload[at] ^= byte | 1,
            1 => payload[at] = byte,
            2 => payload.insert(at, byte),
            _ => {
                payload.remove(at);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn prop_round_trip(v in value()) {
        let payload = dump(&v);
        let back = restore(&payload).expect("round trip");
        prop_assert_eq!(normalized(back), normalized(v));
    }

    #[test]
    fn prop_lzf_round_trip(data in element(), extra in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut input = data.clone();
        input.extend_from_slice(&extra);
        input.extend_from_slice(&data);
        if let Some(c) = lzf::compress(&input, input.len() + 64) {
            prop_assert_eq!(lzf::decompress(&c, input.len()), Some(input));
        } else {
            // With room for 64 bytes of growth only inputs too short to hold a
            // back-reference (liblzf's minimum is 3 bytes) are refused.
            prop_assert!(input.len() < 3);
        }
    }

    #[test]
    fn prop_truncation_never_panics(v in value(), cut in any::<usize>()) {
        let payload = dump(&v);
        let cut = cut % payload.len();
        prop_assert!(restore(&payload[..cut]).is_err());
        // Truncated body with a valid footer: must be rejected, not panic.
        let body = &payload[..payload.len() - FOOTER_LEN];
        let _ = restore(&with_footer(&body[..cut.min(body.len())]));
    }

    #[test]
    fn prop_mutations_never_panic(
        v in value(),
        ops in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..6),
    ) {
        let payload = dump(&v);
        let mut body = payload[..payload.len() - FOOTER_LEN].to_vec();
        let mut raw = payload.clone();
        mutate(&mut raw, &ops);
        if raw != payload {
            prop_assert!(restore(&raw).is_err());
        }
        // Re-checksummed mutations reach the decoder itself.
        mutate(&mut body, &ops);
        let _ = restore(&with_footer(&body));
    }

    #[test]
    fn prop_random_bodies_never_panic(
        ty in prop_oneof![0u8..20, any::<u8>()],
        body in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut full = vec![ty];
        full.extend(body);
        let _ = restore(&with_footer(&full));
    }

    #[test]
    fn prop_mutated_redis_vectors_never_panic(
        which in 0usize..10,
        ops in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..4),
    ) {
        let vectors = [
            L_SMALL, L_ENC, L_MULTI, L_PLAIN, SET_INT, H_SMALL, H_HT, Z_SMALL, Z_SKIP,
            S_300PAT,
        ];
        let payload = hex(vectors[which]);
        let mut body = payload[..payload.len() - FOOTER_LEN].to_vec();
        mutate(&mut body, &ops);
        let _ = restore(&with_footer(&body));
    }
}

/// A stream whose only node holds nothing but tombstones, as redis-server 7.0.15
/// DUMPs it (after XADDs and trims of a propagation test run): it restores, empty,
/// with its counters.
#[test]
fn stream_node_of_only_tombstones_restores() {
    let v = restored(
        "130110000001a21e04d4d000000000000000002b2b0000000f00000102010101816602000103010001\
         000182763803040103010401000183763138040401ff0081000001a21e04d4d400000081000001a2\
         1e04d4d40002000a00ad3512202ab22b5c",
    );
    let DumpValue::Stream(s) = v else {
        panic!("not a stream");
    };
    assert_eq!(s.len(), 0);
    assert_eq!(
        s.last_id,
        crate::storage::stream::StreamId::new(1_795_799_962_836, 0)
    );
    assert_eq!(s.entries_added, 2);
}
