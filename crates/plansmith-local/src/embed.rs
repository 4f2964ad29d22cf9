//! Dense tool retrieval: a sentence-embedding model run in-process on the CPU.
//!
//! Keyword search misses a request that shares no word with the tool it needs ("book me
//! something to eat tonight" and `reserve_restaurant`). A sentence-embedding model maps both to
//! nearby vectors. [`Embedder`] runs all-MiniLM-L6-v2 ([`acquire::MINILM_L6`], BERT with six
//! layers and 384 dimensions) through candle, with mean pooling over the tokens and L2
//! normalisation, as the model was trained. [`DenseIndex`] holds one vector per tool and ranks by
//! cosine similarity; [`VectorCache`] keeps the vectors on disk, keyed by the model and a hash
//! of each tool's text, so a large catalog is embedded once, not at every start. [`LazyDense`]
//! defers all of it to the first search, so a process that never searches a catalog larger than
//! its top-K never loads the model.
//!
//! Combine with keyword search through [`plansmith_core::Fusion`].

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use plansmith_core::catalog::{Catalog, Tool};
use plansmith_core::retrieve::{Retriever, Scored, top};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokenizers::{PaddingParams, Tokenizer, TruncationParams};

use crate::acquire::{self, FileSet};

/// Longest input in tokens, as the model was trained (sentence-transformers' `max_seq_length`).
const MAX_TOKENS: usize = 256;

/// Texts embedded in one forward pass.
const BATCH: usize = 32;

/// Floats of one block of a parallel scan (4 MiB of vectors).
const SCAN_BLOCK: usize = 1 << 20;

/// Errors of the embedding model and its cache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The model's files are not installed.
    #[error(
        "the embedding model is not installed in {0}; run `plansmith models pull all-minilm-l6-v2`"
    )]
    Missing(String),
    /// A file of the model could not be read or is not what it should be.
    #[error("cannot load the embedding model from {path}: {message}")]
    Load {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// Tokenising or running the model failed.
    #[error("embedding failed: {0}")]
    Inference(String),
}

fn inference(err: impl std::fmt::Display) -> EmbedError {
    EmbedError::Inference(err.to_string())
}

/// A sentence-embedding model: text in, unit vector out.
pub struct Embedder {
    model: BertModel,
    tokenizer: Tokenizer,
    id: String,
    dim: usize,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("id", &self.id)
            .field("dim", &self.dim)
            .finish()
    }
}

impl Embedder {
    /// Loads a BERT sentence-embedding model from a directory holding `config.json`,
    /// `tokenizer.json` and `model.safetensors`. `id` names the model in cache keys: two
    /// different models must never share one.
    pub fn load(dir: &Path, id: &str) -> Result<Embedder, EmbedError> {
        let load_error = |path: &Path, message: String| EmbedError::Load {
            path: path.display().to_string(),
            message,
        };
        let config_path = dir.join("config.json");
        let text = fs::read_to_string(&config_path)
            .map_err(|err| load_error(&config_path, err.to_string()))?;
        let config: Config =
            serde_json::from_str(&text).map_err(|err| load_error(&config_path, err.to_string()))?;
        let dim = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get("hidden_size").and_then(Value::as_u64))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| load_error(&config_path, "no `hidden_size`".into()))?;

        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|err| load_error(&tokenizer_path, err.to_string()))?;
        tokenizer.with_padding(Some(PaddingParams::default()));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|err| load_error(&tokenizer_path, err.to_string()))?;

        // Read into memory rather than mapped: mapping a file is `unsafe` in candle (another
        // process could change it underneath), and this workspace forbids unsafe code.
        let weights_path = dir.join("model.safetensors");
        let bytes =
            fs::read(&weights_path).map_err(|err| load_error(&weights_path, err.to_string()))?;
        let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &Device::Cpu)
            .map_err(|err| load_error(&weights_path, err.to_string()))?;
        let model = BertModel::load(vb, &config)
            .map_err(|err| load_error(&weights_path, err.to_string()))?;
        Ok(Embedder {
            model,
            tokenizer,
            id: id.to_owned(),
            dim,
        })
    }

    /// The pinned model ([`acquire::MINILM_L6`]) from the models directory `models_dir`, loaded
    /// once per process and shared: every planner of a service, and every case of an
    /// evaluation, uses the same copy.
    pub fn shared(models_dir: &Path) -> Result<Arc<Embedder>, EmbedError> {
        static LOADED: Mutex<Vec<(PathBuf, Arc<Embedder>)>> = Mutex::new(Vec::new());
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, embedder)) = loaded.iter().find(|(dir, _)| dir == models_dir) {
            return Ok(embedder.clone());
        }
        let set = &acquire::MINILM_L6;
        if !acquire::file_set_installed(models_dir, set) {
            return Err(EmbedError::Missing(models_dir.display().to_string()));
        }
        let embedder = Arc::new(Embedder::load(
            &acquire::file_set_dir(models_dir, set),
            &pinned_id(set),
        )?);
        loaded.push((models_dir.to_owned(), embedder.clone()));
        Ok(embedder)
    }

    /// The model's name in cache keys.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Length of a vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// One unit vector per text, in order. Texts longer than the model's window are cut.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = vec![Vec::new(); texts.len()];
        // Batches of similar length pad less: sort by length, embed, put back in order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts.get(i).map_or(0, |t| t.len()));
        for chunk in order.chunks(BATCH) {
            let batch: Vec<&str> = chunk
                .iter()
                .filter_map(|&i| texts.get(i).copied())
                .collect();
            let vectors = self.embed_batch(&batch)?;
            for (&i, vector) in chunk.iter().zip(vectors) {
                if let Some(slot) = out.get_mut(i) {
                    *slot = vector;
                }
            }
        }
        Ok(out)
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(inference)?;
        let device = Device::Cpu;
        let ids = encodings
            .iter()
            .map(|e| Tensor::new(e.get_ids(), &device))
            .collect::<Result<Vec<_>, _>>()
            .map_err(inference)?;
        let mask = encodings
            .iter()
            .map(|e| Tensor::new(e.get_attention_mask(), &device))
            .collect::<Result<Vec<_>, _>>()
            .map_err(inference)?;
        let ids = Tensor::stack(&ids, 0).map_err(inference)?;
        let mask = Tensor::stack(&mask, 0).map_err(inference)?;
        let types = ids.zeros_like().map_err(inference)?;
        let hidden = self
            .model
            .forward(&ids, &types, Some(&mask))
            .map_err(inference)?;
        // Mean over the real tokens (padding masked out), then unit length.
        let pooled = (|| {
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let sum = hidden.broadcast_mul(&mask)?.sum(1)?;
            let count = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
            let mean = sum.broadcast_div(&count)?;
            let norm = mean
                .sqr()?
                .sum_keepdim(1)?
                .sqrt()?
                .clamp(1e-12f32, f32::MAX)?;
            mean.broadcast_div(&norm)?.to_vec2::<f32>()
        })();
        pooled.map_err(inference)
    }
}

/// The cache id of a pinned model: its name and the start of its weights' hash.
fn pinned_id(set: &FileSet) -> String {
    let weights = set
        .files
        .iter()
        .find(|f| f.name == "model.safetensors")
        .map_or("", |f| f.sha256);
    format!("{}-{}", set.name, weights.get(..16).unwrap_or(weights))
}

/// The text a tool is embedded as: its name in words, its description, and its parameters
/// with their descriptions, the fields a request is most likely to echo.
pub fn tool_text(tool: &Tool) -> String {
    let mut text = name_words(&tool.name);
    if !tool.description.trim().is_empty() {
        text.push_str(": ");
        text.push_str(tool.description.trim());
    }
    let mut params = Vec::new();
    if let Some(properties) = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
    {
        for (name, schema) in properties {
            let description = schema
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim();
            if description.is_empty() {
                params.push(name_words(name));
            } else {
                params.push(format!("{} ({description})", name_words(name)));
            }
        }
    }
    if !params.is_empty() {
        text.push_str(" Parameters: ");
        text.push_str(&params.join("; "));
    }
    text
}

/// `get_weather`, `sendEmail`, `math.factorial` → `get weather`, `send email`, `math factorial`.
fn name_words(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut prev_lower = false;
    for c in name.chars() {
        if c == '_' || c == '.' || c == '-' || c == '/' || c == ':' {
            if !out.ends_with(' ') {
                out.push(' ');
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            out.push(' ');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        out.extend(c.to_lowercase());
    }
    out.trim().to_owned()
}

/// How a [`DenseIndex`] was built: how many vectors came from the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildStats {
    /// Tools indexed.
    pub tools: usize,
    /// Tools whose vector was in the cache.
    pub cached: usize,
    /// Tools embedded now.
    pub embedded: usize,
}

/// One vector per tool, searched by cosine similarity (a dot product of unit vectors).
pub struct DenseIndex {
    embedder: Arc<Embedder>,
    /// Row `i` is tool `i`: `vectors[i * dim..(i + 1) * dim]`.
    vectors: Vec<f32>,
    dim: usize,
}

impl std::fmt::Debug for DenseIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenseIndex")
            .field("model", &self.embedder.id())
            .field("tools", &self.len())
            .finish()
    }
}

impl DenseIndex {
    /// Embeds every tool (those in `cache` are read from it instead, and the new ones are
    /// added to it).
    pub fn build<'a>(
        embedder: Arc<Embedder>,
        tools: impl Iterator<Item = &'a Tool>,
        cache: Option<&VectorCache>,
    ) -> Result<(DenseIndex, BuildStats), EmbedError> {
        let dim = embedder.dim();
        let texts: Vec<String> = tools.map(tool_text).collect();
        let keys: Vec<[u8; 32]> = texts.iter().map(|t| Sha256::digest(t).into()).collect();
        let stored = cache
            .map(|c| c.load(embedder.id(), dim))
            .unwrap_or_default();
        let mut vectors = vec![0f32; texts.len() * dim];
        let mut missing = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            match stored.get(key) {
                Some(vector) => {
                    if let Some(row) = vectors.get_mut(i * dim..(i + 1) * dim) {
                        row.copy_from_slice(vector);
                    }
                }
                None => missing.push(i),
            }
        }
        let stats = BuildStats {
            tools: texts.len(),
            cached: texts.len() - missing.len(),
            embedded: missing.len(),
        };
        if !missing.is_empty() {
            let batch: Vec<&str> = missing
                .iter()
                .filter_map(|&i| texts.get(i).map(String::as_str))
                .collect();
            let embedded = embedder.embed(&batch)?;
            for (&i, vector) in missing.iter().zip(&embedded) {
                if let Some(row) = vectors.get_mut(i * dim..(i + 1) * dim)
                    && vector.len() == dim
                {
                    row.copy_from_slice(vector);
                }
            }
            if let Some(cache) = cache {
                let fresh = missing
                    .iter()
                    .zip(embedded)
                    .filter_map(|(&i, vector)| keys.get(i).map(|key| (*key, vector)));
                cache.store(embedder.id(), dim, stored, fresh);
            }
        }
        Ok((
            DenseIndex {
                embedder,
                vectors,
                dim,
            },
            stats,
        ))
    }

    /// An index over vectors computed elsewhere (row `i` is tool `i`, each of the model's
    /// length and unit norm), for benchmarks of large catalogs.
    pub fn from_vectors(embedder: Arc<Embedder>, vectors: Vec<f32>) -> DenseIndex {
        let dim = embedder.dim();
        DenseIndex {
            embedder,
            vectors,
            dim,
        }
    }

    /// Tools indexed.
    pub fn len(&self) -> usize {
        self.vectors.len().checked_div(self.dim).unwrap_or(0)
    }

    /// True when no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vector of tool `index`.
    pub fn vector(&self, index: usize) -> Option<&[f32]> {
        self.vectors.get(index * self.dim..(index + 1) * self.dim)
    }

    /// Ranks by similarity to a query vector (of unit length).
    pub fn rank_vector(&self, query: &[f32], limit: usize) -> Vec<Scored> {
        if limit == 0 || query.len() != self.dim || self.dim == 0 {
            return Vec::new();
        }
        scan(&self.vectors, self.dim, query, limit, SCAN_BLOCK)
    }
}

/// The `limit` rows of `vectors` (each `dim` floats) nearest `query`, scanning blocks of
/// `block` floats in parallel.
fn scan(vectors: &[f32], dim: usize, query: &[f32], limit: usize, block: usize) -> Vec<Scored> {
    let rows_per_block = (block / dim).max(1);
    let block = rows_per_block * dim;
    let best_of = |(number, rows): (usize, &[f32])| {
        let candidates = rows
            .chunks_exact(dim)
            .enumerate()
            .map(|(offset, row)| Scored {
                index: number * rows_per_block + offset,
                // Cosine in -1..=1 shifted into 0..=1: `top` keeps positive scores only.
                score: (1.0 + dot(row, query)) / 2.0,
            });
        top(candidates, limit)
    };
    // A large catalog's scan is bound by memory bandwidth: blocks on all cores, then the best
    // of each block's best.
    let partial: Vec<Vec<Scored>> = if vectors.len() > block {
        use rayon::prelude::*;
        vectors.par_chunks(block).enumerate().map(best_of).collect()
    } else {
        vec![best_of((0, vectors))]
    };
    top(partial.into_iter().flatten(), limit)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight lanes summed separately: the compiler vectorises this, a plain fold it would not
    // (floating-point addition is not associative).
    let mut lanes = [0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for ((lane, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

impl Retriever for DenseIndex {
    fn rank(&self, query: &str, limit: usize) -> Vec<Scored> {
        if limit == 0 || query.trim().is_empty() || self.is_empty() {
            return Vec::new();
        }
        match self.embedder.embed(&[query]) {
            Ok(vectors) => vectors
                .first()
                .map(|v| self.rank_vector(v, limit))
                .unwrap_or_default(),
            Err(err) => {
                tracing::warn!(error = %err, "dense retrieval skipped for this request");
                Vec::new()
            }
        }
    }
}

/// Tool vectors on disk: one file per model in a directory, entries keyed by the SHA-256 of the
/// tool's embedded text, so a tool that changes is embedded again and one that does not is
/// read back.
///
/// The file is `PSMVEC01`, the vector length (u32), the entry count (u64), then each entry's
/// 32-byte key and its floats, little-endian. It is rewritten whole, to a temporary file
/// renamed into place, so a reader never sees half of it; a file that does not parse (cut
/// short, another version, another length) is ignored and replaced. It keeps at most
/// [`VectorCache::MAX_ENTRIES`] vectors: the catalog just indexed first, then earlier ones.
#[derive(Debug, Clone)]
pub struct VectorCache {
    dir: PathBuf,
}

const MAGIC: &[u8; 8] = b"PSMVEC01";
const HEADER: usize = 8 + 4 + 8;

impl VectorCache {
    /// Most vectors kept in one model's file (at 384 dimensions, ~380 MiB).
    pub const MAX_ENTRIES: usize = 250_000;

    /// A cache in this directory (created when first written).
    pub fn new(dir: impl Into<PathBuf>) -> VectorCache {
        VectorCache { dir: dir.into() }
    }

    /// `$PLANSMITH_CACHE_DIR/vectors`, else `$XDG_CACHE_HOME/plansmith/vectors`, else
    /// `~/.cache/plansmith/vectors`.
    pub fn default_dir() -> PathBuf {
        crate::cache_dir().join("vectors")
    }

    /// The file of one model.
    pub fn path(&self, model: &str) -> PathBuf {
        let safe: String = model
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.join(format!("{safe}.vectors"))
    }

    /// The stored vectors of `model`, by key; empty when there is no usable file.
    pub fn load(&self, model: &str, dim: usize) -> HashMap<[u8; 32], Vec<f32>> {
        let path = self.path(model);
        let Ok(bytes) = fs::read(&path) else {
            return HashMap::new();
        };
        match parse(&bytes, dim) {
            Some(entries) => entries,
            None => {
                tracing::debug!(path = %path.display(), "vector cache ignored: not a cache of this model");
                HashMap::new()
            }
        }
    }

    /// Writes `fresh` with as many of `old` as fit; failures are logged, never an error (the
    /// vectors are in memory already, the cache only saves the next start some work).
    pub fn store(
        &self,
        model: &str,
        dim: usize,
        old: HashMap<[u8; 32], Vec<f32>>,
        fresh: impl Iterator<Item = ([u8; 32], Vec<f32>)>,
    ) {
        let mut entries: Vec<([u8; 32], Vec<f32>)> =
            fresh.filter(|(_, v)| v.len() == dim).collect();
        let room = VectorCache::MAX_ENTRIES.saturating_sub(entries.len());
        let mut old: Vec<_> = old.into_iter().collect();
        // Deterministic content whatever the hash map's order.
        old.sort_unstable_by_key(|entry| entry.0);
        entries.extend(old.into_iter().take(room));
        entries.truncate(VectorCache::MAX_ENTRIES);
        let path = self.path(model);
        if let Err(err) = crate::files::write_atomically(&self.dir, &path, &encode(&entries, dim)) {
            tracing::warn!(path = %path.display(), error = %err, "could not write the vector cache");
        }
    }
}

fn parse(bytes: &[u8], dim: usize) -> Option<HashMap<[u8; 32], Vec<f32>>> {
    if bytes.get(..8)? != MAGIC {
        return None;
    }
    let stored_dim = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?) as usize;
    let count = usize::try_from(u64::from_le_bytes(bytes.get(12..20)?.try_into().ok()?)).ok()?;
    let entry = 32 + 4 * dim;
    if stored_dim != dim || count > VectorCache::MAX_ENTRIES {
        return None;
    }
    if bytes.len() != HEADER.checked_add(count.checked_mul(entry)?)? {
        return None;
    }
    let mut entries = HashMap::with_capacity(count);
    for raw in bytes.get(HEADER..)?.chunks_exact(entry) {
        let key: [u8; 32] = raw.get(..32)?.try_into().ok()?;
        let vector = raw
            .get(32..)?
            .chunks_exact(4)
            .map(|f| f.try_into().map(f32::from_le_bytes))
            .collect::<Result<Vec<f32>, _>>()
            .ok()?;
        entries.insert(key, vector);
    }
    Some(entries)
}

fn encode(entries: &[([u8; 32], Vec<f32>)], dim: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + entries.len() * (32 + 4 * dim));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&u32::try_from(dim).unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (key, vector) in entries {
        out.extend_from_slice(key);
        for value in vector {
            out.extend_from_slice(&value.to_le_bytes());
        }
    }
    out
}

/// A [`DenseIndex`] built at its first search: the model is loaded and the catalog embedded
/// (or read from the cache) only when a request needs more than keyword order.
///
/// When the model is not installed, or fails, the first search logs one warning naming the
/// cause and what to do, and every search then returns nothing, so a [`plansmith_core::Fusion`]
/// with keyword search falls back to keyword order alone.
pub struct LazyDense {
    catalog: Catalog,
    models_dir: PathBuf,
    cache: Option<VectorCache>,
    index: OnceLock<Option<DenseIndex>>,
}

impl std::fmt::Debug for LazyDense {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyDense")
            .field("tools", &self.catalog.len())
            .field("built", &self.index.get().is_some())
            .finish()
    }
}

impl LazyDense {
    /// Dense retrieval over the catalog's tools with the pinned model of `models_dir`, caching
    /// vectors in `cache` (none: embed at every start).
    pub fn new(catalog: Catalog, models_dir: PathBuf, cache: Option<VectorCache>) -> LazyDense {
        LazyDense {
            catalog,
            models_dir,
            cache,
            index: OnceLock::new(),
        }
    }

    /// The index, built now if this is the first call; `None` when the model is unusable.
    pub fn index(&self) -> Option<&DenseIndex> {
        self.index
            .get_or_init(|| {
                let built = Embedder::shared(&self.models_dir).and_then(|embedder| {
                    let tools = self.catalog.tools().map(|t| &t.tool);
                    DenseIndex::build(embedder, tools, self.cache.as_ref())
                });
                match built {
                    Ok((index, stats)) => {
                        tracing::debug!(
                            tools = stats.tools,
                            cached = stats.cached,
                            embedded = stats.embedded,
                            "dense tool index built"
                        );
                        Some(index)
                    }
                    Err(err) => {
                        tracing::warn!("keyword retrieval only: {err}");
                        None
                    }
                }
            })
            .as_ref()
    }
}

impl Retriever for LazyDense {
    fn rank(&self, query: &str, limit: usize) -> Vec<Scored> {
        if limit == 0 || self.catalog.is_empty() {
            return Vec::new();
        }
        self.index()
            .map(|index| index.rank(query, limit))
            .unwrap_or_default()
    }

    fn prepare(&self) {
        if !self.catalog.is_empty() {
            self.index();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_words() {
        assert_eq!(name_words("get_weather"), "get weather");
        assert_eq!(name_words("sendEmail"), "send email");
        assert_eq!(name_words("math.factorial"), "math factorial");
        assert_eq!(name_words("HTTPRequest"), "httprequest");
        assert_eq!(name_words("ipv4Address"), "ipv4 address");
    }

    #[test]
    fn cache_files_round_trip_and_reject_what_is_not_theirs() {
        let dir = tempfile::tempdir().unwrap();
        let cache = VectorCache::new(dir.path());
        let key = [7u8; 32];
        cache.store(
            "m",
            3,
            HashMap::new(),
            [(key, vec![0.5, -1.0, 2.0])].into_iter(),
        );
        assert_eq!(cache.load("m", 3).get(&key), Some(&vec![0.5, -1.0, 2.0]));
        // Another vector length, another model, a cut-off file: nothing, never an error.
        assert!(cache.load("m", 4).is_empty());
        assert!(cache.load("other", 3).is_empty());
        let path = cache.path("m");
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(cache.load("m", 3).is_empty());
        fs::write(&path, b"PSMVEC01\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff").unwrap();
        assert!(cache.load("m", 3).is_empty());
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["m.vectors"]);
    }

    #[test]
    fn a_scan_in_parallel_blocks_ranks_as_one_pass() {
        let dim = 4;
        let rows: Vec<f32> = (0..1000)
            .flat_map(|i| {
                let angle = i as f32 * 0.37;
                [angle.cos(), angle.sin(), 0.1 * (i % 7) as f32, 0.0]
            })
            .collect();
        let query = [0.6, 0.8, 0.0, 0.0];
        let whole = scan(&rows, dim, &query, 10, usize::MAX);
        for block in [dim, 7 * dim, 100 * dim, 999 * dim] {
            assert_eq!(scan(&rows, dim, &query, 10, block), whole, "block {block}");
        }
        assert_eq!(whole.len(), 10);
    }

    #[test]
    fn dot_products_match_the_plain_sum() {
        let a: Vec<f32> = (0..21).map(|i| i as f32 * 0.25).collect();
        let b: Vec<f32> = (0..21).map(|i| 1.0 - i as f32 * 0.1).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-4);
    }
}
