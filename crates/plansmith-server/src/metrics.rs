//! Prometheus metrics, rendered by hand in the text exposition format (no registry crate).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use plansmith_core::{Outcome, OutcomeStatus};

/// Upper bounds of the latency buckets, in seconds.
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Upper bounds of the count buckets (steps per plan, iterations).
const COUNTS: &[f64] = &[0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0];

#[derive(Debug, Clone, Default)]
struct Histogram {
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], value: f64) {
        if self.buckets.len() != bounds.len() {
            self.buckets = vec![0; bounds.len()];
        }
        for (bucket, bound) in self.buckets.iter_mut().zip(bounds) {
            if value <= *bound {
                *bucket += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }
}

#[derive(Debug, Default)]
struct Inner {
    plans: BTreeMap<String, u64>,
    parse_failures: u64,
    repairs: u64,
    validation_errors: BTreeMap<String, u64>,
    ready: u64,
    planned: u64,
    steps: Histogram,
    iterations: Histogram,
    stages: BTreeMap<&'static str, Histogram>,
    tokens: BTreeMap<&'static str, u64>,
    http: BTreeMap<(String, u16), Histogram>,
}

/// The server's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    /// Empty metrics.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Records one planning outcome.
    pub fn record_outcome(&self, outcome: &Outcome) {
        let Ok(mut m) = self.inner.lock() else {
            return;
        };
        *m.plans.entry(outcome.status.name().to_owned()).or_default() += 1;
        m.planned += 1;
        if outcome.status == OutcomeStatus::Ready {
            m.ready += 1;
        }
        let d = &outcome.diagnostics;
        m.repairs += u64::from(d.repairs);
        for attempt in &d.attempts {
            if attempt.shape.is_none() {
                m.parse_failures += 1;
            }
            for diag in attempt.diagnostics.iter().filter(|x| x.is_error()) {
                *m.validation_errors
                    .entry(diag.code.as_str().to_owned())
                    .or_default() += 1;
            }
        }
        m.steps.observe(COUNTS, outcome.plan.steps.len() as f64);
        m.iterations.observe(COUNTS, d.attempts.len() as f64);
        let t = d.timings;
        for (stage, us) in [
            ("select", t.select_us),
            ("render", t.render_us),
            ("queue", t.queue_us),
            ("generate", t.generate_us),
            ("parse", t.parse_us),
            ("validate", t.validate_us),
            ("total", t.total_us),
        ] {
            m.stages
                .entry(stage)
                .or_default()
                .observe(SECONDS, us as f64 / 1e6);
        }
        *m.tokens.entry("prompt").or_default() += u64::from(d.usage.prompt_tokens);
        *m.tokens.entry("completion").or_default() += u64::from(d.usage.completion_tokens);
    }

    /// Records a failed planning call (no outcome).
    pub fn record_failure(&self) {
        if let Ok(mut m) = self.inner.lock() {
            *m.plans.entry("failed".to_owned()).or_default() += 1;
            m.planned += 1;
        }
    }

    /// Records a planning call dropped before the planner answered: its client went away, or the
    /// request timed out (counted by outcome as `abandoned`, and left out of the ready ratio: it
    /// never ended).
    pub fn record_abandoned(&self) {
        if let Ok(mut m) = self.inner.lock() {
            *m.plans.entry("abandoned".to_owned()).or_default() += 1;
        }
    }

    /// Records one HTTP request's latency by route template and status.
    pub fn record_http(&self, route: &str, status: u16, seconds: f64) {
        if let Ok(mut m) = self.inner.lock() {
            m.http
                .entry((route.to_owned(), status))
                .or_default()
                .observe(SECONDS, seconds);
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let Ok(m) = self.inner.lock() else {
            return out;
        };
        let o = &mut out;
        header(
            o,
            "plansmith_plans_total",
            "counter",
            "Planning calls by outcome (abandoned: dropped before an answer, by a client that went away or a request timeout).",
        );
        for (outcome, n) in &m.plans {
            let _ = writeln!(o, "plansmith_plans_total{{outcome=\"{outcome}\"}} {n}");
        }
        header(
            o,
            "plansmith_parse_failures_total",
            "counter",
            "Model outputs that did not parse.",
        );
        let _ = writeln!(o, "plansmith_parse_failures_total {}", m.parse_failures);
        header(o, "plansmith_repairs_total", "counter", "Repair rounds.");
        let _ = writeln!(o, "plansmith_repairs_total {}", m.repairs);
        header(
            o,
            "plansmith_validation_errors_total",
            "counter",
            "Validation errors by code.",
        );
        for (code, n) in &m.validation_errors {
            let _ = writeln!(
                o,
                "plansmith_validation_errors_total{{code=\"{code}\"}} {n}"
            );
        }
        header(
            o,
            "plansmith_ready_ratio",
            "gauge",
            "Share of the planning calls that ended (not abandoned) that ended ready.",
        );
        let ratio = if m.planned == 0 {
            0.0
        } else {
            m.ready as f64 / m.planned as f64
        };
        let _ = writeln!(o, "plansmith_ready_ratio {ratio}");
        header(
            o,
            "plansmith_steps_per_plan",
            "histogram",
            "Steps per returned plan.",
        );
        histogram(o, "plansmith_steps_per_plan", "", COUNTS, &m.steps);
        header(
            o,
            "plansmith_iterations",
            "histogram",
            "Generations per planning call.",
        );
        histogram(o, "plansmith_iterations", "", COUNTS, &m.iterations);
        header(
            o,
            "plansmith_stage_seconds",
            "histogram",
            "Time per planning stage.",
        );
        for (stage, h) in &m.stages {
            histogram(
                o,
                "plansmith_stage_seconds",
                &format!("stage=\"{stage}\""),
                SECONDS,
                h,
            );
        }
        header(
            o,
            "plansmith_llm_tokens_total",
            "counter",
            "LLM tokens by kind.",
        );
        for (kind, n) in &m.tokens {
            let _ = writeln!(o, "plansmith_llm_tokens_total{{kind=\"{kind}\"}} {n}");
        }
        header(
            o,
            "plansmith_http_request_seconds",
            "histogram",
            "HTTP latency by route and status.",
        );
        for ((route, status), h) in &m.http {
            let labels = format!("route=\"{}\",status=\"{status}\"", route.replace('"', ""));
            histogram(o, "plansmith_http_request_seconds", &labels, SECONDS, h);
        }
        out
    }
}

/// The event relay's counters ([`crate::EventBus::relay`]), appended to the exposition of a
/// server whose bus is relayed.
pub(crate) fn render_relay(out: &mut String, stats: crate::events::RelayStats) {
    header(
        out,
        "plansmith_events_relayed_total",
        "counter",
        "Plan events relayed between the processes on a PostgreSQL store: sent, received, and failed (not sent: the database could not be reached or the queue was full).",
    );
    for (direction, n) in [
        ("sent", stats.sent),
        ("received", stats.received),
        ("failed", stats.failed),
    ] {
        let _ = writeln!(
            out,
            "plansmith_events_relayed_total{{direction=\"{direction}\"}} {n}"
        );
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, labels: &str, bounds: &[f64], h: &Histogram) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (i, bound) in bounds.iter().enumerate() {
        let n = h.buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.count);
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(out, "{name}_sum{braces} {}", h.sum);
    let _ = writeln!(out, "{name}_count{braces} {}", h.count);
}
