//! Black-box tests of the wire protocol and the connection commands: inline and
//! multibulk requests, pipelining across shards, protocol errors, RESP3, AUTH,
//! QUIT / RESET and CLIENT.

mod common;
#[path = "common/resp.rs"]
mod resp;

use std::io::Write;

use common::*;
use resp::*;
use tessera::slot::SlotTable;

fn shard(key: &str) -> usize {
    SlotTable::new(2).shard_of_key(key.as_bytes())
}

fn setup() -> (Server, Raw) {
    let s = Server::start(2);
    let c = Raw::connect(s.port);
    (s, c)
}

/// Sends `bytes` on a fresh connection and expects exactly `reply`, then a close.
fn expect_protocol_error(s: &Server, bytes: &[u8], reply: &str) {
    let mut c = Raw::connect(s.port);
    c.send(bytes);
    let got = c.read_raw();
    assert_eq!(
        String::from_utf8_lossy(&got),
        reply,
        "input {:?}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(60)])
    );
    assert!(c.is_closed(), "connection stays open after {reply}");
}

#[test]
fn inline_commands() {
    let (s, mut c) = setup();
    c.send(b"SET foo bar\r\nGET foo\r\n");
    assert_eq!(c.read_raw(), b"+OK\r\n");
    assert_eq!(c.read_raw(), b"$3\r\nbar\r\n");
    // Quotes, escapes, a bare \n terminator, extra spaces, empty lines.
    c.send(b"\r\n\r\nSET  \"a key\"   'single \\' q'  \n");
    assert_eq!(c.read(), ok());
    assert_eq!(c.cmd(&[b"GET", b"a key"]), b("single ' q"));
    c.send(b"SET k \"x\\x41\\r\\n\\ty\"\r\nGET k\r\n");
    assert_eq!(c.read(), ok());
    assert_eq!(c.read(), b("xA\r\n\ty"));
    // Inline and multibulk mixed in one write.
    let mut mixed = b"INCR n\r\n".to_vec();
    mixed.extend(encode(&[b"INCR", b"n"]));
    mixed.extend(b"INCR n\n");
    c.send(&mixed);
    assert_eq!(c.read(), i(1));
    assert_eq!(c.read(), i(2));
    assert_eq!(c.read(), i(3));
    // Inline commands reach both shards.
    let line =
        format!("SET {KEY_SHARD0} a\r\nSET {KEY_SHARD1} b\r\nMGET {KEY_SHARD0} {KEY_SHARD1}\r\n");
    c.send(line.as_bytes());
    assert_eq!(c.read(), ok());
    assert_eq!(c.read(), ok());
    assert_eq!(c.read(), bulks(&["a", "b"]));
    // Negative and zero multibulk counts are ignored, like an empty line.
    c.send(b"*-10\r\n*0\r\nPING\r\n");
    assert_eq!(c.read_raw(), b"+PONG\r\n");
    // The harness's roundtrip works on inline input too.
    assert_eq!(s.roundtrip(b"PING\r\n", 7), b"+PONG\r\n");
}

#[test]
fn pipeline_of_1000_commands_in_one_write_keeps_order_across_shards() {
    let (_s, mut c) = setup();
    assert_ne!(shard("{bar}p"), shard("{foo}p"));
    let mut req = Vec::new();
    let mut want = Vec::new();
    for j in 0..250 {
        let (k0, k1) = (format!("{{bar}}p{j}"), format!("{{foo}}p{j}"));
        let v = j.to_string();
        req.extend(encode(&[b"SET", k0.as_bytes(), v.as_bytes()]));
        want.extend(b"+OK\r\n");
        req.extend(encode(&[b"INCR", b"{foo}ctr"]));
        want.extend(format!(":{}\r\n", j + 1).as_bytes());
        req.extend(encode(&[b"GET", k0.as_bytes()]));
        want.extend(format!("${}\r\n{v}\r\n", v.len()).as_bytes());
        // Split across shards: the second key is only written later.
        req.extend(encode(&[b"MGET", k0.as_bytes(), k1.as_bytes()]));
        want.extend(format!("*2\r\n${}\r\n{v}\r\n$-1\r\n", v.len()).as_bytes());
    }
    c.s.write_all(&req).unwrap();
    let got = read_at_least(&mut c.s, want.len());
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    // The connection is still in step afterwards.
    assert_eq!(c.c("DBSIZE"), i(251));
}

#[test]
fn binary_safe_keys_and_values() {
    let (_s, mut c) = setup();
    let value = b"line1\r\nline2\x00\x01\xff\r\n$3\r\n*1\r\n";
    let key = b"k\r\n\x00ey";
    assert_eq!(c.cmd(&[b"SET", key, value]), ok());
    let raw = {
        c.send(&encode(&[b"GET", key]));
        c.read_raw()
    };
    let mut want = format!("${}\r\n", value.len()).into_bytes();
    want.extend_from_slice(value);
    want.extend_from_slice(b"\r\n");
    assert_eq!(raw, want);
    assert_eq!(c.cmd(&[b"STRLEN", key]), i(value.len() as i64));
    assert_eq!(c.cmd(&[b"EXISTS", b"k"]), i(0));
    assert_eq!(c.cmd(&[b"ECHO", value]), R::Bulk(value.to_vec()));
    // The same through the redis crate.
    let s2 = Server::start(2);
    let mut rc = s2.client();
    let _: () = redis::cmd("SET")
        .arg(&key[..])
        .arg(&value[..])
        .query(&mut rc)
        .unwrap();
    let got: Vec<u8> = redis::cmd("GET").arg(&key[..]).query(&mut rc).unwrap();
    assert_eq!(got, value);
}

#[test]
fn protocol_errors_reply_and_close() {
    let (s, _c) = setup();
    let p = |m: &str| format!("-ERR Protocol error: {m}\r\n");
    expect_protocol_error(&s, b"*3000000000\r\n", &p("invalid multibulk length"));
    expect_protocol_error(&s, b"*abc\r\n", &p("invalid multibulk length"));
    expect_protocol_error(
        &s,
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
        &p("expected '$', got 'f'"),
    );
    expect_protocol_error(
        &s,
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n",
        &p("invalid bulk length"),
    );
    expect_protocol_error(
        &s,
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n",
        &p("invalid bulk length"),
    );
    expect_protocol_error(
        &s,
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n",
        &p("invalid bulk length"),
    );
    expect_protocol_error(&s, b"*1\r\nfoo\r\n", &p("expected '$', got 'f'"));
    expect_protocol_error(
        &s,
        b"set \"\"\"test-key\"\"\" test-value\r\nping\r\n",
        &p("unbalanced quotes in request"),
    );
    expect_protocol_error(
        &s,
        b"SET k \"abc\"def\r\n",
        &p("unbalanced quotes in request"),
    );
    expect_protocol_error(&s, &[b'A'; 70 * 1024], &p("too big inline request"));
    let mut big_count = b"*".to_vec();
    big_count.extend([b'1'; 70 * 1024]);
    expect_protocol_error(&s, &big_count, &p("too big mbulk count string"));
    let mut big_bulk = b"*1\r\n$".to_vec();
    big_bulk.extend([b'1'; 70 * 1024]);
    expect_protocol_error(&s, &big_bulk, &p("too big bulk count string"));
    // Commands before the bad one are answered first; nothing after it runs.
    let mut c = Raw::connect(s.port);
    c.send(b"PING\r\nSET a 1\r\n*x\r\nSET b 2\r\n");
    assert_eq!(c.read_raw(), b"+PONG\r\n");
    assert_eq!(c.read_raw(), b"+OK\r\n");
    assert_eq!(c.read_raw(), p("invalid multibulk length").as_bytes());
    assert!(c.is_closed());
    let mut c = Raw::connect(s.port);
    assert_eq!(c.c("MGET a b"), arr(vec![b("1"), R::Nil]));
}

#[test]
fn proto_max_bulk_len_limits_bulk_arguments() {
    let (s, mut c) = setup();
    assert_eq!(c.c("CONFIG SET proto-max-bulk-len 1048576"), ok());
    assert_eq!(
        c.c("CONFIG GET proto-max-bulk-len"),
        bulks(&["proto-max-bulk-len", "1048576"])
    );
    // Exactly the limit is fine.
    let at_limit = vec![b'x'; 1048576];
    assert_eq!(c.cmd(&[b"SET", b"k", &at_limit]), ok());
    assert_eq!(c.c("STRLEN k"), i(1048576));
    // One byte more is refused at the header, on any shard's connection.
    for key in [KEY_SHARD0, KEY_SHARD1] {
        let req = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1048577\r\n", key.len());
        expect_protocol_error(
            &s,
            req.as_bytes(),
            "-ERR Protocol error: invalid bulk length\r\n",
        );
    }
    assert_eq!(c.c("CONFIG SET proto-max-bulk-len 1000"), e("ERR CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - argument must be between 1048576 and 9223372036854775807 inclusive"));
}

#[test]
fn unknown_command_and_arity_errors() {
    let (_s, mut c) = setup();
    assert_eq!(
        c.c_raw("FOO"),
        b"-ERR unknown command 'FOO', with args beginning with: \r\n"
    );
    assert_eq!(
        c.c_raw("foo a b"),
        b"-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n"
    );
    // At most 128 bytes of arguments are quoted.
    let a100 = "a".repeat(100);
    let b50 = "b".repeat(50);
    let reply = c.cmd(&[b"NOPE", a100.as_bytes(), b50.as_bytes(), b"c"]);
    assert_eq!(
        reply,
        e(&format!(
            "ERR unknown command 'NOPE', with args beginning with: '{a100}' '{}' ",
            &b50[..25]
        ))
    );
    let long = "z".repeat(200);
    let reply = c.cmd(&[long.as_bytes()]);
    assert_eq!(
        reply,
        e(&format!(
            "ERR unknown command '{}', with args beginning with: ",
            &long[..128]
        ))
    );
    // Wrong arity names the command in lower case.
    assert_eq!(
        c.c_raw("GET"),
        b"-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        c.c("ping x y z"),
        e("ERR wrong number of arguments for 'ping' command")
    );
    assert_eq!(
        c.c("SeT k"),
        e("ERR wrong number of arguments for 'set' command")
    );
    assert_eq!(
        c.c("GET a b"),
        e("ERR wrong number of arguments for 'get' command")
    );
    // Container commands.
    assert_eq!(
        c.c("CONFIG FOO"),
        e("ERR unknown subcommand 'FOO'. Try CONFIG HELP.")
    );
    assert_eq!(
        c.c("CLIENT foo"),
        e("ERR unknown subcommand 'foo'. Try CLIENT HELP.")
    );
    assert_eq!(
        c.c("CONFIG GET"),
        e("ERR wrong number of arguments for 'config|get' command")
    );
    // Errors do not break the connection.
    assert_eq!(c.c("PING"), st("PONG"));
    assert_eq!(c.c("PING hello"), b("hello"));
    assert_eq!(c.c("ECHO x"), b("x"));
}

#[test]
fn resp3_after_hello_3() {
    let (_s, mut c) = setup();
    // HELLO without a version answers in the current protocol (RESP2: a flat array).
    let h2 = c.c("HELLO");
    assert_eq!(h2.items().len(), 14);
    assert_eq!(h2.items()[0], b("server"));
    let id = c.c("CLIENT ID").int();
    let raw = c.c_raw("HELLO 3");
    let want = format!(
        "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:{id}\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
    );
    assert_eq!(String::from_utf8_lossy(&raw), want);
    // Nulls are "_", also in multi-key replies across shards.
    assert_eq!(c.c_raw("GET missing"), b"_\r\n");
    c.c("SET {bar}a 1");
    assert_eq!(c.c_raw("MGET {bar}a {foo}b"), b"*2\r\n$1\r\n1\r\n_\r\n");
    assert_eq!(c.c_raw("SET x 1 XX"), b"_\r\n");
    assert_eq!(c.c_raw("OBJECT ENCODING missing"), b"_\r\n");
    // Maps where Redis sends maps.
    assert_eq!(
        c.c_raw("CONFIG GET maxmemory"),
        b"%1\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"
    );
    c.c("MSET {t}1 ohmytext {t}2 mynewtext");
    let lcs = c.c("LCS {t}1 {t}2 IDX MINMATCHLEN 4");
    assert!(
        matches!(lcs, R::Map(ref m) if m.len() == 2 && m[0].0 == b("matches") && m[1] == (b("len"), i(6))),
        "{lcs:?}"
    );
    // INFO is a verbatim string.
    assert!(matches!(c.c("INFO server"), R::Verbatim(ref f, _) if f == "txt"));
    assert_eq!(c.c("HELLO 3").items_map_len(), 7);
    // Back to RESP2.
    let h = c.c("HELLO 2");
    assert_eq!(h.items()[5], i(2));
    assert_eq!(c.c_raw("GET missing"), b"$-1\r\n");
    assert_eq!(c.c("HELLO 4"), e("NOPROTO unsupported protocol version"));
    assert_eq!(c.c("HELLO 1"), e("NOPROTO unsupported protocol version"));
    assert_eq!(
        c.c("HELLO abc"),
        e("ERR Protocol version is not an integer or out of range")
    );
    assert_eq!(
        c.c("HELLO 3 FOO"),
        e("ERR Syntax error in HELLO option 'FOO'")
    );
    assert_eq!(
        c.c("HELLO 3 SETNAME"),
        e("ERR Syntax error in HELLO option 'SETNAME'")
    );
    // A failed HELLO leaves the protocol alone.
    assert_eq!(c.c_raw("GET missing"), b"$-1\r\n");
    let h = c.c("HELLO 3 SETNAME myname");
    assert!(matches!(h, R::Map(_)));
    assert_eq!(c.c("CLIENT GETNAME"), b("myname"));
}

trait MapLen {
    fn items_map_len(&self) -> usize;
}

impl MapLen for R {
    fn items_map_len(&self) -> usize {
        match self {
            R::Map(m) => m.len(),
            other => panic!("not a map: {other:?}"),
        }
    }
}

#[test]
fn quit_closes_and_skips_pipelined_commands() {
    let (s, _c) = setup();
    let mut c = Raw::connect(s.port);
    assert_eq!(c.c("QUIT"), ok());
    assert!(c.is_closed());
    let mut c = Raw::connect(s.port);
    let mut req = encode(&[b"QUIT"]);
    req.extend(encode(&[b"SET", b"foo", b"bar"]));
    req.extend(encode(&[b"SET", b"foo2", &[b'x'; 20000]]));
    c.send(&req);
    assert_eq!(c.read_raw(), b"+OK\r\n");
    assert!(c.is_closed());
    let mut c = Raw::connect(s.port);
    assert_eq!(c.c("EXISTS foo foo2"), i(0));
}

#[test]
fn reset_restores_connection_defaults() {
    let (_s, mut c) = setup();
    c.c("SELECT 5");
    c.c("SET in5 v");
    c.c("CLIENT SETNAME before");
    c.c("HELLO 3");
    assert_eq!(c.c_raw("RESET"), b"+RESET\r\n");
    assert_eq!(c.c_raw("CLIENT GETNAME"), b"$-1\r\n");
    assert_eq!(c.c("EXISTS in5"), i(0));
    c.c("SELECT 5");
    assert_eq!(c.c("EXISTS in5"), i(1));
    // Reply mode goes back on.
    c.send(&encode(&[b"CLIENT", b"REPLY", b"OFF"]));
    c.send(&encode(&[b"RESET"]));
    assert_eq!(c.read_raw(), b"+RESET\r\n");
    assert_eq!(c.c("PING"), st("PONG"));
    assert_eq!(
        c.c("RESET x"),
        e("ERR wrong number of arguments for 'reset' command")
    );
}

#[test]
fn auth_with_requirepass() {
    let port = free_port();
    let _p = Proc::start(
        &[
            "--port".into(),
            port.to_string(),
            "--threads".into(),
            "2".into(),
            "--requirepass".into(),
            "secret".into(),
        ],
        port,
    );
    let noauth = e("NOAUTH Authentication required.");
    let wrongpass = e("WRONGPASS invalid username-password pair or user is disabled.");
    let mut c = Raw::connect(port);
    assert_eq!(c.c("PING"), noauth);
    assert_eq!(c.c("GET foo"), noauth);
    assert_eq!(c.c("SET foo bar"), noauth);
    assert_eq!(c.c("CONFIG GET port"), noauth);
    assert_eq!(c.c("AUTH wrong"), wrongpass);
    assert_eq!(c.c("AUTH default wrong"), wrongpass);
    assert_eq!(c.c("AUTH nobody secret"), wrongpass);
    assert_eq!(c.c("AUTH a b c"), e("ERR syntax error"));
    assert_eq!(
        c.c("HELLO 3"),
        e("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
    );
    assert_eq!(c.c("PING"), noauth);
    assert_eq!(c.c("AUTH secret"), ok());
    assert_eq!(c.c("PING"), st("PONG"));
    assert_eq!(c.cmd(&[b"SET", KEY_SHARD0.as_bytes(), b"1"]), ok());
    assert_eq!(c.cmd(&[b"SET", KEY_SHARD1.as_bytes(), b"2"]), ok());
    // RESET forgets the authentication.
    assert_eq!(c.c("RESET"), st("RESET"));
    assert_eq!(c.c("PING"), noauth);
    assert_eq!(c.c("AUTH default secret"), ok());
    assert_eq!(
        c.cmd(&[b"MGET", KEY_SHARD0.as_bytes(), KEY_SHARD1.as_bytes()]),
        bulks(&["1", "2"])
    );

    // HELLO AUTH authenticates and switches protocol at once.
    let mut c = Raw::connect(port);
    assert_eq!(c.c("HELLO 3 AUTH default wrong"), wrongpass);
    assert_eq!(c.c("PING"), noauth);
    let h = c.c("HELLO 3 AUTH default secret SETNAME app1");
    assert!(matches!(h, R::Map(ref m) if m.len() == 7), "{h:?}");
    assert_eq!(c.c_raw("GET nokey"), b"_\r\n");
    assert_eq!(c.c("CLIENT GETNAME"), b("app1"));

    // The redis crate's password handling.
    let url = format!("redis://:secret@127.0.0.1:{port}/");
    let mut rc = redis::Client::open(url).unwrap().get_connection().unwrap();
    let v: String = redis::cmd("GET").arg(KEY_SHARD1).query(&mut rc).unwrap();
    assert_eq!(v, "2");
}

#[test]
fn unauthenticated_clients_get_small_protocol_limits() {
    let port = free_port();
    let _p = Proc::start(
        &[
            "--port".into(),
            port.to_string(),
            "--threads".into(),
            "2".into(),
            "--requirepass".into(),
            "secret".into(),
        ],
        port,
    );
    let mut c = Raw::connect(port);
    c.send(b"*20\r\n");
    assert_eq!(
        c.read_raw(),
        b"-ERR Protocol error: unauthenticated multibulk length\r\n"
    );
    assert!(c.is_closed());
    let mut c = Raw::connect(port);
    c.send(b"*1\r\n$100000\r\n");
    assert_eq!(
        c.read_raw(),
        b"-ERR Protocol error: unauthenticated bulk length\r\n"
    );
    assert!(c.is_closed());
    // After AUTH the normal limits apply.
    let mut c = Raw::connect(port);
    assert_eq!(c.c("AUTH secret"), ok());
    let big = vec![b'v'; 100_000];
    let mut args: Vec<&[u8]> = vec![b"MSET"];
    for _ in 0..10 {
        args.push(b"k");
        args.push(&big);
    }
    assert_eq!(c.cmd(&args), ok());
}

#[test]
fn auth_without_password_configured() {
    let (_s, mut c) = setup();
    assert_eq!(
        c.c("AUTH foo"),
        e("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
    );
    // The default user has no password: any password is accepted for it.
    assert_eq!(c.c("AUTH default anything"), ok());
    assert_eq!(
        c.c("AUTH other anything"),
        e("WRONGPASS invalid username-password pair or user is disabled.")
    );
    assert!(matches!(c.c("HELLO 3 AUTH default x"), R::Map(_)));
}

#[test]
fn client_setname_getname_id_list() {
    let (s, mut c) = setup();
    assert_eq!(c.c_raw("CLIENT GETNAME"), b"$-1\r\n");
    assert_eq!(c.c("CLIENT SETNAME myname"), ok());
    assert_eq!(c.c("CLIENT GETNAME"), b("myname"));
    let bad = e("ERR Client names cannot contain spaces, newlines or special characters.");
    assert_eq!(c.cmd(&[b"CLIENT", b"SETNAME", b"my name"]), bad);
    assert_eq!(c.cmd(&[b"CLIENT", b"SETNAME", b"a\nb"]), bad);
    assert_eq!(c.c("CLIENT GETNAME"), b("myname"));
    assert_eq!(c.cmd(&[b"CLIENT", b"SETNAME", b""]), ok());
    assert_eq!(c.c("CLIENT GETNAME"), R::Nil);
    c.c("CLIENT SETNAME first");

    let id = c.c("CLIENT ID").int();
    assert!(id > 0);
    let mut other = Raw::connect(s.port);
    other.c("CLIENT SETNAME second");
    other.c("SELECT 3");
    let other_id = other.c("CLIENT ID").int();
    assert_ne!(id, other_id);

    let list = c.c("CLIENT LIST").text();
    let lines: Vec<&str> = list.lines().collect();
    assert!(lines.len() >= 2, "{list}");
    let mine = lines
        .iter()
        .find(|l| l.starts_with(&format!("id={id} ")))
        .expect("own line");
    assert!(mine.contains(" name=first "), "{mine}");
    assert!(mine.contains(" addr=127.0.0.1:"), "{mine}");
    assert!(mine.contains(" db=0 "), "{mine}");
    assert!(mine.ends_with(" resp=2 lib-name= lib-ver="), "{mine}");
    let theirs = lines
        .iter()
        .find(|l| l.starts_with(&format!("id={other_id} ")))
        .expect("other line");
    assert!(
        theirs.contains(" name=second ") && theirs.contains(" db=3 "),
        "{theirs}"
    );
    let only = c.c(&format!("CLIENT LIST ID {other_id}")).text();
    assert_eq!(only.lines().count(), 1);
    assert!(only.starts_with(&format!("id={other_id} ")));
    assert_eq!(c.c("CLIENT LIST ID abc"), e("ERR Invalid client ID"));
    assert_eq!(
        c.c("CLIENT LIST TYPE foo"),
        e("ERR Unknown client type 'foo'")
    );
    assert_eq!(c.c("CLIENT LIST TYPE pubsub").text(), "");
    let info = c.c("CLIENT INFO").text();
    assert!(
        info.starts_with(&format!("id={id} ")) && info.ends_with('\n'),
        "{info}"
    );
    assert_eq!(
        c.c("CLIENT ID x"),
        e("ERR wrong number of arguments for 'client|id' command")
    );
    assert_eq!(
        c.c("CLIENT SETNAME"),
        e("ERR wrong number of arguments for 'client|setname' command")
    );
}

#[test]
#[ignore = "CLIENT LIST shows cmd=client, Redis 7.0 shows the full name cmd=client|list"]
fn client_list_shows_subcommand_full_name() {
    let (_s, mut c) = setup();
    let list = c.c("CLIENT LIST").text();
    assert!(list.contains(" cmd=client|list "), "{list}");
}

#[test]
fn client_kill_variants() {
    let (s, mut c) = setup();
    let mut victim = Raw::connect(s.port);
    let vid = victim.c("CLIENT ID").int();
    assert_eq!(c.c(&format!("CLIENT KILL ID {vid}")), i(1));
    assert!(victim.is_closed());
    assert_eq!(c.c(&format!("CLIENT KILL ID {vid}")), i(0));
    assert_eq!(
        c.c("CLIENT KILL ID 0"),
        e("ERR client-id should be greater than 0")
    );
    assert_eq!(
        c.c("CLIENT KILL ID abc"),
        e("ERR client-id should be greater than 0")
    );

    // Old form: CLIENT KILL ip:port.
    let mut victim = Raw::connect(s.port);
    victim.c("PING");
    let addr = victim.s.local_addr().unwrap().to_string();
    assert_eq!(c.c(&format!("CLIENT KILL {addr}")), ok());
    assert!(victim.is_closed());
    assert_eq!(c.c(&format!("CLIENT KILL {addr}")), e("ERR No such client"));

    // ADDR filter, and SKIPME for our own connection.
    let mut victim = Raw::connect(s.port);
    victim.c("PING");
    let addr = victim.s.local_addr().unwrap().to_string();
    assert_eq!(c.c(&format!("CLIENT KILL ADDR {addr}")), i(1));
    assert!(victim.is_closed());
    let me = c.s.local_addr().unwrap().to_string();
    assert_eq!(c.c(&format!("CLIENT KILL ADDR {me}")), i(0));
    assert_eq!(
        c.c("CLIENT KILL ADDR 1.2.3.4:5 FOO bar"),
        e("ERR syntax error")
    );
    assert_eq!(
        c.c("CLIENT KILL ADDR 1.2.3.4:5 SKIPME maybe"),
        e("ERR syntax error")
    );
    // The illegal-argument cases of Redis's introspection suite.
    assert_eq!(
        c.c("CLIENT KILL"),
        e("ERR wrong number of arguments for 'client|kill' command")
    );
    assert_eq!(c.c("CLIENT KILL id 10 wrong_arg"), e("ERR syntax error"));
    for bad in ["str", "-1", "0"] {
        assert_eq!(
            c.c(&format!("CLIENT KILL id {bad}")),
            e("ERR client-id should be greater than 0")
        );
    }
    assert_eq!(
        c.c("CLIENT KILL type wrong_type"),
        e("ERR Unknown client type 'wrong_type'")
    );
    assert_eq!(
        c.c("CLIENT KILL user wrong_user"),
        e("ERR No such user 'wrong_user'")
    );
    assert_eq!(
        c.c("CLIENT KILL user default skipme yes_or_no"),
        e("ERR syntax error")
    );
    assert_eq!(c.c("CLIENT KILL USER default ID 999999"), i(0));
    let id = c.c("CLIENT ID").int();
    c.send(&encode(&[
        b"CLIENT",
        b"KILL",
        b"ID",
        id.to_string().as_bytes(),
        b"SKIPME",
        b"no",
    ]));
    assert_eq!(c.read(), i(1));
    assert!(c.is_closed());
    let mut c = Raw::connect(s.port);
    assert_eq!(c.c("PING"), st("PONG"));
}

#[test]
fn client_reply_off_skip_on() {
    let (_s, mut c) = setup();
    // OFF: nothing comes back, not even for CLIENT REPLY OFF itself.
    let mut req = encode(&[b"CLIENT", b"REPLY", b"OFF"]);
    req.extend(encode(&[b"SET", b"a", b"1"]));
    req.extend(encode(&[b"GET", b"a"]));
    req.extend(encode(&[b"NOSUCHCMD"]));
    req.extend(encode(&[b"CLIENT", b"REPLY", b"ON"]));
    req.extend(encode(&[b"GET", b"a"]));
    c.send(&req);
    assert_eq!(c.read_raw(), b"+OK\r\n");
    assert_eq!(c.read_raw(), b"$1\r\n1\r\n");
    // SKIP: its own reply and the next command's are dropped.
    let mut req = encode(&[b"CLIENT", b"REPLY", b"SKIP"]);
    req.extend(encode(&[b"INCR", b"n"]));
    req.extend(encode(&[b"INCR", b"n"]));
    c.send(&req);
    assert_eq!(c.read_raw(), b":2\r\n");
    // Replies of keys on both shards are dropped too.
    let mut req = encode(&[b"CLIENT", b"REPLY", b"OFF"]);
    req.extend(encode(&[b"SET", KEY_SHARD0.as_bytes(), b"x"]));
    req.extend(encode(&[b"SET", KEY_SHARD1.as_bytes(), b"y"]));
    req.extend(encode(&[
        b"MGET",
        KEY_SHARD0.as_bytes(),
        KEY_SHARD1.as_bytes(),
    ]));
    req.extend(encode(&[b"CLIENT", b"REPLY", b"ON"]));
    req.extend(encode(&[
        b"MGET",
        KEY_SHARD0.as_bytes(),
        KEY_SHARD1.as_bytes(),
    ]));
    c.send(&req);
    assert_eq!(c.read_raw(), b"+OK\r\n");
    assert_eq!(c.read(), bulks(&["x", "y"]));
    assert_eq!(c.c("CLIENT REPLY MAYBE"), e("ERR syntax error"));
}

/// DEBUG PROTOCOL's sample replies, byte for byte as redis-server 7.0.15 sends them, in
/// RESP2 and RESP3 (the test suite's RESP3 parser tests read them).
#[test]
fn debug_protocol_replies_as_redis() {
    let s = Server::start(1);
    let theirs = ReferenceRedis::start_with(&["--enable-debug-command", "yes"]);
    let types = [
        "string",
        "integer",
        "double",
        "bignum",
        "null",
        "array",
        "set",
        "map",
        "attrib",
        "push",
        "verbatim",
        "true",
        "false",
        "nosuchtype",
    ];
    for proto in ["2", "3"] {
        for t in types {
            let ask = |port: u16| {
                let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
                c.write_all(&encode(&[b"HELLO", proto.as_bytes()]))
                    .expect("hello");
                read_quiet(&mut c);
                c.write_all(&encode(&[b"DEBUG", b"PROTOCOL", t.as_bytes()]))
                    .expect("debug");
                String::from_utf8_lossy(&read_quiet(&mut c)).into_owned()
            };
            let ours = ask(s.port);
            assert!(!ours.is_empty(), "RESP{proto} {t}: no reply");
            if let Some(r) = &theirs {
                assert_eq!(ours, ask(r.port), "RESP{proto} DEBUG PROTOCOL {t}");
            }
        }
    }
}

/// Everything the peer sends until it has been quiet for 100 ms (a reply whose RESP3
/// types the test parser does not know, or several replies).
fn read_quiet(c: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    c.set_read_timeout(Some(std::time::Duration::from_millis(100)))
        .expect("timeout");
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = c.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}
