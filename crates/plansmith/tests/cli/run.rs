//! `plansmith run` (the executor issue): a run with progress and summary, an approval gate
//! decided with `plans decide`, and resume after SIGKILL without repeating a completed side
//! effect.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{assert_exit, plansmith, root, text};

/// Budgets and stop reasons through `run` and `serve`.
mod budget;

fn tool(script: &str, args: &[&str]) -> serde_json::Value {
    let mut command = vec![
        "sh".to_owned(),
        root()
            .join("crates/plansmith-exec/tests/tools")
            .join(script)
            .display()
            .to_string(),
    ];
    command.extend(args.iter().map(|a| (*a).to_owned()));
    serde_json::json!({ "command": command })
}

fn write(path: &Path, value: &serde_json::Value) {
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}

fn stored_id(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("stored plan "))
        .unwrap_or_else(|| panic!("no plan id in:\n{stderr}"))
        .trim()
        .to_owned()
}

/// Waits (at most 30 s) until `append.sh` logged the start of `step`.
fn wait_for_start(effects: &Path, step: &str) {
    wait_for_line(effects, &format!("start {step} "));
}

/// Waits (at most 30 s) until a line of `path` starts with `prefix`.
fn wait_for_line(path: &Path, prefix: &str) {
    let began = Instant::now();
    while !lines(path).iter().any(|l| l.starts_with(prefix)) {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "no line starting with `{prefix}` in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How `child` exited; kills it and fails with `why` when it runs for 15 s more.
fn exits_within_15s(child: &mut std::process::Child, why: &str) -> std::process::ExitStatus {
    let began = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if began.elapsed() > Duration::from_secs(15) {
            child.kill().unwrap();
            panic!("{why}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn run_a_plan_file_with_progress_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let commands = dir.path().join("commands.json");
    write(
        &commands,
        &serde_json::json!({"tools": {"list": tool("items.sh", &[]), "show": tool("echo.sh", &[])}}),
    );
    let plan = dir.path().join("plan.json");
    write(
        &plan,
        &serde_json::json!({"title": "two steps", "steps": [
            {"id": "s1", "type": "tool", "title": "list items", "name": "list", "arguments": {}},
            {"id": "s2", "type": "tool", "title": "show one", "name": "show",
             "arguments": {"id": {"$ref": "s1.output.items[0].id"}}, "depends_on": ["s1"]},
            {"id": "s3", "type": "reply", "title": "tell", "text": "Shown.", "depends_on": ["s2"]}
        ]}),
    );
    let output = plansmith(&[
        "run",
        plan.to_str().unwrap(),
        "--store",
        &store,
        "--commands",
        commands.to_str().unwrap(),
    ]);
    assert_exit(&output, 0);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("→ [s1] list items — attempt 1"), "{stderr}");
    assert!(stderr.contains("✓ [s2] show one"), "{stderr}");
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("completed · 3/3 step(s) completed"),
        "{stdout}"
    );
    assert!(stdout.contains("[s3] tell (completed): Shown."), "{stdout}");
    // The document shows the statuses.
    let id = stored_id(&stderr);
    let shown = plansmith(&["plans", "show", &id, "--store", &store]);
    assert!(
        text(&shown.stdout).contains("Progress: 3/3 (100.0%)"),
        "{}",
        text(&shown.stdout)
    );
    // A finished run does not resume.
    let again = plansmith(&["run", &id, "--resume", "--store", &store]);
    assert_exit(&again, 5);
}

/// A plan file is checked against what the run can call before anything runs (no catalog
/// given: the commands file's tools), and keeps its own id and goal.
#[test]
fn a_plan_file_is_checked_against_the_run_and_keeps_its_id_and_goal() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let effects = dir.path().join("effects.log");
    let commands = dir.path().join("commands.json");
    write(
        &commands,
        &serde_json::json!({"tools": {"note": tool("append.sh", &[effects.to_str().unwrap()])}}),
    );
    let steps = serde_json::json!([
        {"id": "s1", "type": "tool", "title": "note it", "name": "note", "arguments": {}},
        {"id": "s2", "type": "tool", "title": "mail it", "name": "send_email",
         "arguments": {"to": "bob@example.com", "body": {"$ref": "s1.output"}},
         "depends_on": ["s1"]}
    ]);
    let plan = dir.path().join("plan.json");
    write(
        &plan,
        &serde_json::json!({"id": "plan-from-a-file", "goal": "Note it, then mail it to Bob",
            "title": "note and mail", "steps": steps}),
    );
    // No part of the run can send an email: refused before s1's side effect, nothing stored.
    for extra in [&["--commands", commands.to_str().unwrap()][..], &[]] {
        let mut args = vec!["run", plan.to_str().unwrap(), "--store", &store];
        args.extend_from_slice(extra);
        let refused = plansmith(&args);
        assert_exit(&refused, 2);
        let stderr = text(&refused.stderr);
        assert!(
            stderr.contains("is not a valid plan") && stderr.contains("send_email"),
            "{stderr}"
        );
    }
    assert!(
        lines(&effects).is_empty(),
        "a step ran: {:?}",
        lines(&effects)
    );
    // A broken commands file is refused before the plan is stored.
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"tools\": ").unwrap();
    let refused = plansmith(&[
        "run",
        plan.to_str().unwrap(),
        "--store",
        &store,
        "--commands",
        broken.to_str().unwrap(),
    ]);
    assert_exit(&refused, 2);
    assert!(
        text(&refused.stderr).contains("is not a commands file"),
        "{}",
        text(&refused.stderr)
    );
    let listed = plansmith(&["plans", "list", "--store", &store, "--json"]);
    assert!(
        !text(&listed.stdout).contains("plan-from-a-file"),
        "{}",
        text(&listed.stdout)
    );
    // What the run can call runs, under the file's id, with its goal.
    write(
        &plan,
        &serde_json::json!({"id": "plan-from-a-file", "goal": "Note it",
            "title": "note", "steps": [steps[0].clone()]}),
    );
    let output = plansmith(&[
        "run",
        plan.to_str().unwrap(),
        "--store",
        &store,
        "--commands",
        commands.to_str().unwrap(),
    ]);
    assert_exit(&output, 0);
    assert_eq!(stored_id(&text(&output.stderr)), "plan-from-a-file");
    let shown = plansmith(&[
        "plans",
        "show",
        "plan-from-a-file",
        "--store",
        &store,
        "--json",
    ]);
    assert_exit(&shown, 0);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["plan"]["goal"], "Note it", "{shown}");
    assert_eq!(shown["plan"]["title"], "note", "{shown}");
}

/// Tool commands and MCP servers do not inherit the provider keys (`OPENAI_API_KEY`,
/// `ANTHROPIC_API_KEY`, and the variable the config file's `api_key_env` names), and a key a
/// tool prints anyway (its own `env` gave it one) is `[redacted]` in its result and error and
/// nowhere in the store.
#[test]
fn tools_get_no_provider_keys_and_a_printed_key_is_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[providers.openai]\napi_key_env = \"GATEWAY_KEY\"\n",
    )
    .unwrap();
    let keys = [
        ("OPENAI_API_KEY", "sk-openai-test-1234"),
        ("ANTHROPIC_API_KEY", "sk-ant-test-5678"),
        ("GATEWAY_KEY", "gw-test-9012"),
    ];
    let sh = |script: &str| serde_json::json!(["sh", "-c", script]);
    let commands = dir.path().join("commands.json");
    write(
        &commands,
        &serde_json::json!({"tools": {
            "env": {"command": sh(
                "echo \"[$OPENAI_API_KEY|$ANTHROPIC_API_KEY|$GATEWAY_KEY|$PLANSMITH_STEP_ID]\"")},
            "leak": {"command": sh("echo \"{\\\"key\\\": \\\"$OPENAI_API_KEY\\\"}\""),
                     "env": {"OPENAI_API_KEY": keys[0].1}},
            "fail": {"command": sh("echo \"refused: $GATEWAY_KEY\" >&2; exit 3"),
                     "env": {"GATEWAY_KEY": keys[2].1}},
        }}),
    );
    // A stdio MCP server that writes down the environment it was given (and exits: its tools
    // are not needed).
    let server_env = dir.path().join("server-env.txt");
    let servers = dir.path().join("servers.json");
    write(
        &servers,
        &serde_json::json!({"mcpServers": {"envdump": {
            "command": "sh", "args": ["-c", format!("env > '{}'", server_env.display())]}}}),
    );
    let plan = dir.path().join("plan.json");
    write(
        &plan,
        &serde_json::json!({"title": "keys", "steps": [
            {"id": "s1", "type": "tool", "title": "env", "name": "env", "arguments": {}},
            {"id": "s2", "type": "tool", "title": "leak", "name": "leak", "arguments": {}},
            {"id": "s3", "type": "tool", "title": "fail", "name": "fail", "arguments": {}}
        ]}),
    );
    let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(["run", plan.to_str().unwrap(), "--store", &store])
        .args(["--commands", commands.to_str().unwrap()])
        .args(["--mcp", servers.to_str().unwrap()])
        .args(["--retries", "0", "--on-failure", "skip", "--json"])
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .env("PLANSMITH_CONFIG", &config)
        .envs(keys)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "stdout:\n{}\nstderr:\n{}",
            text(&output.stdout),
            text(&output.stderr)
        )
    });
    let steps = &report["steps"];
    assert_eq!(steps[0]["result"], "[|||s1]", "{report}");
    assert_eq!(
        steps[1]["result"],
        serde_json::json!({"key": "[redacted]"}),
        "{report}"
    );
    let error = steps[2]["error"].as_str().unwrap_or_default();
    assert!(error.contains("refused: [redacted]"), "{report}");
    let seen = std::fs::read_to_string(&server_env).unwrap();
    assert!(seen.contains("PATH="), "{seen}");
    for (name, value) in keys {
        assert!(
            !seen.contains(name) && !seen.contains(value),
            "{name} reached the MCP server"
        );
        assert!(
            !report.to_string().contains(value),
            "{name}'s value in {report}"
        );
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("plans.db")
            {
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !bytes.windows(value.len()).any(|w| w == value.as_bytes()),
                    "{name}'s value stored in {}",
                    path.display()
                );
            }
        }
    }
}

/// A one-step plan whose step (a tool that appends to `effects`) needs approval, run until the
/// run pauses at the gate (exit 10).
struct Gated {
    _dir: tempfile::TempDir,
    store: String,
    commands: String,
    effects: std::path::PathBuf,
    id: String,
    /// What the first `run` printed.
    output: std::process::Output,
}

impl Gated {
    fn paused() -> Gated {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("sqlite:{}", dir.path().join("plans.db").display());
        let effects = dir.path().join("effects");
        let commands = dir.path().join("commands.json");
        write(
            &commands,
            &serde_json::json!({"tools": {"delete": tool("append.sh", &[effects.to_str().unwrap()])}}),
        );
        let plan = dir.path().join("plan.json");
        write(
            &plan,
            &serde_json::json!({"title": "gated", "steps": [
                {"id": "s1", "type": "tool", "title": "delete things", "name": "delete", "arguments": {}}
            ]}),
        );
        let commands = commands.display().to_string();
        let output = plansmith(&[
            "run",
            plan.to_str().unwrap(),
            "--require-approval",
            "s1",
            "--store",
            &store,
            "--commands",
            &commands,
        ]);
        assert_exit(&output, 10);
        let id = stored_id(&text(&output.stderr));
        Gated {
            _dir: dir,
            store,
            commands,
            effects,
            id,
            output,
        }
    }

    /// `plansmith run ID --resume` with the gate.
    fn resume(&self) -> std::process::Output {
        plansmith(&[
            "run",
            &self.id,
            "--resume",
            "--require-approval",
            "s1",
            "--store",
            &self.store,
            "--commands",
            &self.commands,
        ])
    }
}

#[test]
fn an_approval_gate_waits_for_plans_decide() {
    let gated = Gated::paused();
    let (store, effects, id, output) = (&gated.store, &gated.effects, &gated.id, &gated.output);
    assert!(
        text(&output.stdout).contains("waiting for a decision on s1"),
        "{}",
        text(&output.stdout)
    );
    assert!(lines(effects).is_empty());
    // While the run waits, `plans show` does not offer to run the plan again.
    let shown = plansmith(&["plans", "show", id, "--store", store]);
    assert_exit(&shown, 0);
    assert!(
        text(&shown.stdout).contains("State: accepted\n")
            && !text(&shown.stdout).contains("Actions: run"),
        "{}",
        text(&shown.stdout)
    );
    let decided = plansmith(&["plans", "decide", id, "s1", "approve", "--store", store]);
    assert_exit(&decided, 0);
    assert!(
        text(&decided.stderr).contains(&format!(
            "approve s1: the step was waiting for it; the run goes on with `plansmith run {id} --resume`"
        )),
        "{}",
        text(&decided.stderr)
    );
    assert_exit(&gated.resume(), 0);
    assert_eq!(lines(effects).len(), 2);
    // The run is over: a decision now would never be read, and is refused (exit 5, conflict);
    // there is no run to stop either.
    let late = plansmith(&["plans", "decide", id, "s1", "deny", "--store", store]);
    assert_exit(&late, 5);
    assert!(
        text(&late.stderr).contains("its last run is completed"),
        "{}",
        text(&late.stderr)
    );
    let late = plansmith(&["plans", "stop", id, "--store", store]);
    assert_exit(&late, 5);
    assert!(
        text(&late.stderr).contains("has no run in progress to stop: its last run is completed"),
        "{}",
        text(&late.stderr)
    );
}

/// `plans stop` on a run paused at its gate: resumed, the run ends `aborted` (exit 1) with the
/// note as its reason, and the gated step never runs.
#[test]
fn plans_stop_ends_a_paused_run() {
    let gated = Gated::paused();
    let (store, effects, id) = (&gated.store, &gated.effects, &gated.id);
    let stop = plansmith(&["plans", "stop", id, "--note", "not today", "--store", store]);
    assert_exit(&stop, 0);
    assert!(
        text(&stop.stdout).contains(&format!(
            "(its run is waiting): a process running it stops at its next turn; a paused run stops when resumed (`plansmith run {id} --resume`)"
        )),
        "{}",
        text(&stop.stdout)
    );
    let output = gated.resume();
    assert_exit(&output, 1);
    assert!(
        text(&output.stdout).contains("aborted") && text(&output.stdout).contains("not today"),
        "{}",
        text(&output.stdout)
    );
    assert!(lines(effects).is_empty(), "the stopped run deleted things");
    // Over: nothing left to stop.
    let again = plansmith(&["plans", "stop", id, "--store", store]);
    assert_exit(&again, 5);
    assert!(
        text(&again.stderr).contains("has no run in progress to stop: its last run is aborted"),
        "{}",
        text(&again.stderr)
    );
}

/// A store, a commands file and a plan file of `steps`, in a fresh directory. The tools:
/// `append` and `append_slow` (sleeps `slow_secs` first; both log to `effects`: see
/// `append.sh`), and `spawn` (`spawn.sh`: does its work in a child, which sleeps `slow_secs`
/// and whose pid goes to `pidfile`).
struct SideEffects {
    dir: tempfile::TempDir,
    store: String,
    effects: std::path::PathBuf,
    pidfile: std::path::PathBuf,
    commands: String,
    plan: String,
}

impl SideEffects {
    fn new(slow_secs: &str, steps: serde_json::Value) -> SideEffects {
        let dir = tempfile::tempdir().unwrap();
        let plan = dir.path().join("plan.json");
        write(
            &plan,
            &serde_json::json!({"title": "side effects", "steps": steps}),
        );
        let fixture = SideEffects {
            store: format!("sqlite:{}", dir.path().join("plans.db").display()),
            effects: dir.path().join("effects"),
            pidfile: dir.path().join("child"),
            commands: dir.path().join("commands.json").display().to_string(),
            plan: plan.display().to_string(),
            dir,
        };
        fixture.slow(slow_secs);
        fixture
    }

    /// s1 `append` ("first"), then s2 `spawn` ("long": its child sleeps 60 s), then s3
    /// `append` ("last"): a run to stop while s2 runs.
    fn first_long_last() -> SideEffects {
        SideEffects::new(
            "60",
            serde_json::json!([
                {"id": "s1", "type": "tool", "title": "first", "name": "append", "arguments": {}},
                {"id": "s2", "type": "tool", "title": "long", "name": "spawn", "arguments": {}, "depends_on": ["s1"]},
                {"id": "s3", "type": "tool", "title": "last", "name": "append", "arguments": {}, "depends_on": ["s2"]}
            ]),
        )
    }

    /// `plansmith run PLAN --store … --commands …` and `extra`, with its stdout and stderr in
    /// files ([`SideEffects::output`]); not started, so that a test can set more.
    fn run(&self, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_plansmith"));
        command
            .args(["run", &self.plan, "--store", &self.store])
            .args(["--commands", &self.commands])
            .args(extra)
            .current_dir(root())
            .env_remove("PLANSMITH_MODEL")
            .stdout(std::fs::File::create(self.dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(self.dir.path().join("stderr")).unwrap());
        command
    }

    /// What the process of [`SideEffects::run`] wrote to `name` (`stdout` or `stderr`) so far.
    fn output(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap()
    }

    /// (Re)writes the commands file: the slow tools take `secs` seconds.
    fn slow(&self, secs: &str) {
        let effects = self.effects.to_str().unwrap();
        write(
            Path::new(&self.commands),
            &serde_json::json!({"tools": {
                "append": tool("append.sh", &[effects]),
                "append_slow": tool("append.sh", &[effects, secs]),
                "spawn": tool("spawn.sh", &[self.pidfile.to_str().unwrap(), secs])
            }}),
        );
    }
}

/// The process is killed (SIGKILL) while step 2 runs. Its tool, in a process group of its own,
/// lives on and finishes (nothing can stop it once the CLI is gone, as after a crash); then
/// `--resume` finishes the plan: step 1 (completed) is not repeated, step 2 is re-run with the
/// same idempotency key, and its effect happened once.
#[test]
fn resume_after_sigkill_does_not_repeat_completed_steps() {
    let fixture = SideEffects::new(
        "3",
        serde_json::json!([
            {"id": "s1", "type": "tool", "title": "first", "name": "append", "arguments": {}},
            {"id": "s2", "type": "tool", "title": "slow", "name": "append_slow", "arguments": {}, "depends_on": ["s1"]},
            {"id": "s3", "type": "tool", "title": "last", "name": "append", "arguments": {}, "depends_on": ["s2"]}
        ]),
    );
    let mut child = fixture
        .run(&["--lease-secs", "1"])
        .process_group(0)
        .spawn()
        .unwrap();
    wait_for_start(&fixture.effects, "s2");
    // SIGKILL the CLI's process group: the running tool is not in it.
    let pgid = format!("-{}", child.id());
    let killed = Command::new("kill")
        .args(["-KILL", "--", &pgid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(!status.success());
    let id = stored_id(&fixture.output("stderr"));
    wait_for_line(&fixture.effects, "done s2 ");

    let output = plansmith(&[
        "run",
        &id,
        "--resume",
        "--store",
        &fixture.store,
        "--commands",
        &fixture.commands,
        "--lease-secs",
        "1",
    ]);
    assert_exit(&output, 0);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("resuming plan"), "{stderr}");
    assert!(stderr.contains("(re-run after a lost lease)"), "{stderr}");
    let log = lines(&fixture.effects);
    let count = |prefix: &str| log.iter().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count("start s1 "), 1, "completed s1 ran again: {log:?}");
    assert_eq!(count("done s1 "), 1, "{log:?}");
    assert_eq!(count("start s2 "), 2, "{log:?}");
    assert_eq!(count("done s2 "), 1, "{log:?}");
    assert_eq!(count("done s3 "), 1, "{log:?}");
    // Both starts of s2 carried the same idempotency key.
    let keys: Vec<&str> = log
        .iter()
        .filter(|l| l.starts_with("start s2 "))
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(keys[0], keys[1]);
    assert!(keys[0].ends_with(":s2:1"), "{keys:?}");
}

/// `plans delete` from another process while `plansmith run` runs the plan: the run stops its
/// running step and ends with exit 4 and what happened (it used to wait out the step, then two
/// minutes for a run that was gone).
#[test]
fn deleting_a_plan_ends_its_run() {
    let fixture = SideEffects::new(
        "20",
        serde_json::json!([
            {"id": "s1", "type": "tool", "title": "slow", "name": "append_slow", "arguments": {}},
            {"id": "s2", "type": "tool", "title": "last", "name": "append", "arguments": {}, "depends_on": ["s1"]}
        ]),
    );
    let mut child = fixture.run(&[]).spawn().unwrap();
    wait_for_start(&fixture.effects, "s1");
    let id = stored_id(&fixture.output("stderr"));
    assert_exit(
        &plansmith(&["plans", "delete", &id, "--store", &fixture.store]),
        0,
    );
    let status = exits_within_15s(&mut child, "the run went on after its plan was deleted");
    assert_eq!(status.code(), Some(4));
    let stderr = fixture.output("stderr");
    assert!(
        stderr.contains(&format!(
            "plan `{id}` was deleted while it ran: its running steps were stopped and nothing else was started"
        )),
        "{stderr}"
    );
    let log = lines(&fixture.effects);
    assert!(
        !log.iter().any(|l| l.contains("s2")),
        "s2 ran after the deletion: {log:?}"
    );
}

/// Whether the process runs (a zombie, killed and waiting for its parent, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X'))
    })
}

/// The pid `spawn.sh` wrote to `path` (its child's), once written.
fn pid_in(path: &Path) -> u32 {
    wait_for_line(path, "");
    let pid = std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid), "{pid} is not running");
    pid
}

/// Fails unless the process is gone within 3 s.
fn assert_ends(pid: u32) {
    let began = Instant::now();
    while alive(pid) {
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "the tool's child {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ctrl-C stops a run as `plans stop` does. The signal goes to the CLI alone (a terminal sends
/// it to the CLI's process group, and the tools run in groups of their own); the run stops
/// the running tool and the process that tool started, starts nothing else, ends `aborted`,
/// and the CLI exits 130. A new run then runs only what is left.
#[test]
#[cfg(target_os = "linux")]
fn ctrl_c_stops_the_run_and_what_its_tools_started() {
    let setup = SideEffects::first_long_last();
    let (store, effects) = (setup.store.as_str(), &setup.effects);
    let commands = setup.commands.as_str();
    let mut child = setup.run(&[]).spawn().unwrap();
    let grandchild = pid_in(&setup.pidfile);
    send("-INT", child.id());
    let status = exits_within_15s(&mut child, "the run went on after Ctrl-C");
    let (stderr, stdout) = (setup.output("stderr"), setup.output("stdout"));
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted (Ctrl-C): stopping the run"),
        "{stderr}"
    );
    assert!(stdout.contains(": aborted ·"), "{stdout}");
    assert!(
        stdout.contains("Reason: stopped by cli: interrupted (Ctrl-C)"),
        "{stdout}"
    );
    // Before, a terminal's Ctrl-C reached the tool's group; a SIGINT to the CLI alone left
    // the tool and its child running.
    assert_ends(grandchild);
    assert!(
        !lines(effects).iter().any(|l| l.starts_with("start s3 ")),
        "s3 started after the stop"
    );

    // A new run: s1 (completed) is kept, s2 and s3 run.
    setup.slow("0");
    let id = stored_id(&stderr);
    let again = plansmith(&["run", &id, "--store", store, "--commands", commands]);
    assert_exit(&again, 0);
    let log = lines(effects);
    let count = |prefix: &str| log.iter().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count("start s1 "), 1, "completed s1 ran again: {log:?}");
    assert_eq!(count("done s3 "), 1, "{log:?}");
}

/// Two `plansmith serve` processes on one PostgreSQL store run a batch of plans together, one
/// is killed mid-run, and every step runs to completion exactly once
/// (`scripts/two-serves-exec-postgres.sh`). Needs `PLANSMITH_TEST_POSTGRES_URL`; without it
/// prints `NOTE … NOT RUN`, and fails under `CI=true`.
#[test]
fn two_serves_share_runs_on_postgres() {
    let Some(url) = crate::fresh_postgres("two_serves_share_runs_on_postgres") else {
        return;
    };
    crate::run_script(
        "two-serves-exec-postgres.sh",
        &url,
        &[],
        "each done exactly once",
    );
}

/// The reference MCP server installed at `$name` (`scripts/mcp-servers.sh`); `None` with a
/// `NOTE … NOT RUN` line when it is not set, a failure under `CI=true`.
fn mcp_server(test: &str, name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but {name} is not set (.ci/setup.d/30-mcp-servers.sh)"
            );
            println!("NOTE: {test} NOT RUN: set {name} (eval \"$(scripts/mcp-servers.sh)\")");
            None
        }
    }
}

/// `plansmith run --mcp`: steps call tools of real MCP servers (the reference `time` and
/// `everything` servers, `scripts/mcp-servers.sh`), a `$ref` carrying one server's structured
/// result into the other's arguments. Without `PLANSMITH_TEST_MCP_TIME` /
/// `PLANSMITH_TEST_MCP_EVERYTHING` prints `NOTE … NOT RUN`; under `CI=true` fails.
#[test]
fn run_calls_tools_of_real_mcp_servers() {
    let test = "run_calls_tools_of_real_mcp_servers";
    let (Some(time), Some(everything)) = (
        mcp_server(test, "PLANSMITH_TEST_MCP_TIME"),
        mcp_server(test, "PLANSMITH_TEST_MCP_EVERYTHING"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let servers = dir.path().join("servers.json");
    write(
        &servers,
        &serde_json::json!({"mcpServers": {
            "time": {"command": time, "args": ["--local-timezone", "UTC"]},
            "everything": {"command": everything, "args": ["stdio"]}
        }}),
    );
    let plan = dir.path().join("plan.json");
    write(
        &plan,
        &serde_json::json!({"title": "time then echo", "steps": [
            {"id": "s1", "type": "tool", "title": "time in Paris", "name": "get_current_time",
             "arguments": {"timezone": "Europe/Paris"}},
            {"id": "s2", "type": "tool", "title": "echo the zone", "name": "echo",
             "arguments": {"message": {"$ref": "s1.output.timezone"}}, "depends_on": ["s1"]}
        ]}),
    );
    let report = run_json_with_mcp(dir.path(), &plan, &servers);
    assert_eq!(report["state"], "completed", "{report}");
    assert_eq!(
        report["steps"][0]["result"]["timezone"], "Europe/Paris",
        "{report}"
    );
    let echoed = report["steps"][1]["result"].to_string();
    assert!(echoed.contains("Europe/Paris"), "{report}");
}

/// `plansmith run --mcp` with a step whose tool the server runs only as a task (the
/// TypeScript SDK's `server-everything`, speaking the 2025-11-25 tasks): the step completes with
/// the task's result, and the report names the task.
#[test]
fn run_calls_a_task_only_tool_of_a_real_mcp_server() {
    let test = "run_calls_a_task_only_tool_of_a_real_mcp_server";
    let Some(everything) = mcp_server(test, "PLANSMITH_TEST_MCP_EVERYTHING") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let servers = dir.path().join("servers.json");
    write(
        &servers,
        &serde_json::json!({"mcpServers": {
            "everything": {"command": everything, "args": ["stdio"]}
        }}),
    );
    let plan = dir.path().join("plan.json");
    write(
        &plan,
        &serde_json::json!({"title": "research", "steps": [
            {"id": "s1", "type": "tool", "title": "research tidal power",
             "name": "simulate-research-query", "arguments": {"topic": "tidal power"}}
        ]}),
    );
    let report = run_json_with_mcp(dir.path(), &plan, &servers);
    assert_eq!(report["state"], "completed", "{report}");
    let result = report["steps"][0]["result"].to_string();
    assert!(result.contains("Research Report: tidal power"), "{report}");
}

/// One HTTP/1.1 request with a JSON body; returns (status, body as JSON or null).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: &serde_json::Value,
) -> (u16, serde_json::Value) {
    let (status, body) =
        crate::http_request(addr, &format!("{method} {path}"), "", &body.to_string()).unwrap();
    (
        status,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// A second Ctrl-C quits at once, even when the store does not answer (here another process
/// holds SQLite's write lock, so the first Ctrl-C's stop cannot be recorded): the tool and
/// its child are killed, the run stays in progress, and `--resume` finishes it later.
#[test]
#[cfg(target_os = "linux")]
fn a_second_ctrl_c_quits_at_once_even_with_the_store_stuck() {
    let setup = SideEffects::new(
        "60",
        serde_json::json!([
            {"id": "s1", "type": "tool", "title": "long", "name": "spawn", "arguments": {}},
            {"id": "s2", "type": "tool", "title": "last", "name": "append", "arguments": {}, "depends_on": ["s1"]}
        ]),
    );
    let (dir, store, effects) = (&setup.dir, setup.store.as_str(), &setup.effects);
    let commands = setup.commands.as_str();
    let db = dir.path().join("plans.db");
    let stderr_path = dir.path().join("stderr");
    let mut child = Reaped(setup.run(&["--lease-secs", "1"]).spawn().unwrap());
    let grandchild = pid_in(&setup.pidfile);
    let locker = hold_write_lock(&db);
    let interrupt = || send("-INT", child.0.id());
    interrupt();
    wait_for_line(
        &stderr_path,
        "plansmith run: interrupted (Ctrl-C): stopping the run",
    );
    interrupt();
    let began = Instant::now();
    let status = exits_within_15s(&mut child.0, "a second Ctrl-C did not quit");
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    // The stop waits up to SQLite's busy timeout (10 s) for the lock; the quit does not.
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "quitting took {:?}: {stderr}",
        began.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("plansmith run: quit (interrupted (Ctrl-C))"),
        "{stderr}"
    );
    assert!(
        stderr.contains("continues it once their leases expire"),
        "{stderr}"
    );
    assert_ends(grandchild);
    drop(locker);

    setup.slow("0");
    let id = stored_id(&stderr);
    let resumed = plansmith(&[
        "run",
        &id,
        "--resume",
        "--store",
        store,
        "--commands",
        commands,
        "--lease-secs",
        "1",
    ]);
    assert_exit(&resumed, 0);
    assert!(
        text(&resumed.stderr).contains("(re-run after a lost lease)"),
        "{}",
        text(&resumed.stderr)
    );
    assert_eq!(
        lines(effects)
            .iter()
            .filter(|l| l.starts_with("done s2 "))
            .count(),
        1
    );
}

/// Another process that takes the SQLite store's write lock and keeps it until dropped
/// (readers go on: the store is in WAL mode).
fn hold_write_lock(db: &Path) -> Reaped {
    let mut locker = Reaped(
        Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys, time\n\
                 c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
                 c.execute('BEGIN EXCLUSIVE')\n\
                 print('locked', flush=True)\n\
                 time.sleep(120)",
            ])
            .arg(db)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut locked = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(locker.0.stdout.take().unwrap()),
        &mut locked,
    )
    .unwrap();
    assert_eq!(locked.trim(), "locked");
    locker
}

/// A Ctrl-C that comes before the run has recorded its start (here the start waits for
/// another process's write lock) stops the run as soon as it starts. Before, the stop was
/// refused as "not running" and the run went on.
#[test]
#[cfg(target_os = "linux")]
fn ctrl_c_before_the_run_starts_stops_it_when_it_starts() {
    let mut setup = SideEffects::new(
        "60",
        serde_json::json!([
            {"id": "s1", "type": "tool", "title": "long", "name": "spawn", "arguments": {}},
            {"id": "s2", "type": "tool", "title": "last", "name": "append", "arguments": {}, "depends_on": ["s1"]}
        ]),
    );
    // A stored plan whose last run ended (paused at a gate, then stopped), so that the next
    // `run` records a new start.
    let gated = setup.run(&["--require-approval", "s1"]).status().unwrap();
    assert_eq!(gated.code(), Some(10), "{}", setup.output("stderr"));
    let id = stored_id(&setup.output("stderr"));
    let store = setup.store.clone();
    assert_exit(&plansmith(&["plans", "stop", &id, "--store", &store]), 0);
    setup.plan = id;
    let ended = setup
        .run(&["--resume", "--require-approval", "s1"])
        .status()
        .unwrap();
    assert_eq!(ended.code(), Some(1), "{}", setup.output("stdout"));

    let locker = hold_write_lock(&setup.dir.path().join("plans.db"));
    let mut child = Reaped(setup.run(&[]).spawn().unwrap());
    // Its Ctrl-C handler is in place: from here the CLI waits for the lock to record the start.
    let pid = child.0.id();
    let began = Instant::now();
    while !catches_sigint(pid) {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "no SIGINT handler"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    send("-INT", pid);
    let stderr_path = setup.dir.path().join("stderr");
    wait_for_line(
        &stderr_path,
        "plansmith run: the run has not started yet; it is stopped as soon as it starts",
    );
    drop(locker);
    let status = exits_within_15s(&mut child.0, "the run went on after Ctrl-C");
    let (stderr, stdout) = (setup.output("stderr"), setup.output("stdout"));
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stdout.contains("Reason: stopped by cli: interrupted (Ctrl-C)"),
        "{stdout}"
    );
    if let Ok(pid) = std::fs::read_to_string(&setup.pidfile) {
        assert_ends(pid.trim().parse().unwrap());
    }
    assert!(
        !lines(&setup.effects)
            .iter()
            .any(|l| l.starts_with("start s2 ")),
        "s2 started after the stop"
    );
}

/// On a terminal (a pseudo-terminal here): the steps show as spinners, and the terminal's
/// Ctrl-C (the `^C` key, which the terminal sends to the CLI's foreground process group, not
/// to the tools' own groups) stops the run and what its tool started; the spinners give way
/// to the report.
#[test]
#[cfg(target_os = "linux")]
fn on_a_terminal_the_steps_spin_and_ctrl_c_stops_the_run() {
    let setup = SideEffects::first_long_last();
    let command = setup.run(&[]);
    let mut argv = vec![command.get_program().to_owned()];
    argv.extend(command.get_args().map(ToOwned::to_owned));
    // Runs the CLI on a pseudo-terminal; types Ctrl-C once the tool's child runs.
    let terminal = Command::new("python3")
        .arg(root().join("crates/plansmith/tests/cli/terminal.py"))
        .arg(&setup.pidfile)
        .args(&argv)
        .current_dir(root())
        .env("TERM", "xterm")
        .env_remove("PLANSMITH_MODEL")
        .output()
        .unwrap();
    let shown = text(&terminal.stdout);
    let (code, screen) = shown.split_once('\n').unwrap_or((&shown, ""));
    assert_eq!(code.trim(), "130", "{screen}\n{}", text(&terminal.stderr));
    for expected in [
        "[s2] long — attempt 1",
        "stopping the run",
        ": aborted ·",
        "Reason: stopped by cli: interrupted (Ctrl-C)",
    ] {
        assert!(screen.contains(expected), "no `{expected}` in {screen}");
    }
    // The spinners drew over their own lines (a terminal's erase-line escape)…
    assert!(screen.contains("\u{1b}[2K"), "no spinner drawn: {screen}");
    // …and nothing erased the steps' last lines: before, a finished spinner stayed in the
    // spinners' place, and the next line printed erased it (s2's end vanished from the screen).
    let after_last_erase = screen.rsplit("\u{1b}[2K").next().unwrap_or("");
    for kept in [
        "- [s2] long skipped: stopped",
        "- [s3] last skipped: not run",
    ] {
        assert!(
            after_last_erase.contains(kept),
            "`{kept}` erased: {screen:?}"
        );
    }
    // The tool's child (it sleeps 60 s) is gone.
    let grandchild = std::fs::read_to_string(&setup.pidfile).unwrap();
    assert_ends(grandchild.trim().parse().unwrap());
    assert!(
        !lines(&setup.effects)
            .iter()
            .any(|l| l.starts_with("start s3 ")),
        "s3 started after the stop"
    );
}

/// Ctrl-C at a terminal while a step waits on an MCP server's tool (a real stdio server on the
/// official Python SDK, `slow_server.py`), whose progress reports show in the step's spinner.
/// The terminal signals the CLI's process group; the
/// server has a group of its own, so it lives on: the CLI cancels the call
/// (`notifications/cancelled`, the server logs it), the step ends stopped (not failed with "the
/// server closed the connection", as when the server died of the same Ctrl-C), nothing else
/// starts, and the CLI closes the server before it exits.
#[test]
#[cfg(target_os = "linux")]
fn on_a_terminal_mcp_progress_shows_and_ctrl_c_cancels_the_call() {
    let test = "on_a_terminal_mcp_progress_shows_and_ctrl_c_cancels_the_call";
    let Some(python) = mcp_server(test, "PLANSMITH_TEST_MCP_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let mark = dir.path().join("reported");
    let servers = slow_server(
        dir.path(),
        &python,
        serde_json::json!({"SLOW_SERVER_LOG": log, "SLOW_SERVER_MARK": mark}),
    );
    let plan = dir.path().join("plan.json");
    write(
        &plan,
        &serde_json::json!({"title": "wait, then wait", "steps": [
            {"id": "s1", "type": "tool", "title": "long wait", "name": "wait",
             "arguments": {"seconds": 60, "tag": "s1", "progress_every": 0.2}},
            {"id": "s2", "type": "tool", "title": "short wait", "name": "wait",
             "arguments": {"seconds": 0, "tag": "s2"}, "depends_on": ["s1"]}
        ]}),
    );
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    // Ctrl-C is typed once the tool has reported its progress three times.
    let terminal = Command::new("python3")
        .arg(root().join("crates/plansmith/tests/cli/terminal.py"))
        .arg(&mark)
        .arg(env!("CARGO_BIN_EXE_plansmith"))
        .args(["run", plan.to_str().unwrap(), "--store", &store])
        .args(["--mcp", servers.to_str().unwrap()])
        .current_dir(root())
        .env("TERM", "xterm")
        .env_remove("PLANSMITH_MODEL")
        .output()
        .unwrap();
    let shown = text(&terminal.stdout);
    let (code, screen) = shown.split_once('\n').unwrap_or((&shown, ""));
    let server_log = lines(&log);
    assert_eq!(code.trim(), "130", "{screen}\n{}", text(&terminal.stderr));
    for expected in [
        // The tool's progress, in its step's spinner.
        "[s1] long wait — attempt 1 · ",
        "/60 · waited ",
        "- [s1] long wait skipped: stopped",
        "- [s2] short wait skipped: not run",
        "Reason: stopped by cli: interrupted (Ctrl-C)",
    ] {
        assert!(screen.contains(expected), "no `{expected}` in {screen}");
    }
    for unexpected in ["closed the connection", "failed", "retry"] {
        assert!(!screen.contains(unexpected), "`{unexpected}` in {screen}");
    }
    // The server heard the cancellation, then was closed (it logs its exit), and is gone.
    let pid: u32 = server_log[0].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        server_log.iter().any(|l| l == "cancelled s1"),
        "{server_log:?}"
    );
    assert!(
        server_log.iter().any(|l| *l == format!("exit {pid}")),
        "{server_log:?}"
    );
    assert!(
        !server_log.iter().any(|l| l.starts_with("started s2")),
        "{server_log:?}"
    );
    assert_ends(pid);
}

/// An MCP tool call carries the step's idempotency key (and plan, step, attempt) in its
/// `_meta`, as a command gets them in its environment: the Python SDK server's `meta` tool
/// answers what it received.
#[test]
fn mcp_calls_carry_the_idempotency_key_in_meta() {
    let test = "mcp_calls_carry_the_idempotency_key_in_meta";
    let Some(python) = mcp_server(test, "PLANSMITH_TEST_MCP_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let servers = slow_server(
        dir.path(),
        &python,
        serde_json::json!({"SLOW_SERVER_LOG": dir.path().join("server.log")}),
    );
    let plan = dir.path().join("plan.json");
    write(
        &plan,
        &serde_json::json!({"title": "meta", "steps": [
            {"id": "s1", "type": "tool", "title": "what came", "name": "meta", "arguments": {}}
        ]}),
    );
    let report = run_json_with_mcp(dir.path(), &plan, &servers);
    let plan_id = report["plan_id"].as_str().unwrap();
    let meta = &report["steps"][0]["result"];
    assert_eq!(meta["plansmith/plan_id"], plan_id, "{report}");
    assert_eq!(meta["plansmith/step_id"], "s1", "{report}");
    assert_eq!(meta["plansmith/attempt"], 1, "{report}");
    assert_eq!(
        meta["plansmith/idempotency_key"],
        format!("{plan_id}:1:s1:1"),
        "{report}"
    );
}

/// `servers.json` in `dir` naming the Python SDK test server (`slow_server.py`) as `slow`,
/// with `env`.
fn slow_server(dir: &Path, python: &str, env: serde_json::Value) -> std::path::PathBuf {
    let servers = dir.join("servers.json");
    write(
        &servers,
        &serde_json::json!({"mcpServers": {"slow": {
            "command": python,
            "args": [root().join("crates/plansmith-mcp/tests/fixtures/slow_server.py")],
            "env": env,
        }}}),
    );
    servers
}

/// `plansmith run PLAN --mcp SERVERS --json` on a store in `dir`: its report, once it exited 0.
fn run_json_with_mcp(dir: &Path, plan: &Path, servers: &Path) -> serde_json::Value {
    let store = format!("sqlite:{}", dir.join("plans.db").display());
    let output = plansmith(&[
        "run",
        plan.to_str().unwrap(),
        "--store",
        &store,
        "--mcp",
        servers.to_str().unwrap(),
        "--json",
    ]);
    assert_exit(&output, 0);
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Sends `signal` (`-INT`, `-TERM`) to process `pid` alone.
fn send(signal: &str, pid: u32) {
    let sent = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {signal} {pid}");
}

/// Whether process `pid` has a handler for SIGINT (`SigCgt` in its status).
fn catches_sigint(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (2 - 1)) != 0)
}

/// Plans `query` over HTTP (accepted at once) and starts its run; the plan's id. `log()` goes
/// with a failure.
fn plan_and_run(addr: &str, query: &str, log: impl Fn() -> String) -> String {
    let (status, created) = http(
        addr,
        "POST",
        "/v1/plans",
        &serde_json::json!({"query": query, "auto_accept": true}),
    );
    assert_eq!(status, 201, "{created}\n{}", log());
    let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
    let (status, started) = http(
        addr,
        "POST",
        &format!("/v1/plans/{id}/run"),
        &serde_json::json!({}),
    );
    assert_eq!(status, 202, "{started}\n{}", log());
    id
}

/// The plan as stored once its last run completed (at most 60 s); fails, with `log()`, when
/// the run ends otherwise or does not end.
fn completed_plan(addr: &str, id: &str, log: impl Fn() -> String) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, stored) = http(
            addr,
            "GET",
            &format!("/v1/plans/{id}"),
            &serde_json::json!({}),
        );
        let state = &stored["plan"]["metadata"]["last_run"]["state"];
        if state == "completed" {
            return stored;
        }
        assert!(
            state.is_null() || state == "running",
            "run ended {state}: {stored}\n{}",
            log()
        );
        assert!(Instant::now() < deadline, "the run did not end:\n{}", log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `plansmith serve --mcp` with the `time` MCP server (its command: `time`) on a free port,
/// with a scripted model whose one plan asks it for the time in Paris, logging into `dir/serve.log`; started and
/// listening. Returns the child and its address.
fn serve_time_plan(dir: &Path, time: &str) -> (std::process::Child, String) {
    let servers = dir.join("servers.json");
    write(
        &servers,
        &serde_json::json!({"mcpServers": {
            "time": {"command": time, "args": ["--local-timezone", "UTC"]}
        }}),
    );
    let plan = serde_json::json!({"thought": "One call answers it.", "title": "Time in Paris",
        "steps": [{"id": "s1", "type": "tool", "title": "Time in Paris",
                   "name": "get_current_time", "arguments": {"timezone": "Europe/Paris"}}]});
    serve_scripted(dir, &["--mcp", servers.to_str().unwrap()], &[plan])
}

/// `plansmith serve ARGS` on a free port over `dir/serve.db`, logging into `dir/serve.log`,
/// with a scripted model answering `turns` (plans as JSON) in order; started and listening.
/// Returns the child and its address.
fn serve_scripted(
    dir: &Path,
    args: &[&str],
    turns: &[serde_json::Value],
) -> (std::process::Child, String) {
    let replies = dir.join("replies.json");
    let turns: Vec<String> = turns.iter().map(ToString::to_string).collect();
    write(
        &replies,
        &serde_json::json!({"capabilities": {"json_schema": true}, "turns": turns}),
    );
    let addr = format!("127.0.0.1:{}", crate::free_port());
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args(["serve", "--addr", &addr])
        .args(args)
        .arg("--model")
        .arg(format!("scripted:{}", replies.display()))
        .arg("--store")
        .arg(format!("sqlite:{}", dir.join("serve.db").display()))
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .env_remove("PLANSMITH_TOKENS")
        .env_remove("PLANSMITH_COMMANDS")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(&addr).is_err() {
        let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "serve did not start:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, addr)
}

/// An MCP servers file with `serve`'s `/mcp` at `addr` as server `serve`.
fn serve_as_mcp_server(dir: &Path, addr: &str) -> std::path::PathBuf {
    let servers = dir.join("servers.json");
    write(
        &servers,
        &serde_json::json!({"mcpServers": {"serve": {"url": format!("http://{addr}/mcp")}}}),
    );
    servers
}

/// `plansmith serve --mcp`: a plan made over HTTP runs its tool on the real `time` MCP server
/// through `POST /v1/plans/{id}/run` (no `--commands`: MCP alone turns execution on).
#[test]
fn serve_runs_plans_on_mcp_servers() {
    let test = "serve_runs_plans_on_mcp_servers";
    let Some(time) = mcp_server(test, "PLANSMITH_TEST_MCP_TIME") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = serve_time_plan(dir.path(), &time);
    let log = || std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let id = plan_and_run(&addr, "What time is it in Paris?", log);
        let stored = completed_plan(&addr, &id, log);
        assert_eq!(
            stored["plan"]["steps"][0]["result"]["timezone"], "Europe/Paris",
            "{stored}"
        );
    }));
    let _ = child.kill();
    let _ = child.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// An AG-UI front end follows and drives a plan on `plansmith serve`, through the official
/// AG-UI TypeScript client (`HttpAgent`, which checks the event order and applies the state
/// events): its first run ends in the review interrupt; resuming it with "accept and run"
/// reaches the same review decision as the feedback route, and the second run streams the
/// plan's run on the real `time` MCP server to its successful end.
#[test]
fn an_agui_client_reviews_and_runs_a_plan() {
    let test = "an_agui_client_reviews_and_runs_a_plan";
    let Some(time) = mcp_server(test, "PLANSMITH_TEST_MCP_TIME") else {
        return;
    };
    if std::env::var("PLANSMITH_TEST_AGUI")
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but PLANSMITH_TEST_AGUI is not set (.ci/setup.d/35-agui-client.sh)"
        );
        println!("NOTE: {test} NOT RUN: eval \"$(scripts/agui-client.sh)\"");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = serve_time_plan(dir.path(), &time);
    let log = || std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (status, created) = http(
            &addr,
            "POST",
            "/v1/plans",
            &serde_json::json!({"query": "What time is it in Paris?"}),
        );
        assert_eq!(status, 201, "{created}\n{}", log());
        let id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();
        let output = Command::new("node")
            .arg(crate::root().join("scripts/agui-client.mjs"))
            .arg(format!("http://{addr}/v1/plans/{id}/events"))
            .arg(&id)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", crate::text(&output.stderr));
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let runs = report["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{report}");

        let review = &runs[0];
        assert_eq!(review["error"], serde_json::Value::Null, "{review}");
        let types: Vec<&str> = review["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(types[..2], ["RUN_STARTED", "STATE_SNAPSHOT"], "{review}");
        assert_eq!(types.last(), Some(&"RUN_FINISHED"));
        assert!(types.contains(&"TEXT_MESSAGE_CONTENT"), "{types:?}");
        assert_eq!(review["interrupts"][0]["id"], "review@v1", "{review}");
        assert_eq!(review["state"]["state"], "awaiting_review");

        let run = &runs[1];
        assert_eq!(run["error"], serde_json::Value::Null, "{run}\n{}", log());
        let types: Vec<&str> = run["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let at = |kind: &str| {
            types
                .iter()
                .position(|t| *t == kind)
                .unwrap_or_else(|| panic!("no {kind} in {types:?}"))
        };
        assert!(at("STEP_STARTED") < at("STEP_FINISHED"), "{types:?}");
        assert!(types.contains(&"STATE_DELTA"), "{types:?}");
        assert_eq!(types.last(), Some(&"RUN_FINISHED"));
        assert_eq!(run["result"]["state"], "completed", "{run}");
        assert_eq!(run["interrupts"], serde_json::json!([]));
        // The client applied the snapshot and the deltas: its state has the step completed.
        assert_eq!(run["state"]["state"], "accepted", "{run}");
        assert_eq!(run["state"]["steps"][0]["status"], "completed", "{run}");

        // The resume was the review's accept, recorded as any accept is.
        let (_, history) = http(
            &addr,
            "GET",
            &format!("/v1/plans/{id}/history"),
            &serde_json::json!({}),
        );
        assert!(history.to_string().contains("\"accept"), "{history}");
        let stored = completed_plan(&addr, &id, log);
        assert_eq!(
            stored["plan"]["steps"][0]["result"]["timezone"],
            "Europe/Paris"
        );
        // Watched afterwards, the plan is an AG-UI run that ends at once, successfully.
        let (status, body) = crate::http_request(
            &addr,
            &format!("GET /v1/plans/{id}/events?protocol=ag-ui"),
            "",
            "",
        )
        .unwrap();
        assert_eq!(status, 200);
        assert!(
            body.contains("\"RUN_FINISHED\"") && body.contains("\"success\""),
            "{body}"
        );
    }));
    let _ = child.kill();
    let _ = child.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// SIGTERM to `plansmith serve` while it runs a plan: the server stops at once (it does not
/// wait out a step that takes a minute, and the step's tool and what the tool started are
/// killed), says which runs it left in progress, and does not trip over its own closed store.
/// Started again on the same store, its worker carries the run on to the end at once: the
/// leases (120 s) were given up, not left to run out.
#[test]
#[cfg(target_os = "linux")]
fn stopping_serve_leaves_its_runs_for_the_next_start() {
    let steps = serde_json::json!([
        {"id": "s1", "type": "tool", "title": "Work", "name": "spawn", "arguments": {}},
        {"id": "s2", "type": "tool", "title": "Note", "name": "append", "arguments": {},
         "depends_on": ["s1"]}
    ]);
    let setup = SideEffects::new("60", steps.clone());
    let (dir, store, effects) = (&setup.dir, setup.store.as_str(), &setup.effects);
    let tools = dir.path().join("tools.json");
    let any = serde_json::json!({"type": "object"});
    write(
        &tools,
        &serde_json::json!({"tools": [
            {"name": "spawn", "description": "Works for a while.", "inputSchema": any},
            {"name": "append", "description": "Notes it down.", "inputSchema": any}
        ]}),
    );
    let plan = serde_json::json!({"thought": "Work, then note it.", "title": "Long work",
                                  "steps": steps});
    let replies = dir.path().join("replies.json");
    write(
        &replies,
        &serde_json::json!({"capabilities": {"json_schema": true}, "turns": [plan.to_string()]}),
    );
    let addr = format!("127.0.0.1:{}", crate::free_port());
    let log_path = dir.path().join("serve.log");
    let start = |log: &Path| {
        let child = Command::new(env!("CARGO_BIN_EXE_plansmith"))
            .args([
                "serve",
                "--addr",
                &addr,
                "--lease-secs",
                "120",
                "--store",
                store,
            ])
            .arg("--commands")
            .arg(&setup.commands)
            .arg("--tools")
            .arg(&tools)
            .arg("--model")
            .arg(format!("scripted:{}", replies.display()))
            .env_remove("PLANSMITH_MODEL")
            .env_remove("PLANSMITH_TOKENS")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "serve did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Reaped(child)
    };
    let mut first = start(&log_path);
    let id = plan_and_run(&addr, "Do the long work", || {
        std::fs::read_to_string(&log_path).unwrap_or_default()
    });
    let grandchild = pid_in(&setup.pidfile);
    send("-TERM", first.0.id());
    let status = exits_within_15s(&mut first.0, "serve went on after SIGTERM");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains(&format!("left 1 run(s) in progress ({id})")),
        "{log}"
    );
    // It used to go on running the plan until the store closed under it.
    assert!(!log.contains("closed pool"), "{log}");
    assert_ends(grandchild);

    // Started again, its worker finds the run and ends it.
    setup.slow("0");
    let _second = start(&dir.path().join("serve2.log"));
    completed_plan(&addr, &id, || {
        std::fs::read_to_string(dir.path().join("serve2.log")).unwrap_or_default()
    });
    assert_eq!(
        lines(effects)
            .iter()
            .filter(|l| l.starts_with("done s2 "))
            .count(),
        1
    );
}

/// A child process killed when dropped: a failing test leaves no server behind.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The README's offline example: `examples/plans/weather-email.json` run through
/// `examples/commands.json` (stand-in tools in `examples/tools/`). The mail's body is the
/// weather step's summary (a `$ref`), and the outbox gets the mail once, also when the call
/// comes again with the same idempotency key (a retry, a re-run after a crash).
#[test]
fn the_example_commands_run_the_example_plan() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("plans.db").display());
    let outbox = dir.path().join("outbox.jsonl");
    let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
        .args([
            "run",
            "examples/plans/weather-email.json",
            "--store",
            &store,
        ])
        .args([
            "--commands",
            "examples/commands.json",
            "--tools",
            "examples/tools.json",
        ])
        .current_dir(root())
        .env("PLANSMITH_OUTBOX", &outbox)
        .env_remove("PLANSMITH_MODEL")
        .output()
        .unwrap();
    assert_exit(&output, 0);
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains(": completed · 3/3 step(s) completed"),
        "{stdout}"
    );
    let mails = lines(&outbox);
    assert_eq!(mails.len(), 1, "{mails:?}");
    let mail: serde_json::Value = serde_json::from_str(&mails[0]).unwrap();
    assert_eq!(mail["to"], "bob@example.com");
    assert_eq!(
        mail["body"],
        "No forecast for Paris: examples/tools/get_weather.py is an offline stand-in that calls \
         no weather service."
    );
    assert!(
        mail["idempotency_key"]
            .as_str()
            .is_some_and(|key| key.ends_with(":s2:1")),
        "{mail}"
    );
    let again = |key: &str| {
        let mut call = Command::new("python3")
            .arg("examples/tools/send_email.py")
            .current_dir(root())
            .env("PLANSMITH_OUTBOX", &outbox)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = serde_json::json!({"tool": "send_email", "idempotency_key": key,
            "arguments": {"to": "bob@example.com", "subject": "s", "body": "b"}});
        std::io::Write::write_all(call.stdin.as_mut().unwrap(), input.to_string().as_bytes())
            .unwrap();
        assert!(call.wait_with_output().unwrap().status.success());
    };
    again(mail["idempotency_key"].as_str().unwrap());
    assert_eq!(lines(&outbox).len(), 1, "the same key sent the mail twice");
    again("another key");
    assert_eq!(lines(&outbox).len(), 2);
}

/// A long MCP tool call that its server makes a task survives a restart of the run: `plansmith
/// run` calls `serve`'s `/mcp` tool `run` (which follows another plan's 4-second step to its
/// end) and the server answers with a task; the run is killed (SIGKILL) while the task works,
/// and `--resume` polls the same task to its end instead of calling the tool again: the other
/// plan's step ran once, and the resumed run completes with the task's result.
#[test]
fn a_tool_call_made_a_task_survives_a_restart_of_the_run() {
    // The inner plan, run by `serve`: one slow step with a side effect.
    let inner = SideEffects::new(
        "4",
        serde_json::json!([
            {"id": "s1", "type": "tool", "title": "slow", "name": "append_slow", "arguments": {}}
        ]),
    );
    let dir = inner.dir.path();
    let tools = dir.join("tools.json");
    write(
        &tools,
        &serde_json::json!([{"name": "append_slow", "description": "Append slowly",
            "input_schema": {"type": "object", "properties": {}}}]),
    );
    let reply = serde_json::json!({"title": "Slow", "steps": [
        {"id": "s1", "type": "tool", "title": "slow", "name": "append_slow", "arguments": {}}]});
    let (mut server, addr) = serve_scripted(
        dir,
        &[
            "--commands",
            &inner.commands,
            "--tools",
            tools.to_str().unwrap(),
        ],
        &[reply],
    );
    let serve_log = || std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (status, created) = http(
            &addr,
            "POST",
            "/v1/plans",
            &serde_json::json!({"query": "Append slowly", "auto_accept": true}),
        );
        assert_eq!(status, 201, "{created}\n{}", serve_log());
        let inner_id = created["stored"]["plan"]["id"].as_str().unwrap().to_owned();

        // The outer plan, run by `plansmith run`: one call of serve's MCP `run` tool.
        let servers = serve_as_mcp_server(dir, &addr);
        let outer = dir.join("outer.json");
        write(
            &outer,
            &serde_json::json!({"title": "Run the slow plan", "steps": [
                {"id": "s1", "type": "tool", "title": "run it", "name": "run",
                 "arguments": {"plan_id": inner_id, "wait": true}}]}),
        );
        let store = format!("sqlite:{}", dir.join("outer.db").display());
        let mut child = Command::new(env!("CARGO_BIN_EXE_plansmith"))
            .args(["run", outer.to_str().unwrap(), "--store", &store, "--mcp"])
            .arg(&servers)
            // (`run` is a destructive tool: approved up front.)
            .args(["--lease-secs", "1", "--approve-all"])
            .current_dir(root())
            .env_remove("PLANSMITH_MODEL")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("outer.stderr")).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        wait_for_start(&inner.effects, "s1");
        // The task's id reaches the store as soon as the server answers; give it a moment.
        std::thread::sleep(Duration::from_millis(500));
        let killed = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .status()
            .unwrap();
        assert!(killed.success());
        assert!(!child.wait().unwrap().success());
        let outer_stderr = std::fs::read_to_string(dir.join("outer.stderr")).unwrap();
        let outer_id = stored_id(&outer_stderr);

        let resumed = plansmith(&[
            "run",
            &outer_id,
            "--resume",
            "--store",
            &store,
            "--mcp",
            servers.to_str().unwrap(),
            "--lease-secs",
            "1",
            "--approve-all",
            "--json",
        ]);
        assert_exit(&resumed, 0);
        assert!(
            text(&resumed.stderr).contains("(re-run after a lost lease)"),
            "{}",
            text(&resumed.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&resumed.stdout).unwrap();
        assert_eq!(report["state"], "completed", "{report}\n{}", serve_log());
        assert_eq!(
            report["steps"][0]["result"]["state"], "completed",
            "{report}"
        );
        let log = lines(&inner.effects);
        assert_eq!(
            log.iter().filter(|l| l.starts_with("start s1 ")).count(),
            1,
            "the inner step ran again: {log:?}"
        );
    }));
    let _ = server.kill();
    let _ = server.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A tool's task that asks a person (`input_required`) leaves the step waiting: `plansmith run`
/// calls `serve`'s `/mcp` `plan` (made a task), whose plan lacks the recipient and asks for it
/// through the task; the run waits with the question as the step's error; a `retry` decision
/// whose note is the answer, then `--resume`, answers the same task, and the step completes
/// with the replanned plan carrying the answer.
#[test]
fn a_task_that_asks_a_person_waits_for_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let weather_email: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("examples/replies/weather-email.json")).unwrap(),
    )
    .unwrap();
    let no_recipient = serde_json::json!({"title": "Paris weather to a friend", "steps": [
        {"id": "s1", "type": "tool", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "s2", "type": "tool", "name": "send_email", "depends_on": ["s1"],
         "arguments": {"subject": "Weather", "body": {"$ref": "s1.output.summary"}}}]});
    // The recorded reply of the README's request, without its Markdown fence.
    let fenced = weather_email["turns"][0].as_str().unwrap().trim();
    let with_recipient: serde_json::Value =
        serde_json::from_str(fenced.trim_start_matches("```json").trim_end_matches("```")).unwrap();
    let (mut server, addr) = serve_scripted(
        dir.path(),
        &["--tools", "examples/tools.json"],
        &[no_recipient, with_recipient],
    );
    let serve_log = || std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let servers = serve_as_mcp_server(dir.path(), &addr);
        let outer = dir.path().join("outer.json");
        write(
            &outer,
            &serde_json::json!({"title": "Plan the mail", "steps": [
                {"id": "s1", "type": "tool", "title": "plan it", "name": "plan",
                 "arguments": {"query": "What's the weather in Paris? Email it to my friend",
                               "options": {"max_repairs": 0}}}]}),
        );
        let store = format!("sqlite:{}", dir.path().join("outer.db").display());
        let mcp = servers.to_str().unwrap();
        let first = plansmith(&[
            "run",
            outer.to_str().unwrap(),
            "--store",
            &store,
            "--mcp",
            mcp,
            "--json",
        ]);
        let report: serde_json::Value = serde_json::from_slice(&first.stdout)
            .unwrap_or_else(|_| panic!("{}\n{}", text(&first.stderr), serve_log()));
        assert_eq!(report["state"], "waiting", "{report}");
        let asked = report["steps"][0]["error"].as_str().unwrap_or_default();
        assert!(asked.contains("What should `to` be"), "{report}");
        let id = report["plan_id"].as_str().unwrap().to_owned();

        let decided = plansmith(&[
            "plans",
            "decide",
            &id,
            "s1",
            "retry",
            "--note",
            "bob@example.com",
            "--store",
            &store,
        ]);
        assert_exit(&decided, 0);
        let resumed = plansmith(&[
            "run", &id, "--resume", "--store", &store, "--mcp", mcp, "--json",
        ]);
        let report: serde_json::Value = serde_json::from_slice(&resumed.stdout)
            .unwrap_or_else(|_| panic!("{}\n{}", text(&resumed.stderr), serve_log()));
        assert_eq!(report["state"], "completed", "{report}\n{}", serve_log());
        let planned = &report["steps"][0]["result"];
        assert_eq!(planned["status"], "ready", "{planned}");
        assert_eq!(
            planned["plan"]["steps"][1]["action"]["arguments"]["to"], "bob@example.com",
            "{planned}"
        );
        // The answer reached the question through the same task (the server's log of what it
        // asked; a new call of the tool would plan afresh and ask nothing).
        assert_eq!(
            planned["asked"],
            serde_json::json!(["q1: answered"]),
            "{planned}\n{}",
            text(&resumed.stderr)
        );
    }));
    let _ = server.kill();
    let _ = server.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
