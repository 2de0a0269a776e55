//! `leasehold man` and `leasehold completions SHELL`, both generated from the clap definitions and
//! printed to stdout before the runtime starts.
//!
//! `man`: one manual page, leasehold(1), generated from the clap definitions. Promise:
//! every public subcommand (nested ones too) with its synopsis, description and every option under
//! its `--help` heading; EXIT STATUS from [`crate::exit::TABLE`]; ENVIRONMENT naming every variable
//! an option reads (from the definitions) and every one leasehold reads or sets besides; FILES; and
//! references only to pages that exist outside this one. Limit: roff for man(1); the text is
//! `--help`'s, not written for print.

use std::io::Write;

use clap_mangen::Man;

use crate::cli::Command;

/// Variables leasehold reads that no option declares, and those it sets for the commands it runs.
const OTHER_VARIABLES: &[(&str, &str)] = &[
    ("LEASEHOLD_REDIS_URL", "The store URL when neither --store nor LEASEHOLD_STORE gives one (the older name)."),
    ("RUST_LOG", "Log filter (e.g. leasehold=debug); replaces what -v and -q choose."),
    ("NO_COLOR", "When set and not empty, log lines on stderr carry no colour (they never do off a terminal)."),
    ("LEASEHOLD_NAME", "Set for the command: the lease name (for cron, the job's)."),
    ("LEASEHOLD_FENCE", "Set for the command: the lease's fencing token; present it to fenced writes."),
    ("LEASEHOLD_TERM", "Set for elect's command and hooks: the leadership's term, the same number as LEASEHOLD_FENCE."),
    ("LEASEHOLD_SLOT", "Set for a scheduled run's command (run --once-per, cron): the slot's number."),
    ("LEASEHOLD_SLOT_START", "Set for a scheduled run's command: the slot's start, milliseconds since the Unix epoch."),
    ("LEASEHOLD_JOB", "Set for a cron job's command: the job's name."),
    ("LEASEHOLD_ATTEMPT", "Set for a cron job's command: which attempt of the slot this is, from 1."),
    ("LEASEHOLD_EVENT", "Set for elect's --on-lead and --on-lose programs: lead or lose."),
    ("LEASEHOLD_VALUE", "Set for elect's --on-lead and --on-lose programs: the value advertised."),
];

/// `completions` and `man`: generated from the clap definitions, printed to stdout; their exit code,
/// or `None` for any other command.
pub(crate) fn print_generated(command: &Command) -> Option<i32> {
    let mut out = std::io::stdout().lock();
    let written = match command {
        Command::Completions(a) => {
            clap_complete::generate(a.shell, &mut public_command(), "leasehold", &mut out);
            Ok(())
        }
        Command::Man => render(&mut out),
        _ => return None,
    };
    Some(match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("leasehold: cannot write to stdout: {e}");
            crate::exit::SOFTWARE
        }
    })
}

/// The command as the page and the completions show it: without the hidden subcommands (the
/// watcher, the lab's workers, the stand-ins of commands a build leaves out).
pub(crate) fn public_command() -> clap::Command {
    let full = crate::cli::command();
    let public: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut cmd = clap::Command::new("leasehold")
        .version(env!("CARGO_PKG_VERSION"))
        .args(full.get_arguments().cloned())
        .subcommands(public)
        .max_term_width(100);
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    if let Some(long) = full.get_long_about() {
        cmd = cmd.long_about(long.clone());
    }
    cmd
}

/// Writes the page.
pub(crate) fn render(w: &mut dyn Write) -> std::io::Result<()> {
    let mut cmd = public_command().disable_help_subcommand(true);
    cmd.build();
    let top = Man::new(cmd.clone());
    top.render_title(w)?;
    top.render_name_section(w)?;
    top.render_synopsis_section(w)?;
    top.render_description_section(w)?;
    top.render_options_section(w)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        subcommand(w, sub)?;
    }
    exit_status(w)?;
    environment(w, &cmd)?;
    files(w)?;
    writeln!(w, ".SH \"SEE ALSO\"")?;
    writeln!(
        w,
        "flock(1), systemd.service(5), systemd.timer(5), crontab(5). The guides (stores, \
         operations, elections, scheduled jobs) are in the docs folder of {}.",
        env!("CARGO_PKG_REPOSITORY")
    )?;
    top.render_version_section(w)
}

/// One subcommand's section (and its own subcommands', after it): its synopsis, description and
/// options, each `.SH` of clap_mangen's made a subsection of it.
fn subcommand(w: &mut dyn Write, sub: &clap::Command) -> std::io::Result<()> {
    let name = sub.get_bin_name().unwrap_or(sub.get_name()).to_owned();
    let page = Man::new(sub.clone());
    let mut text = Vec::new();
    page.render_synopsis_section(&mut text)?;
    page.render_description_section(&mut text)?;
    page.render_options_section(&mut text)?;
    let text = String::from_utf8_lossy(&text);
    writeln!(w, ".SH \"{}\"", name.to_uppercase())?;
    for line in text.lines() {
        match line.strip_prefix(".SH ") {
            Some("SYNOPSIS" | "DESCRIPTION") => {}
            Some(heading) => writeln!(w, ".SS {}", title_case(heading))?,
            None => writeln!(w, "{line}")?,
        }
    }
    if let Some(after) = sub.get_after_long_help().or(sub.get_after_help()) {
        // The exit statuses are in EXIT STATUS; the example stays with its command.
        for line in after
            .to_string()
            .lines()
            .filter(|l| l.starts_with("Example"))
        {
            writeln!(w, ".PP\n{}", escape(line))?;
        }
    }
    for nested in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
        subcommand(w, nested)?;
    }
    Ok(())
}

fn exit_status(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, ".SH \"EXIT STATUS\"")?;
    for s in crate::exit::TABLE {
        let scope = if s.commands.is_empty() {
            String::new()
        } else {
            format!(" (leasehold {})", s.commands.join(", leasehold "))
        };
        writeln!(w, ".TP\n\\fB{}\\fR\n{}{}", s.code, escape(s.meaning), scope)?;
    }
    writeln!(
        w,
        ".PP\nThe command's own exit code passes through unchanged, so a command that itself exits 75 \
         or 76 looks like busy or lost: move the busy code with --busy-exit-code."
    )
}

/// Every variable an option reads (from the definitions, with the options it sets), then the rest.
fn environment(w: &mut dyn Write, cmd: &clap::Command) -> std::io::Result<()> {
    let mut read: Vec<(String, Vec<String>)> = Vec::new();
    collect_env(cmd, &mut read);
    writeln!(w, ".SH ENVIRONMENT")?;
    writeln!(
        w,
        "An option given on the command line wins over its variable. A variable whose value is \
         wrong is exit 2, naming the variable."
    )?;
    for (var, options) in &read {
        writeln!(w, ".TP\n\\fB{var}\\fR\nSets {}.", options.join(", "))?;
    }
    for (var, what) in OTHER_VARIABLES {
        writeln!(w, ".TP\n\\fB{var}\\fR\n{}", escape(what))?;
    }
    Ok(())
}

fn collect_env(cmd: &clap::Command, read: &mut Vec<(String, Vec<String>)>) {
    let path = cmd.get_bin_name().unwrap_or(cmd.get_name()).to_owned();
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let (Some(var), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        let var = var.to_string_lossy().into_owned();
        let option = format!("{path} --{long}");
        match read.iter_mut().find(|(v, _)| *v == var) {
            Some((_, options)) => options.push(option),
            None => read.push((var, vec![option])),
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect_env(sub, read);
    }
}

fn files(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, ".SH FILES")?;
    for (file, what) in [
        ("JOBS_FILE", "leasehold cron's jobs, TOML (by convention /etc/leasehold/jobs.toml); read at start and on SIGHUP."),
        ("--metrics-file PATH", "written by run and elect for node_exporter's textfile collector, replaced whole each time (through PATH.PID.tmp beside it)."),
        ("/proc", "read by run and elect when their watcher process is gone, to find the command's processes by their LEASEHOLD_NAME and LEASEHOLD_FENCE."),
    ] {
        writeln!(w, ".TP\n\\fB{}\\fR\n{}", escape(file), escape(what))?;
    }
    Ok(())
}

fn title_case(heading: &str) -> String {
    let lower = heading.trim_matches('"').to_lowercase();
    let mut chars = lower.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// Text for roff: a leading dot or quote would be read as a request; backslashes and hyphens
/// escaped.
fn escape(text: &str) -> String {
    let body = text.replace('\\', "\\e").replace('-', "\\-");
    if body.starts_with('.') || body.starts_with('\'') {
        format!("\\&{body}")
    } else {
        body
    }
}
