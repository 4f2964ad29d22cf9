//! [`Bm25Index`]: the keyword index over a tool's name, description and parameters, scored
//! with BM25F.

use std::collections::HashMap;

use serde_json::Value;

use super::analyze::{analyze, query_tokens};
use super::{Retriever, Scored, best};
use crate::catalog::{Catalog, Tool};

/// Weight and length normalisation of one field of a tool in [`Bm25Index`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldParams {
    /// How much one occurrence of a word in this field counts, relative to the description.
    pub weight: f32,
    /// Length normalisation in `0..=1`: 0 ignores the field's length, 1 divides by it fully.
    pub b: f32,
}

/// Parameters of [`Bm25Index`]. The defaults are the textbook values where the data did not
/// argue otherwise; they were checked on the BFCL and MetaTool development sets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation: how fast repeated occurrences stop adding to the score.
    pub k1: f32,
    /// The tool's name, split into words, plus the whole name folded into one word.
    pub name: FieldParams,
    /// The tool's description.
    pub description: FieldParams,
    /// Names of the tool's parameters (nested ones too), split like the tool's name.
    pub parameter_names: FieldParams,
    /// Descriptions of the tool's parameters (nested ones too) and their string enum values.
    pub parameter_descriptions: FieldParams,
}

impl Default for Bm25Params {
    fn default() -> Bm25Params {
        // k1 = 1.2 and b = 0.75 are the usual BM25 values; on the dev sets every k1 in 0.9..=2
        // and b in 0.5..=0.9 lies within ±0.01 MRR, so nothing is gained by moving them. Names
        // are short and precise: double weight, and a milder b because a name's length says
        // little about its topic. Parameter names are identifiers such as `city` or `unit`:
        // half weight. Parameter descriptions are long and repetitive ("The x of the y"): 0.3.
        // Dropping them costs 0.04 MRR on BFCL, weighting them 1.0 costs 0.01.
        Bm25Params {
            k1: 1.2,
            name: FieldParams {
                weight: 2.0,
                b: 0.5,
            },
            description: FieldParams {
                weight: 1.0,
                b: 0.75,
            },
            parameter_names: FieldParams {
                weight: 0.5,
                b: 0.5,
            },
            parameter_descriptions: FieldParams {
                weight: 0.3,
                b: 0.75,
            },
        }
    }
}

impl Bm25Params {
    fn fields(&self) -> [FieldParams; N_FIELDS] {
        [
            self.name,
            self.description,
            self.parameter_names,
            self.parameter_descriptions,
        ]
    }
}

const N_FIELDS: usize = 4;
const NAME: usize = 0;
const DESCRIPTION: usize = 1;

/// How deep [`Bm25Index`] looks into nested parameter schemas (`properties`, `items`, …).
const MAX_SCHEMA_DEPTH: usize = 4;

/// A keyword index over tools, scored with BM25F.
///
/// Each tool is four fields: its name, description, parameter names and parameter descriptions
/// (see [`Bm25Params`]). Text goes through [`tokenize`]. A term's occurrences are summed over
/// the fields, each weighted and normalised by that field's length, and only then saturated
/// (BM25F, Robertson & Zaragoza), so a word that appears in the name *and* the description
/// counts more than once but less than twice, and a long parameter list does not drown the name.
///
/// The per-tool part of the score does not depend on the query, so it is computed when the
/// index is built and stored in the postings: a query costs one pass over the postings of its
/// words, not over the catalog.
///
/// [`tokenize`]: super::tokenize()
#[derive(Debug, Clone)]
pub struct Bm25Index {
    terms: HashMap<String, u32>,
    idf: Vec<f32>,
    /// Postings of term `t` are `postings[offsets[t]..offsets[t + 1]]`, in tool order.
    offsets: Vec<usize>,
    postings: Vec<Posting>,
    n_docs: usize,
}

#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    /// The saturated, length-normalised term frequency: `tf (k1 + 1) / (tf + k1)`.
    weight: f32,
}

impl Bm25Index {
    /// Indexes every tool of the catalog with the default parameters.
    pub fn new(catalog: &Catalog) -> Bm25Index {
        Bm25Index::with_params(catalog, Bm25Params::default())
    }

    /// Indexes every tool of the catalog with these parameters.
    pub fn with_params(catalog: &Catalog, params: Bm25Params) -> Bm25Index {
        Bm25Index::build(catalog.tools().map(|t| &t.tool), params)
    }

    /// Indexes tools that are not in a catalog (positions are indices into `tools`).
    pub fn from_tools(tools: &[Tool], params: Bm25Params) -> Bm25Index {
        Bm25Index::build(tools.iter(), params)
    }

    /// Number of indexed tools.
    pub fn len(&self) -> usize {
        self.n_docs
    }

    /// True when no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.n_docs == 0
    }

    fn build<'a>(tools: impl Iterator<Item = &'a Tool>, params: Bm25Params) -> Bm25Index {
        let mut terms: HashMap<String, u32> = HashMap::new();
        // Per tool: (term, occurrences per field), and the length of each field.
        let mut doc_terms: Vec<Vec<(u32, [u32; N_FIELDS])>> = Vec::new();
        let mut doc_lengths: Vec<[u32; N_FIELDS]> = Vec::new();
        let mut fields: [Vec<String>; N_FIELDS] = Default::default();
        let mut counts: HashMap<u32, [u32; N_FIELDS]> = HashMap::new();
        for tool in tools {
            if u32::try_from(doc_terms.len()).is_err() {
                break;
            }
            tool_fields(tool, &mut fields);
            counts.clear();
            let mut lengths = [0u32; N_FIELDS];
            for (field, tokens) in fields.iter_mut().enumerate() {
                lengths[field] = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
                for token in tokens.drain(..) {
                    let next_id = u32::try_from(terms.len()).unwrap_or(u32::MAX);
                    let id = *terms.entry(token).or_insert(next_id);
                    let tf = counts.entry(id).or_default();
                    tf[field] = tf[field].saturating_add(1);
                }
            }
            let mut entries: Vec<(u32, [u32; N_FIELDS])> = counts.drain().collect();
            entries.sort_unstable_by_key(|&(id, _)| id);
            doc_terms.push(entries);
            doc_lengths.push(lengths);
        }

        let n_docs = doc_terms.len();
        let n_terms = terms.len();
        let mut average = [0f64; N_FIELDS];
        for lengths in &doc_lengths {
            for (sum, &len) in average.iter_mut().zip(lengths) {
                *sum += f64::from(len);
            }
        }
        for sum in &mut average {
            *sum /= n_docs.max(1) as f64;
        }

        let mut df = vec![0usize; n_terms];
        for entries in &doc_terms {
            for &(id, _) in entries {
                if let Some(count) = df.get_mut(id as usize) {
                    *count += 1;
                }
            }
        }
        let mut offsets = Vec::with_capacity(n_terms + 1);
        let mut total = 0;
        offsets.push(0);
        for &count in &df {
            total += count;
            offsets.push(total);
        }
        let idf = df
            .iter()
            .map(|&count| {
                let (n, count) = (n_docs as f64, count as f64);
                (1.0 + (n - count + 0.5) / (count + 0.5)).ln() as f32
            })
            .collect();

        let field_params = params.fields();
        let k1 = f64::from(params.k1.max(0.0));
        let mut cursor = offsets.clone();
        let mut postings = vec![
            Posting {
                doc: 0,
                weight: 0.0
            };
            total
        ];
        for (doc, (entries, lengths)) in doc_terms.iter().zip(&doc_lengths).enumerate() {
            let Ok(doc) = u32::try_from(doc) else { break };
            let mut norm = [1f64; N_FIELDS];
            for field in 0..N_FIELDS {
                let b = f64::from(field_params[field].b.clamp(0.0, 1.0));
                if average[field] > 0.0 {
                    norm[field] = 1.0 - b + b * f64::from(lengths[field]) / average[field];
                }
            }
            for &(id, tf) in entries {
                let mut pseudo_tf = 0.0;
                for field in 0..N_FIELDS {
                    if tf[field] > 0 && norm[field] > 0.0 {
                        let weight = f64::from(field_params[field].weight.max(0.0));
                        pseudo_tf += weight * f64::from(tf[field]) / norm[field];
                    }
                }
                let weight = if pseudo_tf > 0.0 {
                    pseudo_tf * (k1 + 1.0) / (pseudo_tf + k1)
                } else {
                    0.0
                };
                if let Some(slot) = cursor.get_mut(id as usize)
                    && let Some(posting) = postings.get_mut(*slot)
                {
                    *posting = Posting {
                        doc,
                        weight: weight as f32,
                    };
                    *slot += 1;
                }
            }
        }
        Bm25Index {
            terms,
            idf,
            offsets,
            postings,
            n_docs,
        }
    }

    fn term_postings(&self, id: u32) -> &[Posting] {
        let id = id as usize;
        match (self.offsets.get(id), self.offsets.get(id + 1)) {
            (Some(&start), Some(&end)) => self.postings.get(start..end).unwrap_or(&[]),
            _ => &[],
        }
    }
}

impl Retriever for Bm25Index {
    fn rank(&self, query: &str, limit: usize) -> Vec<Scored> {
        if limit == 0 || self.n_docs == 0 {
            return Vec::new();
        }
        let mut ids: Vec<u32> = query_tokens(query)
            .iter()
            .filter_map(|t| self.terms.get(t).copied())
            .collect();
        // Each distinct word counts once, however often the query repeats it.
        ids.sort_unstable();
        ids.dedup();
        let n_postings: usize = ids.iter().map(|&id| self.term_postings(id).len()).sum();
        let capacity = limit.min(self.n_docs);
        if n_postings.saturating_mul(8) >= self.n_docs {
            let mut scores = vec![0f32; self.n_docs];
            for &id in &ids {
                let idf = self.idf.get(id as usize).copied().unwrap_or(0.0);
                for posting in self.term_postings(id) {
                    if let Some(score) = scores.get_mut(posting.doc as usize) {
                        *score += idf * posting.weight;
                    }
                }
            }
            let candidates = scores
                .into_iter()
                .enumerate()
                .map(|(index, score)| Scored { index, score });
            best(candidates, limit, capacity)
        } else {
            let mut scores: HashMap<u32, f32> = HashMap::with_capacity(n_postings);
            for &id in &ids {
                let idf = self.idf.get(id as usize).copied().unwrap_or(0.0);
                for posting in self.term_postings(id) {
                    *scores.entry(posting.doc).or_default() += idf * posting.weight;
                }
            }
            let candidates = scores.into_iter().map(|(doc, score)| Scored {
                index: doc as usize,
                score,
            });
            best(candidates, limit, capacity)
        }
    }
}

/// The four fields of a tool, as tokens.
fn tool_fields(tool: &Tool, fields: &mut [Vec<String>; N_FIELDS]) {
    for field in fields.iter_mut() {
        field.clear();
    }
    analyze(&tool.name, true, &mut fields[NAME]);
    analyze(&tool.description, false, &mut fields[DESCRIPTION]);
    let [_, _, names, descriptions] = fields;
    schema_fields(&tool.input_schema, 0, names, descriptions);
}

/// Parameter names and descriptions of an object schema, nested ones included.
fn schema_fields(
    schema: &Value,
    depth: usize,
    names: &mut Vec<String>,
    descriptions: &mut Vec<String>,
) {
    if depth >= MAX_SCHEMA_DEPTH {
        return;
    }
    let Some(object) = schema.as_object() else {
        return;
    };
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            analyze(name, true, names);
            if let Some(text) = property.get("description").and_then(Value::as_str) {
                analyze(text, false, descriptions);
            }
            if let Some(values) = property.get("enum").and_then(Value::as_array) {
                for value in values.iter().filter_map(Value::as_str) {
                    analyze(value, false, descriptions);
                }
            }
            schema_fields(property, depth + 1, names, descriptions);
        }
    }
    if let Some(items) = object.get("items") {
        schema_fields(items, depth + 1, names, descriptions);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        for branch in object
            .get(key)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            schema_fields(branch, depth + 1, names, descriptions);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use serde_json::json;

    use super::super::{best_first, select};
    use super::*;

    fn catalog() -> Catalog {
        Catalog::from_json(&json!([
            {"name": "get_weather", "description": "Current weather and forecast for a city.",
             "input_schema": {"type": "object", "properties": {
                 "city": {"type": "string", "description": "City name"},
                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}},
            {"name": "sendEmail", "description": "Send an e-mail message to a recipient.",
             "input_schema": {"type": "object", "properties": {
                 "to": {"type": "string", "description": "Recipient address"},
                 "body": {"type": "string"}}}},
            {"name": "math.factorial", "description": "Calculate the factorial of a number.",
             "input_schema": {"type": "object", "properties": {"number": {"type": "integer"}}}},
            {"name": "HTTPRequest", "description": "Make an HTTP request to a URL.",
             "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}},
            {"name": "search_flights", "description": "Search flights between two airports.",
             "input_schema": {"type": "object", "properties": {
                 "legs": {"type": "array", "items": {"type": "object", "properties": {
                     "origin": {"type": "string", "description": "Departure airport code"}}}}}}},
        ]))
        .unwrap()
    }

    fn names(catalog: &Catalog, ranked: &[Scored]) -> Vec<String> {
        ranked
            .iter()
            .map(|s| catalog.tool_at(s.index).unwrap().tool.name.clone())
            .collect()
    }

    #[test]
    fn ranks_the_matching_tool_first() {
        let catalog = catalog();
        let index = Bm25Index::new(&catalog);
        let table = [
            ("What's the weather like in Paris?", "get_weather"),
            ("temperature in fahrenheit", "get_weather"),
            ("email the report to my boss", "sendEmail"),
            ("compute 5 factorial", "math.factorial"),
            ("fetch https URL with an http request", "HTTPRequest"),
            ("use math.factorial", "math.factorial"),
            ("flights from the departure airport", "search_flights"),
        ];
        for (query, expected) in table {
            let ranked = index.rank(query, 3);
            assert_eq!(
                names(&catalog, &ranked).first().map(String::as_str),
                Some(expected),
                "{query}"
            );
            assert!(
                ranked
                    .windows(2)
                    .all(|w| best_first(&w[0], &w[1]) == Ordering::Less),
                "{query}"
            );
        }
    }

    #[test]
    fn rank_limits_and_skips_non_matches() {
        let catalog = catalog();
        let index = Bm25Index::new(&catalog);
        assert!(index.rank("", 10).is_empty());
        assert!(index.rank("the of and", 10).is_empty());
        assert!(index.rank("zyxxy", 10).is_empty());
        assert!(index.rank("weather", 0).is_empty());
        assert_eq!(index.rank("send weather factorial request", 2).len(), 2);
        assert_eq!(index.rank("weather", 10).len(), 1);
    }

    #[test]
    fn ties_break_by_catalog_position() {
        let tools: Vec<Tool> = (0..20)
            .map(|idx| Tool {
                name: format!("clone_{idx}"),
                description: "Same words.".into(),
                input_schema: json!({"type": "object"}),
                output_schema: None,
                annotations: None,
            })
            .collect();
        let index = Bm25Index::from_tools(&tools, Bm25Params::default());
        let ranked = index.rank("same words", 5);
        assert_eq!(
            ranked.iter().map(|s| s.index).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn empty_catalog() {
        let catalog = Catalog::empty();
        let index = Bm25Index::new(&catalog);
        assert!(index.is_empty());
        assert!(index.rank("weather", 5).is_empty());
        assert!(select(&catalog, &index, "weather", 5, &["get_weather".into()]).is_empty());
        assert!(select(&catalog, &index, "", 0, &[]).is_empty());
    }

    #[test]
    fn select_pins_ranks_and_fills() {
        let catalog = catalog();
        let index = Bm25Index::new(&catalog);
        let pin = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        // Best match only.
        assert_eq!(select(&catalog, &index, "weather in Rome", 1, &[]), [0]);
        // Pinned first and counted; unknown and repeated pins ignored.
        assert_eq!(
            select(
                &catalog,
                &index,
                "weather in Rome",
                2,
                &pin(&["HTTPRequest", "nope", "HTTPRequest"])
            ),
            [3, 0]
        );
        // A pinned tool that also ranks is not repeated.
        assert_eq!(
            select(
                &catalog,
                &index,
                "weather in Rome",
                2,
                &pin(&["get_weather"])
            ),
            [0, 1]
        );
        // More pins than top_k: all kept.
        assert_eq!(
            select(
                &catalog,
                &index,
                "weather",
                1,
                &pin(&["sendEmail", "math.factorial"])
            ),
            [1, 2]
        );
        // Fewer matches than top_k: filled in catalog order.
        assert_eq!(select(&catalog, &index, "factorial", 3, &[]), [2, 0, 1]);
        // Empty query: catalog order.
        assert_eq!(select(&catalog, &index, "", 2, &[]), [0, 1]);
        // top_k == 0: everything, pinned first.
        assert_eq!(
            select(&catalog, &index, "weather", 0, &pin(&["search_flights"])),
            [4, 0, 1, 2, 3]
        );
        // top_k larger than the catalog: everything once.
        assert_eq!(select(&catalog, &index, "weather", 50, &[]).len(), 5);
    }

    #[test]
    fn dense_and_sparse_accumulation_agree() {
        // 200 tools: a rare term takes the sparse path, a common one the dense path.
        let tools: Vec<Tool> = (0..200)
            .map(|idx| Tool {
                name: format!("tool_{idx}"),
                description: if idx % 50 == 0 {
                    "rare common".into()
                } else {
                    "common".into()
                },
                input_schema: json!({"type": "object"}),
                output_schema: None,
                annotations: None,
            })
            .collect();
        let index = Bm25Index::from_tools(&tools, Bm25Params::default());
        let rare = index.rank("rare", 10);
        assert_eq!(
            rare.iter().map(|s| s.index).collect::<Vec<_>>(),
            [0, 50, 100, 150]
        );
        let both = index.rank("rare common", 4);
        assert_eq!(
            both.iter().map(|s| s.index).collect::<Vec<_>>(),
            [0, 50, 100, 150]
        );
        assert!((both[0].score - rare[0].score) > 0.0);
    }
}
