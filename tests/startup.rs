//! Starting, logging and stopping as redis-server does: what Redis's test framework,
//! supervisors and operators' scripts wait for and grep. Black-box: the real binary
//! started with a config file in the style of Redis's tests/assets/default.conf, its
//! stdout read as the framework reads it, and refused directives compared with a
//! real redis-server's output.

mod common;
use common::free_port;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-startup-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The directives of Redis's tests/assets/default.conf (with `dir`, `pidfile` and
/// `unixsocket` inside `dir`), plus `extra` lines.
fn default_conf(dir: &Path, port: u16, extra: &str) -> String {
    format!(
        "always-show-logo yes\n\
         notify-keyspace-events KEA\n\
         daemonize no\n\
         pidfile {dir}/redis.pid\n\
         port {port}\n\
         timeout 0\n\
         bind 127.0.0.1\n\
         loglevel verbose\n\
         logfile ''\n\
         databases 16\n\
         latency-monitor-threshold 1\n\
         repl-diskless-sync-delay 0\n\
         save 900 1\n\
         rdbcompression yes\n\
         dbfilename dump.rdb\n\
         dir ./\n\
         slave-serve-stale-data yes\n\
         appendonly no\n\
         appendfsync everysec\n\
         no-appendfsync-on-rewrite no\n\
         activerehashing yes\n\
         enable-protected-configs yes\n\
         enable-debug-command yes\n\
         enable-module-command yes\n\
         propagation-error-behavior panic\n\
         unixsocket {dir}/socket\n\
         threads 2\n\
         {extra}",
        dir = dir.display()
    )
}

/// Starts tessera in `dir` with the config file given by a path relative to the cwd
/// (as the framework does); stdout and stderr go to files in `dir`.
fn spawn_in(dir: &Path, conf_name: &str, args: &[&str]) -> Child {
    let stdout = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("stdout"))
        .expect("stdout file");
    let stderr = std::fs::File::create(dir.join("stderr")).expect("stderr file");
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(dir)
        .arg(conf_name)
        .args(args)
        .stdout(stdout)
        .stderr(stderr)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn tessera")
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// Waits until `file` in `dir` contains `needle` `count` times (or `child` exits).
fn wait_for_lines(dir: &Path, child: &mut Child, needle: &str, count: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = read(dir, "stdout");
        if text.matches(needle).count() >= count {
            return text;
        }
        let exited = matches!(child.try_wait(), Ok(Some(_)));
        if exited || Instant::now() > deadline {
            panic!(
                "no {count}x {needle:?} in stdout:\n{text}\nstderr:\n{}",
                read(dir, "stderr")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The framework's liveness probe: an inline PING (with a stray `\n` after it).
fn inline_ping(stream: &mut impl ReadWrite) -> String {
    stream.write_all(b"PING\r\n\n").expect("write");
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf).expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn stop(child: &mut Child) -> Duration {
    let started = Instant::now();
    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = started + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return started.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("tessera did not exit within 10 s of SIGTERM");
}

/// `<pid>:<role> <dd Mon yyyy HH:MM:SS.mmm> <level> <message>`.
fn is_redis_log_line(line: &str, pid: u32) -> bool {
    let Some(rest) = line.strip_prefix(&format!("{pid}:")) else {
        return false;
    };
    let b = rest.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    b.len() > 28
        && matches!(b[0], b'C' | b'M' | b'S')
        && b[1] == b' '
        && digits(2..4)
        && b[4] == b' '
        && b[5].is_ascii_uppercase()
        && b[6].is_ascii_lowercase()
        && b[7].is_ascii_lowercase()
        && b[8] == b' '
        && digits(9..13)
        && b[13] == b' '
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b':'
        && digits(20..22)
        && b[22] == b'.'
        && digits(23..26)
        && b[26] == b' '
        && matches!(b[27], b'.' | b'-' | b'*' | b'#')
        && b[28] == b' '
}

#[test]
fn starts_logs_and_stops_as_redis_server() {
    let dir = scratch_dir("lifecycle");
    let port = free_port();
    std::fs::write(dir.join("redis.conf"), default_conf(&dir, port, "")).expect("conf");
    let mut child = spawn_in(&dir, "redis.conf", &[]);
    let pid = child.id();

    // The handshake: the PID line, then one "Ready to accept" line.
    wait_for_lines(&dir, &mut child, &format!(" PID: {pid}"), 1);
    let text = wait_for_lines(&dir, &mut child, "Ready to accept", 1);
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    assert_eq!(inline_ping(&mut tcp), "+PONG\r\n");
    let mut unix = UnixStream::connect(dir.join("socket")).expect("unix socket");
    assert_eq!(inline_ping(&mut unix), "+PONG\r\n");
    unix.write_all(b"CLIENT INFO\r\n").expect("write");
    let mut buf = [0u8; 512];
    let n = unix.read(&mut buf).expect("read");
    let info = String::from_utf8_lossy(&buf[..n]);
    assert!(
        info.contains(&format!("addr={}/socket:0", dir.display())),
        "{info}"
    );
    assert!(info.contains("flags=U"), "{info}");
    tcp.write_all(b"SELECT 15\r\n").expect("write");
    let n = tcp.read(&mut buf).expect("read");
    assert_eq!(&buf[..n], b"+OK\r\n");

    // Every line outside the banner has Redis's prefix; the first ones are logged
    // as C (before the role is known), then as M.
    let logged: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{pid}:")))
        .collect();
    assert!(logged.len() >= 5, "{text}");
    for line in &logged {
        assert!(
            is_redis_log_line(line, pid),
            "not in Redis's format: {line:?}"
        );
    }
    assert!(logged[0].starts_with(&format!("{pid}:C ")), "{text}");
    assert!(text.contains(&format!("{pid}:M ")), "{text}");
    assert!(text.contains("* Ready to accept connections\n"), "{text}");
    assert!(text.contains(&format!("Port: {port}")), "{text}");
    assert_eq!(
        read(&dir, "redis.pid"),
        format!("{pid}\n"),
        "pidfile holds the pid"
    );
    let title = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    let title = String::from_utf8_lossy(&title);
    assert!(
        title.contains(&format!("127.0.0.1:{port}")),
        "proc title {title:?}"
    );

    // A second server on the same port says the line the framework retries on.
    let second = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(&dir)
        .arg("redis.conf")
        .args(["--pidfile", "", "--unixsocket", ""])
        .output()
        .expect("run second tessera");
    assert!(!second.status.success());
    let out = String::from_utf8_lossy(&second.stdout);
    assert!(
        out.contains(&format!("Failed listening on port {port} (TCP), aborting.")),
        "{out}"
    );

    // SIGTERM: gone within 10 s, with Redis's last line, files removed.
    let took = stop(&mut child);
    assert!(took < Duration::from_secs(10));
    let text = read(&dir, "stdout");
    assert!(
        text.contains("Received SIGTERM scheduling shutdown..."),
        "{text}"
    );
    assert!(
        text.contains("# Redis is now ready to exit, bye bye...\n"),
        "{text}"
    );
    assert!(!dir.join("redis.pid").exists(), "pidfile removed");
    assert!(!dir.join("socket").exists(), "socket removed");
    let stderr = read(&dir, "stderr");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // A restart appends one more "Ready to accept" line to the same stdout.
    let mut child = spawn_in(&dir, "redis.conf", &[]);
    wait_for_lines(&dir, &mut child, "Ready to accept", 2);
    stop(&mut child);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn logfile_and_loglevel_are_honoured() {
    let dir = scratch_dir("logfile");
    let port = free_port();
    let conf = default_conf(
        &dir,
        port,
        "logfile server.log\nloglevel warning\nalways-show-logo no\n",
    );
    std::fs::write(dir.join("redis.conf"), conf).expect("conf");
    let mut child = spawn_in(&dir, "redis.conf", &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "did not start: {}",
            read(&dir, "server.log")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Warnings only: "Server initialized" (#) is there, notices (*) are not.
    let log = read(&dir, "server.log");
    assert!(log.contains("# Server initialized"), "{log}");
    assert!(!log.contains(" * "), "{log}");
    assert_eq!(read(&dir, "stdout"), "", "nothing on stdout with a logfile");
    // CONFIG SET loglevel takes effect at once.
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.write_all(b"CONFIG SET loglevel notice\r\n")
        .expect("write");
    let mut buf = [0u8; 64];
    let n = c.read(&mut buf).expect("read");
    assert_eq!(&buf[..n], b"+OK\r\n");
    stop(&mut child);
    let log = read(&dir, "server.log");
    assert!(log.contains("* Removing the pid file."), "{log}");
    assert!(
        log.contains("# Redis is now ready to exit, bye bye..."),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn run_server(program: &str, dir: &Path, args: &[&str]) -> Option<Output> {
    Command::new(program)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()
}

/// The FATAL CONFIG FILE ERROR report, from the line that starts it.
fn fatal_report(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr);
    match text.find("*** FATAL") {
        Some(i) => text[i..].to_string(),
        None => text.into_owned(),
    }
}

/// Directives and arguments both servers refuse: the report is the same text, byte
/// for byte (unit/introspection matches on it).
#[test]
fn refused_directives_read_as_redis_server_writes_them() {
    let dir = scratch_dir("refused");
    let cases: &[(&str, &[&str])] = &[
        ("port 99999\n", &[]),
        ("nosuchdirective yes\n", &[]),
        ("loglevel loud\n", &[]),
        ("save 100\n", &[]),
        ("", &["--port"]),
        ("", &["--port", "6380", "--loglevel"]),
        ("", &["--maxmemory-policy", "wrong"]),
        ("", &["--shutdown-on-sigint", "save", "nosave"]),
        ("", &["--oom-score-adj-values", "1 2"]),
        ("", &["--proc-title-template", "{unknown}"]),
        ("", &["--unixsocketperm", "800"]),
        ("", &["--unixsocketperm", "1000"]),
        ("", &["--oom-score-adj-values", "1 x 3"]),
        ("", &["--daemonize", "maybe"]),
        // A cluster chooses masters itself.
        (
            "cluster-enabled yes\n",
            &["--replicaof", "127.0.0.1", "7304"],
        ),
        // ACL users: checked as the file is read (Redis names the word at the
        // merged rule's index, not the rule: kept).
        ("user alice on bogus\n", &[]),
        ("user alice on ~* ~foo >x\n", &[]),
        ("user alice on >a\nuser alice off\n", &[]),
        ("user alice on #abc\n", &[]),
    ];
    let mut compared = 0;
    for (i, (conf, args)) in cases.iter().enumerate() {
        let name = format!("case{i}.conf");
        std::fs::write(dir.join(&name), conf).expect("conf");
        let mut argv = vec![name.as_str()];
        argv.extend_from_slice(args);
        let ours = run_server(env!("CARGO_BIN_EXE_tessera"), &dir, &argv).expect("run tessera");
        assert!(!ours.status.success(), "case {conf:?} {args:?} started");
        let Some(theirs) = run_server("redis-server", &dir, &argv) else {
            continue;
        };
        assert_eq!(
            fatal_report(&ours),
            fatal_report(&theirs),
            "case {conf:?} {args:?}"
        );
        assert!(String::from_utf8_lossy(&ours.stderr).starts_with("\n*** FATAL"));
        compared += 1;
    }
    if compared == 0 {
        eprintln!("redis-server not installed: refusals checked on Tessera alone");
    }
    // What Tessera cannot honour yet is refused with a reason, never ignored.
    for (conf, reason) in [
        (
            "cluster-link-sendbuf-limit 1mb\n",
            "does not limit cluster bus send buffers",
        ),
        (
            "tls-dh-params-file /etc/dh.pem\n",
            "ECDHE key exchange only",
        ),
        ("daemonize yes\n", "daemonize yes is not supported"),
        (
            "rename-command flushdb badger\n",
            "rename-command is not supported",
        ),
    ] {
        std::fs::write(dir.join("t.conf"), conf).expect("conf");
        let out = run_server(env!("CARGO_BIN_EXE_tessera"), &dir, &["t.conf"]).expect("run");
        assert!(!out.status.success(), "{conf:?} was accepted");
        let report = fatal_report(&out);
        assert!(report.contains(reason), "{conf:?}: {report}");
        assert!(
            report.contains(&format!(">>> '{}'", conf.trim_end())),
            "{report}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Directives from the suite's configs and Redis 7.0 configs that Tessera accepts.
#[test]
fn suite_directives_are_accepted() {
    let dir = scratch_dir("accepted");
    let port = free_port();
    let extra = "oom-score-adj relative\n\
                 oom-score-adj-values \"5 10 20\"\n\
                 crash-memcheck-enabled no\n\
                 use-exit-on-panic yes\n\
                 key-load-delay 0\n\
                 loading-process-events-interval-bytes 1024\n\
                 sanitize-dump-payload yes\n\
                 acl-pubsub-default allchannels\n\
                 aof-load-truncated yes\n\
                 appenddirname appendonlydir\n\
                 syslog-enabled no\n\
                 syslog-ident redis\n\
                 hash-max-ziplist-entries 64\n\
                 zset-max-ziplist-entries 64\n\
                 list-max-ziplist-size -2\n\
                 lua-time-limit 5000\n\
                 unixsocketperm 700\n\
                 proc-title-template \"TEST {title} {port}\"\n\
                 shutdown-on-sigint nosave force now\n";
    std::fs::write(dir.join("redis.conf"), default_conf(&dir, port, extra)).expect("conf");
    let base: i64 = std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let mut child = spawn_in(&dir, "redis.conf", &[]);
    wait_for_lines(&dir, &mut child, "Ready to accept", 1);
    let pid = child.id();
    let score = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).expect("score");
    assert_eq!(score.trim(), (base + 5).clamp(-1000, 1000).to_string());
    let title = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    let title = String::from_utf8_lossy(&title);
    assert!(title.starts_with("TEST "), "{title:?}");
    assert!(title.contains(&port.to_string()), "{title:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("socket"))
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    stop(&mut child);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A crash is reported in the log as Redis reports one (the lines Redis's
/// integration/logging looks for), the pid file goes, and the process ends: of the
/// signal, or with exit code 1 after a panic under `use-exit-on-panic yes`.
#[test]
fn crashes_are_reported_and_end_the_process() {
    let dir = scratch_dir("crash");
    for (how, extra) in [
        ("SIGABRT", ""),
        ("DEBUG SEGFAULT", ""),
        ("DEBUG PANIC", "use-exit-on-panic yes\n"),
    ] {
        let port = free_port();
        let conf = default_conf(&dir, port, &format!("crash-memcheck-enabled no\n{extra}"));
        std::fs::write(dir.join("redis.conf"), conf).expect("conf");
        let _ = std::fs::remove_file(dir.join("stdout"));
        let mut child = spawn_in(&dir, "redis.conf", &[]);
        wait_for_lines(&dir, &mut child, "Ready to accept", 1);
        if how == "SIGABRT" {
            // SAFETY: kill(2) on the pid of a child this test spawned.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGABRT);
            }
        } else {
            let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            c.write_all(format!("{how}\r\n").as_bytes()).expect("write");
            let mut buf = [0u8; 64];
            let _ = c.read(&mut buf);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break status;
            }
            assert!(Instant::now() < deadline, "{how}: still running");
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = read(&dir, "stdout");
        use std::os::unix::process::ExitStatusExt;
        match how {
            "SIGABRT" => {
                assert_eq!(status.signal(), Some(libc::SIGABRT), "{text}");
                assert!(text.contains("crashed by signal: 6"), "{text}");
                assert!(text.contains("------ STACK TRACE ------"), "{text}");
            }
            "DEBUG SEGFAULT" => {
                assert_eq!(status.signal(), Some(libc::SIGSEGV), "{text}");
                assert!(text.contains("crashed by signal: 11"), "{text}");
            }
            _ => {
                assert_eq!(status.code(), Some(1), "{text}");
                assert!(
                    text.contains("Guru Meditation: DEBUG PANIC called"),
                    "{text}"
                );
            }
        }
        assert!(!dir.join("redis.pid").exists(), "{how}: pidfile removed");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn command(port: u16, line: &str) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.write_all(format!("{line}\r\n").as_bytes())
        .expect("write");
    let mut buf = [0u8; 512];
    let n = c.read(&mut buf).expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// CONFIG REWRITE writes the running values into the config file the server was
/// started with (comments and unknown lines kept, aliases folded into one line), and
/// a restart from that file has them.
#[test]
fn config_rewrite_survives_a_restart() {
    let dir = scratch_dir("rewrite");
    let port = free_port();
    let extra = "# a comment the rewrite keeps\nhash-max-ziplist-entries 21\n";
    std::fs::write(dir.join("redis.conf"), default_conf(&dir, port, extra)).expect("conf");
    let mut child = spawn_in(&dir, "redis.conf", &[]);
    wait_for_lines(&dir, &mut child, "Ready to accept", 1);
    for set in [
        "CONFIG SET hash-max-listpack-entries 100",
        "CONFIG SET save \"\"",
        "CONFIG SET maxmemory 200mb",
        "CONFIG SET shutdown-on-sigterm \"nosave now\"",
    ] {
        assert_eq!(command(port, set), "+OK\r\n", "{set}");
    }
    assert_eq!(command(port, "CONFIG REWRITE"), "+OK\r\n");
    stop(&mut child);
    let text = read(&dir, "redis.conf");
    assert!(text.contains("# a comment the rewrite keeps\n"), "{text}");
    assert!(text.contains("hash-max-listpack-entries 100\n"), "{text}");
    assert!(!text.contains("ziplist"), "{text}");
    assert!(text.contains("\nsave \"\"\n"), "{text}");
    let mut child = spawn_in(&dir, "redis.conf", &[]);
    wait_for_lines(&dir, &mut child, "Ready to accept", 2);
    let got = command(port, "CONFIG GET maxmemory");
    assert!(got.contains("209715200"), "{got}");
    let got = command(port, "CONFIG GET save");
    assert_eq!(got, "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
    let got = command(port, "CONFIG GET shutdown-on-sigterm");
    assert!(got.contains("nosave now"), "{got}");
    stop(&mut child);
    // Without a config file there is nothing to rewrite, as in Redis.
    let s_port = free_port();
    let mut bare = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["--port", &s_port.to_string(), "--threads", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", s_port)).is_err() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        command(s_port, "CONFIG REWRITE"),
        "-ERR The server is running without a config file\r\n"
    );
    stop(&mut bare);
    let _ = std::fs::remove_dir_all(&dir);
}
