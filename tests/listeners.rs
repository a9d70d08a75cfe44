//! CONFIG SET port / bind move the listeners at run time, as Redis's
//! changeListenPort and changeBindAddr do, with their errors, and a failed move
//! leaves the server listening where it was.

mod common;

use common::{err, free_port, info_field, q, Server};
use std::net::TcpListener;

fn pong(port: u16) -> bool {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok_and(|p| p == "PONG")
}

#[test]
fn port_and_bind_move_at_run_time() {
    let server = Server::start_with(2, &[]);
    let old = server.port;
    let new = free_port();
    let mut c = server.client();
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "port", &new.to_string()]),
        "OK"
    );
    assert!(!pong(old), "the old port still serves");
    // Every shard serves the new port and reports it (connections spread over them).
    for _ in 0..8 {
        let mut n = redis::Client::open(format!("redis://127.0.0.1:{new}/"))
            .and_then(|c| c.get_connection())
            .expect("connect to the new port");
        assert_eq!(info_field(&mut n, "server", "tcp_port"), new.to_string());
        assert_eq!(
            q::<Vec<String>>(&mut n, &["CONFIG", "GET", "port"]),
            ["port".to_string(), new.to_string()]
        );
    }
    // A port another socket holds: Redis's error, and the server stays put.
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = holder.local_addr().expect("addr").port();
    let e = err(&mut c, &["CONFIG", "SET", "port", &taken.to_string()]);
    assert!(e.contains("Unable to listen on this port"), "{e}");
    assert!(pong(new));
    assert_eq!(
        q::<Vec<String>>(&mut c, &["CONFIG", "GET", "port"])[1],
        new.to_string()
    );
    // Bad bind addresses: Redis's error, the old addresses kept.
    let e = err(&mut c, &["CONFIG", "SET", "bind", "999.999.999.999"]);
    assert!(e.contains("Failed to bind to specified addresses."), "{e}");
    assert!(pong(new));
    assert_eq!(
        q::<Vec<String>>(&mut c, &["CONFIG", "GET", "bind"])[1],
        "* -::*"
    );
    // A new bind list on the same port.
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "bind", "127.0.0.1 -::1"]),
        "OK"
    );
    for _ in 0..6 {
        assert!(pong(new));
    }
    assert_eq!(
        q::<Vec<String>>(&mut c, &["CONFIG", "GET", "bind"])[1],
        "127.0.0.1 -::1"
    );
    drop(holder);
}
