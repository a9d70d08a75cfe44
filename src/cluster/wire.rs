//! The cluster bus message, byte for byte as Redis 7.0 sends it (`clusterMsg` in
//! Redis's cluster.h), so Tessera and redis-server nodes can gossip with each other.
//!
//! Every message is one fixed 2256-byte header followed by a body whose layout
//! depends on the type, all integers in network byte order:
//!
//! ```text
//!   0 "RCmb"          4 totlen u32     8 ver u16 (1)    10 port u16
//!  12 type u16       14 count u16     16 currentEpoch u64
//!  24 configEpoch u64                 32 offset u64    40 sender[40]
//!  80 myslots[2048]                 2128 slaveof[40]  2168 myip[46]
//! 2214 extensions u16 2216 unused[30] 2246 pport u16   2248 cport u16
//! 2250 flags u16    2252 state u8   2253 mflags[3]    2256 body
//! ```
//!
//! Bodies: PING, PONG and MEET carry `count` gossip entries of 104 bytes each and,
//! when `mflags[0]` has EXT_DATA, `extensions` 8-byte-aligned extensions (7.0 knows
//! one, the announced hostname); FAIL names a node; PUBLISH and PUBLISHSHARD carry a
//! channel and a message; UPDATE a node's config epoch and slots; MODULE an opaque
//! payload; FAILOVER_AUTH_REQUEST, FAILOVER_AUTH_ACK and MFSTART are the header alone.
//!
//! Reading is two steps, as in Redis's clusterReadHandler and clusterProcessPacket:
//! `frame_len` looks at the first 8 bytes of a link's input and says how long the
//! message is, or that the link carries garbage and must be closed; `decode` then
//! checks the message's length against its type (Redis's checks, in Redis's order:
//! a message that fails them is ignored, the link stays) and parses it. Nothing
//! here trusts a length before checking it against the bytes present.

use super::{NodeName, NAME_LEN, SLOTS};
use std::fmt;

pub const SIGNATURE: [u8; 4] = *b"RCmb";
/// `CLUSTER_PROTO_VER`: messages of another version are ignored.
pub const VERSION: u16 = 1;
/// The fixed part of every message (`CLUSTERMSG_MIN_LEN`).
pub const HEADER_LEN: usize = 2256;
/// One gossip entry (`clusterMsgDataGossip`).
pub const GOSSIP_LEN: usize = 104;
/// An IP address field (`NET_IP_STR_LEN`): text, zero padded.
pub const IP_LEN: usize = 46;
/// A slot bitmap: bit `s` is `bitmap[s / 8] & (1 << (s % 8))`.
pub const BITMAP_LEN: usize = SLOTS / 8;
/// The largest message a link accepts. Redis has no limit; the largest a peer
/// sends in practice is a PUBLISH, whose channel and message are each bounded by
/// `proto-max-bulk-len` (512 MB by default), so twice that plus the header.
pub const MAX_MESSAGE_LEN: usize = HEADER_LEN + 8 + 2 * 512 * 1024 * 1024;

const FAIL_BODY_LEN: usize = NAME_LEN;
const UPDATE_BODY_LEN: usize = 8 + NAME_LEN + BITMAP_LEN;
/// PUBLISH: channel length and message length, then both.
const PUBLISH_FIXED_LEN: usize = 8;
/// MODULE: module id, payload length, type, then the payload.
const MODULE_FIXED_LEN: usize = 13;
/// An extension's own header: length u32, type u16, two unused bytes.
const EXT_HEADER_LEN: usize = 8;

/// Message types (`CLUSTERMSG_TYPE_*`).
pub mod kind {
    pub const PING: u16 = 0;
    pub const PONG: u16 = 1;
    pub const MEET: u16 = 2;
    pub const FAIL: u16 = 3;
    pub const PUBLISH: u16 = 4;
    pub const FAILOVER_AUTH_REQUEST: u16 = 5;
    pub const FAILOVER_AUTH_ACK: u16 = 6;
    pub const UPDATE: u16 = 7;
    pub const MFSTART: u16 = 8;
    pub const MODULE: u16 = 9;
    pub const PUBLISHSHARD: u16 = 10;
    /// `CLUSTERMSG_TYPE_COUNT`: the per-type message counters of CLUSTER INFO.
    pub const COUNT: usize = 11;

    /// The name CLUSTER INFO's `cluster_stats_messages_<name>_sent` and Redis's log
    /// lines use (clusterGetMessageTypeString).
    pub fn name(kind: u16) -> &'static str {
        match kind {
            PING => "ping",
            PONG => "pong",
            MEET => "meet",
            FAIL => "fail",
            PUBLISH => "publish",
            PUBLISHSHARD => "publishshard",
            FAILOVER_AUTH_REQUEST => "auth-req",
            FAILOVER_AUTH_ACK => "auth-ack",
            UPDATE => "update",
            MFSTART => "mfstart",
            MODULE => "module",
            _ => "unknown",
        }
    }
}

/// Bits of `mflags[0]` (`CLUSTERMSG_FLAG0_*`).
pub mod mflags0 {
    /// The sending master is paused for a manual failover.
    pub const PAUSED: u8 = 1;
    /// Vote for this FAILOVER_AUTH_REQUEST even though the master is up.
    pub const FORCEACK: u8 = 2;
    /// The message carries extensions. `encode` sets it when there are any.
    pub const EXT_DATA: u8 = 4;
}

/// Extension types (`clusterMsgPingtypes`).
pub const EXT_HOSTNAME: u16 = 0;

/// A slot bitmap as the bus carries it.
pub type SlotBitmap = [u8; BITMAP_LEN];

/// What every message says about its sender.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Header {
    /// The client port (the TLS one when the node serves TLS).
    pub port: u16,
    pub current_epoch: u64,
    /// The sender's config epoch, or its master's if it is a replica.
    pub config_epoch: u64,
    /// Replication offset: the master's, or what the replica has processed.
    pub offset: u64,
    pub sender: NodeName,
    /// The sender's slots, or its master's if it is a replica.
    pub slots: Box<SlotBitmap>,
    /// The sender's master; `NodeName::NULL` for a master.
    pub master: NodeName,
    /// `cluster-announce-ip`, zero padded; all zero when the receiver should use
    /// the link's peer address.
    pub ip: [u8; IP_LEN],
    /// The plaintext client port when `port` is the TLS one, else 0.
    pub pport: u16,
    /// The bus port.
    pub cport: u16,
    /// The sender's node flags (`super::flags`).
    pub flags: u16,
    /// The cluster state as the sender sees it: 0 ok, 1 fail.
    pub state: u8,
    /// Message flags; EXT_DATA is not kept here (see `Body::Ping`'s extensions).
    pub mflags: [u8; 3],
}

/// One node another node gossips about (`clusterMsgDataGossip`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Gossip {
    pub name: NodeName,
    /// Seconds (Unix time) the gossiping node last pinged this one, 0 for none.
    pub ping_sent: u32,
    /// Seconds the gossiping node last heard a PONG from it.
    pub pong_received: u32,
    pub ip: [u8; IP_LEN],
    pub port: u16,
    pub cport: u16,
    pub flags: u16,
    pub pport: u16,
}

/// An extension of a PING, PONG or MEET.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Extension {
    /// `cluster-announce-hostname` (empty: the sender announces none).
    Hostname(Vec<u8>),
    /// A type this version does not know: Redis logs it and goes on.
    Unknown { kind: u16, data: Vec<u8> },
}

/// The part of a PING, PONG or MEET after the header.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct PingBody {
    pub gossip: Vec<Gossip>,
    pub extensions: Vec<Extension>,
}

/// What follows the header, by message type.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Body {
    Ping(PingBody),
    Pong(PingBody),
    Meet(PingBody),
    Fail {
        about: NodeName,
    },
    Publish {
        channel: Vec<u8>,
        message: Vec<u8>,
    },
    PublishShard {
        channel: Vec<u8>,
        message: Vec<u8>,
    },
    FailoverAuthRequest,
    FailoverAuthAck,
    Update {
        config_epoch: u64,
        node: NodeName,
        slots: Box<SlotBitmap>,
    },
    MfStart,
    Module {
        module_id: u64,
        kind: u8,
        payload: Vec<u8>,
    },
    /// A type newer than 7.0: Redis accepts it as well formed and ignores it.
    Unknown {
        kind: u16,
        data: Vec<u8>,
    },
}

impl Body {
    /// The message type this body is sent as.
    pub fn kind(&self) -> u16 {
        match self {
            Body::Ping(_) => kind::PING,
            Body::Pong(_) => kind::PONG,
            Body::Meet(_) => kind::MEET,
            Body::Fail { .. } => kind::FAIL,
            Body::Publish { .. } => kind::PUBLISH,
            Body::PublishShard { .. } => kind::PUBLISHSHARD,
            Body::FailoverAuthRequest => kind::FAILOVER_AUTH_REQUEST,
            Body::FailoverAuthAck => kind::FAILOVER_AUTH_ACK,
            Body::Update { .. } => kind::UPDATE,
            Body::MfStart => kind::MFSTART,
            Body::Module { .. } => kind::MODULE,
            Body::Unknown { kind, .. } => *kind,
        }
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Message {
    pub header: Header,
    pub body: Body,
}

/// The first 8 bytes of a link's input are not the start of a bus message: Redis
/// logs this and frees the link.
#[derive(Debug, PartialEq, Eq)]
pub struct BadFrame;

impl fmt::Display for BadFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Bad message length or signature received from Cluster bus.")
    }
}

/// The length of the message at the start of `buffered`, once its first 8 bytes
/// have arrived (None before). The caller reads until it has that many bytes and
/// hands them to `decode`.
pub fn frame_len(buffered: &[u8]) -> Result<Option<usize>, BadFrame> {
    let Some(start) = buffered.get(..8) else {
        return Ok(None);
    };
    let totlen = u32::from_be_bytes([start[4], start[5], start[6], start[7]]) as usize;
    if start[..4] != SIGNATURE || !(HEADER_LEN..=MAX_MESSAGE_LEN).contains(&totlen) {
        return Err(BadFrame);
    }
    Ok(Some(totlen))
}

/// Why a whole message was ignored (the link stays). `Display` is the line Redis
/// logs at warning level for it; a version mismatch Redis ignores silently.
#[derive(Debug, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than the header or not starting with the signature: `frame_len`
    /// lets neither through, so only a caller skipping it sees this.
    NotAFrame,
    Version(u16),
    Length {
        kind: u16,
        got: usize,
        expected: usize,
    },
    ExtensionPadding {
        kind: u16,
        len: usize,
    },
    ExtensionTooShort {
        kind: u16,
        len: usize,
    },
    ExtensionOverrun {
        kind: u16,
        totlen: usize,
    },
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::NotAFrame => f.write_str("Bad message length or signature received from Cluster bus."),
            Malformed::Version(v) => write!(f, "Ignoring a cluster bus message of protocol version {v}"),
            Malformed::Length { kind, got, expected } => write!(
                f,
                "Received invalid {} packet of length {got} but expected length {expected}",
                kind::name(*kind)
            ),
            Malformed::ExtensionPadding { kind, len } => write!(
                f,
                "Received a {} packet without proper padding ({len} bytes)",
                kind::name(*kind)
            ),
            Malformed::ExtensionTooShort { kind, len } => write!(
                f,
                "Received a {} packet with an extension shorter than its own header ({len} bytes)",
                kind::name(*kind)
            ),
            Malformed::ExtensionOverrun { kind, totlen } => write!(
                f,
                "Received invalid {} packet with extension data that exceeds total packet length ({totlen})",
                kind::name(*kind)
            ),
        }
    }
}

/// Big-endian reads at fixed offsets of a buffer whose length was checked first.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u16(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.0[at], self.0[at + 1]])
    }
    fn u32(&self, at: usize) -> u32 {
        let b = &self.0[at..at + 4];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    fn u64(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[at..at + 8]);
        u64::from_be_bytes(b)
    }
    fn array<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut b = [0u8; N];
        b.copy_from_slice(&self.0[at..at + N]);
        b
    }
    fn name(&self, at: usize) -> NodeName {
        NodeName(self.array(at))
    }
}

/// Parses one whole message (`frame` is exactly the `totlen` bytes `frame_len`
/// announced), checking its length against its type as clusterProcessPacket does.
pub fn decode(frame: &[u8]) -> Result<Message, Malformed> {
    if frame.len() < HEADER_LEN || frame[..4] != SIGNATURE {
        return Err(Malformed::NotAFrame);
    }
    let r = Reader(frame);
    let version = r.u16(8);
    if version != VERSION {
        return Err(Malformed::Version(version));
    }
    let kind = r.u16(12);
    let expected = expected_len(&r, kind)?;
    if frame.len() != expected {
        return Err(Malformed::Length {
            kind,
            got: frame.len(),
            expected,
        });
    }
    let header = decode_header(&r);
    let body = decode_body(&r, kind);
    Ok(Message { header, body })
}

/// The length a message of type `kind` must have, given what its header and body
/// say about their variable parts (Redis's `explen`).
fn expected_len(r: &Reader, kind: u16) -> Result<usize, Malformed> {
    let totlen = r.0.len();
    Ok(match kind {
        kind::PING | kind::PONG | kind::MEET => {
            let gossip_end = HEADER_LEN + GOSSIP_LEN * r.u16(14) as usize;
            let mut end = gossip_end;
            // When the gossip alone overruns the message, the length check says
            // so, as in Redis (whose extension walk would read past the buffer).
            if r.0[2253] & mflags0::EXT_DATA != 0 && gossip_end <= totlen {
                for _ in 0..r.u16(2214) {
                    end += checked_extension_len(r, kind, end)?;
                }
            }
            end
        }
        kind::FAIL => HEADER_LEN + FAIL_BODY_LEN,
        kind::UPDATE => HEADER_LEN + UPDATE_BODY_LEN,
        kind::PUBLISH | kind::PUBLISHSHARD => {
            if totlen < HEADER_LEN + PUBLISH_FIXED_LEN {
                HEADER_LEN + PUBLISH_FIXED_LEN
            } else {
                HEADER_LEN
                    + PUBLISH_FIXED_LEN
                    + r.u32(HEADER_LEN) as usize
                    + r.u32(HEADER_LEN + 4) as usize
            }
        }
        kind::FAILOVER_AUTH_REQUEST | kind::FAILOVER_AUTH_ACK | kind::MFSTART => HEADER_LEN,
        kind::MODULE => {
            if totlen < HEADER_LEN + MODULE_FIXED_LEN {
                HEADER_LEN + MODULE_FIXED_LEN
            } else {
                HEADER_LEN + MODULE_FIXED_LEN + r.u32(HEADER_LEN + 8) as usize
            }
        }
        _ => totlen,
    })
}

/// The length of the extension starting at `at`, checked: it must lie within the
/// message, be a multiple of 8, and hold at least its own header (Redis does not
/// check the last, and reads past the message when a peer breaks it).
fn checked_extension_len(r: &Reader, kind: u16, at: usize) -> Result<usize, Malformed> {
    let totlen = r.0.len();
    if at + EXT_HEADER_LEN > totlen {
        return Err(Malformed::ExtensionOverrun { kind, totlen });
    }
    let len = r.u32(at) as usize;
    if !len.is_multiple_of(8) {
        return Err(Malformed::ExtensionPadding { kind, len });
    }
    if len < EXT_HEADER_LEN {
        return Err(Malformed::ExtensionTooShort { kind, len });
    }
    if totlen - at < len {
        return Err(Malformed::ExtensionOverrun { kind, totlen });
    }
    Ok(len)
}

fn decode_header(r: &Reader) -> Header {
    let mut mflags: [u8; 3] = r.array(2253);
    mflags[0] &= !mflags0::EXT_DATA;
    Header {
        port: r.u16(10),
        current_epoch: r.u64(16),
        config_epoch: r.u64(24),
        offset: r.u64(32),
        sender: r.name(40),
        slots: Box::new(r.array(80)),
        master: r.name(2128),
        ip: r.array(2168),
        pport: r.u16(2246),
        cport: r.u16(2248),
        flags: r.u16(2250),
        state: r.0[2252],
        mflags,
    }
}

/// The body of a message whose length `expected_len` has already matched.
fn decode_body(r: &Reader, kind: u16) -> Body {
    let body = &r.0[HEADER_LEN..];
    match kind {
        kind::PING => Body::Ping(decode_ping(r)),
        kind::PONG => Body::Pong(decode_ping(r)),
        kind::MEET => Body::Meet(decode_ping(r)),
        kind::FAIL => Body::Fail {
            about: r.name(HEADER_LEN),
        },
        kind::PUBLISH | kind::PUBLISHSHARD => {
            let channel_len = r.u32(HEADER_LEN) as usize;
            let channel = body[PUBLISH_FIXED_LEN..PUBLISH_FIXED_LEN + channel_len].to_vec();
            let message = body[PUBLISH_FIXED_LEN + channel_len..].to_vec();
            if kind == kind::PUBLISH {
                Body::Publish { channel, message }
            } else {
                Body::PublishShard { channel, message }
            }
        }
        kind::FAILOVER_AUTH_REQUEST => Body::FailoverAuthRequest,
        kind::FAILOVER_AUTH_ACK => Body::FailoverAuthAck,
        kind::MFSTART => Body::MfStart,
        kind::UPDATE => Body::Update {
            config_epoch: r.u64(HEADER_LEN),
            node: r.name(HEADER_LEN + 8),
            slots: Box::new(r.array(HEADER_LEN + 8 + NAME_LEN)),
        },
        kind::MODULE => Body::Module {
            module_id: r.u64(HEADER_LEN),
            kind: body[12],
            payload: body[MODULE_FIXED_LEN..].to_vec(),
        },
        other => Body::Unknown {
            kind: other,
            data: body.to_vec(),
        },
    }
}

fn decode_ping(r: &Reader) -> PingBody {
    let count = r.u16(14) as usize;
    let gossip = (0..count)
        .map(|i| decode_gossip(r, HEADER_LEN + i * GOSSIP_LEN))
        .collect();
    let mut extensions = Vec::new();
    if r.0[2253] & mflags0::EXT_DATA != 0 {
        let mut at = HEADER_LEN + count * GOSSIP_LEN;
        for _ in 0..r.u16(2214) {
            let len = r.u32(at) as usize;
            let data = &r.0[at + EXT_HEADER_LEN..at + len];
            extensions.push(match r.u16(at + 4) {
                EXT_HOSTNAME => Extension::Hostname(until_nul(data).to_vec()),
                kind => Extension::Unknown {
                    kind,
                    data: data.to_vec(),
                },
            });
            at += len;
        }
    }
    PingBody { gossip, extensions }
}

fn decode_gossip(r: &Reader, at: usize) -> Gossip {
    Gossip {
        name: r.name(at),
        ping_sent: r.u32(at + 40),
        pong_received: r.u32(at + 44),
        ip: r.array(at + 48),
        port: r.u16(at + 94),
        cport: r.u16(at + 96),
        flags: r.u16(at + 98),
        pport: r.u16(at + 100),
    }
}

/// A C string's bytes: up to the first NUL, or all of them.
fn until_nul(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

/// An address as a zero-padded IP field (strncpy of at most 45 bytes, then NUL).
pub fn ip_field(ip: &str) -> [u8; IP_LEN] {
    let mut field = [0u8; IP_LEN];
    let len = ip.len().min(IP_LEN - 1);
    field[..len].copy_from_slice(&ip.as_bytes()[..len]);
    field
}

/// An IP field's text (empty when unset).
pub fn ip_text(field: &[u8; IP_LEN]) -> String {
    String::from_utf8_lossy(until_nul(field)).into_owned()
}

/// Appends `message` as it goes on the wire.
pub fn encode(message: &Message, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + HEADER_LEN, 0);
    let (count, extensions) = match &message.body {
        Body::Ping(p) | Body::Pong(p) | Body::Meet(p) => (p.gossip.len(), p.extensions.len()),
        _ => (0, 0),
    };
    encode_header(
        &message.header,
        message.body.kind(),
        count,
        extensions,
        &mut out[start..],
    );
    encode_body(&message.body, out);
    let totlen = (out.len() - start) as u32;
    out[start + 4..start + 8].copy_from_slice(&totlen.to_be_bytes());
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

fn encode_header(h: &Header, kind: u16, count: usize, extensions: usize, buf: &mut [u8]) {
    put(buf, 0, &SIGNATURE);
    put(buf, 8, &VERSION.to_be_bytes());
    put(buf, 10, &h.port.to_be_bytes());
    put(buf, 12, &kind.to_be_bytes());
    put(buf, 14, &(count as u16).to_be_bytes());
    put(buf, 16, &h.current_epoch.to_be_bytes());
    put(buf, 24, &h.config_epoch.to_be_bytes());
    put(buf, 32, &h.offset.to_be_bytes());
    put(buf, 40, &h.sender.0);
    put(buf, 80, &h.slots[..]);
    put(buf, 2128, &h.master.0);
    put(buf, 2168, &h.ip);
    put(buf, 2214, &(extensions as u16).to_be_bytes());
    put(buf, 2246, &h.pport.to_be_bytes());
    put(buf, 2248, &h.cport.to_be_bytes());
    put(buf, 2250, &h.flags.to_be_bytes());
    buf[2252] = h.state;
    let mut mflags = h.mflags;
    mflags[0] &= !mflags0::EXT_DATA;
    if extensions > 0 {
        mflags[0] |= mflags0::EXT_DATA;
    }
    put(buf, 2253, &mflags);
}

fn encode_body(body: &Body, out: &mut Vec<u8>) {
    match body {
        Body::Ping(p) | Body::Pong(p) | Body::Meet(p) => encode_ping(p, out),
        Body::Fail { about } => out.extend_from_slice(&about.0),
        Body::Publish { channel, message } | Body::PublishShard { channel, message } => {
            out.extend_from_slice(&(channel.len() as u32).to_be_bytes());
            out.extend_from_slice(&(message.len() as u32).to_be_bytes());
            out.extend_from_slice(channel);
            out.extend_from_slice(message);
        }
        Body::FailoverAuthRequest | Body::FailoverAuthAck | Body::MfStart => {}
        Body::Update {
            config_epoch,
            node,
            slots,
        } => {
            out.extend_from_slice(&config_epoch.to_be_bytes());
            out.extend_from_slice(&node.0);
            out.extend_from_slice(&slots[..]);
        }
        Body::Module {
            module_id,
            kind,
            payload,
        } => {
            out.extend_from_slice(&module_id.to_be_bytes());
            out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            out.push(*kind);
            out.extend_from_slice(payload);
        }
        Body::Unknown { data, .. } => out.extend_from_slice(data),
    }
}

fn encode_ping(p: &PingBody, out: &mut Vec<u8>) {
    for g in &p.gossip {
        out.extend_from_slice(&g.name.0);
        out.extend_from_slice(&g.ping_sent.to_be_bytes());
        out.extend_from_slice(&g.pong_received.to_be_bytes());
        out.extend_from_slice(&g.ip);
        for field in [g.port, g.cport, g.flags, g.pport, 0] {
            out.extend_from_slice(&field.to_be_bytes());
        }
    }
    for ext in &p.extensions {
        let (kind, data, nul) = match ext {
            // The hostname goes as a C string, so it always has room for its NUL.
            Extension::Hostname(name) => (EXT_HOSTNAME, name.as_slice(), 1),
            Extension::Unknown { kind, data } => (*kind, data.as_slice(), 0),
        };
        let len = EXT_HEADER_LEN + (data.len() + nul).div_ceil(8) * 8;
        out.extend_from_slice(&(len as u32).to_be_bytes());
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(data);
        out.resize(out.len() + len - EXT_HEADER_LEN - data.len(), 0);
    }
}

/// Whether `slot` is set in a bus bitmap (bitmapTestBit).
pub fn slot_is_set(bitmap: &SlotBitmap, slot: usize) -> bool {
    bitmap[slot / 8] & (1 << (slot & 7)) != 0
}

/// Sets `slot` in a bus bitmap (bitmapSetBit).
pub fn set_slot(bitmap: &mut SlotBitmap, slot: usize) {
    bitmap[slot / 8] |= 1 << (slot & 7);
}

/// Clears `slot` in a bus bitmap (bitmapClearBit).
pub fn clear_slot(bitmap: &mut SlotBitmap, slot: usize) {
    bitmap[slot / 8] &= !(1 << (slot & 7));
}

#[cfg(test)]
mod tests;
