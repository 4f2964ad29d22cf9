//! `--model openai:…`, `openai-compatible:URL#MODEL`, `anthropic:…` (issue 4): the binary
//! against a local stand-in server (a plain `std::net` listener with one canned reply).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::mpsc;

use super::{assert_exit, root, text};

/// Serves one request with `reply` (a JSON body); sends the request body it read back.
fn one_shot_server(reply: &'static str) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        let _ = reader.read_exact(&mut body);
        let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
        let mut stream = stream;
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
            reply.len()
        );
    });
    (format!("http://{addr}"), rx)
}

const REPLY: &str = r#"{"choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"title\": \"Weather\", \"steps\": [{\"id\": \"s1\", \"type\": \"tool\", \"title\": \"Weather\", \"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}"#;

#[test]
fn openai_compatible_model_plans_through_a_local_server() {
    let (url, bodies) = one_shot_server(REPLY);
    let spec = format!("openai-compatible:{url}/v1#tiny-model");
    let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args([
            "plan",
            "Weather in Paris?",
            "--tools",
            "examples/tools.json",
            "--outcome-json",
            "--model",
            &spec,
        ])
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .env("OPENAI_API_KEY", "sk-cli-secret-1234")
        .output()
        .unwrap();
    assert_exit(&output, 0);
    let outcome: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(outcome["status"], "ready");
    assert_eq!(
        outcome["diagnostics"]["model"],
        "openai-compatible:tiny-model"
    );
    assert_eq!(outcome["diagnostics"]["strategy"], "json_schema");
    let sent: serde_json::Value = serde_json::from_str(&bodies.recv().unwrap()).unwrap();
    assert_eq!(sent["model"], "tiny-model");
    assert_eq!(sent["response_format"]["json_schema"]["strict"], true);
    assert!(!text(&output.stdout).contains("sk-cli-secret-1234"));
    assert!(!text(&output.stderr).contains("sk-cli-secret-1234"));
}

#[test]
fn missing_keys_are_exit_3_and_named() {
    for (spec, var) in [
        ("openai:gpt-4o-mini", "OPENAI_API_KEY"),
        ("anthropic:claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
            .args([
                "plan",
                "hi",
                "--tools",
                "examples/tools.json",
                "--model",
                spec,
            ])
            .current_dir(root())
            .env_remove("PLANSMITH_MODEL")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .output()
            .unwrap();
        assert_exit(&output, 3);
        assert!(
            text(&output.stderr).contains(&format!("{var} is not set")),
            "{}",
            text(&output.stderr)
        );
    }
}
