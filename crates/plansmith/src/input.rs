//! Reading the files a user names: catalogs, plans, patches, commands, templates, config.
//!
//! Every one is read through [`read_text`]: at most [`MAX_INPUT_BYTES`] (a larger file is a
//! clear error, not an allocation of whatever size it has), UTF-8, and with a leading byte-order
//! mark dropped (editors on Windows write one; JSON and TOML parsers reject it).

use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};

/// The largest input file read: 64 MiB, far above any real catalog or plan.
pub const MAX_INPUT_BYTES: u64 = 64 << 20;

/// The text of `path`; errors say `cannot read {label}{path}: …`.
pub fn read_text_as(path: &Path, label: &str) -> anyhow::Result<String> {
    let what = format!("{label}{}", path.display());
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {what}"))?;
    read_bounded(file, &what)
}

/// At most [`MAX_INPUT_BYTES`] of UTF-8 text from `reader` (a file, standard input), a leading
/// byte-order mark dropped; errors say `cannot read {what}: …`.
pub fn read_bounded(reader: impl Read, what: &str) -> anyhow::Result<String> {
    // `take` also bounds what is not a regular file (a pipe, a device) and has no size.
    let mut bytes = Vec::new();
    reader
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {what}"))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        bail!(
            "cannot read {what}: it is larger than {} MiB, the most an input file may be",
            MAX_INPUT_BYTES >> 20
        );
    }
    let text = String::from_utf8(bytes).map_err(|err| {
        anyhow::anyhow!(
            "cannot read {what}: not UTF-8 text (byte {})",
            err.utf8_error().valid_up_to()
        )
    })?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

/// [`read_text_as`] with no label: `cannot read {path}: …`.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    read_text_as(path, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_order_mark_is_dropped_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let bom = dir.path().join("bom.json");
        std::fs::write(&bom, "\u{feff}[1]").unwrap();
        assert_eq!(read_text(&bom).unwrap(), "[1]");
        let latin = dir.path().join("latin.json");
        std::fs::write(&latin, b"[\"caf\xe9\"]").unwrap();
        let err = read_text(&latin).unwrap_err().to_string();
        assert!(err.contains("not UTF-8 text (byte 5)"), "{err}");
        let big = dir.path().join("big.json");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len(MAX_INPUT_BYTES + 1).unwrap();
        let err = read_text(&big).unwrap_err().to_string();
        assert!(err.contains("larger than 64 MiB"), "{err}");
        let err = read_text_as(&dir.path().join("nope"), "the config file ")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot read the config file "), "{err}");
    }
}
