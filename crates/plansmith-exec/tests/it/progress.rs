use std::sync::Arc;
use std::time::{Duration, Instant};

use plansmith_core::llm::BoxFuture;
use plansmith_exec::{
    Call, CallProgress, ExecEvent, Executor, InvokeError, Invoker, Invokers, PROGRESS_EVERY,
};
use plansmith_store::RunState;
use serde_json::{Value, json};

use crate::support::*;

/// A tool that reports its progress every 10 ms for `reports` times, then answers.
struct Chatty {
    reports: u32,
}

impl Invoker for Chatty {
    fn invoke<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<Value, InvokeError>> {
        self.invoke_reporting(call, &|_| {})
    }

    fn invoke_reporting<'a>(
        &'a self,
        _call: &'a Call,
        progress: &'a (dyn Fn(CallProgress) + Send + Sync),
    ) -> BoxFuture<'a, Result<Value, InvokeError>> {
        Box::pin(async move {
            for n in 1..=self.reports {
                tokio::time::sleep(Duration::from_millis(10)).await;
                progress(CallProgress {
                    progress: f64::from(n),
                    total: Some(f64::from(self.reports)),
                    message: Some(format!("report {n}")),
                    task: None,
                });
            }
            Ok(json!({"done": true}))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_progress_reaches_the_observers_a_few_times_a_second() {
    let env = env().await;
    env.plan(
        "chatty",
        json!([{"id": "s1", "title": "chatty", "action": {"type": "tool", "name": "chatty", "arguments": {}}}]),
        json!({}),
    )
    .await;
    let invokers = Invokers {
        tools: Some(Arc::new(Chatty { reports: 100 })),
        ..Invokers::default()
    };
    let seen = Seen::default();
    let began = Instant::now();
    let report = seen
        .attach(Executor::new(env.store.clone(), invokers, config("n")))
        .run("chatty")
        .await
        .unwrap();
    let elapsed = began.elapsed();
    assert_eq!(report.state, RunState::Completed);
    let events = seen.0.lock().unwrap().clone();
    let progress: Vec<(f64, Option<f64>, Option<String>)> = events
        .iter()
        .filter_map(|event| match event {
            ExecEvent::StepProgress {
                step_id,
                attempt,
                progress,
                total,
                message,
            } => {
                assert_eq!((step_id.as_str(), *attempt), ("s1", 1));
                Some((*progress, *total, message.clone()))
            }
            _ => None,
        })
        .collect();
    // The first report at once, then at most one per PROGRESS_EVERY: 100 reports over a second
    // or more come out as a handful.
    assert_eq!(
        progress.first(),
        Some(&(1.0, Some(100.0), Some("report 1".to_owned())))
    );
    let most = 1 + (elapsed.as_millis() / PROGRESS_EVERY.as_millis()) as usize;
    assert!(
        progress.len() >= 2 && progress.len() <= most,
        "{} events in {elapsed:?}: {progress:?}",
        progress.len()
    );
    assert!(progress.windows(2).all(|w| w[0].0 < w[1].0), "{progress:?}");
    // Between the step's start and its end.
    let kinds = seen.kinds();
    let first = kinds.iter().position(|k| k == "step_progress").unwrap();
    let last = kinds.iter().rposition(|k| k == "step_progress").unwrap();
    assert!(
        kinds[..first].contains(&"step_started".to_owned()),
        "{kinds:?}"
    );
    assert!(
        kinds[last..].contains(&"step_completed".to_owned()),
        "{kinds:?}"
    );
}
