//! FUNCTION DUMP / FUNCTION RESTORE payloads against redis-server 7.0.15: each
//! restores the other's, and both write the same bytes for the same library.
//! Skipped (with a note) when redis-server is not installed.

mod common;

use common::{crc64, q, ReferenceRedis, Server};

/// 71 bytes LZF cannot shrink by 4: stored verbatim.
const SHORT: &str = "#!lua name=short\nredis.register_function('f1', function() return 1 end)";
/// Repetitive enough for LZF.
const LONG: &str = "#!lua name=long\n\
    redis.register_function('fa', function() return 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' end)\n\
    redis.register_function('fb', function(keys, args) return #args end)\n";

fn reference() -> Option<ReferenceRedis> {
    let r = ReferenceRedis::start();
    if r.is_none() {
        eprintln!("note: redis-server 7.0.15 not installed; payload comparison skipped");
    }
    r
}

fn dump(c: &mut redis::Connection) -> Vec<u8> {
    q(c, &["FUNCTION", "DUMP"])
}

fn restore(c: &mut redis::Connection, payload: &[u8], policy: Option<&str>) -> Result<(), String> {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("RESTORE").arg(payload);
    if let Some(p) = policy {
        cmd.arg(p);
    }
    cmd.query::<()>(c).map_err(|e| e.to_string())
}

fn load_both(c: &mut redis::Connection) {
    let _: String = q(c, &["FUNCTION", "LOAD", SHORT]);
    let _: String = q(c, &["FUNCTION", "LOAD", LONG]);
}

/// FCALLs every function of SHORT and LONG.
fn check_calls(c: &mut redis::Connection) {
    assert_eq!(q::<i64>(c, &["FCALL", "f1", "0"]), 1);
    assert_eq!(
        q::<String>(c, &["FCALL", "fa", "0"]),
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    );
    assert_eq!(q::<i64>(c, &["FCALL", "fb", "0", "x", "y"]), 2);
}

#[test]
fn redis_dump_restores_in_tessera() {
    let Some(r) = reference() else { return };
    let mut rc = r.client();
    load_both(&mut rc);
    let payload = dump(&mut rc);
    let t = Server::start(2);
    let mut tc = t.client();
    restore(&mut tc, &payload, None).unwrap();
    check_calls(&mut tc);
    // Again under APPEND, the libraries exist: Redis's error, word for word. Which of
    // the two it names is Redis's dict order (its hash seed is random per process),
    // so either name is Redis's answer.
    let named = |e: Result<(), String>| {
        let e = e.expect_err("APPEND of existing libraries fails");
        ["short", "long"]
            .iter()
            .map(|lib| {
                e.replace(
                    &format!("Library {lib} already exists"),
                    "Library <lib> already exists",
                )
            })
            .find(|t| t.contains("<lib>"))
            .unwrap_or(e)
    };
    assert_eq!(
        named(restore(&mut tc, &payload, None)),
        named(restore(&mut rc, &payload, None))
    );
    restore(&mut tc, &payload, Some("REPLACE")).unwrap();
    restore(&mut tc, &payload, Some("FLUSH")).unwrap();
    check_calls(&mut tc);
}

#[test]
fn tessera_dump_restores_in_redis() {
    let Some(r) = reference() else { return };
    let t = Server::start(2);
    let mut tc = t.client();
    load_both(&mut tc);
    let payload = dump(&mut tc);
    let mut rc = r.client();
    restore(&mut rc, &payload, None).unwrap();
    check_calls(&mut rc);
    // And back: Tessera reads its own payload.
    restore(&mut tc, &payload, Some("FLUSH")).unwrap();
    check_calls(&mut tc);
}

#[test]
fn dump_bytes_are_identical() {
    let Some(r) = reference() else { return };
    let t = Server::start(1);
    let (mut rc, mut tc) = (r.client(), t.client());
    for (code, lzf) in [(SHORT, false), (LONG, true)] {
        let mut dumps = Vec::new();
        for c in [&mut rc, &mut tc] {
            let _: () = q(c, &["FUNCTION", "FLUSH"]);
            let _: String = q(c, &["FUNCTION", "LOAD", code]);
            dumps.push(dump(c));
        }
        assert_eq!(dumps[0], dumps[1], "{code}");
        // 0xF5 (FUNCTION2), then 0xC3 when the code is LZF-compressed.
        assert_eq!(dumps[0][..2] == [0xF5, 0xC3], lzf, "{:?}", dumps[0]);
    }
    // No libraries: just the footer.
    for c in [&mut rc, &mut tc] {
        let _: () = q(c, &["FUNCTION", "FLUSH"]);
    }
    assert_eq!(dump(&mut rc), dump(&mut tc));
}

/// `body` with RDB version 10 and a correct CRC64, as a payload.
fn with_footer(body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&10u16.to_le_bytes());
    let crc = crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

#[test]
fn bad_payloads_get_redis_errors() {
    let Some(r) = reference() else { return };
    let t = Server::start(1);
    let (mut rc, mut tc) = (r.client(), t.client());
    let _: String = q(&mut rc, &["FUNCTION", "LOAD", LONG]);
    let good = dump(&mut rc);
    let _: () = q(&mut rc, &["FUNCTION", "FLUSH"]);
    let _: () = q(&mut rc, &["SET", "k", "hello"]);
    let key_dump: Vec<u8> = q(&mut rc, &["DUMP", "k"]);

    let mut bad_crc = good.clone();
    *bad_crc.last_mut().unwrap() ^= 1;
    let body = &good[..good.len() - 10];
    let mut newer = with_footer(body);
    let at = newer.len() - 10;
    newer[at] = 11;
    let crc = crc64(&newer[..at + 2]);
    newer[at + 2..].copy_from_slice(&crc.to_le_bytes());
    let mut good_then_key = body.to_vec();
    good_then_key.extend_from_slice(&key_dump[..key_dump.len() - 10]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("bad checksum", bad_crc),
        ("newer version", newer),
        ("too short", good[..9].to_vec()),
        ("a key's payload", key_dump.clone()),
        ("library then key", with_footer(&good_then_key)),
        ("truncated string", with_footer(b"\xf5\x7f\xff")),
        ("bad string encoding", with_footer(b"\xf5\xc4\x00")),
        ("bad LZF", with_footer(b"\xf5\xc3\x03\x18\x00abc")),
        ("integer code", with_footer(b"\xf5\xc0\x7b")),
        ("no functions", with_footer(b"\xf5\x10#!lua name=x\nfoo")),
    ];
    for (what, payload) in &cases {
        let want = restore(&mut rc, payload, None);
        assert!(want.is_err(), "{what}: redis-server accepted it");
        assert_eq!(restore(&mut tc, payload, None), want, "{what}");
    }
    // Nothing was loaded by any of them.
    assert_eq!(dump(&mut rc), dump(&mut tc));
}
