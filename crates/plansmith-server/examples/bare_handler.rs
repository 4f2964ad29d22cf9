//! The baseline of `scripts/load-test.sh`: a bare axum server whose `POST /v1/plans` parses
//! the JSON body and answers `201` with a fixed payload (a real `plansmith serve` answer, read
//! from a file), with no planning, no store and no middleware. What plansmith adds per request
//! is the difference between the two.
//!
//! ```sh
//! cargo run --release -p plansmith-server --example bare_handler -- 127.0.0.1:18292 payload.json
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::Value;

async fn plan(State(payload): State<Arc<String>>, Json(_body): Json<Value>) -> impl IntoResponse {
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        payload.as_str().to_owned(),
    )
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:18292".to_owned());
    let payload = match args.next() {
        Some(path) => std::fs::read_to_string(path).expect("cannot read the payload file"),
        None => "{}".to_owned(),
    };
    let app = Router::new()
        .route("/v1/plans", post(plan))
        .with_state(Arc::new(payload));
    let listener = tokio::net::TcpListener::bind(&addr).await.unwrap();
    eprintln!("bare handler: listening on http://{addr}");
    axum::serve(listener, app).await.unwrap();
}
