//! Options read from `LEASEHOLD_*` environment variables (clap's `env`): a usage error caused by a
//! variable's value names the variable. Promise: when clap refuses a value that came from a
//! variable (a bad duration, address, number), or an option set only by a variable conflicts with
//! another, the message says which variable, so that a wrong value in a unit file or a pod spec is
//! found at once. Limit: clap's message otherwise, as clap words it.

use clap::error::{ContextKind, ContextValue};

/// clap's message for `e`, each argument that a variable set followed by the variable's name.
pub(crate) fn explain(cmd: &clap::Command, e: &clap::Error) -> String {
    let mut text = e.render().to_string();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for arg_text in mentioned(e) {
        let Some(long) = long_of(&arg_text) else {
            continue;
        };
        let Some((var, value)) = from_env(cmd, &long, &argv) else {
            continue;
        };
        let quoted = format!("'{arg_text}'");
        let named = format!("{quoted} (from the environment variable {var}={value:?})");
        text = text.replacen(&quoted, &named, 1);
    }
    text
}

/// The arguments the error names (`--ttl <DURATION>`).
fn mentioned(e: &clap::Error) -> Vec<String> {
    let mut out = Vec::new();
    for kind in [ContextKind::InvalidArg, ContextKind::PriorArg] {
        match e.get(kind) {
            Some(ContextValue::String(s)) => out.push(s.clone()),
            Some(ContextValue::Strings(v)) => out.extend(v.iter().cloned()),
            _ => {}
        }
    }
    out
}

/// `ttl` from `--ttl <DURATION>`.
fn long_of(arg_text: &str) -> Option<String> {
    let rest = arg_text.strip_prefix("--")?;
    Some(
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect(),
    )
}

/// The variable (and its value) that set `--long`, when it is set and the command line does not
/// give the option itself.
fn from_env(cmd: &clap::Command, long: &str, argv: &[String]) -> Option<(String, String)> {
    let arg = find(cmd, long)?;
    let var = arg.get_env()?.to_string_lossy().into_owned();
    let value = std::env::var(&var).ok()?;
    let on_line = argv.iter().take_while(|a| *a != "--").any(|a| {
        a == &format!("--{long}")
            || a.starts_with(&format!("--{long}="))
            || arg
                .get_short()
                .is_some_and(|s| a.starts_with('-') && !a.starts_with("--") && a.contains(s))
    });
    (!on_line).then_some((var, value))
}

fn find<'a>(cmd: &'a clap::Command, long: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(long) && a.get_env().is_some())
        .or_else(|| cmd.get_subcommands().find_map(|s| find(s, long)))
}
