//! Messages between processes sharing a store (`PlanStore::broadcast`): two stores opened on
//! one PostgreSQL database stand for two processes.

use std::time::Duration;

use plansmith_store::{Listener, PlanStore};

use crate::support::{TestDb, both_backends};

async fn next(listener: &mut Listener) -> String {
    tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("no message within 10 s")
        .unwrap()
}

async fn messages_reach_the_other_process(db: TestDb) {
    let Some((here, mut here_hears)) = db.store.broadcast("plansmith_test").await.unwrap() else {
        // SQLite: one process's store, no channel.
        assert_eq!(db.store.backend(), plansmith_store::Backend::Sqlite);
        return;
    };
    let other = PlanStore::open(&db.location).await.unwrap();
    let (there, mut there_hears) = other.broadcast("plansmith_test").await.unwrap().unwrap();

    // A small message, one far over PostgreSQL's 8,000-byte payload limit (with two-byte
    // characters around the part boundaries), and an empty one: each arrives whole, in order.
    let big: String = (0..20_000)
        .map(|i| if i % 3 == 0 { 'é' } else { 'x' })
        .collect();
    for message in ["first", big.as_str(), ""] {
        here.send(message).await.unwrap();
    }
    assert_eq!(next(&mut there_hears).await, "first");
    assert_eq!(next(&mut there_hears).await, big);
    assert_eq!(next(&mut there_hears).await, "");

    // The other way; and a listener does not hear its own notifier: the first thing `here`
    // hears is what `there` sent.
    there.send("back").await.unwrap();
    assert_eq!(next(&mut here_hears).await, "back");

    // Another channel's messages are not heard.
    let (elsewhere, _keep) = other.broadcast("plansmith_other").await.unwrap().unwrap();
    elsewhere.send("not for you").await.unwrap();
    here.send("last").await.unwrap();
    assert_eq!(next(&mut there_hears).await, "last");
}
both_backends!(broadcast, super::messages_reach_the_other_process);
