//! Files the caches write: a temporary file in the cache's own directory (removed unless it is
//! renamed into place), so that an entry appears whole or not at all.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A file of this process in `dir` (`.tmp-PID-N`), removed when dropped.
pub(crate) struct Temp(pub(crate) PathBuf);

impl Temp {
    /// A fresh name in `dir`; nothing is created yet.
    pub(crate) fn new(dir: &Path) -> Temp {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        Temp(dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        )))
    }

    /// `bytes` written to a fresh temporary file in `dir` (created if missing), synced.
    pub(crate) fn write(dir: &Path, bytes: &[u8]) -> std::io::Result<Temp> {
        fs::create_dir_all(dir)?;
        let tmp = Temp::new(dir);
        let mut file = fs::File::create(&tmp.0)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(tmp)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        // After a rename there is nothing left to remove.
        let _ = fs::remove_file(&self.0);
    }
}

/// Writes `bytes` to `path` (in `dir`) through a temporary file and a rename: a reader sees
/// the old file or the new one, never part of it.
pub(crate) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = Temp::write(dir, bytes)?;
    fs::rename(&tmp.0, path)
}
