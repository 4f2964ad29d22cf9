//! [`Fusion`]: several rankings of one catalog combined by reciprocal-rank fusion.

use std::collections::HashMap;

use super::{Retriever, Scored, top};

/// Büttcher, 2009): a tool scores `Σ 1 / (K + rank)` over the rankings it appears in, with
/// rank 1 for the best, and `K` = [`Fusion::K`].
///
/// Fusing ranks rather than scores needs no calibration between retrievers whose scores live
/// on different scales (BM25F is unbounded, a cosine is in `-1..=1`), and a tool that both
/// rankings place high beats one that only one of them likes. Each retriever is asked for its
/// best [`Fusion::DEPTH`] tools (or `limit`, if more), so a tool one of them misses entirely can
/// still come in from the other.
///
/// [`Retriever::order`] asks only the first retriever: a catalog offered whole needs an order,
/// not a search, and the others (an embedding model) need not start for it.
pub struct Fusion {
    parts: Vec<std::sync::Arc<dyn Retriever>>,
}

impl std::fmt::Debug for Fusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fusion")
            .field("parts", &self.parts.len())
            .finish()
    }
}

impl Fusion {
    /// The constant of the fusion, the value of the original paper (not tuned here): it damps
    /// the difference between the first ranks, so one retriever's top tool does not outweigh
    /// agreement between both.
    pub const K: f32 = 60.0;

    /// How many tools each retriever is asked for, at least.
    pub const DEPTH: usize = 50;

    /// Fuses these rankings; the first also orders catalogs that are offered whole.
    pub fn new(parts: Vec<std::sync::Arc<dyn Retriever>>) -> Fusion {
        Fusion { parts }
    }
}

impl Retriever for Fusion {
    fn rank(&self, query: &str, limit: usize) -> Vec<Scored> {
        if limit == 0 {
            return Vec::new();
        }
        let depth = limit.max(Fusion::DEPTH);
        let mut scores: HashMap<usize, f32> = HashMap::new();
        for part in &self.parts {
            for (rank, scored) in part.rank(query, depth).iter().enumerate() {
                *scores.entry(scored.index).or_default() += 1.0 / (Fusion::K + (rank + 1) as f32);
            }
        }
        top(
            scores
                .into_iter()
                .map(|(index, score)| Scored { index, score }),
            limit,
        )
    }

    fn order(&self, query: &str, limit: usize) -> Vec<Scored> {
        self.parts
            .first()
            .map(|part| part.order(query, limit))
            .unwrap_or_default()
    }

    fn prepare(&self) {
        for part in &self.parts {
            part.prepare();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ranking fixed in advance: tools in this order, whatever the query.
    struct Fixed(Vec<usize>);

    impl Retriever for Fixed {
        fn rank(&self, _query: &str, limit: usize) -> Vec<Scored> {
            self.0
                .iter()
                .take(limit)
                .enumerate()
                .map(|(rank, &index)| Scored {
                    index,
                    score: 1.0 / (rank + 1) as f32,
                })
                .collect()
        }
    }

    #[test]
    fn fusion_prefers_agreement_and_keeps_what_one_ranking_alone_found() {
        let fused = Fusion::new(vec![
            std::sync::Arc::new(Fixed(vec![0, 1, 2])),
            std::sync::Arc::new(Fixed(vec![1, 3, 0])),
        ]);
        let order: Vec<usize> = fused.rank("q", 10).iter().map(|s| s.index).collect();
        // 1 is second and first; 0 first and third; 3 (only the second ranking) before 2.
        assert_eq!(order, [1, 0, 3, 2]);
        assert_eq!(fused.rank("q", 2).len(), 2);
        assert!(fused.rank("q", 0).is_empty());
        // A catalog offered whole is ordered by the first ranking alone.
        let whole: Vec<usize> = fused.order("q", 10).iter().map(|s| s.index).collect();
        assert_eq!(whole, [0, 1, 2]);
    }
}
