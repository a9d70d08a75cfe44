//! TLS as Redis 7.0 serves it, checked with real TLS clients: redis-cli --tls,
//! openssl s_client, redis-py, and redis-server 7.0.15 as TLS master and replica.
//! The certificates (a CA, a server and a client certificate) are made here with
//! openssl, as Redis's utils/gen-test-certs.sh makes its suite's.

mod common;

use common::{free_port, q, scratch_dir, Server};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A CA and certificates signed by it, in one scratch directory.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// redis-cli's TLS arguments with the client certificate.
    fn cli_args(&self) -> Vec<String> {
        vec![
            "--tls".into(),
            "--cacert".into(),
            self.path("ca.crt"),
            "--cert".into(),
            self.path("client.crt"),
            "--key".into(),
            self.path("client.key"),
        ]
    }

    /// The server side of TLS as `--directive value` arguments.
    fn server_args(&self, tls_port: u16) -> Vec<String> {
        vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            self.path("server.crt"),
            "--tls-key-file".into(),
            self.path("server.key"),
            "--tls-client-cert-file".into(),
            self.path("client.crt"),
            "--tls-client-key-file".into(),
            self.path("client.key"),
            "--tls-ca-cert-file".into(),
            self.path("ca.crt"),
        ]
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl (the tests need the openssl command)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A certificate for `name` with `extensions` (a section of ext.cnf), signed by
/// the CA; `cn` is its subject's common name.
fn sign(dir: &Path, name: &str, cn: &str, extensions: &str) {
    openssl(dir, &["genrsa", "-out", &format!("{name}.key"), "2048"]);
    let subject = format!("/O=Tessera Test/CN={cn}");
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-sha256",
            "-subj",
            &subject,
            "-key",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-sha256",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "30",
            "-extfile",
            "ext.cnf",
            "-extensions",
            extensions,
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

fn make_certs(test: &str) -> Certs {
    let dir = scratch_dir("tls", test);
    std::fs::write(
        dir.join("ext.cnf"),
        "[server]\nkeyUsage = digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\n\
         subjectAltName = IP:127.0.0.1, DNS:localhost\n\
         [client]\nkeyUsage = digitalSignature, keyEncipherment\nextendedKeyUsage = clientAuth\n",
    )
    .expect("ext.cnf");
    openssl(&dir, &["genrsa", "-out", "ca.key", "2048"]);
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-sha256",
            "-key",
            "ca.key",
            "-days",
            "30",
            "-subj",
            "/O=Tessera Test/CN=Test CA",
            "-out",
            "ca.crt",
        ],
    );
    sign(&dir, "server", "Server One", "server");
    sign(&dir, "client", "Client", "client");
    Certs { dir }
}

/// redis-cli on `port` with `args` then the command: (success, stdout + stderr).
fn cli(port: u16, args: &[String], cmd: &[&str]) -> (bool, String) {
    cli_with_input(port, args, cmd, None)
}

/// `cli` with `input` on redis-cli's stdin (`-x`: its last argument).
fn cli_with_input(
    port: u16,
    args: &[String],
    cmd: &[&str],
    input: Option<&[u8]>,
) -> (bool, String) {
    let mut child = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .args(input.map(|_| "-x"))
        .args(cmd)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-cli");
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(bytes).expect("redis-cli stdin");
    }
    let out = child.wait_with_output().expect("redis-cli");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.success() && !text.contains("Error"),
        text.trim().to_string(),
    )
}

fn pong(port: u16, args: &[String]) -> bool {
    let (ok, text) = cli(port, args, &["PING"]);
    ok && text == "PONG"
}

/// `openssl s_client` sends PING on `port` with extra options: its whole output
/// (the certificate subject, protocol and cipher, and the reply).
fn s_client(certs: &Certs, port: u16, extra: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-CAfile",
        ])
        .arg(certs.path("ca.crt"))
        .args([
            "-cert",
            &certs.path("client.crt"),
            "-key",
            &certs.path("client.key"),
        ])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    let mut stdin = child.stdin.take().expect("stdin");
    let _ = stdin.write_all(b"PING\r\n");
    std::thread::sleep(Duration::from_millis(500));
    drop(stdin);
    let out = child.wait_with_output().expect("s_client output");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn start_tls(certs: &Certs, extra: &[&str]) -> (Server, u16) {
    let tls_port = free_port();
    let mut args: Vec<String> = certs.server_args(tls_port);
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let log = certs.dir.join("server.log");
    (Server::start_logged_with(2, &refs, &log), tls_port)
}

fn server_log(certs: &Certs) -> String {
    std::fs::read_to_string(certs.dir.join("server.log")).unwrap_or_default()
}

#[test]
fn tls_clients_mutual_auth_and_plaintext_side_by_side() {
    let certs = make_certs("clients");
    let (server, tls_port) = start_tls(&certs, &[]);
    let with_cert = certs.cli_args();
    let without_cert: Vec<String> = with_cert[..3].to_vec();
    // Mutual TLS required (tls-auth-clients yes, the default).
    assert!(pong(tls_port, &with_cert));
    assert!(
        !pong(tls_port, &without_cert),
        "a client without a certificate got in"
    );
    // Redis's log line for the refused handshake: the client may see the refusal
    // before the shard has written the line (a loaded CI machine did).
    let logged = common::eventually(Duration::from_secs(5), || {
        server_log(&certs).contains("# Error accepting a client connection: ")
    });
    assert!(logged, "{}", server_log(&certs));
    // Plaintext on the plaintext port; not on the TLS port.
    assert!(pong(server.port, &[]));
    assert!(!pong(tls_port, &[]), "plaintext was served on the TLS port");
    // A big value both ways through TLS (sends the socket cannot take at once).
    let value = "v".repeat(3 << 20);
    let (ok, _) = cli_with_input(
        tls_port,
        &with_cert,
        &["SET", "big"],
        Some(value.as_bytes()),
    );
    assert!(ok);
    let (ok, got) = cli(tls_port, &with_cert, &["STRLEN", "big"]);
    assert!(ok);
    assert_eq!(got, (3 << 20).to_string());
    let (_, got) = cli(tls_port, &with_cert, &["GET", "big"]);
    assert_eq!(got.len(), 3 << 20);
    let mut c = server.client();
    assert_eq!(q::<usize>(&mut c, &["STRLEN", "big"]), 3 << 20);
    // tls-auth-clients at run time: no, optional, yes.
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-auth-clients", "no"]),
        "OK"
    );
    assert!(pong(tls_port, &without_cert));
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-auth-clients", "optional"]),
        "OK"
    );
    assert!(pong(tls_port, &without_cert));
    assert!(pong(tls_port, &with_cert));
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-auth-clients", "yes"]),
        "OK"
    );
    assert!(!pong(tls_port, &without_cert));
    // A client certificate from another CA is refused.
    let other = make_certs("other-ca");
    let foreign = vec![
        "--tls".into(),
        "--cacert".into(),
        certs.path("ca.crt"),
        "--cert".into(),
        other.path("client.crt"),
        "--key".into(),
        other.path("client.key"),
    ];
    assert!(!pong(tls_port, &foreign));
}

#[test]
fn protocols_ciphers_and_session_settings_take_effect() {
    let certs = make_certs("protocols");
    let (server, tls_port) = start_tls(&certs, &[]);
    let mut c = server.client();
    let tls13 = s_client(&certs, tls_port, &["-tls1_3"]);
    assert!(tls13.contains("+PONG"), "{tls13}");
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-protocols", "TLSv1.2"]),
        "OK"
    );
    let refused = s_client(&certs, tls_port, &["-tls1_3"]);
    assert!(
        !refused.contains("+PONG"),
        "TLSv1.3 still served: {refused}"
    );
    let tls12 = s_client(&certs, tls_port, &["-tls1_2"]);
    assert!(
        tls12.contains("+PONG") && tls12.contains("TLSv1.2"),
        "{tls12}"
    );
    // tls-ciphers (TLSv1.2): only the suites it selects.
    let only = "ECDHE-RSA-CHACHA20-POLY1305";
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-ciphers", only]),
        "OK"
    );
    let chacha = s_client(&certs, tls_port, &["-tls1_2"]);
    assert!(
        chacha.contains(only) && chacha.contains("+PONG"),
        "{chacha}"
    );
    let gcm = s_client(
        &certs,
        tls_port,
        &["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"],
    );
    assert!(!gcm.contains("+PONG"), "{gcm}");
    // A list that selects nothing rustls has, and a protocol it lacks, are refused
    // with Redis's error, and the running settings stay.
    for (name, value) in [
        ("tls-ciphers", "-ALL:AES128-SHA256"),
        ("tls-protocols", "TLSv1.1"),
        ("tls-ciphersuites", "TLS_AES_128_CCM_SHA256"),
    ] {
        let e = common::err(&mut c, &["CONFIG", "SET", name, value]);
        assert!(
            e.ends_with(&format!("CONFIG SET failed (possibly related to argument '{name}') - Unable to update TLS configuration. Check server logs.")),
            "{e}"
        );
    }
    assert_eq!(
        q::<Vec<String>>(&mut c, &["CONFIG", "GET", "tls-ciphers"]),
        ["tls-ciphers", only]
    );
    assert!(s_client(&certs, tls_port, &["-tls1_2"]).contains("+PONG"));
    // tls-ciphersuites (TLSv1.3).
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-protocols", ""]),
        "OK"
    );
    assert_eq!(
        q::<String>(
            &mut c,
            &[
                "CONFIG",
                "SET",
                "tls-ciphersuites",
                "TLS_CHACHA20_POLY1305_SHA256"
            ]
        ),
        "OK"
    );
    let suite = s_client(&certs, tls_port, &["-tls1_3"]);
    assert!(
        suite.contains("TLS_CHACHA20_POLY1305_SHA256") && suite.contains("+PONG"),
        "{suite}"
    );
    // Session resumption: a second handshake with the first one's session resumes
    // it while caching is on, and does not once it is off.
    let session = certs.path("session.pem");
    let first = s_client(&certs, tls_port, &["-tls1_2", "-sess_out", &session]);
    assert!(first.contains("+PONG"), "{first}");
    let again = s_client(&certs, tls_port, &["-tls1_2", "-sess_in", &session]);
    assert!(again.contains("Reused, "), "no resumption: {again}");
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-session-caching", "no"]),
        "OK"
    );
    let first = s_client(&certs, tls_port, &["-tls1_2", "-sess_out", &session]);
    assert!(first.contains("+PONG"));
    let again = s_client(&certs, tls_port, &["-tls1_2", "-sess_in", &session]);
    assert!(
        again.contains("New, ") && !again.contains("Reused, "),
        "resumed: {again}"
    );
}

#[test]
fn certificates_reload_on_config_set_and_encrypted_keys_need_their_password() {
    let certs = make_certs("reload");
    let (server, tls_port) = start_tls(&certs, &[]);
    let mut c = server.client();
    assert!(s_client(&certs, tls_port, &[]).contains("CN = Server One"));
    // A renewed certificate under the same path is read again by CONFIG SET.
    sign(&certs.dir, "server", "Server Two", "server");
    let path = certs.path("server.crt");
    assert!(s_client(&certs, tls_port, &[]).contains("CN = Server One"));
    assert_eq!(
        q::<String>(
            &mut c,
            &[
                "CONFIG",
                "SET",
                "tls-cert-file",
                &path,
                "tls-key-file",
                &certs.path("server.key")
            ]
        ),
        "OK"
    );
    let renewed = s_client(&certs, tls_port, &[]);
    assert!(
        renewed.contains("CN = Server Two") && renewed.contains("+PONG"),
        "{renewed}"
    );
    // Redis's test: an encrypted key fails without its password, works with it.
    let encrypted = certs.path("server.key.encrypted");
    openssl(
        &certs.dir,
        &[
            "rsa",
            "-in",
            "server.key",
            "-out",
            "server.key.encrypted",
            "-aes256",
            "-passout",
            "pass:1234",
        ],
    );
    let e = common::err(&mut c, &["CONFIG", "SET", "tls-key-file", &encrypted]);
    assert!(e.contains("Unable to update TLS"), "{e}");
    assert_eq!(
        q::<Vec<String>>(&mut c, &["CONFIG", "GET", "tls-key-file"]),
        ["tls-key-file".to_string(), certs.path("server.key")]
    );
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-key-file-pass", "1234"]),
        "OK"
    );
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-key-file", &encrypted]),
        "OK"
    );
    assert!(pong(tls_port, &certs.cli_args()));
    // The password never shows in CONFIG GET's neighbours: it is redacted in SLOWLOG.
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        "OK"
    );
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-key-file-pass", "1234"]),
        "OK"
    );
    let log: Vec<redis::Value> = q(&mut c, &["SLOWLOG", "GET", "1"]);
    assert!(!format!("{log:?}").contains("1234"), "{log:?}");
}

#[test]
fn start_up_refuses_what_cannot_work() {
    let certs = make_certs("startup");
    let dir = scratch_dir("tls", "startup-run");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args([
                "--port",
                &free_port().to_string(),
                "--dir",
                &dir.display().to_string(),
            ])
            .args(args)
            .output()
            .expect("run tessera");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let port = free_port().to_string();
    let (ok, log) = run(&["--tls-port", &port]);
    assert!(!ok);
    assert!(log.contains("No tls-cert-file configured!"), "{log}");
    assert!(
        log.contains("Failed to configure TLS. Check logs for more info."),
        "{log}"
    );
    let cert = certs.path("server.crt");
    let key = certs.path("server.key");
    let (ok, log) = run(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
    ]);
    assert!(!ok);
    assert!(
        log.contains("Either tls-ca-cert-file or tls-ca-cert-dir must be specified"),
        "{log}"
    );
    let (ok, log) = run(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &key,
        "--tls-key-file",
        &key,
        "--tls-auth-clients",
        "no",
    ]);
    assert!(!ok);
    assert!(log.contains("Failed to load certificate"), "{log}");
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["--port", &port, "--tls-dh-params-file", "/nonexistent"])
        .output()
        .expect("run tessera");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ECDHE key exchange only"));
    // A key that is not the certificate's: OpenSSL's words.
    let (ok, log) = run(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &certs.path("client.key"),
        "--tls-auth-clients",
        "no",
    ]);
    assert!(!ok);
    assert!(log.contains("key values mismatch"), "{log}");
    // An X.509 v1 server certificate (what `openssl x509 -req` makes without
    // extensions, as Redis's gen-test-certs.sh does for redis.crt) serves.
    openssl(&certs.dir, &["genrsa", "-out", "v1.key", "2048"]);
    openssl(
        &certs.dir,
        &[
            "req", "-new", "-subj", "/CN=v1", "-key", "v1.key", "-out", "v1.csr",
        ],
    );
    openssl(
        &certs.dir,
        &[
            "x509", "-req", "-in", "v1.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-days", "30",
            "-out", "v1.crt",
        ],
    );
    let tls_port = free_port();
    let (v1_cert, v1_key) = (certs.path("v1.crt"), certs.path("v1.key"));
    let server = Server::start_with(
        1,
        &[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &v1_cert,
            "--tls-key-file",
            &v1_key,
            "--tls-auth-clients",
            "no",
        ],
    );
    assert!(pong(tls_port, &certs.cli_args()[..3]));
    // Plaintext on the TLS port gets the connection closed, no bytes (an alert
    // would read as a reply): redis-cli reports the closed connection.
    let (ok, text) = cli(tls_port, &[], &["PING"]);
    assert!(
        !ok && text.contains("Server closed the connection"),
        "{text}"
    );
    drop(server);
    // CA from a directory (OpenSSL's hashed-directory layout holds plain PEM files).
    let ca_dir = certs.dir.join("cadir");
    std::fs::create_dir_all(&ca_dir).expect("ca dir");
    std::fs::copy(certs.dir.join("ca.crt"), ca_dir.join("5d1b2c3a.0")).expect("copy ca");
    let tls_port = free_port();
    let ca_dir_text = ca_dir.display().to_string();
    let server = Server::start_with(
        1,
        &[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-dir",
            &ca_dir_text,
        ],
    );
    assert!(pong(tls_port, &certs.cli_args()));
    drop(server);
    // Only a TLS port, and nothing to listen on at all.
    let tls_port = free_port();
    let mut only = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["--port", "0", "--dir", &dir.display().to_string()])
        .args(certs.server_args(tls_port))
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pong(tls_port, &certs.cli_args()) {
        assert!(Instant::now() < deadline, "TLS-only server did not serve");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = only.kill();
    let _ = only.wait();
    let (ok, log) = run(&["--port", "0"]);
    assert!(!ok);
    assert!(
        log.contains("Configured to not listen anywhere, exiting."),
        "{log}"
    );
}

#[test]
fn redis_py_over_tls() {
    let certs = make_certs("redis-py");
    let (_server, tls_port) = start_tls(&certs, &[]);
    let script = format!(
        r#"
import redis, ssl
r = redis.Redis(host="127.0.0.1", port={port}, ssl=True, ssl_ca_certs="{ca}",
                ssl_certfile="{crt}", ssl_keyfile="{key}")
assert r.ping()
r.set("k", "x" * 200000)
assert len(r.get("k")) == 200000
p = r.pipeline()
for i in range(5000):
    p.incr("n")
assert p.execute()[-1] == 5000
try:
    redis.Redis(host="127.0.0.1", port={port}, ssl=True, ssl_ca_certs="{ca}").ping()
    print("no client certificate was accepted")
except redis.exceptions.ConnectionError:
    print("ok")
"#,
        port = tls_port,
        ca = certs.path("ca.crt"),
        crt = certs.path("client.crt"),
        key = certs.path("client.key"),
    );
    let out = Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .output()
        .expect("python3 with redis-py");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.trim() == "ok", "{text}");
}

/// `DEBUG DIGEST` over TLS.
fn digest(port: u16, certs: &Certs) -> String {
    cli(port, &certs.cli_args(), &["DEBUG", "DIGEST"]).1
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn replication_over_tls_with_redis_server_both_ways() {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("redis-server not installed: skipped");
        return;
    }
    let certs = make_certs("replication");
    let debug = ["--enable-debug-command", "yes", "--tls-replication", "yes"];
    let (master, master_tls) = start_tls(&certs, &debug);
    let mut m = master.client();
    assert_eq!(
        q::<String>(&mut m, &["DEBUG", "POPULATE", "50000", "key", "64"]),
        "OK"
    );
    // redis-server replicas of the Tessera master: diskless (the default), then
    // disk-based, both through the master's TLS session.
    let mut replicas = Vec::new();
    for diskless in ["yes", "no"] {
        assert_eq!(
            q::<String>(&mut m, &["CONFIG", "SET", "repl-diskless-sync", diskless]),
            "OK"
        );
        let port = free_port();
        let child = redis_server_tls(
            &certs,
            port,
            &format!("replica-{diskless}"),
            &[
                "--repl-diskless-sync-delay",
                "0",
                "--replicaof",
                "127.0.0.1",
                &master_tls.to_string(),
            ],
        );
        replicas.push(child);
        wait_for("the redis-server replica's sync", || {
            cli(port, &certs.cli_args(), &["INFO", "replication"])
                .1
                .contains("master_link_status:up")
        });
        wait_for("the replica's dataset", || {
            digest(port, &certs) == digest(master_tls, &certs)
        });
        assert_eq!(
            q::<String>(&mut m, &["SET", &format!("after-{diskless}"), "1"]),
            "OK"
        );
        wait_for("the stream", || {
            cli(
                port,
                &certs.cli_args(),
                &["GET", &format!("after-{diskless}")],
            )
            .1 == "1"
        });
    }
    // A Tessera replica of a redis-server TLS master.
    let rport = free_port();
    let redis_master = redis_server_tls(&certs, rport, "redis-master", &[]);
    wait_for("redis-server over TLS", || pong(rport, &certs.cli_args()));
    cli(
        rport,
        &certs.cli_args(),
        &["DEBUG", "POPULATE", "30000", "theirs", "32"],
    );
    let (replica, replica_tls) = start_tls(&certs, &debug);
    let mut r = replica.client();
    assert_eq!(
        q::<String>(&mut r, &["REPLICAOF", "127.0.0.1", &rport.to_string()]),
        "OK"
    );
    wait_for("Tessera's sync from redis-server", || {
        digest(replica_tls, &certs) == digest(rport, &certs)
    });
    cli(rport, &certs.cli_args(), &["SET", "later", "v"]);
    wait_for("the stream from redis-server", || {
        q::<Option<String>>(&mut r, &["GET", "later"]).as_deref() == Some("v")
    });
    drop(redis_master);
}

/// redis-server with TLS only (port 0, `tls-port`), tls-replication on, DEBUG on,
/// in a scratch directory named `name`, plus `extra` arguments.
fn redis_server_tls(certs: &Certs, tls_port: u16, name: &str, extra: &[&str]) -> Killed {
    let dir = scratch_dir("tls", name);
    let mut args: Vec<String> = ["--port", "0", "--save", "", "--enable-debug-command", "yes"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--dir".to_string(), dir.display().to_string()]);
    args.extend(["--tls-replication".to_string(), "yes".into()]);
    args.extend(certs.server_args(tls_port));
    args.extend(extra.iter().map(|s| s.to_string()));
    Killed(
        Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server"),
    )
}

/// A child process killed when the test lets go of it.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn switch_between_plaintext_and_tls_ports_at_run_time() {
    let certs = make_certs("switch");
    let server = Server::start_with(2, &[]);
    let plain = server.port;
    let mut c = server.client();
    let tls_port = free_port().to_string();
    // TLS configured and its port opened in one CONFIG SET (Redis's applyTLSPort).
    let (cert, key, ca) = (
        certs.path("server.crt"),
        certs.path("server.key"),
        certs.path("ca.crt"),
    );
    assert_eq!(
        q::<String>(
            &mut c,
            &[
                "CONFIG",
                "SET",
                "tls-cert-file",
                &cert,
                "tls-key-file",
                &key,
                "tls-ca-cert-file",
                &ca,
                "tls-port",
                &tls_port
            ]
        ),
        "OK"
    );
    let tls_port: u16 = tls_port.parse().expect("port");
    assert!(pong(tls_port, &certs.cli_args()));
    // Redis's test, on a connection that outlives the listeners: the plaintext
    // port closed, TLS moved onto it, then back.
    assert_eq!(q::<String>(&mut c, &["CONFIG", "SET", "port", "0"]), "OK");
    assert!(!pong(plain, &[]));
    let plain_text = plain.to_string();
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-port", &plain_text]),
        "OK"
    );
    assert!(pong(plain, &certs.cli_args()));
    assert!(!pong(tls_port, &certs.cli_args()));
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "tls-port", "0"]),
        "OK"
    );
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "port", &plain_text]),
        "OK"
    );
    assert!(pong(plain, &[]));
}

/// A CONFIG SET refused while it is applied leaves every parameter it named as it
/// was, on every shard, as Redis restores them. `tls-cluster yes` on a cluster node
/// passes the TLS checks here (the certificates load) and is then refused, since the
/// bus has no TLS. The shard that took the command used to keep the new values.
#[test]
fn refused_config_set_changes_nothing() {
    let certs = make_certs("refused-config-set");
    let bus_port = free_port().to_string();
    let nodes_conf = certs.path("nodes.conf");
    let (s, _) = start_tls(
        &certs,
        &[
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &bus_port,
            "--cluster-config-file",
            &nodes_conf,
        ],
    );
    // New connections land on either shard.
    for _ in 0..6 {
        let mut c = s.client();
        let refused = redis::cmd("CONFIG")
            .arg(&["SET", "loglevel", "warning", "tls-cluster", "yes"])
            .query::<()>(&mut c)
            .expect_err("tls-cluster yes is refused")
            .to_string();
        assert!(
            refused.contains("CONFIG SET failed - tls-cluster yes is not supported yet"),
            "{refused}"
        );
        for (name, value) in [("tls-cluster", "no"), ("loglevel", "notice")] {
            let got: Vec<String> = q(&mut c, &["CONFIG", "GET", name]);
            assert_eq!(got, [name, value]);
        }
    }
}
