//! The KV state of a prompt's system part, kept on disk so that the next process starts from it.
//!
//! Every `plansmith plan` from the shell is a cold process: without this cache it evaluates
//! the whole system prompt (instructions, profile, tool manifest: ~700 tokens, seconds on a
//! small CPU) before it writes a token. After a prompt's system part has been evaluated, its
//! KV state is saved here; a later process whose prompt starts with the same tokens loads the
//! longest matching entry instead of evaluating them again (llama.cpp's sequence state save
//! and load), then evaluates only what follows.
//!
//! Safe by construction:
//! - **Never across models or builds.** An entry names its *identity*: a hash of the model
//!   file (path, size, modification time), the executable that wrote it (size, modification
//!   time: a rebuilt plansmith, with whatever llama.cpp it links, starts afresh) and the
//!   context size. An entry of another identity is never read.
//! - **Whole or nothing.** Entries are written to a temporary file and renamed into place, and
//!   carry a SHA-256 of llama.cpp's state: a torn, truncated or altered file fails the check
//!   and is ignored (a debug log), never an error and never handed to llama.cpp.
//! - **Bounded.** The directory is kept under a byte budget (256 MiB by default); the entries
//!   used least recently (by modification time, renewed on each use) go first.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::files::{Temp, write_atomically};

const MAGIC: &[u8; 8] = b"PSMKV001";
/// Magic, identity, token count.
const HEAD: usize = 8 + 32 + 4;
/// No system prompt is longer than a context; a count above this is a corrupt header.
const MAX_TOKENS: usize = 1 << 20;
const EXTENSION: &str = "kv";

/// An on-disk cache of prompt prefixes' KV state (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// An entry that shares a prefix with a prompt.
#[derive(Debug)]
pub(crate) struct Candidate {
    path: PathBuf,
    /// The tokens the entry holds the state of.
    pub(crate) tokens: Vec<i32>,
    /// How many of them start the prompt.
    pub(crate) common: usize,
}

impl PromptCache {
    /// The default budget: 256 MiB (~30 system prompts of the 0.5B model, ~12 of the 1.5B).
    pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

    /// A cache in `dir` (created when first written), kept under `max_bytes`.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> PromptCache {
        PromptCache {
            dir: dir.into(),
            max_bytes,
        }
    }

    /// The cache the environment asks for: `PLANSMITH_PROMPT_CACHE_MB` is its budget in MiB
    /// (unset: 256; `0` turns it off), in [`crate::cache_dir`]`/prompts`. An unreadable
    /// budget is an error naming the variable.
    pub fn from_env() -> Result<Option<PromptCache>, String> {
        let budget = match std::env::var("PLANSMITH_PROMPT_CACHE_MB") {
            Err(_) => PromptCache::DEFAULT_MAX_BYTES,
            Ok(value) if value.trim().is_empty() => PromptCache::DEFAULT_MAX_BYTES,
            Ok(value) => value
                .trim()
                .parse::<u64>()
                .map_err(|_| {
                    format!(
                        "PLANSMITH_PROMPT_CACHE_MB=`{value}`: the prompt cache's budget is a \
                         whole number of MiB (0 turns it off)"
                    )
                })?
                .saturating_mul(1 << 20),
        };
        Ok((budget > 0).then(|| PromptCache::new(crate::cache_dir().join("prompts"), budget)))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The identity entries are written under and read by: the model file, the running
    /// executable and the context size (see the module docs).
    pub(crate) fn identity(model: &Path, context: u32) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(b"plansmith prompt cache 1\0");
        let file = |hash: &mut Sha256, path: &Path| {
            let path = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            hash.update(path.to_string_lossy().as_bytes());
            hash.update([0]);
            if let Ok(meta) = fs::metadata(&path) {
                hash.update(meta.len().to_le_bytes());
                let modified = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                hash.update(modified.to_le_bytes());
            }
        };
        file(&mut hash, model);
        match std::env::current_exe() {
            Ok(exe) => file(&mut hash, &exe),
            // No executable to name: an identity no other process shares, so nothing is reused.
            Err(_) => hash.update(std::process::id().to_le_bytes()),
        }
        hash.update(context.to_le_bytes());
        hash.finalize().into()
    }

    /// The entry of `identity` that shares the longest prefix with `prompt` (at least
    /// `at_least` tokens), if any.
    pub(crate) fn best(
        &self,
        identity: &[u8; 32],
        prompt: &[i32],
        at_least: usize,
    ) -> Option<Candidate> {
        let entries = fs::read_dir(&self.dir).ok()?;
        let mut best: Option<Candidate> = None;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some(EXTENSION) {
                continue;
            }
            let Some(tokens) = read_tokens(&path, identity) else {
                continue;
            };
            let common = tokens
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count();
            // An entry is used whole: one longer than the shared part would leave tokens of
            // another prompt in the cache (they are cut after loading, but cost the read).
            let better = best.as_ref().is_none_or(|b| common > b.common);
            if common >= at_least && better {
                best = Some(Candidate {
                    path,
                    tokens,
                    common,
                });
            }
        }
        best
    }

    /// Checks `candidate`'s state against its hash, hands it to `load` as a file of llama.cpp's
    /// sequence-state format, and renews its place in the eviction order. `load` gives the
    /// tokens llama.cpp read back; they must be the entry's.
    pub(crate) fn restore(
        &self,
        candidate: &Candidate,
        load: impl FnOnce(&Path) -> Result<Vec<i32>, String>,
    ) -> Result<(), String> {
        let bytes = fs::read(&candidate.path).map_err(|err| err.to_string())?;
        let state = payload(&bytes).ok_or("the entry does not match its hash")?;
        let tmp = Temp::write(&self.dir, state).map_err(|err| err.to_string())?;
        let tokens = load(&tmp.0)?;
        if tokens != candidate.tokens {
            return Err("llama.cpp read other tokens than the entry names".into());
        }
        if let Ok(file) = fs::File::options().write(true).open(&candidate.path) {
            let _ = file.set_modified(SystemTime::now());
        }
        Ok(())
    }

    /// Saves the state `save` writes (llama.cpp's sequence-state file of `tokens`) as the
    /// entry of `identity` and `tokens`, then evicts the least recently used entries beyond
    /// the budget. Failures are logged, never an error: the cache only saves the next process
    /// some work.
    pub(crate) fn store(
        &self,
        identity: &[u8; 32],
        tokens: &[i32],
        save: impl FnOnce(&Path) -> Result<(), String>,
    ) {
        if let Err(err) = self.try_store(identity, tokens, save) {
            tracing::debug!(dir = %self.dir.display(), error = %err, "prompt cache: entry not saved");
        }
        self.evict();
    }

    fn try_store(
        &self,
        identity: &[u8; 32],
        tokens: &[i32],
        save: impl FnOnce(&Path) -> Result<(), String>,
    ) -> Result<(), String> {
        fs::create_dir_all(&self.dir).map_err(|err| err.to_string())?;
        let state = Temp::new(&self.dir);
        save(&state.0)?;
        let state = fs::read(&state.0).map_err(|err| err.to_string())?;
        let bytes = encode(identity, tokens, &state);
        if bytes.len() as u64 > self.max_bytes {
            return Err(format!(
                "the entry ({} bytes) is larger than the budget",
                bytes.len()
            ));
        }
        let path = self.dir.join(entry_name(identity, tokens));
        write_atomically(&self.dir, &path, &bytes).map_err(|err| err.to_string())
    }

    /// Removes entries, least recently used first, until the rest fit the budget.
    fn evict(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().extension().and_then(|x| x.to_str()) == Some(EXTENSION))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        // Newest first: they are kept while the budget lasts.
        entries.sort_by_key(|entry| std::cmp::Reverse(entry.0));
        let mut used = 0u64;
        for (_, len, path) in entries {
            used = used.saturating_add(len);
            if used > self.max_bytes {
                let _ = fs::remove_file(&path);
            }
        }
    }
}

/// The tokens of the entry at `path`, when it is an entry of `identity`.
fn read_tokens(path: &Path, identity: &[u8; 32]) -> Option<Vec<i32>> {
    let mut file = fs::File::open(path).ok()?;
    let mut head = [0u8; HEAD];
    file.read_exact(&mut head).ok()?;
    if head.get(..8)? != MAGIC || head.get(8..40)? != identity {
        return None;
    }
    let count = u32::from_le_bytes(head.get(40..44)?.try_into().ok()?) as usize;
    if count > MAX_TOKENS {
        return None;
    }
    let mut raw = vec![0u8; count * 4];
    file.read_exact(&mut raw).ok()?;
    Some(
        raw.chunks_exact(4)
            .filter_map(|t| t.try_into().ok().map(i32::from_le_bytes))
            .collect(),
    )
}

/// The entry's llama.cpp state, when its hash checks.
fn payload(bytes: &[u8]) -> Option<&[u8]> {
    let count = u32::from_le_bytes(bytes.get(40..44)?.try_into().ok()?) as usize;
    if count > MAX_TOKENS {
        return None;
    }
    let at = HEAD + count * 4;
    let hash = bytes.get(at..at + 32)?;
    let len = usize::try_from(u64::from_le_bytes(
        bytes.get(at + 32..at + 40)?.try_into().ok()?,
    ))
    .ok()?;
    let state = bytes.get(at + 40..)?;
    (state.len() == len && Sha256::digest(state).as_slice() == hash).then_some(state)
}

fn encode(identity: &[u8; 32], tokens: &[i32], state: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD + tokens.len() * 4 + 40 + state.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(identity);
    out.extend_from_slice(
        &u32::try_from(tokens.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    for token in tokens {
        out.extend_from_slice(&token.to_le_bytes());
    }
    out.extend_from_slice(&Sha256::digest(state));
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    out.extend_from_slice(state);
    out
}

fn entry_name(identity: &[u8; 32], tokens: &[i32]) -> String {
    let mut hash = Sha256::new();
    hash.update(identity);
    for token in tokens {
        hash.update(token.to_le_bytes());
    }
    let hex: String = hash
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{hex}.{EXTENSION}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: [u8; 32] = [7; 32];

    fn store(cache: &PromptCache, tokens: &[i32], state: &[u8]) {
        cache.store(&ID, tokens, |path| {
            fs::write(path, state).map_err(|e| e.to_string())
        });
    }

    fn restored(cache: &PromptCache, prompt: &[i32]) -> Option<(Vec<i32>, Vec<u8>)> {
        let candidate = cache.best(&ID, prompt, 1)?;
        let mut seen = Vec::new();
        cache
            .restore(&candidate, |path| {
                seen = fs::read(path).map_err(|e| e.to_string())?;
                Ok(candidate.tokens.clone())
            })
            .ok()?;
        Some((candidate.tokens, seen))
    }

    #[test]
    fn the_longest_shared_prefix_of_this_identity_is_restored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PromptCache::new(dir.path(), 1 << 20);
        store(&cache, &[1, 2, 3], b"short");
        store(&cache, &[1, 2, 3, 4, 5], b"long");
        store(&cache, &[9, 9], b"other");
        let (tokens, state) = restored(&cache, &[1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(tokens, [1, 2, 3, 4, 5]);
        assert_eq!(state, b"long");
        // A prompt that leaves the longer entry early takes the one it shares most with.
        assert_eq!(cache.best(&ID, &[1, 2, 3, 7], 1).unwrap().common, 3);
        assert!(cache.best(&ID, &[5, 5], 1).is_none());
        // Another model or build never reads these.
        assert!(cache.best(&[8; 32], &[1, 2, 3, 4, 5], 1).is_none());
        // Nor does a prompt that shares fewer tokens than asked for.
        assert!(cache.best(&ID, &[1, 2, 7], 3).is_none());
    }

    #[test]
    fn a_damaged_entry_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PromptCache::new(dir.path(), 1 << 20);
        store(&cache, &[1, 2, 3], b"the state of three tokens");
        let path = fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == EXTENSION))
            .unwrap();
        let good = fs::read(&path).unwrap();
        // One flipped byte in the state, then a cut: found by its tokens, refused by its hash.
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        for damaged in [
            flipped,
            good[..good.len() - 4].to_vec(),
            good[..20].to_vec(),
        ] {
            fs::write(&path, &damaged).unwrap();
            assert!(restored(&cache, &[1, 2, 3, 4]).is_none());
        }
        fs::write(&path, &good).unwrap();
        assert!(restored(&cache, &[1, 2, 3, 4]).is_some());
    }

    #[test]
    fn the_least_recently_used_entries_go_beyond_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let state = vec![0u8; 1000];
        // Room for two entries of ~1.1 KB.
        let cache = PromptCache::new(dir.path(), 2300);
        let old = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        store(&cache, &[1], &state);
        store(&cache, &[2], &state);
        for entry in fs::read_dir(dir.path()).unwrap().flatten() {
            let file = fs::File::options().write(true).open(entry.path()).unwrap();
            file.set_modified(old).unwrap();
        }
        // Using [1] renews it, so [2] is the one evicted when [3] arrives.
        assert!(restored(&cache, &[1]).is_some());
        store(&cache, &[3], &state);
        assert!(restored(&cache, &[1]).is_some());
        assert!(restored(&cache, &[3]).is_some());
        assert!(cache.best(&ID, &[2], 1).is_none());
        // No temporary file is left behind.
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        // An entry larger than the whole budget is not written.
        store(&cache, &[4], &vec![0u8; 5000]);
        assert!(cache.best(&ID, &[4], 1).is_none());
    }

    /// Two writers at once (two processes planning with the same catalog), saving the same
    /// prefixes over each other under a budget that keeps evicting: every entry read back
    /// afterwards is one writer's whole state, never a mix or a torn file, and no temporary
    /// file is left.
    #[test]
    fn writers_at_once_corrupt_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // Room for about four of the 3 KB entries.
        let cache = PromptCache::new(dir.path(), 13_000);
        let states = |writer: u8, tokens: i32| vec![writer.wrapping_mul(31) ^ tokens as u8; 3000];
        std::thread::scope(|scope| {
            for writer in [1u8, 2] {
                let cache = cache.clone();
                scope.spawn(move || {
                    for round in 0..40 {
                        let tokens: Vec<i32> = (0..=(round % 6)).collect();
                        store(&cache, &tokens, &states(writer, tokens.len() as i32));
                        let _ = restored(&cache, &[0, 1, 2, 3, 4, 5, 6]);
                    }
                });
            }
        });
        let mut read = 0;
        for n in 1..=6 {
            let tokens: Vec<i32> = (0..n).collect();
            if cache
                .best(&ID, &tokens, n as usize)
                .is_none_or(|c| c.tokens.len() != n as usize)
            {
                continue;
            }
            let (got, state) = restored(&cache, &tokens).unwrap();
            assert_eq!(got, tokens);
            assert!(
                [states(1, n), states(2, n)].contains(&state),
                "entry of {n} tokens holds a mixed state"
            );
            read += 1;
        }
        assert!(read > 0, "the budget left no entry to read");
        for entry in fs::read_dir(dir.path()).unwrap().flatten() {
            let path = entry.path();
            assert!(
                path.extension().is_some_and(|x| x == EXTENSION),
                "left behind: {}",
                path.display()
            );
        }
    }

    #[test]
    fn a_failed_save_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PromptCache::new(dir.path(), 1 << 20);
        cache.store(&ID, &[1, 2], |_| Err("llama.cpp said no".into()));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
