use super::*;
use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn load(list: &[&str]) -> Result<Config, String> {
    Config::load(args(list).into_iter())
}

fn get1(c: &Config, name: &str) -> String {
    c.get_value(name)
        .unwrap_or_else(|| format!("<missing {name}>"))
}

fn set(c: &mut Config, pairs: &[(&str, &str)]) -> Result<(), String> {
    let pairs: Vec<(&[u8], &[u8])> = pairs
        .iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect();
    c.set_many(&pairs)
}

/// A unique scratch file path (tests run in parallel).
fn temp_path(tag: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("tessera-config-{}-{tag}-{n}", std::process::id()))
}

fn write_temp(tag: &str, text: &str) -> PathBuf {
    let path = temp_path(tag);
    fs::write(&path, text).expect("write temp config");
    path
}

#[test]
fn all_defaults_parse_and_render() {
    for p in PARAMS {
        let value = parse_value(p, &default_args(p), None);
        assert!(value.is_ok(), "default of {} fails: {:?}", p.name, value);
    }
    let c = Config::new();
    assert_eq!(get1(&c, "save"), "3600 1 300 100 60 10000");
    assert_eq!(get1(&c, "maxmemory"), "0");
    assert_eq!(get1(&c, "proto-max-bulk-len"), "536870912");
    assert_eq!(get1(&c, "client-query-buffer-limit"), "1073741824");
    assert_eq!(
        get1(&c, "client-output-buffer-limit"),
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
    );
    assert_eq!(get1(&c, "latency-tracking-info-percentiles"), "50 99 99.9");
    assert_eq!(get1(&c, "list-max-listpack-size"), "-2");
    assert_eq!(get1(&c, "loglevel"), "notice");
    assert_eq!(get1(&c, "bind"), "* -::*");
    assert_eq!(get1(&c, "notify-keyspace-events"), "");
    assert_eq!(get1(&c, "cpus"), "");
    let cwd = fs::canonicalize(".").expect("cwd");
    assert_eq!(get1(&c, "dir"), cwd.to_string_lossy());
}

#[test]
fn names_are_unique() {
    let names: Vec<&str> = entries().map(|(_, n)| n).collect();
    for (i, n) in names.iter().enumerate() {
        assert!(!names[i + 1..].contains(n), "duplicate entry {n}");
        assert_eq!(n.to_ascii_lowercase(), *n);
    }
}

#[test]
fn typed_accessors_defaults() {
    let c = Config::new();
    assert_eq!(c.port(), 6379);
    assert_eq!(c.bind(), ["*".to_string(), "-::*".to_string()]);
    assert_eq!(c.databases(), 16);
    assert_eq!(c.requirepass(), None);
    assert_eq!(c.maxclients(), 10_000);
    assert_eq!(c.proto_max_bulk_len(), 512 * 1024 * 1024);
    assert_eq!(c.client_query_buffer_limit(), 1024 * 1024 * 1024);
    assert_eq!(c.maxmemory(), 0);
    assert_eq!(c.maxmemory_policy(), MaxmemoryPolicy::NoEviction);
    assert_eq!(c.loglevel(), LogLevel::Notice);
    assert_eq!(c.hz(), 10);
    assert_eq!(c.timeout(), 0);
    assert_eq!(c.tcp_keepalive(), 300);
    assert_eq!(c.threads(), None);
    assert!(c.cpus().is_empty());
    assert_eq!(c.save_points().len(), 3);
    assert_eq!(c.appendfsync(), AppendFsync::EverySec);
    assert_eq!(c.busy_reply_threshold(), 5000);
    assert_eq!(
        c.client_output_buffer_limit(ClientClass::Pubsub),
        ObufLimit {
            hard_limit_bytes: 33_554_432,
            soft_limit_bytes: 8_388_608,
            soft_limit_seconds: 60
        }
    );
    assert_eq!(c.latency_tracking_info_percentiles(), [50.0, 99.0, 99.9]);
    assert_eq!(c.bool_param("lazyfree-lazy-user-del"), Some(false));
    assert_eq!(c.int_param("hash-max-ziplist-entries"), Some(128));
    assert_eq!(c.version(), 0);
}

#[test]
fn config_text_parsing() {
    let mut c = Config::new();
    let text = "# comment\n\n   \n  Port 7000\r\nMAXMEMORY 1gb\n\
                requirepass \"p a\\\"ss\"\nlogLevel WARNING\n  # indented comment\n\
                notify-keyspace-events 'KEA'\nhash-max-ziplist-entries 256\n";
    c.load_str(text).expect("load");
    assert_eq!(c.port(), 7000);
    assert_eq!(c.maxmemory(), 1 << 30);
    assert_eq!(c.requirepass(), Some("p a\"ss"));
    assert_eq!(c.loglevel(), LogLevel::Warning);
    assert_eq!(get1(&c, "notify-keyspace-events"), "AKE");
    assert_eq!(get1(&c, "hash-max-listpack-entries"), "256");
}

#[test]
fn unknown_directive_error_text() {
    let mut c = Config::new();
    let err = c.load_str("port 6380\n# x\nfoo bar\n").unwrap_err();
    assert_eq!(
        err,
        "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\n\
         Reading the configuration file, at line 3\n\
         >>> 'foo bar'\n\
         Bad directive or wrong number of arguments"
    );
}

#[test]
fn file_errors() {
    let mut c = Config::new();
    let err = c.load_str("port 1 2").unwrap_err();
    assert!(
        err.ends_with(">>> 'port 1 2'\nwrong number of arguments"),
        "{err}"
    );
    let err = c.load_str("\n  maxmemory lots  \n").unwrap_err();
    assert!(err.contains("at line 2\n>>> 'maxmemory lots'\nargument must be a memory value"));
    let err = c.load_str("requirepass \"abc").unwrap_err();
    assert!(
        err.ends_with("Unbalanced quotes in configuration line"),
        "{err}"
    );
    let err = c
        .load_str("port 6379 # trailing comments are not comments")
        .unwrap_err();
    assert!(err.ends_with("wrong number of arguments"));
    // Immutable parameters are settable from the file.
    c.load_str("databases 4\nlist-max-ziplist-entries 5")
        .expect("ok");
    assert_eq!(c.databases(), 4);
}

#[test]
fn save_lines_accumulate_in_files() {
    let mut c = Config::new();
    c.load_str("save 900 1\nsave 300 10\n").expect("load");
    assert_eq!(get1(&c, "save"), "900 1 300 10");
    let mut c = Config::new();
    c.load_str("save \"\"\n").expect("load");
    assert_eq!(get1(&c, "save"), "");
    let mut c = Config::new();
    c.load_str("save \"\"\nsave 60 5\n").expect("load");
    assert_eq!(get1(&c, "save"), "60 5");
    let mut c = Config::new();
    c.load_str("save \"900 1 300 10\"").expect("load");
    assert_eq!(c.save_points().len(), 2);
    let err = Config::new().load_str("save 900").unwrap_err();
    assert!(err.ends_with("Invalid save parameters"));
    let err = Config::new().load_str("save 0 1").unwrap_err();
    assert!(err.ends_with("Invalid save parameters"));
}

#[test]
fn include_files() {
    let inner = write_temp("inner", "maxclients 77\ninclude-not-a-thing\n");
    let outer = write_temp(
        "outer",
        &format!("port 7001\ninclude {}\n", inner.display()),
    );
    let err = Config::new()
        .load_str(&format!("include {}", outer.display()))
        .unwrap_err();
    // The error points inside the included file.
    assert!(
        err.contains("at line 2\n>>> 'include-not-a-thing'"),
        "{err}"
    );

    fs::write(&inner, "maxclients 77\n").expect("rewrite");
    let mut c = Config::new();
    c.load_str(&format!("include {}\ntimeout 5", outer.display()))
        .expect("load");
    assert_eq!((c.port(), c.maxclients(), c.timeout()), (7001, 77, 5));

    let missing = Config::new()
        .load_str("include /nonexistent/tessera.conf")
        .unwrap_err();
    assert_eq!(
        missing,
        "Fatal error, can't open config file '/nonexistent/tessera.conf': No such file or directory"
    );
    for p in [inner, outer] {
        let _ = fs::remove_file(p);
    }
}

#[test]
fn include_cycles_are_stopped() {
    let path = temp_path("cycle");
    fs::write(&path, format!("include {}\n", path.display())).expect("write");
    let err = Config::new()
        .load_str(&format!("include {}", path.display()))
        .unwrap_err();
    assert!(err.contains("Too many nested include directives"), "{err}");
    let _ = fs::remove_file(path);
}

#[test]
fn include_wildcards() {
    let dir = temp_path("confd");
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(dir.join("a.conf"), "port 7100\n").expect("write");
    fs::write(dir.join("b.conf"), "port 7200\n").expect("write");
    fs::write(dir.join("c.txt"), "port 7300\n").expect("write");
    let mut c = Config::new();
    c.load_str(&format!("include {}/*.conf", dir.display()))
        .expect("load");
    assert_eq!(c.port(), 7200, "files are applied in sorted order");
    c.load_str(&format!("include {}/*.none", dir.display()))
        .expect("no match is fine");
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn appendonly_and_the_aof_settings() {
    let mut c = load(&["--appendonly", "yes", "--appenddirname", "aofs"]).expect("load");
    assert!(c.appendonly());
    assert_eq!(c.appenddirname(), "aofs");
    set(&mut c, &[("appendonly", "no")]).expect("CONFIG SET appendonly no");
    assert_eq!(get1(&c, "appendonly"), "no");
    let err = set(&mut c, &[("appenddirname", "x")]).expect_err("appenddirname is immutable");
    assert!(err.contains("can't set immutable config"), "{err}");
    let err = load(&["--appenddirname", "a/b"]).expect_err("a directory name, not a path");
    assert!(
        err.contains("appenddirname can't be a path, just a dirname"),
        "{err}"
    );
}

#[test]
fn cli_passthrough() {
    let c = load(&["--save", "", "--activerehashing", "no", "--port", "7002"]).expect("load");
    assert_eq!(get1(&c, "save"), "");
    assert_eq!(get1(&c, "activerehashing"), "no");
    assert_eq!(c.port(), 7002);

    // `--save` followed by another option means `save ""`.
    let c = load(&["--save", "--activerehashing", "no"]).expect("load");
    assert!(c.save_points().is_empty());
    assert_eq!(get1(&c, "activerehashing"), "no");
    let c = load(&["--activerehashing", "no", "--save"]).expect("load");
    assert!(c.save_points().is_empty());

    // Multi-word values, either as separate args or one quoted arg.
    let c = load(&["--save", "900", "1", "300", "10"]).expect("load");
    assert_eq!(get1(&c, "save"), "900 1 300 10");
    let c = load(&["--save", "900 1 300 10", "--bind", "127.0.0.1", "::1"]).expect("load");
    assert_eq!(get1(&c, "save"), "900 1 300 10");
    assert_eq!(c.bind(), ["127.0.0.1".to_string(), "::1".to_string()]);

    // A value that looks like an option.
    let c = load(&["--requirepass", "--secret", "--MAXCLIENTS", "5"]).expect("load");
    assert_eq!(c.requirepass(), Some("--secret"));
    assert_eq!(c.maxclients(), 5);

    // Name and value in one argument.
    let c = load(&["--port 7003", "--threads", "4", "--cpus", "0-3,8"]).expect("load");
    assert_eq!(c.port(), 7003);
    assert_eq!(c.threads(), Some(4));
    assert_eq!(c.cpus(), [0, 1, 2, 3, 8]);
    assert_eq!(get1(&c, "cpus"), "0-3,8");
}

#[test]
fn cli_errors() {
    let err = load(&["--foo", "bar"]).unwrap_err();
    assert_eq!(
        err,
        "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\n\
         Reading the configuration file, at line 2\n\
         >>> 'foo \"bar\"'\n\
         Bad directive or wrong number of arguments"
    );
    // Values are judged by the loader: redis-server's text, naming the line.
    assert!(load(&["--port", "notaport"])
        .unwrap_err()
        .contains(">>> 'port \"notaport\"'"));
    assert!(load(&["--cpus", "3-1"]).unwrap_err().contains("reversed"));
    assert!(load(&["--loglevel", "loud"]).is_err());
    let err = load(&["--port", "1", "2"]).unwrap_err();
    assert!(err.ends_with("wrong number of arguments"), "{err}");
    let err = load(&["/nonexistent/tessera.conf"]).unwrap_err();
    assert!(
        err.starts_with("Fatal error, can't open config file"),
        "{err}"
    );
}

#[test]
fn cli_struct_view() {
    let parsed = parse_args(&args(&[
        "redis.conf",
        "--port",
        "7004",
        "--bind",
        "10.0.0.1",
        "-::1",
        "--loglevel",
        "DEBUG",
        "--save",
        "",
    ]))
    .expect("parse");
    assert_eq!(parsed.cli.config_file, Some(PathBuf::from("redis.conf")));
    assert_eq!(parsed.cli.port, 7004);
    assert_eq!(parsed.cli.bind, ["10.0.0.1", "-::1"]);
    let quoted = parse_args(&args(&["--bind", "10.0.0.1 ::1"])).expect("parse");
    assert_eq!(quoted.cli.bind, ["10.0.0.1", "::1"]);
    let default = parse_args(&args(&[])).expect("parse");
    assert_eq!(default.cli.bind, ["*", "-::*"]);
    assert_eq!(default.cli.port, 6379);
    assert_eq!(parsed.cli.loglevel, LogLevel::Debug);
    assert_eq!(parsed.cli.databases, 16);
    assert_eq!(
        parsed.options,
        "port \"7004\" \nbind \"10.0.0.1\" \"-::1\" \nloglevel \"DEBUG\" \nsave \"\" "
    );
    assert!(!parsed.config_from_stdin);
    let parsed = parse_args(&args(&["-", "--port", "1"])).expect("parse");
    assert!(parsed.config_from_stdin);
    assert_eq!(parsed.cli.config_file, None);
}

#[test]
fn config_file_then_cli_overrides() {
    let path = write_temp("main", "port 7005\nmaxclients 50\nsave 10 1\n");
    let c = load(&[&path.to_string_lossy(), "--port", "7006", "--save", "20 2"]).expect("load");
    assert_eq!(c.port(), 7006);
    assert_eq!(c.maxclients(), 50);
    // CLI lines are still "file" lines: the save appends.
    assert_eq!(get1(&c, "save"), "10 1 20 2");
    assert!(c.config_file().is_some_and(Path::is_absolute));
    let _ = fs::remove_file(path);
}

#[test]
fn cpu_lists() {
    assert_eq!(parse_cpu_list("0-3,8"), Ok(vec![0, 1, 2, 3, 8]));
    assert_eq!(parse_cpu_list(" 8 , 2-3,3,0 "), Ok(vec![0, 2, 3, 8]));
    assert_eq!(parse_cpu_list("5-5"), Ok(vec![5]));
    for bad in ["", "a", "1-", "-1", "3-1", "1,,2", "1-2-3", "70000", "0x1"] {
        assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
    }
    assert_eq!(render_cpus(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
}

#[test]
fn config_get_globbing() {
    let c = Config::new();
    let names =
        |pat: &str| -> Vec<String> { c.get(pat.as_bytes()).into_iter().map(|(n, _)| n).collect() };
    assert_eq!(
        c.get(b"maxmemory"),
        [("maxmemory".to_string(), "0".to_string())]
    );
    // Exact lookups echo the name as typed.
    assert_eq!(
        c.get(b"MaxMemory"),
        [("MaxMemory".to_string(), "0".to_string())]
    );
    assert!(c.get(b"nosuchthing").is_empty());
    assert!(c.get(b"nosuch*").is_empty());
    let mm = names("maxmemory*");
    for n in [
        "maxmemory",
        "maxmemory-policy",
        "maxmemory-samples",
        "maxmemory-eviction-tenacity",
        "maxmemory-clients",
    ] {
        assert!(mm.contains(&n.to_string()), "{n} missing from {mm:?}");
    }
    // Globs list both names and aliases that match.
    let hash = names("hash-max-*-entries");
    assert_eq!(
        hash,
        ["hash-max-listpack-entries", "hash-max-ziplist-entries"]
    );
    assert_eq!(names("*ziplist*").len(), 5);
    assert_eq!(names("LUA-TIME-*"), ["lua-time-limit"]);
    assert_eq!(get1(&c, "lua-time-limit"), "5000");
    // Every name but the hidden ones, which need their exact name.
    let all = c.get(b"*");
    let hidden: Vec<&str> = PARAMS
        .iter()
        .filter(|p| p.flags.contains(ParamFlags::HIDDEN))
        .map(|p| p.name)
        .collect();
    assert!(hidden.contains(&"key-load-delay") && hidden.contains(&"rdb-key-save-delay"));
    assert_eq!(all.len(), entries().count() - hidden.len());
    for h in hidden {
        assert!(all.iter().all(|(n, _)| n != h));
        assert!(!get1(&c, h).is_empty());
    }
    // Several patterns: each name once.
    let many = c.get_many(&[b"port", b"po*", b"PORT"]);
    assert_eq!(many, [("port".to_string(), "6379".to_string())]);
}

#[test]
fn config_set_values() {
    let mut c = Config::new();
    set(
        &mut c,
        &[("maxmemory", "100mb"), ("maxmemory-policy", "ALLKEYS-LRU")],
    )
    .expect("set");
    assert_eq!(c.maxmemory(), 100 * 1024 * 1024);
    assert_eq!(get1(&c, "maxmemory"), "104857600");
    assert_eq!(c.maxmemory_policy(), MaxmemoryPolicy::AllkeysLru);
    assert_eq!(get1(&c, "maxmemory-policy"), "allkeys-lru");
    assert_eq!(c.version(), 1);
    set(
        &mut c,
        &[("requirepass", "s3cret"), ("activerehashing", "NO")],
    )
    .expect("set");
    assert_eq!(c.requirepass(), Some("s3cret"));
    assert_eq!(get1(&c, "activerehashing"), "no");
    set(&mut c, &[("save", ""), ("hz", "1000")]).expect("set");
    assert!(c.save_points().is_empty());
    assert_eq!(get1(&c, "hz"), "500", "hz is clamped like Redis");
    set(&mut c, &[("save", "100 2 50 3")]).expect("set");
    assert_eq!(
        get1(&c, "save"),
        "100 2 50 3",
        "CONFIG SET replaces save points"
    );
    set(
        &mut c,
        &[("client-output-buffer-limit", "pubsub 1mb 2kb 9")],
    )
    .expect("set");
    assert_eq!(
        get1(&c, "client-output-buffer-limit"),
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 2048 9"
    );
    set(&mut c, &[("notify-keyspace-events", "Exn")]).expect("set");
    assert_eq!(get1(&c, "notify-keyspace-events"), "xnE");
    assert_eq!(
        c.notify_keyspace_events(),
        notify::EXPIRED | notify::NEW | notify::KEYEVENT
    );
    set(&mut c, &[("notify-keyspace-events", "gA$K")]).expect("set");
    assert_eq!(get1(&c, "notify-keyspace-events"), "AK");
    set(&mut c, &[("latency-tracking-info-percentiles", "99.99 50")]).expect("set");
    assert_eq!(get1(&c, "latency-tracking-info-percentiles"), "99.99 50");
    // Parsed as Redis parses it, then refused: client eviction is not implemented.
    let err = set(&mut c, &[("maxmemory-clients", "10%")]).unwrap_err();
    assert!(err.contains("not implemented"), "{err}");
    set(&mut c, &[("maxmemory-clients", "0")]).expect("the default is accepted");
    set(&mut c, &[("list-max-ziplist-size", "-3")]).expect("set");
    assert_eq!(get1(&c, "list-max-listpack-size"), "-3");
    set(&mut c, &[("maxmemory", "")]).expect("Redis quirk: empty memory is 0");
    assert_eq!(c.maxmemory(), 0);
}

#[test]
fn config_set_error_strings() {
    let mut c = Config::new();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("foo", "1")],
            "ERR Unknown option or number of arguments for CONFIG SET - 'foo'",
        ),
        (
            &[("maxmemory", "lots")],
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value",
        ),
        (
            &[("hz", "10x")],
            "ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed into an integer",
        ),
        (
            &[("maxmemory-samples", "65")],
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-samples') - argument must be between 1 and 64 inclusive",
        ),
        (
            &[("appendonly", "maybe")],
            "ERR CONFIG SET failed (possibly related to argument 'appendonly') - argument must be 'yes' or 'no'",
        ),
        (
            &[("loglevel", "loud")],
            "ERR CONFIG SET failed (possibly related to argument 'loglevel') - argument(s) must be one of the following: debug, verbose, notice, warning",
        ),
        (
            &[("maxmemory-policy", "lru")],
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction",
        ),
        (
            &[("THREADS", "3")],
            "ERR CONFIG SET failed (possibly related to argument 'THREADS') - can't set immutable config",
        ),
        (
            &[("timeout", "1"), ("TIMEOUT", "2")],
            "ERR CONFIG SET failed (possibly related to argument 'TIMEOUT') - duplicate parameter",
        ),
        (
            &[("dir", "/tmp")],
            "ERR CONFIG SET failed (possibly related to argument 'dir') - can't set protected config",
        ),
        (
            &[("hash-max-ziplist-entries", "x")],
            "ERR CONFIG SET failed (possibly related to argument 'hash-max-ziplist-entries') - argument couldn't be parsed into an integer",
        ),
        (
            &[("maxmemory-clients", "101%")],
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - percentage argument must be less or equal to 100",
        ),
        (
            &[("maxmemory-clients", "x")],
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - argument must be a memory or percent value",
        ),
        (
            &[("save", "100")],
            "ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters",
        ),
        (
            &[("save", "100  1")],
            "ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters",
        ),
        (
            &[("notify-keyspace-events", "KEQ")],
            "ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.",
        ),
        (
            &[("client-output-buffer-limit", "master 0 0 0")],
            "ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Invalid client class specified in buffer limit configuration.",
        ),
        (
            &[("client-output-buffer-limit", "normal 1 2")],
            "ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Wrong number of arguments in buffer limit configuration.",
        ),
        (
            &[("client-output-buffer-limit", "normal 1x 2 3")],
            "ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - Error in hard, soft or soft_seconds setting in buffer limit configuration.",
        ),
        (
            &[("latency-tracking-info-percentiles", "101")],
            "ERR CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
        ),
        (
            &[("latency-tracking-info-percentiles", "abc")],
            "ERR CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - Invalid latency-tracking-info-percentiles parameters",
        ),
        (
            // The first problem in argument order wins.
            &[("timeout", "1"), ("daemonize", "yes"), ("foo", "1")],
            "ERR CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config",
        ),
        (
            &[("foo", "1"), ("daemonize", "yes")],
            "ERR Unknown option or number of arguments for CONFIG SET - 'foo'",
        ),
    ];
    for (pairs, expected) in cases {
        assert_eq!(set(&mut c, pairs).unwrap_err(), *expected, "{pairs:?}");
    }
    assert_eq!(c.version(), 0, "failed sets change nothing");
}

#[test]
fn config_set_is_atomic() {
    let mut c = Config::new();
    let err = set(
        &mut c,
        &[("maxmemory", "1mb"), ("timeout", "30"), ("hz", "nope")],
    )
    .unwrap_err();
    assert!(err.contains("'hz'"), "{err}");
    assert_eq!(c.maxmemory(), 0);
    assert_eq!(c.timeout(), 0);
    assert_eq!(c.version(), 0);
    // An alias and its canonical name are distinct entries: later wins.
    set(
        &mut c,
        &[
            ("hash-max-ziplist-entries", "1"),
            ("hash-max-listpack-entries", "2"),
        ],
    )
    .expect("set");
    assert_eq!(c.int_param("hash-max-listpack-entries"), Some(2));
    set(&mut c, &[]).expect("empty set is a no-op");
    assert_eq!(c.version(), 1);
}

#[test]
fn protected_configs() {
    let mut c = Config::new();
    c.load_str("enable-protected-configs local").expect("load");
    let tmp = std::env::temp_dir();
    let tmp_text = tmp.to_string_lossy();
    let pair: &[(&[u8], &[u8])] = &[(b"dir", tmp_text.as_bytes())];
    assert!(c.set_many_as(pair, false).is_err());
    c.set_many_as(pair, true).expect("local client may set dir");
    let expected = fs::canonicalize(&tmp).expect("canonical tmp");
    assert_eq!(c.dir(), expected.to_string_lossy());
    let bad: &[(&[u8], &[u8])] = &[(b"dir", b"/nonexistent/dir")];
    assert_eq!(
        c.set_many_as(bad, true).unwrap_err(),
        "ERR CONFIG SET failed (possibly related to argument 'dir') - No such file or directory"
    );
    let path: &[(&[u8], &[u8])] = &[(b"dbfilename", b"a/b.rdb")];
    assert_eq!(
        c.set_many_as(path, true).unwrap_err(),
        "ERR CONFIG SET failed (possibly related to argument 'dbfilename') - dbfilename can't be a path, just a filename"
    );
}

#[test]
fn bind_handling() {
    let mut c = Config::new();
    c.load_str("bind 127.0.0.1 ::1 -::*").expect("load");
    assert_eq!(get1(&c, "bind"), "127.0.0.1 ::1 -::*");
    c.load_str("bind \"\"").expect("load");
    assert!(c.bind().is_empty());
    let many = vec!["1.1.1.1"; 17].join(" ");
    let err = Config::new().load_str(&format!("bind {many}")).unwrap_err();
    assert!(err.ends_with("Too many bind addresses specified."));
}

#[test]
fn directive_api() {
    let mut c = Config::new();
    c.apply_directive("MAXMEMORY", &args(&["2gb"]))
        .expect("apply");
    assert_eq!(c.maxmemory(), 2 << 30);
    assert_eq!(
        c.apply_directive("nope", &args(&["1"])),
        Err("Bad directive or wrong number of arguments".to_string())
    );
    assert_eq!(
        c.apply_directive("port", &args(&[])),
        Err("wrong number of arguments".to_string())
    );
    assert_eq!(
        c.apply_directive("include", &args(&["a", "b"])),
        Err("Bad directive or wrong number of arguments".to_string())
    );
}

#[test]
fn logfile_must_be_openable() {
    let err = load(&["--logfile", "/nonexistent/dir/tessera.log"]).unwrap_err();
    assert_eq!(
        err,
        "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\nCan't open the log file: No such file or directory"
    );
}

#[test]
fn double_rendering() {
    assert_eq!(render_double(50.0), "50");
    assert_eq!(render_double(99.9), "99.9");
    assert_eq!(render_double(0.0), "0");
    assert_eq!(render_double(99.999_999_9), "100");
    assert_eq!(render_double(12.5), "12.5");
}
