//! Attacks on the service from outside: bodies that grow on the server, and pages of other
//! sites that reach a loopback server through the browser.

use std::time::{Duration, Instant};

use plansmith_server::ServerConfig;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{assert_error, call, create, reply, start, weather};

/// `n` operations that each double the plan's steps.
fn doubling(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|_| json!({"op": "copy", "from": "/steps", "path": "/steps/0"}))
            .collect(),
    )
}

/// A body of twenty doubling copies (1.3 KB) is refused at once, on the feedback route and the
/// check route alike, and stores nothing; a patch of too many operations is refused unread;
/// the server answers other requests meanwhile.
#[tokio::test]
async fn json_patch_cannot_amplify_a_request() {
    let s = start(reply("weather-email.json", 1), ServerConfig::default()).await;
    let created = create(&s, None).await;
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let feedback = format!("/v1/plans/{id}/feedback");
    let check = format!("/v1/plans/{id}/check");
    for (path, body) in [
        (&feedback, json!({"action": "patch", "patch": doubling(20)})),
        (&check, json!({"patch": doubling(20)})),
    ] {
        assert!(body.to_string().len() < 1500, "the attack is a small body");
        let started = Instant::now();
        let (status, answer) = call(&s, Method::POST, path, Some(body), None).await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{path} took {:?}",
            started.elapsed()
        );
        assert_error(status, &answer, 400, "bad_request");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains("would make the plan larger than"),
            "{message}"
        );
    }
    let many: Vec<Value> = (0..1001)
        .map(|_| json!({"op": "test", "path": "/id", "value": id}))
        .collect();
    let (status, answer) = call(&s, Method::POST, &check, Some(json!({"patch": many})), None).await;
    assert_error(status, &answer, 400, "bad_request");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("at most 1000 operations"),
        "{answer}"
    );
    // Steps may be added by hand, up to a bound checked before validation.
    let adds: Vec<Value> = (0..600)
        .map(|i| {
            json!({"op": "add", "path": "/steps/-", "value": {
                "id": format!("x{i}"), "title": "t",
                "action": {"type": "reply", "text": "ok"}}})
        })
        .collect();
    let (status, answer) = call(&s, Method::POST, &check, Some(json!({"patch": adds})), None).await;
    assert_error(status, &answer, 400, "bad_request");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("a plan may hold at most 500"),
        "{answer}"
    );
    let (_, current) = call(&s, Method::GET, &format!("/v1/plans/{id}"), None, None).await;
    assert_eq!(current["plan"]["version"], 1, "nothing was stored");
    assert_eq!(
        current["plan"]["steps"].as_array().unwrap().len(),
        created["stored"]["plan"]["steps"].as_array().unwrap().len()
    );
}

/// `method path` with the given `Host` and `Origin` headers: the status and the error code.
async fn from_site(
    s: &crate::Server,
    method: Method,
    path: &str,
    host: Option<&str>,
    origin: Option<&str>,
    token: Option<&str>,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut request = s
        .client
        .request(method.clone(), format!("{}{path}", s.base));
    if let Some(host) = host {
        request = request.header("host", host);
    }
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if method == Method::POST {
        request = request
            .header("content-type", "application/json")
            .body(weather().to_string());
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    let headers = answer.headers().clone();
    let body = serde_json::from_str(&answer.text().await.unwrap()).unwrap_or(Value::Null);
    (status, body, headers)
}

/// Without tokens the server answers only to loopback names: a page whose own name resolves
/// to 127.0.0.1 (DNS rebinding) cannot make it plan, on any route, `/mcp` included; a page of
/// another site cannot either, though the request names the server right; the review page's
/// own requests and listed origins can; and no site may frame the page.
#[tokio::test]
async fn pages_of_other_sites_cannot_drive_a_loopback_server() {
    let s = start(reply("weather-email.json", 4), ServerConfig::default()).await;
    let port = s.base.rsplit(':').next().unwrap().to_owned();
    let rebound = format!("rebind.attacker.example:{port}");
    let rebound_origin = format!("http://{rebound}");
    for (method, path) in [
        (Method::POST, "/v1/plans"),
        (Method::GET, "/v1/plans"),
        (Method::GET, "/"),
        (Method::GET, "/healthz"),
        (Method::POST, "/mcp"),
    ] {
        let (status, body, _) = from_site(
            &s,
            method.clone(),
            path,
            Some(&rebound),
            Some(&rebound_origin),
            None,
        )
        .await;
        assert_error(status, &body, 403, "forbidden");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains("loopback names") && !message.contains("  "),
            "{method} {path}: {body}"
        );
    }
    // Another site's page calling http://127.0.0.1:PORT: the right Host, a foreign Origin.
    let (status, body, _) = from_site(
        &s,
        Method::POST,
        "/v1/plans",
        None,
        Some("http://attacker.example"),
        None,
    )
    .await;
    assert_error(status, &body, 403, "forbidden");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("cors_origins") && !message.contains("  "),
        "{body}"
    );
    let (_, list, _) = from_site(&s, Method::GET, "/v1/plans", None, None, None).await;
    assert_eq!(list["plans"], json!([]), "no plan was made: {list}");
    // The review page's own requests (same origin), under each loopback name.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
    ] {
        let origin = format!("http://{host}");
        let (status, body, _) = from_site(
            &s,
            Method::POST,
            "/v1/plans",
            Some(&host),
            Some(&origin),
            None,
        )
        .await;
        assert_eq!(status, 201, "{host}: {body}");
    }
    // A client that is no browser sends no Origin.
    let (status, _, headers) = from_site(&s, Method::GET, "/", None, None, None).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-security-policy"], "frame-ancestors 'none'");
    assert_eq!(headers["x-frame-options"], "DENY");

    // A listed origin may call; with tokens any Host is served (callers authenticate, and a
    // proxy may name the server anything), but other origins are still refused.
    let app = "http://app.example:3000";
    let mut config = crate::tokens(&[("ta", "alice")]);
    config.cors_origins = vec![app.to_owned()];
    let s = start(reply("weather-email.json", 2), config).await;
    let (status, body, _) = from_site(
        &s,
        Method::POST,
        "/v1/plans",
        Some("plans.internal.example"),
        Some(app),
        Some("ta"),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body, _) = from_site(
        &s,
        Method::POST,
        "/v1/plans",
        Some("plans.internal.example"),
        Some("http://attacker.example"),
        Some("ta"),
    )
    .await;
    assert_error(status, &body, 403, "forbidden");
}

/// Reads from `stream` until it closes; `None` when it is still open after `wait`.
async fn closed_within(stream: &mut tokio::net::TcpStream, wait: Duration) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(wait, read).await.ok().map(|()| seen)
}

#[tokio::test]
async fn slow_headers_and_idle_connections_are_closed() {
    use tokio::io::AsyncWriteExt;
    let mut config = ServerConfig::default();
    config.header_timeout = Duration::from_secs(1);
    let s = start(Vec::new(), config).await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    // Headers that never end: closed after the timeout, with no answer to them.
    let mut partial = tokio::net::TcpStream::connect(&addr).await.unwrap();
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    let started = Instant::now();
    let answer = closed_within(&mut partial, Duration::from_secs(10))
        .await
        .expect("a connection with partial headers stayed open");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed early: {:?}",
        started.elapsed()
    );
    assert!(
        !String::from_utf8_lossy(&answer).contains("200 OK"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // A kept-alive connection is answered, then closed once idle for the timeout.
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let answer = closed_within(&mut idle, Duration::from_secs(10))
        .await
        .expect("an idle keep-alive connection stayed open");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    // The server still serves.
    let (status, _) = call(&s, Method::GET, "/healthz", None, None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_stalled_upload_is_answered_408_after_the_header_timeout() {
    use tokio::io::AsyncWriteExt;
    let mut config = ServerConfig::default();
    config.header_timeout = Duration::from_secs(1);
    config.request_timeout = Duration::from_secs(60);
    let s = start(Vec::new(), config).await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    // A body that promises 100 bytes, sends 10 and stops.
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stalled
        .write_all(
            b"POST /v1/plans HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\nConnection: close\r\n\r\n{\"query\": ",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let answer = closed_within(&mut stalled, Duration::from_secs(20))
        .await
        .expect("a stalled upload was held past the body timeout");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // The server still serves.
    let (status, _) = call(&s, Method::GET, "/healthz", None, None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn connections_over_the_cap_wait_for_one_to_close() {
    use tokio::io::AsyncWriteExt;
    let mut config = ServerConfig::default();
    config.max_connections = 2;
    config.header_timeout = Duration::from_secs(60);
    let s = start(Vec::new(), config).await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let first = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let _second = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // The third connects (the listen queue holds it) but is not served while two are open.
    let mut third = tokio::net::TcpStream::connect(&addr).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    assert!(
        closed_within(&mut third, Duration::from_millis(800))
            .await
            .is_none(),
        "a third connection was served over a cap of two"
    );
    drop(first);
    let answer = closed_within(&mut third, Duration::from_secs(10))
        .await
        .expect("the waiting connection was not served once a slot was free");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
}
