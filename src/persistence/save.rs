//! Writing the dataset to `dir`/`dbfilename` in the foreground (SAVE): one RDB file,
//! written to a temporary file, flushed to disk and renamed into place, as
//! Redis's rdbSave does.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use crate::shard::locks::TxnId;
use crate::shard::ShardCell;

/// Saves the dataset now (SAVE). On success the change counter drops by what the file
/// holds (writes that came after the snapshot still count) and LASTSAVE moves.
pub async fn save(cell: &Rc<ShardCell>) -> std::io::Result<()> {
    // On a replica the cut falls between two batches of the master's stream: the
    // offset the file records is then exactly what it holds.
    let held_stream = crate::replication::link::hold_stream().await;
    let (rdb, dirty) = crate::replication::snapshot_as(cell, cell.next_txn_id()).await;
    drop(held_stream);
    write_snapshot(cell, &rdb, dirty).await
}

/// `save`, its snapshot's locks taken as operation `txn` (a command inside EXEC or a
/// script saves as its transaction, which may hold every shard already, so it
/// cannot wait for a replica's master connection, which may wait for those locks).
pub async fn save_as(cell: &Rc<ShardCell>, txn: TxnId) -> std::io::Result<()> {
    let (rdb, dirty) = crate::replication::snapshot_as(cell, txn).await;
    write_snapshot(cell, &rdb, dirty).await
}

/// Writes a snapshot already taken (`dirty`: each shard's change counter at that
/// moment) as the RDB file (SAVE).
async fn write_snapshot(cell: &Rc<ShardCell>, rdb: &[u8], dirty: Vec<u64>) -> std::io::Result<()> {
    super::SAVES.fetch_add(1, Ordering::Relaxed);
    let (path, key_delay) = {
        let data = cell.data.borrow();
        let path = std::path::Path::new(data.config.dir()).join(data.config.dbfilename());
        (path, data.config.rdb_key_save_delay())
    };
    let tmp = path.with_file_name(format!("temp-{}.rdb", std::process::id()));
    *temp_file() = Some(tmp.clone());
    let written = write_synced(cell, &tmp, rdb, key_delay).await;
    let result = written.and_then(|_| std::fs::rename(&tmp, &path));
    *temp_file() = None;
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!("Failed saving the DB: {e}");
        return Err(e);
    }
    tracing::info!("DB saved on disk");
    super::saved(cell, dirty).await;
    Ok(())
}

/// The temporary file a save is writing, while it does.
fn temp_file() -> std::sync::MutexGuard<'static, Option<PathBuf>> {
    static TEMP: Mutex<Option<PathBuf>> = Mutex::new(None);
    TEMP.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes the temporary file of a save in progress, if one is, and ends a
/// background save's writer: the process is about to exit without finishing them (a
/// second SIGINT, Redis's rdbRemoveTempFile).
pub fn remove_temp_file() {
    if let Some(tmp) = temp_file().take() {
        let _ = std::fs::remove_file(tmp);
    }
    super::bgsave::kill_writer_now();
}

/// Writes `bytes` to `path` and waits until they are on disk. With
/// `rdb-key-save-delay` (microseconds per key, Redis's test knob) the file exists,
/// empty, for that long per key first: the shard keeps serving meanwhile.
async fn write_synced(
    cell: &Rc<ShardCell>,
    path: &std::path::Path,
    bytes: &[u8],
    key_delay: i64,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path)?;
    if key_delay > 0 {
        let keys: u64 = cell
            .call_all(|c| {
                let d = c.data.borrow();
                d.dbs.iter().map(|db| db.len() as u64).sum::<u64>()
            })
            .await
            .into_iter()
            .sum();
        let total = std::time::Duration::from_micros(keys.saturating_mul(key_delay as u64));
        crate::runtime::sleep(total).await;
    }
    f.write_all(bytes)?;
    f.sync_all()
}
