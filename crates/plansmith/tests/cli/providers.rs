//! `--model openai:…`, `openai-compatible:URL#MODEL`, `anthropic:…`: the binary
//! against a local stand-in server (a plain `std::net` listener with one canned reply).

use std::io::Write;
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
        let _ = tx.send(crate::read_request(&stream));
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

const TOOL_CALL_REPLY: &str = r#"{"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "planning", "arguments": "{\"title\": \"Weather\", \"steps\": [{\"id\": \"s1\", \"type\": \"tool\", \"title\": \"Weather\", \"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}"}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}"#;

/// The config file: the default model, the base URL, the key variable, and the
/// strategies offered all come from the file; the request that reaches the server shows them.
#[test]
fn the_config_file_chooses_model_endpoint_key_and_strategy() {
    let (url, bodies) = one_shot_server(TOOL_CALL_REPLY);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("plansmith.toml");
    std::fs::write(
        &config,
        format!(
            "model = \"openai:tiny-model\"\n\n[providers.openai]\nbase_url = \"{url}/v1\"\n\
             api_key_env = \"GATEWAY_KEY\"\nstrategies = [\"tool_calling\", \"json_mode\"]\n\
             max_retries = 0\n"
        ),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args([
            "plan",
            "Weather in Paris?",
            "--tools",
            "examples/tools.json",
            "--outcome-json",
            "--config",
        ])
        .arg(&config)
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env("GATEWAY_KEY", "gw-secret-98765")
        .output()
        .unwrap();
    assert_exit(&output, 0);
    let outcome: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(outcome["status"], "ready", "{outcome:#}");
    assert_eq!(outcome["diagnostics"]["strategy"], "tool_calling");
    let sent: serde_json::Value = serde_json::from_str(&bodies.recv().unwrap()).unwrap();
    assert_eq!(sent["model"], "tiny-model");
    assert!(sent.get("response_format").is_none(), "{sent:#}");
    assert_eq!(sent["tools"][0]["function"]["name"], "planning");
    assert!(!text(&output.stdout).contains("gw-secret-98765"));
    assert!(!text(&output.stderr).contains("gw-secret-98765"));
}

#[test]
fn config_file_mistakes_are_exit_2_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[providers.openai]\napi_key = \"sk-1\"\n").unwrap();
    for (file, needle) in [
        (&missing, "cannot read the config file"),
        (&bad, "api_key_env"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
            .args(["plan", "hi", "--tools", "examples/tools.json", "--config"])
            .arg(file)
            .current_dir(root())
            .output()
            .unwrap();
        assert_exit(&output, 2);
        assert!(
            text(&output.stderr).contains(needle),
            "{}",
            text(&output.stderr)
        );
    }
}

/// Without `--config`, `$XDG_CONFIG_HOME/plansmith/config.toml` is read when it exists, and
/// `PLANSMITH_MODEL` (the environment) wins over the file's `model`.
#[test]
fn the_default_config_file_is_found_and_the_environment_wins() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("plansmith")).unwrap();
    std::fs::write(
        dir.path().join("plansmith/config.toml"),
        "model = \"scripted:examples/replies/weather-email.json\"\n",
    )
    .unwrap();
    let plan = |env_model: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_plansmith"));
        command
            .args([
                "plan",
                "What's the weather in Paris? Email it to bob@example.com",
                "--tools",
                "examples/tools.json",
                "--outcome-json",
            ])
            .current_dir(root())
            .env_remove("PLANSMITH_CONFIG")
            .env("XDG_CONFIG_HOME", dir.path());
        match env_model {
            Some(model) => command.env("PLANSMITH_MODEL", model),
            None => command.env_remove("PLANSMITH_MODEL"),
        };
        command.output().unwrap()
    };
    let output = plan(None);
    assert_exit(&output, 0);
    let outcome: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(outcome["status"], "ready");
    let output = plan(Some("gpt:4"));
    assert_exit(&output, 3);
    assert!(text(&output.stderr).contains("unknown model kind `gpt`"));
}

/// `eval plan` with a provider model: the provider client runs on the CLI's runtime (it
/// panicked for want of one), and the case's plan is written.
#[test]
fn eval_plan_runs_a_provider_model() {
    let (url, bodies) = one_shot_server(REPLY);
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.jsonl");
    let case = serde_json::json!({
        "id": "simple_0", "category": "simple", "query": "Weather in Paris?",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"name": "get_weather", "description": "Weather of a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]}}]
    });
    std::fs::write(&cases, format!("{case}\n")).unwrap();
    let out = dir.path().join("out.jsonl");
    let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(["eval", "plan", "--plan-format", "json", "--model"])
        .arg(format!("openai-compatible:{url}/v1#tiny-model"))
        .arg("--cases")
        .arg(&cases)
        .arg("--out")
        .arg(&out)
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .env("PLANSMITH_RETRIEVER", "bm25")
        .output()
        .unwrap();
    assert_exit(&output, 0);
    assert!(bodies.recv().unwrap().contains("Weather in Paris?"));
    let written = std::fs::read_to_string(&out).unwrap();
    let line: serde_json::Value = serde_json::from_str(written.lines().next().unwrap()).unwrap();
    assert_eq!(line["id"], "simple_0");
    assert_eq!(line["plan"][0]["name"], "get_weather", "{line}");
}
