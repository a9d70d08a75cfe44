//! Black-box tests of the geo commands on a 2-shard server, with keys on both shards
//! and the cross-shard STORE variants; when `redis-server` is installed, random
//! searches run against both and the raw replies must be byte-identical.

mod common;
use common::*;

use redis::Connection;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// Keys on shard 0 ("bar" and its hash tag) and shard 1 ("foo").
const A: &str = "{bar}a";
const A2: &str = "{bar}b";
const B: &str = "{foo}a";
const B2: &str = "{foo}b";

const NYC: &[&str] = &[
    "-73.9454966",
    "40.747533",
    "lic market",
    "-73.9733487",
    "40.7648057",
    "central park n/q/r",
    "-73.9903085",
    "40.7362513",
    "union square",
    "-74.0131604",
    "40.7126674",
    "wtc one",
    "-73.7858139",
    "40.6428986",
    "jfk",
    "-73.9375699",
    "40.7498929",
    "q4",
    "-73.9564142",
    "40.7480973",
    "4545",
];

fn load_nyc(c: &mut Connection, key: &str) {
    let mut args = vec!["GEOADD", key];
    args.extend_from_slice(NYC);
    assert_eq!(q::<i64>(c, &args), 7);
}

#[test]
fn geoadd_pos_dist_hash_on_both_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    for key in [A, B] {
        load_nyc(&mut c, key);
        assert_eq!(
            q::<Vec<(String, String)>>(&mut c, &["ZRANGE", key, "0", "1", "WITHSCORES"]),
            vec![
                ("wtc one".into(), "1791873972053020".into()),
                ("union square".into(), "1791875485187452".into())
            ]
        );
        assert_eq!(q::<i64>(&mut c, &["GEOADD", key, "NX", "1", "1", "jfk"]), 0);
        assert_eq!(
            q::<i64>(
                &mut c,
                &["GEOADD", key, "XX", "CH", "1", "1", "jfk", "2", "2", "new"]
            ),
            1
        );
        assert_eq!(q::<i64>(&mut c, &["ZCARD", key]), 7);
        let pos: Vec<Option<(String, String)>> = q(&mut c, &["GEOPOS", key, "jfk", "missing"]);
        assert_eq!(
            pos,
            vec![
                Some(("0.99999994039535522".into(), "0.99999945914297683".into())),
                None
            ]
        );
        assert_eq!(
            q::<Vec<Option<String>>>(&mut c, &["GEOHASH", key, "wtc one", "missing"]),
            vec![Some("dr5reg922r0".into()), None]
        );
        assert_eq!(
            q::<String>(&mut c, &["GEODIST", key, "wtc one", "q4", "km"]),
            "7.5983"
        );
        assert_eq!(
            q::<Option<String>>(&mut c, &["GEODIST", key, "wtc one", "nope"]),
            None
        );
    }
    assert!(err(&mut c, &["GEOADD", A, "181", "0", "x"])
        .contains("invalid longitude,latitude pair 181.000000,0.000000"));
    assert!(err(&mut c, &["GEOADD", A, "XX", "NX", "1", "1", "x"]).contains("syntax"));
    assert!(err(&mut c, &["GEOADD", A, "1", "x", "y"]).contains("not a valid float"));
    assert!(err(&mut c, &["GEODIST", A, "jfk", "q4", "yd"]).contains("unsupported unit"));
    q::<String>(&mut c, &["SET", A2, "x"]);
    assert!(err(&mut c, &["GEOPOS", A2, "x"]).contains("WRONGTYPE"));
    assert!(err(&mut c, &["GEOADD", A2, "1", "1", "x"]).contains("WRONGTYPE"));
}

#[test]
fn searches() {
    let s = Server::start(2);
    let mut c = s.client();
    load_nyc(&mut c, B);
    assert_eq!(
        q::<Vec<String>>(
            &mut c,
            &[
                "GEORADIUS",
                B,
                "-73.9798091",
                "40.7598464",
                "3",
                "km",
                "ASC"
            ]
        ),
        vec!["central park n/q/r", "4545", "union square"]
    );
    assert_eq!(
        q::<Vec<(String, String)>>(
            &mut c,
            &[
                "GEOSEARCH",
                B,
                "FROMLONLAT",
                "-73.9798091",
                "40.7598464",
                "BYBOX",
                "6",
                "6",
                "km",
                "WITHDIST",
                "ASC"
            ]
        ),
        vec![
            ("central park n/q/r".into(), "0.7750".into()),
            ("4545".into(), "2.3651".into()),
            ("union square".into(), "2.7697".into()),
            ("lic market".into(), "3.1991".into())
        ]
    );
    assert_eq!(
        q::<Vec<String>>(
            &mut c,
            &[
                "GEORADIUS_RO",
                B,
                "-73.9798091",
                "40.7598464",
                "10",
                "km",
                "COUNT",
                "3",
                "ANY"
            ]
        ),
        vec!["wtc one", "union square", "central park n/q/r"]
    );
    assert_eq!(
        q::<Vec<String>>(&mut c, &["GEORADIUSBYMEMBER", B, "wtc one", "7", "km"]),
        vec![
            "wtc one",
            "union square",
            "central park n/q/r",
            "4545",
            "lic market"
        ]
    );
    assert!(err(
        &mut c,
        &["GEORADIUS_RO", B, "0", "0", "1", "km", "STORE", A]
    )
    .contains("syntax"));
    assert!(
        err(&mut c, &["GEOSEARCH", B, "BYBOX", "3", "3", "km", "ASC"])
            .contains("exactly one of FROMMEMBER or FROMLONLAT")
    );
    assert!(err(
        &mut c,
        &["GEOSEARCH", B, "FROMLONLAT", "0", "0", "ASC", "WITHDIST"]
    )
    .contains("exactly one of BYRADIUS and BYBOX"));
    assert!(err(&mut c, &["GEORADIUS", B, "0", "0", "1", "km", "ANY"])
        .contains("ANY argument requires COUNT"));
    assert!(err(&mut c, &["GEORADIUSBYMEMBER", B, "nobody", "1", "km"])
        .contains("could not decode requested zset member"));
    assert!(err(
        &mut c,
        &["GEORADIUS", B, "0", "0", "1", "km", "STORE", A, "WITHDIST"]
    )
    .contains("not compatible"));
    // A missing source: empty reply, or 0 and the destination deleted.
    assert_eq!(
        q::<Vec<String>>(
            &mut c,
            &[
                "GEOSEARCH",
                "nokey",
                "FROMMEMBER",
                "x",
                "BYRADIUS",
                "1",
                "km"
            ]
        )
        .len(),
        0
    );
    q::<String>(&mut c, &["SET", A, "old"]);
    assert_eq!(
        q::<i64>(
            &mut c,
            &["GEORADIUS", "{foo}none", "0", "0", "1", "km", "STORE", A]
        ),
        0
    );
    assert_eq!(q::<i64>(&mut c, &["EXISTS", A]), 0);
}

#[test]
fn store_variants_across_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    load_nyc(&mut c, B);
    // Source on shard 1, destinations on shard 0 and on shard 1.
    for dst in [A, B2] {
        assert_eq!(
            q::<i64>(
                &mut c,
                &[
                    "GEORADIUS",
                    B,
                    "-73.9798091",
                    "40.7598464",
                    "3",
                    "km",
                    "STORE",
                    dst
                ]
            ),
            3
        );
        assert_eq!(
            q::<Vec<String>>(&mut c, &["ZRANGE", dst, "0", "-1"]),
            vec!["union square", "central park n/q/r", "4545"]
        );
        assert_eq!(
            q::<i64>(
                &mut c,
                &[
                    "GEORADIUSBYMEMBER",
                    B,
                    "wtc one",
                    "7",
                    "km",
                    "STOREDIST",
                    dst,
                    "COUNT",
                    "2"
                ]
            ),
            2
        );
        assert_eq!(
            q::<Vec<(String, String)>>(&mut c, &["ZRANGE", dst, "0", "-1", "WITHSCORES"]),
            vec![
                ("wtc one".into(), "0".into()),
                ("union square".into(), "3.254395457335749".into())
            ]
        );
        q::<i64>(&mut c, &["EXPIRE", dst, "100"]);
        assert_eq!(
            q::<i64>(
                &mut c,
                &[
                    "GEOSEARCHSTORE",
                    dst,
                    B,
                    "FROMMEMBER",
                    "jfk",
                    "BYBOX",
                    "1",
                    "1",
                    "km",
                    "STOREDIST"
                ]
            ),
            1
        );
        assert_eq!(q::<i64>(&mut c, &["TTL", dst]), -1);
        assert_eq!(
            q::<i64>(
                &mut c,
                &[
                    "GEOSEARCHSTORE",
                    dst,
                    B,
                    "FROMLONLAT",
                    "0",
                    "0",
                    "BYRADIUS",
                    "1",
                    "m"
                ]
            ),
            0
        );
        assert_eq!(q::<i64>(&mut c, &["EXISTS", dst]), 0);
    }
    q::<String>(&mut c, &["SET", A2, "x"]);
    assert!(err(
        &mut c,
        &[
            "GEOSEARCHSTORE",
            B2,
            A2,
            "FROMLONLAT",
            "0",
            "0",
            "BYRADIUS",
            "1",
            "m"
        ]
    )
    .contains("WRONGTYPE"));
    assert!(err(
        &mut c,
        &[
            "GEOSEARCHSTORE",
            A,
            B,
            "FROMLONLAT",
            "0",
            "0",
            "BYRADIUS",
            "1",
            "m",
            "WITHDIST"
        ]
    )
    .contains("GEOSEARCHSTORE is not compatible"));
    let keys: Vec<String> = q(
        &mut c,
        &[
            "COMMAND",
            "GETKEYS",
            "GEORADIUS",
            B,
            "0",
            "0",
            "1",
            "km",
            "STORE",
            A,
        ],
    );
    assert_eq!(keys, vec![B, A]);
}

// ---------------------------------------------------------------------------
// Byte comparison with a real redis-server, when one is installed
// ---------------------------------------------------------------------------

/// Sends one command in RESP and returns the raw reply bytes.
fn raw(s: &mut TcpStream, args: &[String]) -> Vec<u8> {
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    s.write_all(&req).expect("write");
    // PING after the command marks the end of its reply.
    s.write_all(b"PING\r\n").expect("ping");
    let mut out = read_at_least(s, 0);
    while !out.ends_with(b"+PONG\r\n") {
        let more = read_at_least(s, 1);
        assert!(!more.is_empty(), "connection closed");
        out.extend_from_slice(&more);
    }
    out.truncate(out.len() - 7);
    out
}

#[test]
fn replies_identical_to_redis() {
    let Some(redis) = ReferenceRedis::start() else {
        eprintln!("redis-server not available: comparison skipped");
        return;
    };
    let s = Server::start(2);
    let mut ours = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    let mut theirs = TcpStream::connect(("127.0.0.1", redis.port)).expect("connect");
    for st in [&ours, &theirs] {
        st.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
    }
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut check = |args: Vec<String>| {
        let a = raw(&mut ours, &args);
        let b = raw(&mut theirs, &args);
        assert_eq!(
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b),
            "{args:?}"
        );
    };
    for round in 0..8 {
        let key = if round % 2 == 0 { B } else { A };
        // Even rounds spread points over the globe, odd ones cluster them within a
        // degree of a random spot (searched with small radiuses below).
        let clustered = round % 2 == 1;
        let (clon, clat) = (-170.0 + rnd() * 340.0, -80.0 + rnd() * 160.0);
        let mut add = vec!["GEOADD".to_string(), key.to_string()];
        for j in 0..400 {
            let (lon, lat) = if clustered {
                (clon + rnd() - 0.5, (clat + rnd() - 0.5).clamp(-85.0, 85.0))
            } else {
                (-180.0 + rnd() * 360.0, -80.0 + rnd() * 160.0)
            };
            add.push(format!("{lon:.6}"));
            add.push(format!("{lat:.6}"));
            add.push(format!("p{j}"));
        }
        check(add);
        for _ in 0..25 {
            let (lon, lat) = if clustered {
                (clon + rnd() - 0.5, (clat + rnd() - 0.5).clamp(-85.0, 85.0))
            } else {
                (-180.0 + rnd() * 360.0, -85.0 + rnd() * 170.0)
            };
            let size = format!("{}", (rnd() * 3000.0) as u32 + 1);
            let size2 = format!("{}", (rnd() * 3000.0) as u32 + 1);
            let member = format!("p{}", (rnd() * 400.0) as u32);
            let units = ["m", "km", "mi", "ft"];
            let unit = units[(rnd() * 4.0) as usize % 4];
            let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
            let (lo, la) = (format!("{lon:.5}"), format!("{lat:.5}"));
            let near = if clustered { unit } else { "km" };
            check(s(&[
                "GEORADIUS",
                key,
                &lo,
                &la,
                &size,
                near,
                "WITHDIST",
                "WITHCOORD",
                "WITHHASH",
                "ASC",
            ]));
            check(s(&[
                "GEOSEARCH",
                key,
                "FROMLONLAT",
                &lo,
                &la,
                "BYBOX",
                &size,
                &size2,
                near,
                "WITHDIST",
                "DESC",
            ]));
            check(s(&[
                "GEORADIUS_RO",
                key,
                &lo,
                &la,
                &size,
                "km",
                "COUNT",
                "5",
                "DESC",
                "WITHDIST",
            ]));
            check(s(&[
                "GEORADIUSBYMEMBER",
                key,
                &member,
                &size,
                "km",
                "WITHDIST",
                "ASC",
            ]));
            check(s(&[
                "GEOSEARCH",
                key,
                "FROMLONLAT",
                &lo,
                &la,
                "BYBOX",
                &size,
                &size2,
                "km",
                "WITHCOORD",
                "ASC",
            ]));
            check(s(&[
                "GEOSEARCH",
                key,
                "FROMMEMBER",
                &member,
                "BYRADIUS",
                &size,
                unit,
                "WITHDIST",
                "COUNT",
                "3",
                "ANY",
            ]));
            check(s(&[
                "GEOSEARCHSTORE",
                "{bar}dst",
                key,
                "FROMMEMBER",
                &member,
                "BYBOX",
                &size,
                &size2,
                "km",
                "STOREDIST",
            ]));
            check(s(&["ZRANGE", "{bar}dst", "0", "-1", "WITHSCORES"]));
            check(s(&["GEOHASH", key, &member, "p1", "nope"]));
            check(s(&["GEOPOS", key, &member, "nope"]));
            check(s(&["GEODIST", key, &member, "p2", unit]));
        }
    }
}
