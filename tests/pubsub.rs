//! Pub/Sub and keyspace notifications, black-box over TCP on a 2-shard server.
//! Connections are spread over the shards by SO_REUSEPORT, so a test that opens
//! eight subscribers has subscribers (and publishers) on both shards with
//! overwhelming probability; the keys used live on both shards.

mod common;
#[path = "common/resp.rs"]
mod resp;

use common::*;
use resp::*;

fn subscribers(port: u16, n: usize, cmd: &str) -> Vec<Raw> {
    (0..n)
        .map(|_| {
            let mut c = Raw::connect(port);
            c.send(&encode(
                &cmd.split_whitespace()
                    .map(|w| w.as_bytes())
                    .collect::<Vec<_>>(),
            ));
            c.read();
            c
        })
        .collect()
}

#[test]
fn publish_reaches_subscribers_on_every_shard() {
    let (s, mut p) = setup();
    let mut subs = subscribers(s.port, 8, "subscribe news");
    assert_eq!(p.c("publish news hello"), i(8));
    for c in &mut subs {
        assert_eq!(c.read(), bulks(&["message", "news", "hello"]));
    }
    assert_eq!(
        p.c("pubsub numsub news other"),
        arr(vec![b("news"), i(8), b("other"), i(0)])
    );
    assert_eq!(p.c("pubsub channels"), bulks(&["news"]));
    assert_eq!(p.c("pubsub channels n*"), bulks(&["news"]));
    assert_eq!(p.c("pubsub channels x*"), bulks(&[]));
    for c in subs.iter_mut().take(4) {
        assert_eq!(
            c.c("unsubscribe news"),
            arr(vec![b("unsubscribe"), b("news"), i(0)])
        );
    }
    assert_eq!(p.c("publish news again"), i(4));
    drop(subs);
    // Disconnected subscribers are forgotten.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while p.c("publish news x") != i(0) {
        assert!(
            std::time::Instant::now() < deadline,
            "subscribers not dropped"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(p.c("publish nobody-listens x"), i(0));
}

#[test]
fn patterns_and_confirmations() {
    let (s, mut p) = setup();
    let mut subs = subscribers(s.port, 6, "psubscribe n*");
    let mut mixed = Raw::connect(s.port);
    mixed.send(&encode(&[b"subscribe", b"news", b"other"]));
    assert_eq!(mixed.read(), arr(vec![b("subscribe"), b("news"), i(1)]));
    assert_eq!(mixed.read(), arr(vec![b("subscribe"), b("other"), i(2)]));
    assert_eq!(
        mixed.c("psubscribe n*"),
        arr(vec![b("psubscribe"), b("n*"), i(3)])
    );
    assert_eq!(p.c("publish news hi"), i(8));
    for c in &mut subs {
        assert_eq!(c.read(), bulks(&["pmessage", "n*", "news", "hi"]));
    }
    assert_eq!(mixed.read(), bulks(&["message", "news", "hi"]));
    assert_eq!(mixed.read(), bulks(&["pmessage", "n*", "news", "hi"]));
    assert_eq!(p.c("pubsub numpat"), i(1));
    // Unsubscribing from everything confirms each name, then nothing is left.
    mixed.send(&encode(&[b"unsubscribe"]));
    let mut names = vec![
        mixed.read().items()[1].text(),
        mixed.read().items()[1].text(),
    ];
    names.sort();
    assert_eq!(names, vec!["news", "other"]);
    assert_eq!(
        mixed.c("punsubscribe"),
        arr(vec![b("punsubscribe"), b("n*"), i(0)])
    );
    assert_eq!(
        mixed.c("unsubscribe"),
        arr(vec![b("unsubscribe"), R::Nil, i(0)])
    );
    assert_eq!(mixed.c("get x"), R::Nil);
}

#[test]
fn resp2_subscribed_context_and_reset() {
    let (s, mut p) = setup();
    let mut c = Raw::connect(s.port);
    c.c("subscribe ch");
    assert_eq!(
        c.c("get x"),
        e("ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")
    );
    assert_eq!(c.c("ping"), bulks(&["pong", ""]));
    assert_eq!(c.c("ping hey"), bulks(&["pong", "hey"]));
    assert_eq!(c.c("reset"), st("RESET"));
    assert_eq!(p.c("publish ch x"), i(0));
    assert_eq!(c.c("ping"), st("PONG"));
    assert_eq!(c.c("get x"), R::Nil);
}

#[test]
fn resp3_pushes_and_commands_while_subscribed() {
    let (s, mut p) = setup();
    let mut c = Raw::connect(s.port);
    c.c("hello 3");
    assert_eq!(
        c.c_raw("subscribe ch"),
        b">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
    );
    assert_eq!(c.c("set k v"), ok());
    assert_eq!(c.c("ping"), st("PONG"));
    assert_eq!(p.c("publish ch m"), i(1));
    assert_eq!(
        c.read_raw(),
        b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n"
    );
    assert_eq!(
        c.c_raw("unsubscribe"),
        b">3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n"
    );
    assert_eq!(
        c.c_raw("unsubscribe"),
        b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n"
    );
    // Confirmations are pushes: CLIENT REPLY OFF does not silence them.
    c.send(&encode(&[b"client", b"reply", b"off"]));
    c.send(&encode(&[b"subscribe", b"ch2"]));
    assert_eq!(c.read(), R::Push(vec![b("subscribe"), b("ch2"), i(1)]));
}

#[test]
fn shard_channels_are_a_namespace_of_their_own() {
    let (s, mut p) = setup();
    let mut subs = subscribers(s.port, 6, "ssubscribe {t}a");
    let mut plain = subscribers(s.port, 1, "subscribe {t}a");
    assert_eq!(p.c("spublish {t}a x"), i(6));
    for c in &mut subs {
        assert_eq!(c.read(), bulks(&["smessage", "{t}a", "x"]));
    }
    assert_eq!(p.c("publish {t}a y"), i(1));
    assert_eq!(plain[0].read(), bulks(&["message", "{t}a", "y"]));
    assert_eq!(p.c("pubsub shardnumsub {t}a"), arr(vec![b("{t}a"), i(6)]));
    assert_eq!(p.c("pubsub numsub {t}a"), arr(vec![b("{t}a"), i(1)]));
    assert_eq!(p.c("pubsub shardchannels"), bulks(&["{t}a"]));
    assert_eq!(
        subs[0].c("sunsubscribe {t}a"),
        arr(vec![b("sunsubscribe"), b("{t}a"), i(0)])
    );
    assert_eq!(p.c("spublish {t}a z"), i(5));
}

#[test]
fn pubsub_help_and_errors() {
    let (_s, mut p) = setup();
    assert_eq!(p.c("pubsub help").items().len(), 14);
    assert_eq!(
        p.c("pubsub numpat x"),
        e("ERR wrong number of arguments for 'pubsub|numpat' command")
    );
    assert_eq!(
        p.c("pubsub nosuch"),
        e("ERR unknown subcommand 'nosuch'. Try PUBSUB HELP.")
    );
}

#[test]
fn keyspace_events_from_both_shards() {
    let (s, mut p) = setup();
    assert_ne!(shard(KEY_SHARD0), shard(KEY_SHARD1));
    p.c("config set notify-keyspace-events KEA");
    assert_eq!(
        p.c("config get notify-keyspace-events"),
        bulks(&["notify-keyspace-events", "AKE"])
    );
    let mut subs = subscribers(s.port, 8, "psubscribe __key*__:*");
    p.c(&format!("set {KEY_SHARD0} 1"));
    p.c(&format!("lpush {KEY_SHARD1} a"));
    p.c(&format!("del {KEY_SHARD0} {KEY_SHARD1}"));
    for c in &mut subs {
        let want = [
            (format!("__keyspace@0__:{KEY_SHARD0}"), "set".to_string()),
            ("__keyevent@0__:set".into(), KEY_SHARD0.into()),
            (format!("__keyspace@0__:{KEY_SHARD1}"), "lpush".into()),
            ("__keyevent@0__:lpush".into(), KEY_SHARD1.into()),
        ];
        for w in want {
            assert_eq!(c.event(), w);
        }
        // DEL over two shards: one del event per key, from each key's shard.
        let dels = [c.event(), c.event(), c.event(), c.event()];
        assert_eq!(
            dels.iter().filter(|(ch, _)| ch.ends_with(":del")).count(),
            2
        );
    }
}

#[test]
fn keyspace_events_of_cross_shard_commands_and_expiry() {
    let (s, mut p) = setup();
    p.c("config set notify-keyspace-events Egx");
    let mut sub = subscribers(s.port, 1, "psubscribe __keyevent@0__:*").remove(0);
    p.c(&format!("set {KEY_SHARD0} v"));
    p.c(&format!("rename {KEY_SHARD0} {KEY_SHARD1}"));
    assert_eq!(
        sub.event(),
        ("__keyevent@0__:rename_from".into(), KEY_SHARD0.into())
    );
    assert_eq!(
        sub.event(),
        ("__keyevent@0__:rename_to".into(), KEY_SHARD1.into())
    );
    p.c(&format!("pexpire {KEY_SHARD1} 50"));
    assert_eq!(
        sub.event(),
        ("__keyevent@0__:expire".into(), KEY_SHARD1.into())
    );
    // Nobody touches the key: the active expiry cycle finds it.
    assert_eq!(
        sub.event(),
        ("__keyevent@0__:expired".into(), KEY_SHARD1.into())
    );
}

#[test]
fn no_events_when_disabled_or_masked() {
    let (s, mut p) = setup();
    let mut sub = subscribers(s.port, 1, "psubscribe *").remove(0);
    p.c("set a 1");
    p.c("config set notify-keyspace-events Kl");
    p.c("set a 2");
    p.c("rpush l x");
    // The first thing the subscriber sees is the list event, then a marker.
    assert_eq!(sub.event(), ("__keyspace@0__:l".into(), "rpush".into()));
    p.c("publish marker m");
    assert_eq!(sub.event(), ("marker".into(), "m".into()));
}

#[test]
fn slow_subscriber_is_disconnected() {
    let (s, mut p) = setup();
    assert_eq!(
        p.cmd(&[
            b"config",
            b"set",
            b"client-output-buffer-limit",
            b"pubsub 64kb 0 0"
        ]),
        ok()
    );
    // Subscribes and then never reads.
    let _slow = subscribers(s.port, 1, "subscribe flood");
    let payload = vec![b'x'; 256 * 1024];
    let mut dropped = false;
    for _ in 0..200 {
        if p.cmd(&[b"publish", b"flood", &payload]) == i(0) {
            dropped = true;
            break;
        }
    }
    assert!(dropped, "the slow subscriber was never disconnected");
}

#[test]
fn stream_keyspace_events() {
    let (s, mut p) = setup();
    p.c("config set notify-keyspace-events Kt");
    let mut sub = subscribers(s.port, 1, "psubscribe *").remove(0);
    p.c("xgroup create st g $ mkstream");
    p.c("xadd st 1-1 f v");
    p.c("xreadgroup group g alice streams st >");
    p.c("xgroup delconsumer st g nobody");
    p.c("xgroup delconsumer st g alice");
    for ev in [
        "xgroup-create",
        "xadd",
        "xgroup-createconsumer",
        "xgroup-delconsumer",
    ] {
        assert_eq!(sub.event(), ("__keyspace@0__:st".into(), ev.into()));
    }
}

#[test]
fn hll_and_geo_keyspace_events() {
    let (s, mut p) = setup();
    p.c("config set notify-keyspace-events E$zg");
    let mut sub = subscribers(s.port, 1, "psubscribe __keyevent@0__:*").remove(0);
    let (h0, h1) = (KEY_SHARD0, KEY_SHARD1);
    // PFADD signals only a change (creation included); PFMERGE always signals
    // "pfadd" on the destination, also across shards; PFDEBUG never.
    p.c(&format!("pfadd {h0} a"));
    p.c(&format!("pfadd {h0} a"));
    p.c(&format!("pfadd {h1}"));
    p.c(&format!("pfmerge {h1} {h0}"));
    p.c(&format!("pfmerge {h0}"));
    p.c(&format!("pfdebug todense {h0}"));
    // GEOADD is ZADD: "zadd" when a member was added or moved.
    let (g, d0, d1) = ("{bar}g", "{bar}d", "{foo}d");
    p.c(&format!("geoadd {g} 13.36 38.11 p"));
    p.c(&format!("geoadd {g} 13.36 38.11 p"));
    p.c(&format!("geoadd {g} xx 13.37 38.11 q"));
    p.c(&format!("geoadd {g} ch 13.37 38.11 p"));
    // Storing searches: their own event on a write, "del" when an existing
    // destination is emptied, nothing when there was none.
    p.c(&format!(
        "geosearchstore {d1} {g} fromlonlat 13.36 38.11 byradius 100 km"
    ));
    p.c(&format!(
        "geosearchstore {d1} {g} fromlonlat 0 0 byradius 1 km"
    ));
    p.c(&format!(
        "geosearchstore {d1} {g} fromlonlat 0 0 byradius 1 km"
    ));
    p.c(&format!("georadius {g} 13.36 38.11 100 km store {d0}"));
    p.c(&format!("georadiusbymember {g} p 100 km storedist {d1}"));
    p.c(&format!(
        "georadius nokey{{bar}} 13.36 38.11 100 km store {d0}"
    ));
    // A marker on a channel the pattern matches: no event may come before it.
    p.c("publish __keyevent@0__:marker m");
    let want = [
        ("pfadd", h0),
        ("pfadd", h1),
        ("pfadd", h1),
        ("pfadd", h0),
        ("zadd", g),
        ("zadd", g),
        ("geosearchstore", d1),
        ("del", d1),
        ("georadiusstore", d0),
        ("georadiusstore", d1),
        ("del", d0),
    ];
    for (ev, key) in want {
        assert_eq!(
            sub.event(),
            (format!("__keyevent@0__:{ev}"), key.to_string())
        );
    }
    assert_eq!(sub.event(), ("__keyevent@0__:marker".into(), "m".into()));
}
