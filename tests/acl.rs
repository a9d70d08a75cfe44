//! ACL, black-box: the same administration and permission sequence against Tessera
//! (two shards) and redis-server 7.0.15, reply for reply — users and their rules as
//! ACL LIST / GETUSER describe them, selectors, DRYRUN, commands denied at the top
//! level, in MULTI and in scripts, and what ACL LOG recorded.

mod common;

use common::{ReferenceRedis, Server};

/// A reply as text, errors included (compared between the two servers).
fn show(v: redis::RedisResult<redis::Value>) -> String {
    match v {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!(
            "error: {} {}",
            e.code().unwrap_or(""),
            e.detail().unwrap_or("")
        ),
    }
}

fn run(c: &mut redis::Connection, words: &[&str]) -> String {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    let reply = cmd.query(c);
    if words.len() >= 2 && ["LIST", "GETUSER"].contains(&words[1]) {
        return show(reply.map(|v| sorted_words(&v)));
    }
    // ACL CAT lists a category's commands in that same hash order.
    if words.len() == 3 && words[1] == "CAT" {
        return show(reply.map(|v| match v {
            redis::Value::Array(mut items) => {
                items.sort_by_key(|i| format!("{i:?}"));
                redis::Value::Array(items)
            }
            other => other,
        }));
    }
    show(reply)
}

/// Redis lists a selector's single-command rules in its command dictionary's hash
/// order: the rule strings are compared as sets of words.
fn sorted_words(v: &redis::Value) -> redis::Value {
    match v {
        redis::Value::BulkString(b) => {
            let text = String::from_utf8_lossy(b);
            let mut words: Vec<&str> = text.split(' ').collect();
            words.sort_unstable();
            redis::Value::BulkString(words.join(" ").into_bytes())
        }
        redis::Value::Array(items) => redis::Value::Array(items.iter().map(sorted_words).collect()),
        redis::Value::Map(pairs) => redis::Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (sorted_words(k), sorted_words(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// ACL LOG with the parts that differ between any two servers blanked: the age
/// and the client's address, id and buffers.
fn log_summary(c: &mut redis::Connection) -> Vec<String> {
    let entries: Vec<Vec<redis::Value>> = redis::cmd("ACL").arg("LOG").query(c).expect("ACL LOG");
    entries
        .iter()
        .map(|e| {
            let mut fields = Vec::new();
            for pair in e.chunks(2) {
                let name: String = redis::from_redis_value(&pair[0]).unwrap_or_default();
                if name == "age-seconds" || name == "client-info" {
                    continue;
                }
                fields.push(format!("{name}={:?}", pair[1]));
            }
            fields.join(" ")
        })
        .collect()
}

const ADMIN: &[&[&str]] = &[
    &["ACL", "SETUSER", "alice", "on", ">p1", "~cached:*", "+get"],
    &[
        "ACL",
        "SETUSER",
        "bob",
        "on",
        "nopass",
        "+@all",
        "-@dangerous",
        "~*",
    ],
    &["ACL", "SETUSER", "carol", "reset"],
    &[
        "ACL", "SETUSER", "dan", "on", ">x", "%R~r*", "%W~w*", "+@read", "+@write", "-debug",
    ],
    &["ACL", "SETUSER", "erin", "on", "#bad"],
    &["ACL", "SETUSER", "erin", "on", "+nosuch"],
    &["ACL", "SETUSER", "erin", "on", "+@nosuch"],
    &["ACL", "SETUSER", "erin", "~*", "~foo"],
    &["ACL", "SETUSER", "erin", "&*", "&foo"],
    &["ACL", "SETUSER", "erin", "<nopw"],
    &["ACL", "SETUSER", "erin", "(~x", "+get"],
    &[
        "ACL",
        "SETUSER",
        "erin",
        "on",
        ">e",
        "(~x +get)",
        "(%R~y +@read)",
    ],
    &[
        "ACL",
        "SETUSER",
        "frank",
        "+select|0",
        "+client|kill",
        "+config|get",
        "-@all",
    ],
    &["ACL", "SETUSER", "frank", "+client|kill|x"],
    &["ACL", "SETUSER", "frank", "+select|"],
    &["ACL", "SETUSER", "gina", "+@all", "-@keyspace", "-@admin"],
    &[
        "ACL", "SETUSER", "hank", "-@all", "+@hash", "+@set", "+@list",
    ],
    &[
        "ACL",
        "SETUSER",
        "ivy",
        "on",
        ">pw",
        "&chan:*",
        "+publish",
        "+subscribe",
        "+multi",
        "+exec",
        "+eval",
        "+set",
        "~*",
    ],
    &[
        "ACL",
        "SETUSER",
        "jo",
        "on",
        ">pw",
        "allkeys",
        "allchannels",
        "allcommands",
    ],
    &[
        "ACL",
        "SETUSER",
        "jo",
        "nocommands",
        "resetkeys",
        "resetchannels",
        "skip-sanitize-payload",
    ],
    &["ACL", "SETUSER", "a b"],
    &["ACL", "LIST"],
    &["ACL", "USERS"],
    &["ACL", "GETUSER", "erin"],
    &["ACL", "GETUSER", "frank"],
    &["ACL", "GETUSER", "gina"],
    &["ACL", "GETUSER", "jo"],
    &["ACL", "GETUSER", "nobody"],
    &["ACL", "CAT"],
    &["ACL", "CAT", "hyperloglog"],
    &["ACL", "CAT", "nosuch"],
    &["ACL", "DRYRUN", "alice", "get", "cached:1"],
    &["ACL", "DRYRUN", "alice", "get", "other"],
    &["ACL", "DRYRUN", "alice", "set", "cached:1", "v"],
    &["ACL", "DRYRUN", "nobody", "get", "x"],
    &["ACL", "DRYRUN", "alice", "nosuchcmd"],
    &["ACL", "DRYRUN", "alice", "get"],
    &["ACL", "DRYRUN", "dan", "set", "w1", "v"],
    &["ACL", "DRYRUN", "dan", "set", "r1", "v"],
    &["ACL", "DRYRUN", "dan", "lmove", "r1", "w1", "left", "right"],
    &["ACL", "DRYRUN", "dan", "lmove", "w1", "r1", "left", "right"],
    &["ACL", "DRYRUN", "erin", "get", "x"],
    &["ACL", "DRYRUN", "erin", "get", "y"],
    &["ACL", "DRYRUN", "erin", "set", "y", "1"],
    &["ACL", "DRYRUN", "frank", "select", "0"],
    &["ACL", "DRYRUN", "frank", "select", "1"],
    &["ACL", "DRYRUN", "frank", "config", "get", "x"],
    &["ACL", "DRYRUN", "frank", "config", "set", "x", "y"],
    &["ACL", "DRYRUN", "ivy", "publish", "chan:1", "hi"],
    &["ACL", "DRYRUN", "ivy", "publish", "other", "hi"],
    &["ACL", "DELUSER", "default"],
    &["ACL", "DELUSER", "bob", "nosuch"],
    &["ACL", "GENPASS", "0"],
    &["ACL", "GENPASS", "5000"],
    &["ACL", "GENPASS", "abc"],
    &["ACL", "LOG", "abc"],
    &["ACL", "LOAD"],
    &["ACL", "SAVE"],
    &["ACL", "NOSUCH"],
    &["AUTH", "nouser", "pass"],
    &["AUTH", "pass"],
];

/// As a restricted user: commands at the top level, in MULTI, in a script.
const AS_IVY: &[&[&str]] = &[
    &["ACL", "WHOAMI"],
    &["SET", "k", "v"],
    &["GET", "k"],
    &["PUBLISH", "chan:1", "m"],
    &["PUBLISH", "other", "m"],
    &["MULTI"],
    &["SET", "k", "1"],
    &["GET", "k"],
    &["EXEC"],
    &["MULTI"],
    &["SET", "k", "2"],
    &["PUBLISH", "other", "m"],
    &["EXEC"],
    &["EVAL", "return redis.call('get', KEYS[1])", "1", "k"],
    &["EVAL", "return redis.pcall('publish', 'other', 'm')", "0"],
    &["EVAL", "return redis.acl_check_cmd('set', 'k', 'v')", "0"],
    &["EVAL", "return redis.acl_check_cmd('get', 'k')", "0"],
    &["EVAL", "return redis.acl_check_cmd('nosuch')", "0"],
    &["SORT", "k", "BY", "w_*"],
];

#[test]
fn acl_matches_redis_reply_for_reply() {
    let Some(redis) = ReferenceRedis::start() else {
        eprintln!("redis-server not available: comparison skipped");
        return;
    };
    let s = Server::start(2);
    let mut ours = s.client();
    let mut theirs = redis.client();
    for words in ADMIN {
        let (a, b) = (run(&mut ours, words), run(&mut theirs, words));
        assert_eq!(a, b, "{words:?}");
    }
    let mut ours_ivy = s.client();
    let mut theirs_ivy = redis.client();
    assert_eq!(run(&mut ours_ivy, &["AUTH", "ivy", "pw"]), "ok");
    assert_eq!(run(&mut theirs_ivy, &["AUTH", "ivy", "pw"]), "ok");
    for words in AS_IVY {
        let (a, b) = (run(&mut ours_ivy, words), run(&mut theirs_ivy, words));
        assert_eq!(a, b, "{words:?}");
    }
    assert_eq!(log_summary(&mut ours), log_summary(&mut theirs));
    // Rules changed between MULTI and EXEC: the queued command is refused at EXEC.
    for (admin, ivy) in [(&mut ours, &mut ours_ivy), (&mut theirs, &mut theirs_ivy)] {
        run(ivy, &["MULTI"]);
        run(ivy, &["SET", "k", "3"]);
        run(admin, &["ACL", "SETUSER", "ivy", "-set"]);
        let reply = run(ivy, &["EXEC"]);
        assert!(
            reply.contains("no permission to execute the command"),
            "{reply}"
        );
    }
    assert_eq!(log_summary(&mut ours), log_summary(&mut theirs));
}

/// ACL DELUSER closes the user's connections; a change that takes channels away
/// closes the subscribers it no longer allows.
#[test]
fn deleted_users_and_revoked_channels_disconnect() {
    let s = Server::start(2);
    let mut admin = s.client();
    let set = |c: &mut redis::Connection, rules: &[&str]| {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER");
        for r in rules {
            cmd.arg(*r);
        }
        let () = cmd.query(c).expect("ACL SETUSER");
    };
    set(&mut admin, &["u", "on", ">p", "+@all", "~*", "&news:*"]);
    let mut victims: Vec<redis::Connection> = (0..4).map(|_| s.client()).collect();
    for v in &mut victims {
        let () = redis::cmd("AUTH").arg("u").arg("p").query(v).expect("AUTH");
    }
    let () = redis::cmd("SUBSCRIBE")
        .arg("news:1")
        .query(&mut victims[0])
        .unwrap_or(());
    set(&mut admin, &["u", "resetchannels", "&sports:*"]);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut admin)
        .expect("LIST");
    assert_eq!(list.matches("user=u ").count(), 3, "{list}");
    let n: i64 = redis::cmd("ACL")
        .arg("DELUSER")
        .arg("u")
        .query(&mut admin)
        .expect("DELUSER");
    assert_eq!(n, 1);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut admin)
        .expect("LIST");
    assert!(!list.contains("user=u "), "{list}");
    for v in &mut victims[1..] {
        assert!(redis::cmd("PING").query::<String>(v).is_err());
    }
}

/// `user` directives and `requirepass` at start; an `aclfile` with ACL SAVE / LOAD.
#[test]
fn users_from_config_and_acl_file() {
    let dir = common::scratch_dir("acl", "file");
    let users = [
        "--user", "worker", "on", ">secret", "~jobs:*", "+@list", "--user", "default", "on",
        "nopass", "~*", "&*", "+@all",
    ];
    let s = Server::start_with(2, &users);
    let mut c = s.client();
    let list: Vec<String> = redis::cmd("ACL").arg("LIST").query(&mut c).expect("LIST");
    assert_eq!(
        list,
        [
            // The default user is reset before its rules (sanitize-payload), as in Redis.
            "user default on nopass sanitize-payload ~* &* +@all",
            "user worker on #2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b ~jobs:* resetchannels -@all +@list",
        ]
    );
    let mut w = s.client();
    let () = redis::cmd("AUTH")
        .arg("worker")
        .arg("secret")
        .query(&mut w)
        .expect("AUTH");
    let _: i64 = redis::cmd("LPUSH")
        .arg("jobs:1")
        .arg("x")
        .query(&mut w)
        .expect("LPUSH");
    let e = redis::cmd("GET")
        .arg("jobs:1")
        .query::<String>(&mut w)
        .unwrap_err();
    assert_eq!(e.code(), Some("NOPERM"));
    // Both at once is refused, as Redis refuses it.
    let acl = dir.join("users.acl");
    std::fs::write(&acl, "user default on nopass ~* &* +@all\n").expect("acl");
    let mut both = users.to_vec();
    both.extend(["--aclfile", acl.to_str().expect("path")]);
    let log = dir.join("refused.log");
    let refused = Server::start_loading(2, &both, &log, std::time::Duration::from_secs(10))
        .err()
        .expect("refused");
    assert!(
        refused.log.contains("an ACL file path is invalid"),
        "{}",
        refused.log
    );
    let s = Server::start_with(2, &["--aclfile", acl.to_str().expect("path")]);
    let mut c = s.client();
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("saved")
        .arg("on")
        .arg(">x")
        .arg("+ping")
        .query(&mut c)
        .expect("SETUSER");
    let () = redis::cmd("ACL").arg("SAVE").query(&mut c).expect("SAVE");
    let text = std::fs::read_to_string(&acl).expect("read");
    assert!(text.contains("user saved on #2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881 resetchannels -@all +ping\n"), "{text}");
    std::fs::write(
        &acl,
        "user default on nopass ~* &* +@all\nuser x on +nosuch\n",
    )
    .expect("acl");
    let e = redis::cmd("ACL")
        .arg("LOAD")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("Error in applying operation '+nosuch'"),
        "{e}"
    );
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query(&mut c).expect("USERS");
    assert_eq!(users, ["default", "saved"]);
}

/// Without cluster mode, Redis 7.0 still knows CLUSTER, READONLY, READWRITE and
/// ASKING (ACL rules name them) and answers each with the same error; in a script,
/// CLUSTER's own subcommand flags decide.
#[test]
fn cluster_commands_answer_as_a_standalone_redis() {
    let Some(redis) = ReferenceRedis::start() else {
        eprintln!("redis-server not available: comparison skipped");
        return;
    };
    let s = Server::start(2);
    let (mut ours, mut theirs) = (s.client(), redis.client());
    for words in [
        &["CLUSTER", "INFO"][..],
        &["CLUSTER", "KEYSLOT", "x"],
        &["CLUSTER", "HELP"],
        &["CLUSTER", "NOSUCH"],
        &["CLUSTER"],
        &["READONLY"],
        &["READWRITE"],
        &["ASKING"],
        &["EVAL", "return redis.call('cluster', 'info')", "0"],
        &["EVAL", "return redis.call('cluster', 'reset')", "0"],
        &[
            "ACL",
            "SETUSER",
            "c",
            "on",
            "nopass",
            "+cluster",
            "+readonly",
        ],
        &["ACL", "DRYRUN", "c", "cluster", "info"],
        &["ACL", "DRYRUN", "c", "readwrite"],
        &["COMMAND", "INFO", "readonly", "readwrite", "asking"],
    ] {
        assert_eq!(run(&mut ours, words), run(&mut theirs, words), "{words:?}");
    }
}

/// XREAD and XREADGROUP name their keys after STREAMS: a user's key patterns apply
/// to them (they were not checked at all), on both shards, and COMMAND GETKEYS finds
/// them as Redis's xreadGetKeys does. Each answer is compared with redis-server's.
#[test]
fn stream_reads_check_key_permissions() {
    let script: &[&[&str]] = &[
        &[
            "ACL",
            "SETUSER",
            "lim",
            "on",
            "nopass",
            "~allowed*",
            "+@all",
        ],
        &["XADD", "secret", "1-1", "a", "1"],
        &["XADD", "allowed{x}", "1-1", "a", "1"],
        &["XGROUP", "CREATE", "secret", "g", "0"],
        &["XGROUP", "CREATE", "allowed{x}", "g", "0"],
        &[
            "COMMAND", "GETKEYS", "XREAD", "COUNT", "2", "STREAMS", "s1", "s2", "0", "0",
        ],
        &[
            "COMMAND",
            "GETKEYS",
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "NOACK",
            "STREAMS",
            "a",
            ">",
        ],
        &["COMMAND", "GETKEYS", "XREAD", "STREAMS", "a", "b", "0"],
    ];
    let as_lim: &[&[&str]] = &[
        &["XREAD", "STREAMS", "secret", "0"],
        &[
            "XREAD",
            "COUNT",
            "1",
            "STREAMS",
            "allowed{x}",
            "secret",
            "0",
            "0",
        ],
        &["XREAD", "STREAMS", "allowed{x}", "0"],
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "secret", ">"],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "STREAMS",
            "allowed{x}",
            ">",
        ],
    ];
    let answers = |admin: &mut redis::Connection, user: &mut redis::Connection| {
        let mut out: Vec<String> = script.iter().map(|w| run(admin, w)).collect();
        let _ = run(user, &["AUTH", "lim", "x"]);
        out.extend(as_lim.iter().map(|w| run(user, w)));
        out
    };
    let s = Server::start(2);
    let ours = answers(&mut s.client(), &mut s.client());
    assert!(ours[8].contains("NOPERM"), "{ours:?}");
    assert!(ours[9].contains("NOPERM"), "{ours:?}");
    assert!(ours[11].contains("NOPERM"), "{ours:?}");
    if let Some(r) = ReferenceRedis::start() {
        let theirs = answers(&mut r.client(), &mut r.client());
        assert_eq!(ours, theirs);
    }
}
