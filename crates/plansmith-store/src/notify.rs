//! Messages between the processes that share a PostgreSQL store ([`PlanStore::broadcast`]):
//! `NOTIFY` to send, `LISTEN` to receive.
//!
//! PostgreSQL limits a notification's payload to 8,000 bytes, and the messages sent here (a
//! plan's events, with the whole plan in some of them) are often larger. So a message is sent
//! as numbered parts, all in one transaction, each headed `origin msg part parts` and holding
//! at most [`PART_BYTES`] of the text; a [`Listener`] puts them together again.
//!
//! A listener skips the messages of its own [`Notifier`] (same `origin`): a process has
//! already delivered those itself. Delivery is PostgreSQL's: at most once, in commit order.
//! Messages sent while a listener's connection is down are not seen by it (sqlx reconnects and
//! listens again); what must not be lost belongs in the store's tables.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::AnyPool;
use sqlx::postgres::PgListener;

use crate::error::Result;
use crate::store::{Location, PlanStore};

/// Most bytes of a message's text in one notification (PostgreSQL's payload limit is 8,000
/// bytes, header included).
pub const PART_BYTES: usize = 7_000;

/// Most messages a listener holds half-received (one per sender at a time in practice: each
/// sender's parts arrive in order).
const MAX_PARTIAL: usize = 64;

/// Sends messages to the listeners of one channel, in other processes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Notifier {
    pool: AnyPool,
    channel: Arc<str>,
    origin: Arc<str>,
    next: Arc<AtomicU64>,
}

impl Notifier {
    /// Sends `message` (any length) to every listener of the channel but this notifier's own.
    /// Returns once it is committed; a message is delivered whole or not at all.
    pub async fn send(&self, message: &str) -> Result<()> {
        let msg = self.next.fetch_add(1, Ordering::Relaxed);
        let parts = split(message, PART_BYTES);
        let count = parts.len();
        let mut tx = self.pool.begin().await?;
        for (part, text) in parts.into_iter().enumerate() {
            let payload = format!("{} {msg} {part} {count} {text}", self.origin);
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(self.channel.to_string())
                .bind(payload)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// Receives the messages that other processes' [`Notifier`]s send on one channel.
pub struct Listener {
    inner: PgListener,
    parts: Assembler,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// The next whole message another process sent. Waits; an error is the connection's
    /// (the next call connects again). Notifications that are not this module's are skipped.
    pub async fn recv(&mut self) -> Result<String> {
        loop {
            let notification = self.inner.recv().await?;
            if let Some(message) = self.parts.take(notification.payload()) {
                return Ok(message);
            }
        }
    }
}

/// Puts messages together from their parts.
#[derive(Debug)]
struct Assembler {
    /// The local notifier's origin: its messages are skipped.
    origin: Arc<str>,
    /// Parts received so far, by sender and message number.
    partial: HashMap<(String, u64), Vec<String>>,
}

impl Assembler {
    /// Files one notification's part; the message once its last part is in.
    fn take(&mut self, payload: &str) -> Option<String> {
        let mut fields = payload.splitn(5, ' ');
        let origin = fields.next()?;
        let msg: u64 = fields.next()?.parse().ok()?;
        let part: usize = fields.next()?.parse().ok()?;
        let parts: usize = fields.next()?.parse().ok()?;
        let text = fields.next()?;
        if origin == &*self.origin || part >= parts {
            return None;
        }
        if parts == 1 {
            return Some(text.to_owned());
        }
        let key = (origin.to_owned(), msg);
        if part == 0 {
            // A sender's parts arrive in order: its older unfinished messages lost parts (the
            // connection dropped meanwhile) and will not complete.
            self.partial.retain(|(from, _), _| from != origin);
            if self.partial.len() >= MAX_PARTIAL {
                self.partial.clear();
            }
            self.partial.insert(key, vec![text.to_owned()]);
            return None;
        }
        let received = self.partial.get_mut(&key)?;
        if received.len() != part {
            self.partial.remove(&key);
            return None;
        }
        received.push(text.to_owned());
        if received.len() < parts {
            return None;
        }
        self.partial.remove(&key).map(|texts| texts.concat())
    }
}

/// `text` in pieces of at most `max` bytes, cut at character boundaries (at least one piece).
fn split(text: &str, max: usize) -> Vec<&str> {
    let mut parts = Vec::with_capacity(text.len() / max + 1);
    let mut rest = text;
    while rest.len() > max {
        let mut cut = max;
        while cut > 0 && !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        if cut == 0 {
            // `max` is smaller than the first character: it goes alone.
            cut = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let (head, tail) = rest.split_at(cut);
        parts.push(head);
        rest = tail;
    }
    parts.push(rest);
    parts
}

impl PlanStore {
    /// A channel named `channel` between the processes that share this store: a
    /// [`Notifier`] and a [`Listener`] that skips that notifier's own messages. PostgreSQL
    /// only (`LISTEN`/`NOTIFY`); `None` on SQLite, whose store is one process's.
    pub async fn broadcast(&self, channel: &str) -> Result<Option<(Notifier, Listener)>> {
        let Location::Postgres(url) = self.location() else {
            return Ok(None);
        };
        let mut inner = PgListener::connect(url).await?;
        inner.listen(channel).await?;
        let origin: Arc<str> = uuid::Uuid::new_v4().simple().to_string().into();
        let notifier = Notifier {
            pool: self.pool.clone(),
            channel: channel.into(),
            origin: origin.clone(),
            next: Arc::new(AtomicU64::new(0)),
        };
        let listener = Listener {
            inner,
            parts: Assembler {
                origin,
                partial: HashMap::new(),
            },
        };
        Ok(Some((notifier, listener)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_cuts_at_character_boundaries() {
        assert_eq!(split("", 4), vec![""]);
        assert_eq!(split("abcd", 4), vec!["abcd"]);
        assert_eq!(split("abcdef", 4), vec!["abcd", "ef"]);
        // "é" is two bytes: a cut at byte 4 would fall inside the second one.
        assert_eq!(split("aéé", 4), vec!["aé", "é"]);
        assert_eq!(split("aéé", 4).concat(), "aéé");
        assert_eq!(split("éa", 1), vec!["é", "a"]);
    }

    fn assembler() -> Assembler {
        Assembler {
            origin: "me".into(),
            partial: HashMap::new(),
        }
    }

    #[test]
    fn parts_are_put_together_and_own_messages_skipped() {
        let mut parts = assembler();
        assert_eq!(
            parts.take("other 0 0 1 hello world"),
            Some("hello world".into())
        );
        assert_eq!(parts.take("me 0 0 1 mine"), None);
        assert_eq!(parts.take("other 1 0 3 ab"), None);
        assert_eq!(parts.take("other 1 1 3 c "), None);
        assert_eq!(parts.take("other 1 2 3 d"), Some("abc d".into()));
        assert!(parts.partial.is_empty());
        // Not this module's notifications.
        for foreign in ["", "hello", "other x 0 1 t", "other 1 2 2 t", "other 1 0 1"] {
            assert_eq!(parts.take(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn a_message_that_lost_a_part_is_dropped() {
        let mut parts = assembler();
        assert_eq!(parts.take("other 4 0 3 a"), None);
        // Part 1 was lost: part 2 does not complete it.
        assert_eq!(parts.take("other 4 2 3 c"), None);
        assert!(parts.partial.is_empty());
        // A new message from the same sender replaces an unfinished one.
        assert_eq!(parts.take("other 5 0 2 x"), None);
        assert_eq!(parts.take("other 6 0 2 p"), None);
        assert_eq!(parts.partial.len(), 1);
        assert_eq!(parts.take("other 6 1 2 q"), Some("pq".into()));
        // Senders are kept apart.
        assert_eq!(parts.take("a 0 0 2 1"), None);
        assert_eq!(parts.take("b 0 0 2 x"), None);
        assert_eq!(parts.take("a 0 1 2 2"), Some("12".into()));
        assert_eq!(parts.take("b 0 1 2 y"), Some("xy".into()));
    }
}
