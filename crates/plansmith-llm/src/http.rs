//! The HTTP transport both clients share: one `reqwest` client, per-try timeouts, retries with
//! jittered exponential backoff honouring `Retry-After`, and error text with the key redacted.

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use plansmith_core::LlmError;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::config::{ClientConfig, RetryPolicy, Secret};

/// Longest part of an error body quoted in an error.
const BODY_QUOTE: usize = 600;

/// What one try can end with, besides success.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server answered with a non-success status.
    Status {
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
    /// No answer: connection refused or reset, DNS, TLS, body cut off.
    Connection(String),
    /// The try took longer than the request timeout.
    Timeout,
}

impl Failure {
    fn retryable(&self) -> bool {
        match self {
            Failure::Status { status, body, .. } => {
                *status == 429
                    || *status == 408
                    || (*status >= 500 && !crate::negotiate::is_validation_error(body))
            }
            Failure::Connection(_) | Failure::Timeout => true,
        }
    }
}

/// A finished try.
pub(crate) enum Reply {
    /// The whole body (non-streaming calls).
    Body(Vec<u8>),
    /// The open response (streaming calls read it themselves).
    Stream(reqwest::Response),
}

/// The shared transport.
#[derive(Debug)]
pub(crate) struct Transport {
    client: reqwest::Client,
    pub(crate) timeout: Duration,
    retry: RetryPolicy,
    key: Option<Secret>,
    /// The base URL's password and query values (`https://user:PASS@host/v1?key=VALUE`): a
    /// transport error quotes the URL it failed on.
    url_secrets: Vec<String>,
}

impl Transport {
    pub(crate) fn new(config: &ClientConfig) -> Result<Transport, LlmError> {
        // No redirects: following one would send the prompt (and, to the same host, the key)
        // wherever a server, or whoever answers in its place, points.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|err| LlmError::Backend(format!("cannot build the HTTP client: {err}")))?;
        Ok(Transport {
            client,
            timeout: config.request_timeout,
            retry: config.retry,
            key: config.api_key.clone(),
            url_secrets: url_secrets(&config.base_url),
        })
    }

    /// Text safe to show: the key, and the secrets of the base URL, replaced wherever they
    /// appear.
    pub(crate) fn redact(&self, text: &str) -> String {
        let text = plansmith_core::secrets::redact_all(text, &self.url_secrets);
        match &self.key {
            Some(key) => key.redact(&text),
            None => text,
        }
    }

    /// Sends `body` to `url` until it succeeds, a failure is not retryable, or the retries run
    /// out. Non-2xx statuses come back as [`Failure::Status`] for the caller to classify.
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String, bool)],
        body: &Value,
        stream: bool,
    ) -> Result<Reply, Failure> {
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let mut header_map = HeaderMap::new();
        for (name, value, sensitive) in headers {
            if let Ok(mut value) = HeaderValue::from_str(value) {
                value.set_sensitive(*sensitive);
                header_map.insert(HeaderName::from_static(name), value);
            }
        }
        header_map.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let mut n_retry = 0;
        loop {
            let result = self.try_once(url, &header_map, bytes.clone(), stream).await;
            let failure = match result {
                Ok(reply) => return Ok(reply),
                Err(failure) => failure,
            };
            if !failure.retryable() || n_retry >= self.retry.max_retries {
                return Err(failure);
            }
            let delay = match &failure {
                Failure::Status {
                    retry_after: Some(wait),
                    ..
                } => {
                    if *wait > self.retry.max_retry_after {
                        return Err(failure);
                    }
                    *wait
                }
                _ => backoff(&self.retry, n_retry),
            };
            tracing::warn!(
                url,
                retry = n_retry + 1,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                failure = %self.describe(&failure),
                "model call failed; retrying"
            );
            tokio::time::sleep(delay).await;
            n_retry += 1;
        }
    }

    async fn try_once(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: Vec<u8>,
        stream: bool,
    ) -> Result<Reply, Failure> {
        let send = async {
            let response = self
                .client
                .post(url)
                .headers(headers.clone())
                .body(body)
                .send()
                .await
                .map_err(|err| Failure::Connection(self.redact(&error_chain(&err))))?;
            let status = response.status().as_u16();
            if !(200..300).contains(&status) {
                let retry_after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(parse_retry_after);
                let body = response.text().await.unwrap_or_default();
                return Err(Failure::Status {
                    status,
                    body,
                    retry_after,
                });
            }
            if stream {
                return Ok(Reply::Stream(response));
            }
            let bytes = response
                .bytes()
                .await
                .map_err(|err| Failure::Connection(self.redact(&error_chain(&err))))?;
            Ok(Reply::Body(bytes.to_vec()))
        };
        match tokio::time::timeout(self.timeout, send).await {
            Ok(result) => result,
            Err(_) => Err(Failure::Timeout),
        }
    }

    /// A one-line description of a failure, key redacted, body cut.
    pub(crate) fn describe(&self, failure: &Failure) -> String {
        match failure {
            Failure::Status { status, body, .. } => {
                format!("HTTP {status}: {}", self.redact(&quote(body)))
            }
            Failure::Connection(msg) => format!("connection failed: {}", self.redact(msg)),
            Failure::Timeout => format!("no reply within {} ms", self.timeout.as_millis()),
        }
    }

    /// The boundary error for a failure the caller does not handle itself.
    pub(crate) fn to_error(&self, failure: &Failure) -> LlmError {
        match failure {
            Failure::Timeout => {
                LlmError::Timeout(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX))
            }
            Failure::Status { status, .. } if (300..400).contains(status) => {
                LlmError::Rejected(format!(
                    "HTTP {status}: the server redirects the request elsewhere, and plansmith does \
                     not follow redirects (the prompt would go to another address): set the base \
                     URL to the address the provider documents"
                ))
            }
            Failure::Status { status, body, .. }
                if (400..500).contains(status) && *status != 429 =>
            {
                LlmError::Status {
                    status: *status,
                    message: self.redact(&quote(body)),
                }
            }
            Failure::Status {
                status: 429,
                body,
                retry_after: Some(wait),
            } if *wait > self.retry.max_retry_after => LlmError::Status {
                status: 429,
                message: format!(
                    "rate limited: the server asks to wait {} s, more than the {} s allowed ({})",
                    wait.as_secs(),
                    self.retry.max_retry_after.as_secs(),
                    self.redact(&quote(body))
                ),
            },
            Failure::Status { status, body, .. } => LlmError::Status {
                status: *status,
                message: format!(
                    "{} (after {} retries)",
                    self.redact(&quote(body)),
                    self.retry.max_retries
                ),
            },
            Failure::Connection(_) => LlmError::Connection(format!(
                "{} (after {} retries)",
                self.describe(failure),
                self.retry.max_retries
            )),
        }
    }
}

/// The error and its sources, one line.
/// The parts of `base_url` that may be credentials: the password of its user part and the
/// values of its query (`?api-key=…`, `?key=…`), each as written and percent-decoded.
fn url_secrets(base_url: &str) -> Vec<String> {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return Vec::new();
    };
    let mut secrets = Vec::new();
    if let Some(password) = url.password() {
        secrets.push(password.to_owned());
    }
    if let Some(query) = url.query() {
        for pair in query.split('&') {
            if let Some((_, value)) = pair.split_once('=') {
                secrets.push(value.to_owned());
            }
        }
    }
    for (_, value) in url.query_pairs() {
        secrets.push(value.into_owned());
    }
    // The longest first, so a secret that holds another is replaced whole.
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets.dedup();
    secrets
}

pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Cuts an error body to a quotable length.
pub(crate) fn quote(body: &str) -> String {
    let body = body.trim();
    if body.len() <= BODY_QUOTE {
        return body.to_owned();
    }
    let at = (0..=BODY_QUOTE)
        .rev()
        .find(|&i| body.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…", &body[..at])
}

/// `Retry-After` as seconds (integer or decimal) or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e9)));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The delay before retry `n_retry` (0-based): `base · 2ⁿ`, capped, times a jitter in [½, 1].
pub fn backoff(policy: &RetryPolicy, n_retry: u32) -> Duration {
    let exp = policy
        .base_delay
        .saturating_mul(1u32.checked_shl(n_retry.min(20)).unwrap_or(u32::MAX))
        .min(policy.max_delay);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(n_retry);
    let jitter = 0.5 + (hasher.finish() % 1000) as f64 / 2000.0;
    exp.mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        let wait = parse_retry_after(&later).unwrap();
        assert!(
            wait > Duration::from_secs(27) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn backoff_grows_is_jittered_and_capped() {
        let policy = RetryPolicy {
            max_retries: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            max_retry_after: Duration::from_secs(5),
        };
        for n in 0..12 {
            let delay = backoff(&policy, n);
            let full = Duration::from_millis(100 * (1u64 << n.min(20))).min(Duration::from_secs(1));
            assert!(delay >= full / 2 && delay <= full, "{n}: {delay:?}");
        }
        assert!(backoff(&policy, 40) <= Duration::from_secs(1));
    }
}
