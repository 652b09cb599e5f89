//! The `spool` command-line tool.
//!
//! `spool demo` runs a seeded multi-agent workload on the threaded runtime and prints a
//! checked summary; `spool help` shows the usage. Arguments are parsed by hand here.

#![forbid(unsafe_code)]

mod demo;
mod inspect;
mod replay;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;

use demo::DemoOptions;

/// The usage text, for `help` and after a usage error.
const USAGE: &str = "\
Usage:
  spool demo [--agents N] [--seed S] [--max-latency-ms M] [--store PATH] [--quiet]
             [--retention-secs N]
  spool inspect PATH
  spool replay JOURNAL
  spool help

Commands:
  demo    Run scripted ReAct agents on the threaded runtime against simulated
          LLM and tool executors, then print a summary that checks every answer
  inspect Print the task table of a store, a snapshot or a journal file (id, agent,
          type, priority, age, state and what it waits on) and totals
  replay  Replay a journal of the demo; print the trace hash and the first event
          that differs from the recorded run (exit 1 if one does)
  help    Show this message

Options for demo:
  --agents N           Agents to run (default 300)
  --seed S             Seed of the agents' scripts and the simulated latencies (default 42)
  --max-latency-ms M   Cap on simulated latencies, LLM 5-40 ms and tools 1-10 ms (default 40)
  --store PATH         Journal the run to this store (SQLite); started again with the same
                       store after a Ctrl-C or a kill, it goes on where it stopped
  --journal FILE       Record the run's journal (every input, and the trace) to FILE,
                       for `spool replay FILE`; not together with --store
  --retention-secs N   Keep a finished agent's result N seconds, then evict it (default 600);
                       an agent that ran is never run again, whatever this says
  --report-acks        Print `acked N` on stdout as answers become durable (for tests)
  -q, --quiet          No progress lines on stderr
  -h, --help           Show this message

Environment for demo:
  OPENAI_BASE_URL      Use this OpenAI-compatible endpoint as the LLM instead of the
                       scripted model (answers are then reported, not checked)
  OPENAI_API_KEY       Its API key, if it needs one
  OPENAI_MODEL         Its model (default gpt-4o-mini)
";

/// The most agents `--agents` takes.
const MAX_AGENTS: usize = 1_000_000;
/// The largest `--max-latency-ms`.
const MAX_LATENCY_MS: u64 = 60_000;

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    /// Print the usage.
    Help,
    /// Run the demo.
    Demo(DemoOptions),
    /// Print a snapshot's task table.
    Inspect(PathBuf),
    /// Replay a journal.
    Replay(PathBuf),
}

/// A command line that does not fit the usage.
#[derive(Debug, PartialEq, Eq)]
struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses the arguments after the program name.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, UsageError> {
    let mut args = args.into_iter().map(|arg| {
        arg.into_string()
            .map_err(|arg| UsageError(format!("argument {arg:?} is not valid UTF-8")))
    });
    let Some(command) = args.next().transpose()? else {
        return Err(UsageError("no command given".to_owned()));
    };
    match command.as_str() {
        "help" | "-h" | "--help" => match args.next().transpose()? {
            None => Ok(Command::Help),
            Some(extra) => Err(UsageError(format!(
                "unexpected argument `{extra}` after `help`"
            ))),
        },
        "demo" => parse_demo(args),
        "inspect" | "replay" => {
            let Some(path) = args.next().transpose()? else {
                return Err(UsageError(format!("`{command}` needs a file")));
            };
            if let Some(extra) = args.next().transpose()? {
                return Err(UsageError(format!(
                    "unexpected argument `{extra}` for `spool {command}`"
                )));
            }
            let path = PathBuf::from(path);
            Ok(if command == "inspect" {
                Command::Inspect(path)
            } else {
                Command::Replay(path)
            })
        }
        other if other.starts_with('-') => Err(UsageError(format!(
            "unknown option `{other}`; give a command first"
        ))),
        other => Err(UsageError(format!("unknown command `{other}`"))),
    }
}

/// Parses the options of `spool demo`.
fn parse_demo(
    mut args: impl Iterator<Item = Result<String, UsageError>>,
) -> Result<Command, UsageError> {
    let mut options = DemoOptions::default();
    while let Some(arg) = args.next().transpose()? {
        // Both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg, None),
        };
        let mut value = |what: &str| -> Result<String, UsageError> {
            match inline.clone() {
                Some(value) => Ok(value),
                None => args
                    .next()
                    .transpose()?
                    .ok_or_else(|| UsageError(format!("`{flag}` needs a value ({what})"))),
            }
        };
        match flag.as_str() {
            "--agents" => {
                let n: usize = number(&flag, &value("a number of agents")?)?;
                if n == 0 || n > MAX_AGENTS {
                    return Err(UsageError(format!(
                        "`--agents` must be between 1 and {MAX_AGENTS}, not {n}"
                    )));
                }
                options.agents = n;
            }
            "--seed" => options.seed = number(&flag, &value("a seed, 0 to 2^64-1")?)?,
            "--max-latency-ms" => {
                let ms: u64 = number(&flag, &value("milliseconds")?)?;
                if ms > MAX_LATENCY_MS {
                    return Err(UsageError(format!(
                        "`--max-latency-ms` must be at most {MAX_LATENCY_MS}, not {ms}"
                    )));
                }
                options.max_latency_ms = ms;
            }
            "--retention-secs" => {
                let secs: u64 = number(&flag, &value("seconds")?)?;
                options.retention = std::time::Duration::from_secs(secs);
            }
            "--store" => options.store = Some(PathBuf::from(value("a store file")?)),
            "--journal" => options.journal = Some(PathBuf::from(value("a journal file")?)),
            "--report-acks" if inline.is_none() => options.report_acks = true,
            "-q" | "--quiet" if inline.is_none() => options.quiet = true,
            "-h" | "--help" if inline.is_none() => return Ok(Command::Help),
            "-q" | "--quiet" | "-h" | "--help" | "--report-acks" => {
                return Err(UsageError(format!("`{flag}` takes no value")));
            }
            other if other.starts_with('-') => {
                return Err(UsageError(format!(
                    "unknown option `{other}` for `spool demo`"
                )));
            }
            other => {
                return Err(UsageError(format!(
                    "unexpected argument `{other}` for `spool demo`"
                )));
            }
        }
    }
    if options.journal.is_some() && options.store.is_some() {
        return Err(UsageError(
            "`--journal` and `--store` do not go together: a run journals to one of them"
                .to_owned(),
        ));
    }
    Ok(Command::Demo(options))
}

/// Parses the value of `flag` as a number.
fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, UsageError>
where
    T::Err: fmt::Display,
{
    text.parse().map_err(|error| {
        UsageError(format!(
            "`{flag}` takes a whole number, not `{text}` ({error})"
        ))
    })
}

fn main() -> ExitCode {
    match parse(std::env::args_os().skip(1)) {
        Ok(Command::Help) => {
            print!("spool — a deterministic, coroutine-style runtime for LLM agents\n\n{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Command::Demo(options)) => demo::run(&options),
        Ok(Command::Inspect(path)) => inspect::run(&path),
        Ok(Command::Replay(path)) => replay::run(&path),
        Err(error) => {
            eprint!("error: {error}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(args: &[&str]) -> Result<Command, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn demo_takes_its_options_in_both_spellings() {
        let want = DemoOptions {
            agents: 250,
            seed: 7,
            max_latency_ms: 3,
            quiet: true,
            ..DemoOptions::default()
        };
        assert_eq!(
            parse_str(&[
                "demo",
                "--agents",
                "250",
                "--seed",
                "7",
                "--max-latency-ms",
                "3",
                "--quiet"
            ]),
            Ok(Command::Demo(want.clone()))
        );
        assert_eq!(
            parse_str(&[
                "demo",
                "--agents=250",
                "--seed=7",
                "--max-latency-ms=3",
                "-q"
            ]),
            Ok(Command::Demo(want))
        );
        assert_eq!(
            parse_str(&["demo"]),
            Ok(Command::Demo(DemoOptions::default()))
        );
    }

    #[test]
    fn help_in_every_spelling() {
        for args in [&["help"][..], &["--help"], &["-h"], &["demo", "--help"]] {
            assert_eq!(parse_str(args), Ok(Command::Help), "{args:?}");
        }
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        let error = |args: &[&str]| match parse_str(args) {
            Err(UsageError(message)) => message,
            Ok(command) => panic!("{args:?} parsed as {command:?}"),
        };
        assert_eq!(error(&[]), "no command given");
        assert_eq!(error(&["run"]), "unknown command `run`");
        assert_eq!(error(&["inspect"]), "`inspect` needs a file");
        assert_eq!(
            error(&["replay", "a", "b"]),
            "unexpected argument `b` for `spool replay`"
        );
        assert_eq!(
            error(&["demo", "--fast"]),
            "unknown option `--fast` for `spool demo`"
        );
        assert_eq!(
            error(&["demo", "--agents"]),
            "`--agents` needs a value (a number of agents)"
        );
        assert!(error(&["demo", "--agents", "many"]).contains("takes a whole number, not `many`"));
        assert!(error(&["demo", "--agents", "0"]).contains("between 1 and"));
        assert!(error(&["demo", "--seed", "-1"]).contains("whole number"));
        assert_eq!(error(&["demo", "--quiet=yes"]), "`--quiet` takes no value");
        assert_eq!(
            error(&["demo", "extra"]),
            "unexpected argument `extra` for `spool demo`"
        );
    }
}
