//! The command-line reference (`docs/reference/cli.md`), written from the clap definitions, so
//! that it says what `--help` says: every command, its arguments, their defaults, environment
//! variables and choices. A test fails when the checked-in file differs from what the code
//! generates; `PLANSMITH_UPDATE_REFERENCE=1 cargo test -p plansmith reference` rewrites it.

use clap::Command;

/// The reference of `command` and its subcommands, as Markdown.
pub fn markdown(command: &Command) -> String {
    let mut out = String::from(
        "# Command-line reference\n\n\
         Generated from the code (`crates/plansmith/src/reference.rs`): it is what `--help` \
         prints. Exit codes are in the [guide](../guide/commands.md#exit-codes).\n",
    );
    let mut command = command.clone();
    command.build();
    write_command(&mut out, &command, &[]);
    out
}

fn write_command(out: &mut String, command: &Command, parents: &[&str]) {
    let mut path: Vec<&str> = parents.to_vec();
    path.push(command.get_name());
    out.push_str(&format!(
        "\n{} `{}`\n\n",
        heading(path.len()),
        path.join(" ")
    ));
    if let Some(about) = command
        .get_long_about()
        .or_else(|| command.get_about())
        .map(|a| a.to_string())
    {
        out.push_str(&format!("{}\n\n", about.trim()));
    }
    let usage = command
        .clone()
        .bin_name(path.join(" "))
        .render_usage()
        .to_string();
    let usage = usage.trim_start_matches("Usage: ").trim();
    out.push_str(&format!("```text\n{usage}\n```\n"));
    let args: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !args.is_empty() {
        out.push('\n');
        for arg in args {
            out.push_str(&format!("- {}\n", describe(arg)));
        }
    }
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        write_command(out, sub, &path);
    }
}

fn heading(depth: usize) -> &'static str {
    match depth {
        0 | 1 => "##",
        2 => "###",
        _ => "####",
    }
}

/// One argument: its form, its help, and what the help leaves to clap (default, variable,
/// choices).
fn describe(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
    let form = match (arg.get_long(), arg.get_short()) {
        (Some(long), Some(short)) if takes_value => format!("-{short}, --{long} {value}"),
        (Some(long), Some(short)) => format!("-{short}, --{long}"),
        (Some(long), None) if takes_value => format!("--{long} {value}"),
        (Some(long), None) => format!("--{long}"),
        (None, Some(short)) => format!("-{short}"),
        (None, None) => value,
    };
    let mut text = format!("`{form}`");
    let help = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    if !help.is_empty() {
        text.push_str(&format!(": {help}"));
    }
    let mut notes = Vec::new();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && takes_value {
        notes.push(format!("default `{}`", defaults.join(",")));
    }
    if let Some(env) = arg.get_env() {
        notes.push(format!("env `{}`", env.to_string_lossy()));
    }
    let choices: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !choices.is_empty() && takes_value {
        notes.push(format!("one of {}", choices.join(", ")));
    }
    if arg.is_required_set() {
        notes.push("required".to_owned());
    }
    if !notes.is_empty() {
        text.push_str(&format!(" ({})", notes.join("; ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every `PLANSMITH_*` name in the workspace's source is on the environment page.
    #[test]
    fn the_environment_reference_names_every_variable_the_code_uses() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let page = std::fs::read_to_string(root.join("docs/reference/environment.md")).unwrap();
        let mut missing = std::collections::BTreeSet::new();
        let crates = std::fs::read_dir(root.join("crates")).unwrap();
        let mut dirs: Vec<std::path::PathBuf> =
            crates.map(|e| e.unwrap().path().join("src")).collect();
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                for (at, _) in text.match_indices("PLANSMITH_") {
                    let name: String = text[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    let name = name.trim_end_matches('_');
                    if name.len() > "PLANSMITH_".len()
                        && !name.starts_with("PLANSMITH_TEST")
                        && !page.contains(&format!("`{name}`"))
                    {
                        missing.insert(name.to_owned());
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "docs/reference/environment.md does not name {missing:?}"
        );
    }

    #[test]
    fn the_checked_in_cli_reference_is_what_the_code_generates() {
        let generated = super::markdown(&crate::Cli::command());
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference/cli.md");
        if std::env::var_os("PLANSMITH_UPDATE_REFERENCE").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "{} is not what the code generates: run \
             `PLANSMITH_UPDATE_REFERENCE=1 cargo test -p plansmith reference` and commit it",
            path.display()
        );
    }
}
