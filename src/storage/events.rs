//! What storage tells the layers above it. Storage is a leaf: it never calls pub/sub,
//! replication or client tracking. Those register here instead:
//! - pub/sub sets the `notify-keyspace-events` mask and installs the sink that
//!   publishes the keyspace events storage raises itself ("new", "expired");
//! - effect-stream readers and tracking clients join the listener counts, and while a count is
//!   non-zero the keyspace logs the keys it deletes on its own (`Db::expired_log` for
//!   the DELs replicas receive, `Db::tracking_expired` for invalidations), which the
//!   shard drains after each command.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Publishes one keyspace event: (the mask, the event, the key, the database).
pub type Sink = fn(u32, &str, &[u8], usize);

/// `notify-keyspace-events` as flags, cached for the hot path.
static NOTIFY_MASK: AtomicU32 = AtomicU32::new(0);
static SINK: OnceLock<Sink> = OnceLock::new();

/// Sets the event classes that are published.
pub fn set_notify_mask(mask: u32) {
    NOTIFY_MASK.store(mask, Ordering::Relaxed);
}

/// Installs the publisher of keyspace events (once; later calls keep the first).
pub fn set_sink(sink: Sink) {
    let _ = SINK.set(sink);
}

/// Raises a keyspace event of class `class_bit`: one load and one branch unless the
/// class is enabled.
#[inline]
pub fn notify(class_bit: u32, event: &str, key: &[u8], db: usize) {
    let mask = NOTIFY_MASK.load(Ordering::Relaxed);
    if mask & class_bit != 0 {
        publish(mask, event, key, db);
    }
}

#[cold]
#[inline(never)]
fn publish(mask: u32, event: &str, key: &[u8], db: usize) {
    if let Some(sink) = SINK.get() {
        sink(mask, event, key, db);
    }
}

/// How many consumers want a log of the keys storage deletes on its own.
pub struct Listeners(AtomicUsize);

impl Listeners {
    const fn new() -> Listeners {
        Listeners(AtomicUsize::new(0))
    }

    pub fn join(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn leave(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    #[inline]
    pub fn any(&self) -> bool {
        self.count() > 0
    }
}

/// Readers of the effect stream (replica links): expired and evicted keys are
/// logged for their DELs.
pub static STREAM_READERS: Listeners = Listeners::new();

/// Clients with tracking on: keys expired on access are logged for invalidation.
pub static TRACKING_CLIENTS: Listeners = Listeners::new();

thread_local! {
    /// Whether a keyspace of this shard thread logged a deletion for the stream's
    /// readers (`Db::expired_log`, `Db::expired_fields_log`) since the shard last
    /// drained them: the drain after every command looks at no database otherwise.
    static STREAM_LOGGED: Cell<bool> = const { Cell::new(false) };
}

/// A keyspace of this thread logged a deletion for the stream.
#[inline]
pub fn note_stream_logged() {
    STREAM_LOGGED.with(|l| l.set(true));
}

/// Whether anything was logged for the stream on this thread since the last call.
#[inline]
pub fn take_stream_logged() -> bool {
    STREAM_LOGGED.with(|l| l.replace(false))
}
