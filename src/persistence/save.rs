//! Writing the dataset to `dir`/`dbfilename`: one RDB file (the snapshot a full sync
//! sends), written to a temporary file, flushed to disk and renamed into place, as
//! Redis's rdbSave does.

use std::rc::Rc;
use std::sync::atomic::Ordering;

use crate::shard::ShardCell;

/// Saves the dataset now (SAVE). On success the change counter drops by what the file
/// holds (writes that came after the snapshot still count) and LASTSAVE moves.
pub async fn save(cell: &Rc<ShardCell>) -> std::io::Result<()> {
    let (rdb, _, dirty) = crate::replication::snapshot(cell, None).await;
    let path = {
        let data = cell.data.borrow();
        std::path::Path::new(data.config.dir()).join(data.config.dbfilename())
    };
    let tmp = path.with_file_name(format!("temp-{}.rdb", std::process::id()));
    if let Err(e) = write_synced(&tmp, &rdb).and_then(|_| std::fs::rename(&tmp, &path)) {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!("Failed saving the DB: {e}");
        return Err(e);
    }
    tracing::info!("DB saved on disk");
    let dirty = std::sync::Arc::new(dirty);
    cell.call_all(move |c| {
        let mut d = c.data.borrow_mut();
        let saved = dirty.get(c.id).copied().unwrap_or(0);
        d.dirty = d.dirty.saturating_sub(saved);
    })
    .await;
    super::LAST_SAVE_UNIX.store(crate::util::now_ms() / 1000, Ordering::Relaxed);
    super::SAVES.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Writes `bytes` to `path` and waits until they are on disk.
fn write_synced(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
