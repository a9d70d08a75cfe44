//! Tessera's cluster bus codec (`tessera::cluster::wire`) against a real
//! redis-server 7.0.15 in cluster mode: a fake node built on the codec meets Redis
//! in both directions, answers its PINGs, and exchanges PUBLISH and UPDATE
//! messages. Redis must accept what the codec writes (it completes the handshake,
//! learns the fake node's slots and hostname, delivers its PUBLISH, applies its
//! UPDATE), and every message Redis sends must decode and encode back to the very
//! same bytes.

mod common;

use common::{eventually, free_cluster_port, q, ReferenceRedis};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera::cluster::wire::{self, Body, Extension, Header, Message, PingBody};
use tessera::cluster::{flags, NodeName};

/// A cluster node made of the codec alone: it answers every PING and MEET with a
/// PONG describing itself, reports each message it receives, and can send more.
struct FakeNode {
    port: u16,
    name: NodeName,
    me: Arc<Mutex<Header>>,
    links: Arc<Mutex<Vec<TcpStream>>>,
    report: Sender<Message>,
    received: Receiver<Message>,
}

const HOSTNAME: &[u8] = b"tessera-fake";

impl FakeNode {
    fn start(slots: std::ops::RangeInclusive<usize>) -> FakeNode {
        let port = free_cluster_port();
        let listener = TcpListener::bind(("127.0.0.1", port + 10000)).expect("bind bus port");
        let name = NodeName::random();
        let mut bitmap = Box::new([0u8; wire::BITMAP_LEN]);
        for slot in slots {
            wire::set_slot(&mut bitmap, slot);
        }
        let me = Arc::new(Mutex::new(Header {
            port,
            current_epoch: 0,
            config_epoch: 0,
            offset: 0,
            sender: name,
            slots: bitmap,
            master: NodeName::NULL,
            ip: [0; wire::IP_LEN],
            pport: 0,
            cport: port + 10000,
            flags: flags::MASTER | flags::MYSELF,
            state: 1,
            mflags: [0; 3],
        }));
        let links = Arc::new(Mutex::new(Vec::new()));
        let (report, received) = channel();
        let tx = report.clone();
        let node = FakeNode {
            port,
            name,
            me,
            links,
            report,
            received,
        };
        let (me, links) = (node.me.clone(), node.links.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                serve_link(stream, me.clone(), links.clone(), tx.clone());
            }
        });
        node
    }

    /// Opens a link to a node's bus port (as a node that learned of it would).
    fn connect(&self, bus_port: u16) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", bus_port)).expect("connect to the bus");
        serve_link(
            stream.try_clone().expect("clone"),
            self.me.clone(),
            self.links.clone(),
            self.report.clone(),
        );
        stream
    }

    /// Sends `body` with this node's header on every open link.
    fn broadcast(&self, body: Body) {
        let mut bytes = Vec::new();
        let header = self.me.lock().expect("header").clone();
        wire::encode(&Message { header, body }, &mut bytes);
        for link in self.links.lock().expect("links").iter_mut() {
            let _ = link.write_all(&bytes);
        }
    }

    /// The next message Redis sends whose body matches `wanted`.
    fn wait_for(&self, what: &str, wanted: impl Fn(&Body) -> bool) -> Message {
        loop {
            match self.received.recv_timeout(Duration::from_secs(10)) {
                Ok(m) if wanted(&m.body) => return m,
                Ok(_) => continue,
                Err(_) => panic!("no {what} from redis-server within 10 s"),
            }
        }
    }
}

/// Reads messages off one link until it closes: each must re-encode to its own
/// bytes; PING and MEET get a PONG.
fn serve_link(
    stream: TcpStream,
    me: Arc<Mutex<Header>>,
    links: Arc<Mutex<Vec<TcpStream>>>,
    report: Sender<Message>,
) {
    let mut writer = stream.try_clone().expect("clone link");
    links
        .lock()
        .expect("links")
        .push(stream.try_clone().expect("clone link"));
    std::thread::spawn(move || {
        let mut reader = stream;
        while let Some(frame) = read_frame(&mut reader) {
            let message = wire::decode(&frame)
                .unwrap_or_else(|e| panic!("redis-server sent a message we refuse: {e}"));
            let mut again = Vec::new();
            wire::encode(&message, &mut again);
            assert_eq!(
                again, frame,
                "re-encoding {:?} changed its bytes",
                message.body
            );
            if matches!(message.body, Body::Ping(_) | Body::Meet(_)) {
                let header = me.lock().expect("header").clone();
                let pong = Body::Pong(PingBody {
                    gossip: vec![],
                    extensions: vec![Extension::Hostname(HOSTNAME.to_vec())],
                });
                let mut bytes = Vec::new();
                wire::encode(&Message { header, body: pong }, &mut bytes);
                if writer.write_all(&bytes).is_err() {
                    return;
                }
            }
            if report.send(message).is_err() {
                return;
            }
        }
    });
}

/// One whole message, framed as Redis's clusterReadHandler does; None at EOF.
fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut frame = vec![0u8; 8];
    stream.read_exact(&mut frame).ok()?;
    let len = wire::frame_len(&frame).expect("redis-server sent a bad frame")?;
    frame.resize(len, 0);
    stream.read_exact(&mut frame[8..]).ok()?;
    Some(frame)
}

fn redis_node(extra: &[&str]) -> Option<ReferenceRedis> {
    let node = ReferenceRedis::start_cluster_node(extra);
    if node.is_none() {
        eprintln!("redis-server is not installed: skipping");
    }
    node
}

/// Redis's CLUSTER NODES line for `name`, once it satisfies `ready`.
fn nodes_line(c: &mut redis::Connection, name: NodeName, ready: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    let found = eventually(Duration::from_secs(15), || {
        let nodes: String = q(c, &["CLUSTER", "NODES"]);
        last = nodes
            .lines()
            .find(|l| l.starts_with(&name.to_string()))
            .unwrap_or("")
            .to_string();
        ready(&last)
    });
    assert!(
        found,
        "redis-server's CLUSTER NODES never showed the fake node ready; last: {last:?}"
    );
    last
}

#[test]
fn redis_meets_a_node_speaking_the_codec() {
    let Some(redis) = redis_node(&["--cluster-announce-hostname", "redis-a"]) else {
        return;
    };
    let mut c = redis.client();
    let _: () = q(&mut c, &["CLUSTER", "ADDSLOTSRANGE", "0", "99"]);
    let redis_id: String = q(&mut c, &["CLUSTER", "MYID"]);
    let fake = FakeNode::start(100..=199);
    let _: () = q(
        &mut c,
        &[
            "CLUSTER",
            "MEET",
            "127.0.0.1",
            &fake.port.to_string(),
            &(fake.port + 10000).to_string(),
        ],
    );

    // What Redis says about itself in its MEET.
    let meet = fake.wait_for("MEET", |b| matches!(b, Body::Meet(_)));
    let h = &meet.header;
    assert_eq!(h.sender.to_string(), redis_id);
    assert_eq!(
        (h.port, h.cport, h.pport),
        (redis.port, redis.port + 10000, 0)
    );
    assert_eq!(h.flags, flags::MASTER | flags::MYSELF);
    assert!(h.master.is_null());
    assert_eq!(wire::ip_text(&h.ip), "");
    assert!((0..16384).all(|s| wire::slot_is_set(&h.slots, s) == (s < 100)));
    let Body::Meet(body) = &meet.body else {
        unreachable!()
    };
    assert_eq!(
        body.extensions,
        vec![Extension::Hostname(b"redis-a".to_vec())]
    );

    // Redis takes our PONG: the handshake completes under our name, and the next
    // PONGs teach it our slots and hostname.
    let line = nodes_line(&mut c, fake.name, |l| {
        l.contains("100-199") && !l.contains("handshake")
    });
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(
        fields[1],
        format!("127.0.0.1:{}@{},tessera-fake", fake.port, fake.port + 10000)
    );
    assert_eq!(fields[2], "master");
    assert_eq!(fields[3], "-");
    assert_eq!(fields[7], "connected");
    assert_eq!(&fields[8..], ["100-199"]);
    let ping = fake.wait_for("PING", |b| matches!(b, Body::Ping(_)));
    assert_eq!(ping.header.sender.to_string(), redis_id);

    // PUBLISH from Redis reaches us over the bus...
    let _: i64 = q(&mut c, &["PUBLISH", "news", "from redis"]);
    let published = fake.wait_for("PUBLISH", |b| matches!(b, Body::Publish { .. }));
    assert_eq!(
        published.body,
        Body::Publish {
            channel: b"news".to_vec(),
            message: b"from redis".to_vec()
        }
    );

    // ...and ours reaches Redis's subscribers.
    let mut sub = redis.client();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe("fromfake").expect("subscribe");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    fake.broadcast(Body::Publish {
        channel: b"fromfake".to_vec(),
        message: b"hello redis".to_vec(),
    });
    let msg = pubsub.get_message().expect("message from the fake node");
    assert_eq!(msg.get_channel_name(), "fromfake");
    assert_eq!(msg.get_payload::<String>().expect("payload"), "hello redis");
    drop(pubsub);

    // An UPDATE with a newer config epoch moves Redis's slots 0-49 to us.
    let mut slots = fake.me.lock().unwrap().slots.clone();
    for slot in 0..50 {
        wire::set_slot(&mut slots, slot);
    }
    {
        let mut me = fake.me.lock().unwrap();
        me.slots = slots.clone();
        me.config_epoch = 100;
        me.current_epoch = 100;
    }
    fake.broadcast(Body::Update {
        config_epoch: 100,
        node: fake.name,
        slots,
    });
    let line = nodes_line(&mut c, fake.name, |l| l.ends_with(" 0-49 100-199"));
    assert_eq!(line.split(' ').nth(6), Some("100"));
    let redis_line = nodes_line(&mut c, NodeName::parse(redis_id.as_bytes()).unwrap(), |l| {
        l.ends_with(" 50-99")
    });
    assert!(redis_line.contains("myself,master"));
}

#[test]
fn redis_accepts_a_meet_written_by_the_codec() {
    let Some(redis) = redis_node(&[]) else {
        return;
    };
    let fake = FakeNode::start(1000..=1000);
    let mut c = redis.client();
    let redis_id: String = q(&mut c, &["CLUSTER", "MYID"]);

    let _link = fake.connect(redis.port + 10000);
    fake.broadcast(Body::Meet(PingBody {
        gossip: vec![],
        extensions: vec![Extension::Hostname(HOSTNAME.to_vec())],
    }));

    // Redis answers the MEET on the same link...
    let pong = fake.wait_for("PONG to our MEET", |b| matches!(b, Body::Pong(_)));
    assert_eq!(pong.header.sender.to_string(), redis_id);
    // ...then connects to our bus port and pings; our PONG completes the handshake.
    fake.wait_for("PING on Redis's own link", |b| matches!(b, Body::Ping(_)));
    let line = nodes_line(&mut c, fake.name, |l| {
        l.contains(" 1000") && !l.contains("handshake")
    });
    assert!(
        line.contains(&format!(
            "127.0.0.1:{}@{},tessera-fake master",
            fake.port,
            fake.port + 10000
        )),
        "{line}"
    );
}
