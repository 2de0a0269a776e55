//! The help texts' own rules.

use clap::CommandFactory;

use super::Cli;

/// The longest a short help or about may be, in characters.
const MAX: usize = 80;

fn too_long(text: &str) -> bool {
    text.contains('\n') || text.chars().count() > MAX
}

/// Every short help and about under `cmd` that is not one line of at most [`MAX`] characters.
fn long_lines(cmd: &clap::Command, parent: &str, bad: &mut Vec<String>) {
    let path = if parent.is_empty() {
        cmd.get_name().to_owned()
    } else {
        format!("{parent} {}", cmd.get_name())
    };
    if let Some(about) = cmd.get_about().map(ToString::to_string) {
        if too_long(&about) {
            bad.push(format!("`{path}` about ({} chars): {about}", about.len()));
        }
    }
    // A global argument is checked where it is defined, not again in every subcommand.
    for arg in cmd
        .get_arguments()
        .filter(|a| parent.is_empty() || !a.is_global_set())
    {
        if let Some(help) = arg.get_help().map(ToString::to_string) {
            if too_long(&help) {
                bad.push(format!(
                    "`{path}` argument `{}` help ({} chars): {help}",
                    arg.get_id(),
                    help.len()
                ));
            }
        }
    }
    for sub in cmd.get_subcommands() {
        long_lines(sub, &path, bad);
    }
}

#[test]
fn every_short_help_and_about_is_one_short_line() {
    let mut cmd = Cli::command();
    cmd.build();
    let mut bad = Vec::new();
    long_lines(&cmd, "", &mut bad);
    assert!(
        bad.is_empty(),
        "{} short helps or abouts are not one line of at most {MAX} characters \
         (make the doc comment's first paragraph a short summary):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn run_and_elect_help_list_every_exit_code_of_leasehold_itself_from_the_table() {
    let mut cmd = super::command();
    cmd.build();
    for name in ["run", "elect"] {
        let sub = cmd
            .find_subcommand_mut(name)
            .expect("the subcommand exists");
        let help = sub.render_long_help().to_string();
        for code in ["2", "69", "70", "74", "75", "76", "77", "78", "126/127"] {
            assert!(
                help.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{code} "))),
                "`{name} --help` lacks exit code {code}: {help}"
            );
        }
    }
    let leader = cmd.find_subcommand_mut("leader").unwrap();
    let help = leader.render_long_help().to_string();
    assert!(help.contains("nobody leads"), "{help}");
    assert!(
        !help.contains("126/127"),
        "`leader` runs no command: {help}"
    );
}

/// The first `n` words of `text`, lower case, letters and digits only.
fn words(text: &str, n: usize) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric())
                .collect::<String>()
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .take(n)
        .collect()
}

/// A long help (or long about) that says its short one again: its second paragraph opens with the
/// short help's first three words (clap shows the short one first, then the rest).
fn repeats(short: &str, long: &str) -> bool {
    let Some(rest) = long.split("\n\n").nth(1) else {
        return false;
    };
    let n = words(short, 3).len();
    n > 0 && words(rest, n) == words(short, n)
}

fn repeated_helps(cmd: &clap::Command, path: &str, bad: &mut Vec<String>) {
    if let (Some(short), Some(long)) = (cmd.get_about(), cmd.get_long_about()) {
        if repeats(&short.to_string(), &long.to_string()) {
            bad.push(format!("`{path}` about"));
        }
    }
    for arg in cmd.get_arguments() {
        if let (Some(short), Some(long)) = (arg.get_help(), arg.get_long_help()) {
            if repeats(&short.to_string(), &long.to_string()) {
                bad.push(format!("`{path}` argument `{}`", arg.get_id()));
            }
        }
    }
    // The hidden subcommands are leasehold's own processes, not read by people.
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        repeated_helps(sub, &format!("{path} {}", sub.get_name()), bad);
    }
}

#[test]
fn no_long_help_starts_by_repeating_its_short_help() {
    assert!(repeats(
        "Lease name",
        "Lease name\n\nLease name (no braces)."
    ));
    assert!(!repeats("Lease name", "Lease name\n\nNo braces."));
    let mut cmd = super::command();
    cmd.build();
    let mut bad = Vec::new();
    repeated_helps(&cmd, "leasehold", &mut bad);
    assert!(
        bad.is_empty(),
        "long helps that say their short help again (let the doc comment's second paragraph add \
         to the first, not restate it):\n{}",
        bad.join("\n")
    );
}

#[test]
fn options_are_grouped_under_headings_and_flock_short_flags_exist() {
    let mut cmd = super::command();
    cmd.build();
    let run = cmd.find_subcommand("run").unwrap();
    let heading = |long: &str| {
        run.get_arguments()
            .find(|a| a.get_long() == Some(long))
            .and_then(|a| a.get_help_heading())
            .map(str::to_owned)
    };
    assert_eq!(heading("store").as_deref(), Some(super::headings::STORE));
    assert_eq!(heading("ttl").as_deref(), Some(super::headings::LEASE));
    assert_eq!(heading("once-per").as_deref(), Some(super::headings::JOB));
    assert_eq!(
        heading("metrics-addr").as_deref(),
        Some(super::headings::MONITORING)
    );
    for (short, long) in [('w', "wait"), ('n', "no-wait"), ('E', "busy-exit-code")] {
        for name in ["run", "elect"] {
            let sub = cmd.find_subcommand(name).unwrap();
            assert!(
                sub.get_arguments()
                    .any(|a| a.get_short() == Some(short) && a.get_long() == Some(long)),
                "`{name} -{short}` is not --{long}"
            );
        }
    }
}
