//! One database's part of a running snapshot (BGSAVE without fork, DESIGN.md's
//! "snapshots without fork()").
//!
//! Every entry carries a one-bit mark and its database a mark of its own. While no
//! snapshot runs the two agree on every entry. Cutting a snapshot flips the database's
//! mark, so at that instant every entry disagrees: "not written yet". From then on:
//!
//! * the walk (`Db::snapshot_step`) goes slot by slot, writes each entry that still
//!   disagrees as an RDB record and flips its mark;
//! * a write about to change or remove an entry that still disagrees writes it first
//!   (`Cut::save_ahead`, called by the `Db` method that hands the entry out), so the
//!   record is the value as it was at the cut — serialize-before-mutate;
//! * entries created after the cut get the database's mark at birth, so neither the
//!   walk nor a write ever saves them.
//!
//! Memory therefore grows by the records of entries written ahead of the walk and not
//! yet taken by the file writer, never by a copy of the dataset. When the walk has
//! visited every slot all marks agree again, which is what lets the next cut flip the
//! database's mark without touching any entry. A snapshot given up half way
//! (`abandon`) keeps walking without writing anything, only to restore that agreement.

use super::entry::Entry;
use super::rdb;

/// A running snapshot's state in one database.
#[derive(Default)]
pub struct Cut {
    /// RDB records (`rdb::file::write_record`) not yet handed to the file writer.
    pub out: Vec<u8>,
    /// The slot index the walk has reached.
    pub(super) walk: usize,
    /// Entries written so far, by the walk and ahead of it.
    pub keys_saved: u64,
    /// Bytes of records written ahead of the walk because a write was about to change
    /// their entry: the memory a fork's copy-on-write would have copied.
    pub ahead_bytes: u64,
    /// The snapshot was given up: entries are marked, nothing is written.
    pub(super) abandoned: bool,
}

/// What every `Db` method that hands out or removes an entry calls first: with a
/// snapshot running (`cut`), `e` is written as it is now unless the snapshot has it
/// already (or it came after the cut); `mark` is the database's mark.
#[inline]
pub(super) fn save_before_change(cut: &mut Option<Box<Cut>>, e: &mut Entry, mark: bool) {
    if let Some(cut) = cut.as_deref_mut() {
        cut.save_ahead(e, mark);
    }
}

impl Cut {
    /// Writes `e` as it is now, unless the snapshot has it already (or came after it);
    /// `mark` is the database's mark.
    #[inline]
    pub(super) fn save_ahead(&mut self, e: &mut Entry, mark: bool) {
        if e.snapshot_mark() != mark {
            let before = self.out.len();
            self.save(e, mark);
            self.ahead_bytes += (self.out.len() - before) as u64;
        }
    }

    /// Writes `e` (known not to be in the snapshot yet) and marks it.
    pub(super) fn save(&mut self, e: &mut Entry, mark: bool) {
        e.set_snapshot_mark(mark);
        if self.abandoned {
            return;
        }
        rdb::file::write_record(&mut self.out, e.key(), e.value(), e.expire_at());
        self.keys_saved += 1;
    }

    /// Gives the snapshot up: what is pending is dropped, the rest only marked.
    pub(super) fn abandon(&mut self) {
        self.abandoned = true;
        self.out = Vec::new();
    }
}

/// Entries the walk looks at per unit of its budget: looking at an entry it already
/// wrote (or that came after the cut) costs a load, writing one an encode.
pub const SKIPS_PER_SAVE: usize = 16;
