//! Every command shown in README.md and under docs/, read out of the Markdown as a reader
//! copies it. A `plansmith` command (`plansmith …` or `cargo run -p plansmith -- …`) that can
//! run here (a scripted model, or no model at all, and the repository's own files) is run: it
//! must end with the exit code the docs give (`exit N` in the comment before it, else 0), print
//! what the docs show after it (a `text` block, or `# prints: …` / `# … …` comments), and the
//! saved plan id it prints stands in for `plan-…` / `PLAN_ID` in the commands after it. Every
//! other command is checked, not run: each flag is one its subcommand's `--help` lists, and each
//! script, Python file, crate, bench and test it names exists. What is not run, and why, is
//! printed (`--nocapture`): long-running servers (the serve tests), evaluations and benchmarks
//! (docs/perf.md), and synopses with placeholders. The commands that plan with the embedded
//! default model run under `CI=true` (or `PLANSMITH_TEST_DEFAULT_MODEL=1`), which fetches it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::root;

/// One command as the docs show it.
#[derive(Debug)]
struct Shown {
    /// `file:line` of the command, for messages.
    at: String,
    /// `NAME=value` before it, and `export`s earlier in its block.
    env: Vec<(String, String)>,
    /// The words, as a shell splits them (environment prefix removed).
    words: Vec<String>,
    /// The exit code the comment before it names.
    exit: Option<i32>,
    /// Texts the docs say it prints (`…` separates the pieces).
    prints: Vec<String>,
    /// A `text` block right after a block of this one command: its whole standard output.
    output: Option<String>,
}

/// The Markdown files a reader follows.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut dirs = vec![root().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The pieces of an output claim: `# … tool get_weather  city = "Berlin" …` or
/// `prints: saved plan plan-…`, split at `…`, whitespace collapsed, placeholders dropped.
fn pieces(claim: &str) -> Vec<String> {
    claim
        .split('…')
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .map(|p| p.trim_end_matches("plan-").trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The text before a ` #` that is outside quotes, and the comment after it.
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let (mut single, mut double) = (false, false);
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'#' if !single && !double && (i == 0 || bytes[i - 1] == b' ') => {
                return (&line[..i], Some(line[i + 1..].trim()));
            }
            _ => {}
        }
    }
    (line, None)
}

/// The commands of one Markdown file.
fn commands_in(path: &Path) -> Vec<Shown> {
    let name = path
        .strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string();
    let source = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    let mut shown: Vec<Shown> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        let shell = ["```sh", "```bash", "```console", "```shell"].contains(&fence);
        if !shell {
            i += 1;
            continue;
        }
        let first = shown.len();
        let mut exports: Vec<(String, String)> = Vec::new();
        let mut exit = None;
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            let start = i;
            let mut logical = lines[i].to_owned();
            while logical.ends_with('\\') && i + 1 < lines.len() {
                logical.pop();
                i += 1;
                logical.push(' ');
                logical.push_str(lines[i].trim_start());
            }
            i += 1;
            let (code, comment) = split_comment(&logical);
            let code = code.trim();
            if code.is_empty() {
                // A comment line: what the previous command printed, or the next one's exit.
                let Some(comment) = comment else { continue };
                if comment.starts_with('…') && shown.len() > first {
                    let last = shown.last_mut().unwrap();
                    last.prints.extend(pieces(comment));
                } else if let Some(n) = comment
                    .split("exit ")
                    .nth(1)
                    .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|n| n.parse().ok())
                {
                    exit = Some(n);
                }
                continue;
            }
            let Some(words) = shlex::split(code) else {
                panic!(
                    "{name}:{}: cannot split `{code}` as a shell would",
                    start + 1
                );
            };
            for command in words.split(|w| w == "&&" || w == ";") {
                let mut command = command.to_vec();
                if command.first().is_some_and(|w| w == "export") {
                    for assignment in &command[1..] {
                        let (key, value) = assignment.split_once('=').unwrap();
                        exports.push((key.to_owned(), value.to_owned()));
                    }
                    continue;
                }
                // Shell loops: their body is checked like any other command.
                while command
                    .first()
                    .is_some_and(|w| ["for", "do", "done", "then", "fi"].contains(&w.as_str()))
                {
                    command.clear();
                }
                if command.is_empty() {
                    continue;
                }
                let mut env = exports.clone();
                while let Some((key, value)) = command.first().and_then(|w| w.split_once('=')) {
                    if !key.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                        break;
                    }
                    env.push((key.to_owned(), value.to_owned()));
                    command.remove(0);
                }
                let prints = comment
                    .and_then(|c| c.split_once("prints:"))
                    .map(|(_, claim)| pieces(claim))
                    .unwrap_or_default();
                shown.push(Shown {
                    at: format!("{name}:{}", start + 1),
                    env,
                    words: command,
                    exit: exit.take(),
                    prints,
                    output: None,
                });
            }
        }
        i += 1;
        // A `text` block right after a block of one command is what that command prints.
        let mut next = i;
        while next < lines.len() && lines[next].trim().is_empty() {
            next += 1;
        }
        if shown.len() == first + 1 && lines.get(next).is_some_and(|l| l.trim() == "```text") {
            let end = lines[next + 1..]
                .iter()
                .position(|l| l.trim_start().starts_with("```"))
                .unwrap();
            let text = lines[next + 1..next + 1 + end].join("\n");
            shown.last_mut().unwrap().output = Some(text);
        }
    }
    shown
}

/// The plansmith arguments of a command, if it is one.
fn plansmith_args(words: &[String]) -> Option<&[String]> {
    match words.first().map(String::as_str) {
        Some("plansmith") => Some(&words[1..]),
        Some("cargo") if words.get(1).is_some_and(|w| w == "run") => {
            let dashes = words.iter().position(|w| w == "--")?;
            let package = words.iter().position(|w| w == "-p")?;
            (words.get(package + 1)? == "plansmith").then(|| &words[dashes + 1..])
        }
        _ => None,
    }
}

/// Why a plansmith command is not run here, or `None` when it is.
fn not_run(args: &[String]) -> Option<&'static str> {
    let scripted = args.iter().any(|a| a.starts_with("scripted:"));
    let placeholder = args
        .iter()
        .any(|a| ["plan.json", "commands.json"].contains(&a.as_str()));
    let subcommand = args.first().map(String::as_str).unwrap_or_default();
    if placeholder {
        return Some("a synopsis: its files are placeholders");
    }
    match subcommand {
        "serve" => Some("a long-running server: the serve and service tests start it"),
        "mcp" => Some("a long-running server: the MCP tests drive it"),
        "eval" => Some("an evaluation: its figures and how to read them are in docs/perf.md"),
        "plan" if !scripted && !embedded_model() => Some(
            "NOT RUN: the embedded model (469 MiB) is fetched for this only under CI=true or \
             PLANSMITH_TEST_DEFAULT_MODEL=1",
        ),
        _ if args.iter().any(|a| a == "--mcp") => Some(
            "starts the MCP servers of its file (npx, mcp-server-time on PATH): the MCP tests \
             run the same commands against the installed reference servers",
        ),
        _ => None,
    }
}

/// Whether the commands that plan with the embedded default model run: under `CI=true` or
/// `PLANSMITH_TEST_DEFAULT_MODEL=1`, after `plansmith models pull` (a no-op once it is there).
fn embedded_model() -> bool {
    static READY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *READY.get_or_init(|| {
        let wanted = std::env::var("CI").as_deref() == Ok("true")
            || std::env::var_os("PLANSMITH_TEST_DEFAULT_MODEL").is_some();
        if !wanted {
            return false;
        }
        let pulled = Command::new(env!("CARGO_BIN_EXE_plansmith"))
            .args(["models", "pull", "qwen2.5-coder-0.5b"])
            .output()
            .unwrap();
        assert!(
            pulled.status.success(),
            "cannot pull the default model: {}",
            String::from_utf8_lossy(&pulled.stderr)
        );
        true
    })
}

/// The flags `plansmith SUBCOMMAND… --help` lists, by subcommand path.
fn flags_of(path: &[String], cache: &mut BTreeMap<Vec<String>, String>) -> String {
    cache
        .entry(path.to_vec())
        .or_insert_with(|| {
            let output = Command::new(env!("CARGO_BIN_EXE_plansmith"))
                .args(path)
                .arg("--help")
                .output()
                .unwrap();
            assert!(output.status.success(), "plansmith {path:?} --help failed");
            String::from_utf8_lossy(&output.stdout).into_owned()
        })
        .clone()
}

/// Checks a plansmith command without running it: its subcommands exist, and each flag is one
/// their `--help` lists.
fn check_flags(shown: &Shown, args: &[String], cache: &mut BTreeMap<Vec<String>, String>) {
    let mut path: Vec<String> = Vec::new();
    let mut help = flags_of(&path, cache);
    for arg in args {
        if arg.starts_with('-') {
            let flag = arg.split('=').next().unwrap();
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "{}: `{flag}` is not a flag of `plansmith {}`:\n{help}",
                shown.at,
                path.join(" ")
            );
        } else if path.len() < 2 {
            // A word that names a subcommand of the one so far goes one level down.
            let listed = help
                .lines()
                .skip_while(|l| !l.starts_with("Commands:"))
                .any(|l| l.split_whitespace().next() == Some(arg.as_str()));
            if listed {
                path.push(arg.clone());
                help = flags_of(&path, cache);
            }
        }
    }
    assert!(
        !path.is_empty(),
        "{}: no plansmith subcommand in {args:?}",
        shown.at
    );
}

/// Checks a command of another program: what it names exists.
fn check_other(shown: &Shown) {
    let words = &shown.words;
    let exists = |p: &str| {
        assert!(
            root().join(p).exists(),
            "{}: `{p}` does not exist",
            shown.at
        );
    };
    match words[0].as_str() {
        w if w.starts_with("scripts/") => exists(w),
        "python3" => exists(words.iter().skip(1).find(|w| !w.starts_with('-')).unwrap()),
        "cargo" => {
            let after = |flag: &str| {
                words
                    .iter()
                    .position(|w| w == flag)
                    .and_then(|i| words.get(i + 1))
            };
            let krate = after("-p").map(String::as_str);
            if let Some(krate) = krate {
                exists(&format!("crates/{krate}/Cargo.toml"));
            }
            if let Some(bench) = after("--bench") {
                exists(&format!("crates/{}/benches/{bench}.rs", krate.unwrap()));
            }
            if let Some(test) = after("--test") {
                exists(&format!("crates/{}/tests/{test}", krate.unwrap()));
            }
        }
        // A request to a server the docs start just before (the service tests send it).
        "curl" => {}
        other => panic!(
            "{}: `{other}` is neither plansmith nor a command this test knows how to check",
            shown.at
        ),
    }
}

/// Replaces the docs' `/tmp/` paths with the test's directory, and a saved plan's placeholder
/// with its id.
fn localise(word: &str, tmp: &Path, saved: Option<&str>) -> String {
    let word = word.replace("/tmp/", &format!("{}/", tmp.display()));
    match saved {
        Some(id) if word == "plan-…" || word == "PLAN_ID" => id.to_owned(),
        _ => word,
    }
}

/// `output` with its durations (`12 ms`) as `N ms`, the only figures that vary from run to run,
/// and without trailing spaces.
fn normalise(output: &str) -> String {
    let mut out = String::with_capacity(output.len());
    let mut digits = String::new();
    let mut rest = output;
    while let Some(c) = rest.chars().next() {
        rest = &rest[c.len_utf8()..];
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if !digits.is_empty() {
            let duration = c == ' '
                && rest.starts_with("ms")
                && !rest[2..].starts_with(|c: char| c.is_alphanumeric());
            out.push_str(if duration { "N" } else { &digits });
            digits.clear();
        }
        out.push(c);
    }
    out.push_str(&digits);
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs a plansmith command as the docs show it.
fn run(shown: &Shown, args: &[String], tmp: &Path, saved: &mut Option<String>) {
    let args: Vec<String> = args
        .iter()
        .map(|a| localise(a, tmp, saved.as_deref()))
        .collect();
    let mut command = Command::new(env!("CARGO_BIN_EXE_plansmith"));
    command
        .args(&args)
        .current_dir(root())
        .env_remove("PLANSMITH_MODEL")
        .env_remove("PLANSMITH_CONFIG")
        .env(
            "PLANSMITH_STORE",
            format!("sqlite:{}", tmp.join("plans.db").display()),
        )
        .env("XDG_CONFIG_HOME", tmp)
        .env("PLANSMITH_OUTBOX", tmp.join("outbox.jsonl"))
        // The embedded model's arithmetic depends on its thread count: fixed, so that a
        // documented plan is the same on a busy machine as on an idle one.
        .env("PLANSMITH_THREADS", "2");
    for (key, value) in &shown.env {
        command.env(key, localise(value, tmp, saved.as_deref()));
    }
    if let Some(store) = shown
        .env
        .iter()
        .find(|(k, _)| k == "PLANSMITH_STORE")
        .and_then(|(_, v)| v.strip_prefix("sqlite:"))
    {
        let path = PathBuf::from(localise(store, tmp, None));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(
        output.status.code(),
        Some(shown.exit.unwrap_or(0)),
        "{}: plansmith {args:?}\n{said}",
        shown.at
    );
    let flat = said.split_whitespace().collect::<Vec<_>>().join(" ");
    for piece in &shown.prints {
        assert!(
            flat.contains(piece),
            "{}: the docs say it prints `{piece}`:\n{said}",
            shown.at
        );
    }
    if let Some(expected) = &shown.output {
        assert_eq!(
            normalise(&stdout),
            normalise(expected),
            "{}: the output shown in the docs is not what it prints",
            shown.at
        );
    }
    if let Some(id) = stderr
        .lines()
        .find_map(|l| l.split("saved plan ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
    {
        *saved = Some(id.to_owned());
    }
}

#[test]
fn every_command_in_the_docs_runs_or_is_checked() {
    let mut cache = BTreeMap::new();
    let (mut ran, mut checked) = (0, Vec::new());
    for file in documents() {
        let tmp = tempfile::tempdir().unwrap();
        let mut saved = None;
        for shown in commands_in(&file) {
            let Some(args) = plansmith_args(&shown.words) else {
                check_other(&shown);
                checked.push(format!(
                    "{}: {} (another program)",
                    shown.at, shown.words[0]
                ));
                continue;
            };
            check_flags(&shown, args, &mut cache);
            let unknown_id =
                saved.is_none() && args.iter().any(|a| a == "PLAN_ID" || a == "plan-…");
            let why = if unknown_id {
                Some("a synopsis: its plan id comes from a command before it")
            } else {
                not_run(args)
            };
            match why {
                Some(why) => checked.push(format!("{}: {}", shown.at, why)),
                None => {
                    run(&shown, args, tmp.path(), &mut saved);
                    ran += 1;
                }
            }
        }
    }
    println!("ran {ran} plansmith commands from the docs; checked, not run:");
    for line in &checked {
        println!("  {line}");
    }
    assert!(ran >= 10, "too few commands ran: {ran}");
}

/// The README's library example is the one `plansmith-core`'s crate docs run as a doctest
/// (hidden `# ` lines aside), so it compiles and passes as shown.
#[test]
fn the_readme_library_example_is_the_crate_doctest() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let shown: Vec<&str> = readme
        .lines()
        .skip_while(|l| *l != "```rust")
        .skip(1)
        .take_while(|l| *l != "```")
        .collect();
    let lib = std::fs::read_to_string(root().join("crates/plansmith-core/src/lib.rs")).unwrap();
    let tested: Vec<&str> = lib
        .lines()
        .skip_while(|l| *l != "//! # Example")
        .skip_while(|l| *l != "//! ```")
        .skip(1)
        .take_while(|l| *l != "//! ```")
        .map(|l| {
            l.strip_prefix("//! ")
                .unwrap_or(l.trim_start_matches("//!"))
        })
        .filter(|l| !l.starts_with("# "))
        .collect();
    assert!(!shown.is_empty(), "no Rust example in README.md");
    assert_eq!(
        shown, tested,
        "README.md's library example is not the crate doctest"
    );
}

/// The workspace crates `krate` depends on (`[dependencies]`), each with whether it is optional
/// and the features turned on in it, read from its Cargo.toml.
fn workspace_dependencies(krate: &str) -> BTreeMap<String, (bool, Vec<String>)> {
    let path = root().join("crates").join(krate).join("Cargo.toml");
    let manifest: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    let mut deps = BTreeMap::new();
    let Some(table) = manifest.get("dependencies").and_then(|d| d.as_table()) else {
        return deps;
    };
    for (name, spec) in table {
        let Some(short) = name.strip_prefix("plansmith-") else {
            continue;
        };
        let optional = spec.get("optional").and_then(|o| o.as_bool()) == Some(true);
        let mut features: Vec<String> = spec
            .get("features")
            .and_then(|f| f.as_array())
            .map(|f| {
                f.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        features.sort();
        deps.insert(short.to_owned(), (optional, features));
    }
    deps
}

/// ARCHITECTURE.md's crate graph is the one the manifests declare: every crate, each of its
/// workspace dependencies, which are optional, and the features it turns on in them.
#[test]
fn the_architecture_crate_graph_is_the_manifests() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = text
        .split("## Crate graph")
        .nth(1)
        .expect("ARCHITECTURE.md has a crate graph");
    let block = section
        .split("```")
        .nth(1)
        .expect("the graph is a code block");
    // One entry per crate; a line that starts with spaces continues the one before.
    let mut entries: Vec<String> = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        match entries.last_mut() {
            Some(last) if line.starts_with(' ') => last.push_str(line),
            _ => entries.push(line.to_owned()),
        }
    }
    let mut drawn = BTreeMap::new();
    for entry in &entries {
        let (krate, deps) = entry.split_once('→').unwrap_or((entry, ""));
        let krate = krate.split_whitespace().next().unwrap().to_owned();
        // Notes in parentheses (the feature behind an optional edge) are for readers.
        let mut deps = deps.to_owned();
        while let (Some(open), Some(close)) = (deps.find('('), deps.find(')')) {
            deps.replace_range(open..=close.max(open), "");
        }
        let mut edges = BTreeMap::new();
        for dep in deps.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            let name = dep.split([' ', '?']).next().unwrap().to_owned();
            let optional = dep.split_whitespace().next().unwrap().ends_with('?');
            let mut features: Vec<String> = dep
                .split_once('[')
                .map(|(_, rest)| rest.split(']').next().unwrap())
                .map(|f| f.split(',').map(|x| x.trim().to_owned()).collect())
                .unwrap_or_default();
            features.sort();
            edges.insert(name, (optional, features));
        }
        drawn.insert(krate, edges);
    }
    let mut declared = BTreeMap::new();
    for dir in std::fs::read_dir(root().join("crates")).unwrap() {
        let name = dir.unwrap().file_name().to_string_lossy().into_owned();
        declared.insert(name.clone(), workspace_dependencies(&name));
    }
    assert_eq!(
        drawn.keys().collect::<Vec<_>>(),
        declared.keys().collect::<Vec<_>>(),
        "the graph's crates are not the workspace's"
    );
    for (krate, edges) in &declared {
        assert_eq!(
            &drawn[krate], edges,
            "ARCHITECTURE.md's edges of {krate} (left) differ from its Cargo.toml (right)"
        );
    }
}

/// The top-level modules of a crate's `src` (a file, or a directory with its submodules) and
/// the files of each.
fn top_modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, into);
            } else if path.extension().is_some_and(|e| e == "rs") {
                into.push(path);
            }
        }
    }
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut files = Vec::new();
            rust_files(&path, &mut files);
            modules.insert(name, files);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            modules.insert(name, vec![path]);
        }
    }
    modules
}

/// The sibling modules `text` names through `crate::` paths (`crate::a::…`, `crate::{a, b}`),
/// leaving out comments and the unit tests at the end of a file.
fn named_modules(text: &str, modules: &BTreeMap<String, Vec<PathBuf>>) -> Vec<String> {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let mut named = Vec::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (at, _) in line.match_indices("crate::") {
            let rest = &line[at + "crate::".len()..];
            let idents: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group
                    .split('}')
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .map(|item| item.trim().split("::").next().unwrap_or(""))
                    .collect(),
                None => vec![
                    rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                        .next()
                        .unwrap_or(""),
                ],
            };
            named.extend(
                idents
                    .into_iter()
                    .filter(|n| modules.contains_key(*n))
                    .map(str::to_owned),
            );
        }
    }
    named
}

/// Inside every crate the top-level modules import each other without cycles, so each can be
/// read (and changed) knowing only the modules below it. A child module naming its parent
/// (`routes/openapi.rs` using `crate::routes::…`) is not a cycle: it is part of it.
#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let mut cycles = Vec::new();
    for dir in std::fs::read_dir(root().join("crates")).unwrap() {
        let krate = dir.unwrap().path();
        let modules = top_modules(&krate.join("src"));
        let mut edges: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
        for (module, files) in &modules {
            for file in files {
                let text = std::fs::read_to_string(file).unwrap();
                for other in named_modules(&text, &modules) {
                    if &other != module {
                        edges.entry(module.clone()).or_default().insert(other);
                    }
                }
            }
        }
        // A module is on a cycle when it reaches itself.
        for start in modules.keys() {
            let mut seen = std::collections::BTreeSet::new();
            let mut stack: Vec<String> = edges.get(start).into_iter().flatten().cloned().collect();
            while let Some(next) = stack.pop() {
                if &next == start {
                    cycles.push(format!(
                        "{}: `{start}` imports {:?}, and one of them leads back to it",
                        krate.file_name().unwrap().to_string_lossy(),
                        edges[start]
                    ));
                    break;
                }
                if seen.insert(next.clone()) {
                    stack.extend(edges.get(&next).into_iter().flatten().cloned());
                }
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}
