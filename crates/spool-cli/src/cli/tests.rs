//! The command line's parsing: every subcommand's options, defaults, and usage errors.

use clap::CommandFactory;
use clap::error::ErrorKind;

use super::*;
use crate::demo::DemoOptions;
use crate::run::RunOptions;

/// Parses `spool ARGS...`.
fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("spool").chain(args.iter().copied()))
}

/// The options `spool demo ARGS...` gives.
fn demo(args: &[&str]) -> DemoOptions {
    match parse(&[&["demo"], args].concat()) {
        Ok(Cli {
            command: Command::Demo(args),
            ..
        }) => args.into(),
        Ok(cli) => panic!("{args:?} parsed as {cli:?}"),
        Err(error) => panic!("{args:?}: {}", error.render()),
    }
}

/// The error `spool ARGS...` gives: its kind and its rendered message.
fn error(args: &[&str]) -> (ErrorKind, String) {
    match parse(args) {
        Ok(cli) => panic!("{args:?} parsed as {cli:?}"),
        Err(error) => (error.kind(), error.render().to_string()),
    }
}

/// Asserts that `spool ARGS...` fails with `kind` and a message holding `part`
/// (and no more than a short error: no option list).
#[track_caller]
fn assert_error(args: &[&str], kind: ErrorKind, part: &str) {
    let (got, message) = error(args);
    assert_eq!(got, kind, "{args:?}: {message}");
    assert!(message.contains(part), "{args:?}: {message}");
    assert!(message.starts_with("error: "), "{args:?}: {message}");
    assert!(
        message.ends_with("For more information, try '--help'.\n"),
        "{args:?}: {message}"
    );
    assert!(!message.contains("Options:"), "{args:?}: {message}");
}

#[test]
fn the_command_line_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn demo_defaults_are_the_demo_options_defaults() {
    assert_eq!(demo(&[]), DemoOptions::default());
    assert_eq!(DemoOptions::default().agents, 300);
    assert_eq!(DemoOptions::default().seed, 42);
    assert_eq!(DemoOptions::default().max_latency_ms, 40);
    assert_eq!(DemoOptions::default().retention, Duration::from_secs(600));
}

#[test]
fn demo_takes_each_option_in_both_spellings() {
    let default = DemoOptions::default;
    for (args, want) in [
        (
            &["--agents", "250"][..],
            DemoOptions {
                agents: 250,
                ..default()
            },
        ),
        (
            &["--agents=250"],
            DemoOptions {
                agents: 250,
                ..default()
            },
        ),
        (
            &["--seed", "7"],
            DemoOptions {
                seed: 7,
                ..default()
            },
        ),
        (
            &["--seed=18446744073709551615"],
            DemoOptions {
                seed: u64::MAX,
                ..default()
            },
        ),
        (
            &["--max-latency-ms", "3"],
            DemoOptions {
                max_latency_ms: 3,
                ..default()
            },
        ),
        (
            &["--max-latency-ms=3"],
            DemoOptions {
                max_latency_ms: 3,
                ..default()
            },
        ),
        (
            &["--store", "run.spool"],
            DemoOptions {
                store: location::StoreLocation::sqlite("run.spool"),
                ..default()
            },
        ),
        (
            &["--store=run.spool"],
            DemoOptions {
                store: location::StoreLocation::sqlite("run.spool"),
                ..default()
            },
        ),
        (
            &["--journal", "run.journal"],
            DemoOptions {
                journal: Some("run.journal".into()),
                ..default()
            },
        ),
        (
            &["--journal=run.journal"],
            DemoOptions {
                journal: Some("run.journal".into()),
                ..default()
            },
        ),
        (
            &["--retention-secs", "0"],
            DemoOptions {
                retention: Duration::ZERO,
                ..default()
            },
        ),
        (
            &["--retention-secs=90"],
            DemoOptions {
                retention: Duration::from_secs(90),
                ..default()
            },
        ),
        (
            &["--report-acks"],
            DemoOptions {
                report_acks: true,
                ..default()
            },
        ),
        (
            &["--quiet"],
            DemoOptions {
                quiet: true,
                ..default()
            },
        ),
        (
            &["-q"],
            DemoOptions {
                quiet: true,
                ..default()
            },
        ),
    ] {
        assert_eq!(demo(args), want, "{args:?}");
    }
}

#[test]
fn demo_takes_its_options_together_in_any_order() {
    let want = DemoOptions {
        agents: 250,
        seed: 7,
        max_latency_ms: 3,
        quiet: true,
        store: location::StoreLocation::sqlite("run.spool"),
        journal: None,
        report_acks: true,
        retention: Duration::from_secs(5),
    };
    assert_eq!(
        demo(&[
            "--agents",
            "250",
            "--seed",
            "7",
            "--max-latency-ms",
            "3",
            "--store",
            "run.spool",
            "--retention-secs",
            "5",
            "--report-acks",
            "--quiet",
        ]),
        want
    );
    assert_eq!(
        demo(&[
            "-q",
            "--report-acks",
            "--retention-secs=5",
            "--store=run.spool",
            "--max-latency-ms=3",
            "--seed=7",
            "--agents=250",
        ]),
        want
    );
}

#[test]
fn demo_bounds_take_their_ends() {
    assert_eq!(demo(&["--agents", "1"]).agents, 1);
    assert_eq!(demo(&["--agents", "1000000"]).agents, 1_000_000);
    assert_eq!(demo(&["--max-latency-ms", "0"]).max_latency_ms, 0);
    assert_eq!(demo(&["--max-latency-ms", "60000"]).max_latency_ms, 60_000);
    assert_eq!(
        demo(&["--retention-secs", "18446744073709551615"]).retention,
        Duration::from_secs(u64::MAX)
    );
}

#[test]
fn demo_refuses_values_out_of_bounds() {
    assert_error(
        &["demo", "--agents", "0"],
        ErrorKind::ValueValidation,
        "invalid value '0' for '--agents <N>': 0 is not in 1..=1000000",
    );
    assert_error(
        &["demo", "--agents", "1000001"],
        ErrorKind::ValueValidation,
        "invalid value '1000001' for '--agents <N>': 1000001 is not in 1..=1000000",
    );
    assert_error(
        &["demo", "--max-latency-ms", "60001"],
        ErrorKind::ValueValidation,
        "invalid value '60001' for '--max-latency-ms <M>': 60001 is not in 0..=60000",
    );
    assert_error(
        &["demo", "--seed", "18446744073709551616"],
        ErrorKind::ValueValidation,
        "invalid value '18446744073709551616' for '--seed <S>'",
    );
    assert_error(
        &["demo", "--retention-secs", "18446744073709551616"],
        ErrorKind::ValueValidation,
        "invalid value '18446744073709551616' for '--retention-secs <N>'",
    );
}

#[test]
fn demo_refuses_values_that_are_not_whole_numbers() {
    for (flag, name) in [
        ("--agents", "--agents <N>"),
        ("--seed", "--seed <S>"),
        ("--max-latency-ms", "--max-latency-ms <M>"),
        ("--retention-secs", "--retention-secs <N>"),
    ] {
        assert_error(
            &["demo", flag, "many"],
            ErrorKind::ValueValidation,
            &format!("invalid value 'many' for '{name}': invalid digit found in string"),
        );
        assert_error(
            &["demo", &format!("{flag}=1.5")],
            ErrorKind::ValueValidation,
            &format!("invalid value '1.5' for '{name}'"),
        );
    }
    // A negative number reads as an option, so the flag has no value.
    assert_error(
        &["demo", "--seed", "-1"],
        ErrorKind::UnknownArgument,
        "unexpected argument '-1' found",
    );
}

#[test]
fn demo_options_that_take_a_value_need_one() {
    for name in [
        "--agents <N>",
        "--seed <S>",
        "--max-latency-ms <M>",
        "--store <PATH>",
        "--journal <FILE>",
        "--retention-secs <N>",
    ] {
        let flag = name.split(' ').next().expect("a flag");
        assert_error(
            &["demo", flag],
            ErrorKind::InvalidValue,
            &format!("a value is required for '{name}' but none was supplied"),
        );
    }
}

#[test]
fn demo_flags_take_no_value() {
    for flag in ["--quiet", "--report-acks"] {
        assert_error(
            &["demo", &format!("{flag}=yes")],
            ErrorKind::TooManyValues,
            &format!("unexpected value 'yes' for '{flag}' found; no more were expected"),
        );
    }
}

#[test]
fn journal_and_store_do_not_go_together() {
    // The error names the one given first, then the one it cannot go with.
    assert_error(
        &["demo", "--journal", "a", "--store", "b"],
        ErrorKind::ArgumentConflict,
        "error: the argument '--journal <FILE>' cannot be used with '--store <PATH>'",
    );
    assert_error(
        &["demo", "--store=b", "--journal=a"],
        ErrorKind::ArgumentConflict,
        "error: the argument '--store <PATH>' cannot be used with '--journal <FILE>'",
    );
}

#[test]
fn demo_refuses_unknown_options_and_arguments() {
    assert_error(
        &["demo", "--fast"],
        ErrorKind::UnknownArgument,
        "error: unexpected argument '--fast' found",
    );
    assert_error(
        &["demo", "extra"],
        ErrorKind::UnknownArgument,
        "error: unexpected argument 'extra' found",
    );
    // A near miss gets a suggestion.
    assert_error(
        &["demo", "--agent", "5"],
        ErrorKind::UnknownArgument,
        "tip: a similar argument exists: '--agents'",
    );
}

#[test]
fn inspect_and_replay_take_one_file() {
    match parse(&["inspect", "run.spool"]) {
        Ok(Cli {
            command: Command::Inspect(InspectArgs { path, .. }),
            ..
        }) => assert_eq!(path, Some(PathBuf::from("run.spool"))),
        other => panic!("{other:?}"),
    }
    match parse(&["replay", "run.journal"]) {
        Ok(Cli {
            command: Command::Replay(ReplayArgs { journal, .. }),
            ..
        }) => assert_eq!(journal, PathBuf::from("run.journal")),
        other => panic!("{other:?}"),
    }
    // A file or a server, not both; nothing at all is refused when the command runs.
    assert_error(
        &["inspect", "run.spool", "--addr", "http://127.0.0.1:7420"],
        ErrorKind::ArgumentConflict,
        "the argument '[PATH]' cannot be used with '--addr <URL>'",
    );
    assert_error(
        &["inspect", "run.spool", "--token-file", "t"],
        ErrorKind::ArgumentConflict,
        "the argument '[PATH]' cannot be used with '--token-file <FILE>'",
    );
    assert_error(
        &["replay"],
        ErrorKind::MissingRequiredArgument,
        "error: the following required arguments were not provided:\n  <JOURNAL>",
    );
    assert_error(
        &["replay", "a", "b"],
        ErrorKind::UnknownArgument,
        "error: unexpected argument 'b' found",
    );
    assert_error(
        &["inspect", "--quiet", "a"],
        ErrorKind::UnknownArgument,
        "error: unexpected argument '--quiet' found",
    );
}

#[test]
fn a_command_is_needed_and_must_be_known() {
    assert_error(
        &[],
        ErrorKind::MissingSubcommand,
        "error: 'spool' requires a subcommand but one was not provided",
    );
    assert_error(
        &["nope"],
        ErrorKind::InvalidSubcommand,
        "error: unrecognized subcommand 'nope'",
    );
    assert_error(
        &["--agents", "5"],
        ErrorKind::UnknownArgument,
        "error: unexpected argument '--agents' found",
    );
    assert_error(
        &["help", "nope"],
        ErrorKind::InvalidSubcommand,
        "error: unrecognized subcommand 'nope'",
    );
}

#[test]
fn schedule_commands_parse_and_refuse_what_does_not_fit() {
    use crate::cli::schedule::ScheduleCommand;
    let schedule = |args: &[&str]| match parse(&[&["schedule"], args].concat()) {
        Ok(Cli {
            command: Command::Schedule(ScheduleArgs { command }),
            ..
        }) => command,
        other => panic!("{args:?}: {other:?}"),
    };
    match schedule(&[
        "next",
        "0 9 * * 1-5",
        "--tz",
        "America/New_York",
        "--count=3",
    ]) {
        ScheduleCommand::Next(next) => {
            assert_eq!((next.expr.as_str(), next.count), ("0 9 * * 1-5", 3));
            assert_eq!(next.tz.as_deref(), Some("America/New_York"));
        }
        other => panic!("{other:?}"),
    }
    match schedule(&[
        "add",
        "tick",
        "--every",
        "90s",
        "--prompt",
        "hi",
        "--overlap",
        "allow-all",
        "--fresh-session",
        "--pause-after-failures",
        "3",
        "--store",
        "s.spool",
    ]) {
        ScheduleCommand::Add(add) => {
            assert_eq!(add.every, Some(Duration::from_secs(90)));
            assert_eq!(add.overlap, spool_core::Overlap::AllowAll);
            assert!(add.fresh_session);
            assert_eq!(add.pause_after_failures, Some(3));
            assert_eq!(add.store.location.store, Some(PathBuf::from("s.spool")));
        }
        other => panic!("{other:?}"),
    }
    // Without them, the options the HTTP API defaults to.
    match schedule(&[
        "add", "t", "--every", "1h", "--prompt", "hi", "--store", "s",
    ]) {
        ScheduleCommand::Add(add) => {
            assert_eq!(add.catch_up, spool_core::CatchUp::Latest);
            assert_eq!((add.agent, add.priority, add.once), (None, None, None));
        }
        other => panic!("{other:?}"),
    }
    match schedule(&[
        "add",
        "launch",
        "--once",
        "2026-12-01T09:00:00Z",
        "--prompt",
        "hi",
        "--catch-up",
        "all:1h30m",
        "--agent",
        "ops",
        "--priority=critical",
        "--store",
        "s",
    ]) {
        ScheduleCommand::Add(add) => {
            assert_eq!(
                add.once,
                Some("2026-12-01T09:00:00Z".parse().expect("an instant"))
            );
            assert_eq!(
                add.catch_up,
                spool_core::CatchUp::All {
                    window: Duration::from_secs(5400)
                }
            );
            assert_eq!(add.agent.as_deref(), Some("ops"));
            assert_eq!(add.priority, Some(spool_core::Priority::Critical));
        }
        other => panic!("{other:?}"),
    }
    fn add<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        [
            &["schedule", "add", "tick", "--prompt", "hi", "--store", "s"][..],
            extra,
        ]
        .concat()
    }
    assert_error(
        &add(&[]),
        ErrorKind::MissingRequiredArgument,
        "<--cron <EXPR>|--every <DURATION>|--once <RFC3339>>",
    );
    assert_error(
        &add(&["--cron", "* * * * *", "--every", "1s"]),
        ErrorKind::ArgumentConflict,
        "cannot be used with",
    );
    assert_error(
        &add(&["--every", "1s", "--tz", "UTC"]),
        ErrorKind::ArgumentConflict,
        "'--every <DURATION>' cannot be used with '--tz <ZONE>'",
    );
    assert_error(
        &add(&["--once", "2026-12-01T09:00:00Z", "--every", "1h"]),
        ErrorKind::ArgumentConflict,
        "cannot be used with",
    );
    assert_error(
        &add(&["--once", "2026-12-01T09:00:00Z", "--tz", "UTC"]),
        ErrorKind::ArgumentConflict,
        "'--once <RFC3339>' cannot be used with '--tz <ZONE>'",
    );
    assert_error(
        &add(&["--once", "next week"]),
        ErrorKind::ValueValidation,
        "invalid value 'next week' for '--once <RFC3339>': not an RFC 3339 instant",
    );
    assert_error(
        &add(&["--every", "1h", "--priority", "urgent"]),
        ErrorKind::ValueValidation,
        "invalid value 'urgent' for '--priority <LEVEL>': unknown priority `urgent` \
         (expected low, normal, high or critical)\n",
    );
    assert_error(
        &add(&["--every", "1h", "--catch-up", "all"]),
        ErrorKind::ValueValidation,
        "invalid value 'all' for '--catch-up <POLICY>': `all` is not `latest`, `none` or \
         `all:WINDOW` (all:6h)\n",
    );
    assert_error(
        &add(&["--every", "1h", "--catch-up", "all:soon"]),
        ErrorKind::ValueValidation,
        "invalid value 'all:soon' for '--catch-up <POLICY>': interval \"soon\"",
    );
    assert_error(
        &[
            "schedule", "add", "t", "--every", "1h", "--prompt", " \t", "--store", "s",
        ],
        ErrorKind::ValueValidation,
        "invalid value ' \t' for '--prompt <TEXT>': must not be blank\n",
    );
    assert_error(
        &add(&["--every", "1h", "--agent", " "]),
        ErrorKind::ValueValidation,
        "invalid value ' ' for '--agent <NAME>': an agent's name is not blank\n",
    );
    assert_error(
        &add(&["--every", "soon"]),
        ErrorKind::ValueValidation,
        "invalid value 'soon' for '--every <DURATION>'",
    );
    assert_error(
        &["schedule", "next", "* * * * *", "--after", "yesterday"],
        ErrorKind::ValueValidation,
        "not an RFC 3339 instant",
    );
    // A store or a server, not both; neither is refused when the command runs.
    assert_error(
        &[
            "schedule",
            "list",
            "--store",
            "s",
            "--addr",
            "http://127.0.0.1:7420",
        ],
        ErrorKind::ArgumentConflict,
        "the argument '--store <PATH>' cannot be used with '--addr <URL>'",
    );
    assert_error(
        &["schedule", "list", "--store", "s", "--token-file", "t"],
        ErrorKind::ArgumentConflict,
        "the argument '--store <PATH>' cannot be used with '--token-file <FILE>'",
    );
    match parse(&["run", "--store", "s.spool", "-q"]) {
        Ok(Cli {
            command: Command::Run(args),
            ..
        }) => {
            let options = RunOptions::from(args);
            assert!(options.quiet);
            assert_eq!(options.llm_latency, Duration::from_millis(20));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn run_and_serve_take_the_limit_options() {
    use crate::limits::Described;
    let args = [
        "--store",
        "s.spool",
        "--max-running",
        "8",
        "--limit",
        "llm=4,60/min",
        "--limit=tool:search=2",
        "--agent-limit",
        "llm=1,10/min",
        "--agent-max-in-flight",
        "3",
    ];
    let want = "limits --max-running 8 --limit llm=4,60/min --limit tool:search=2 \
                --agent-limit llm=1,10/min --agent-max-in-flight 3";
    let limits = match parse(&[&["run"], &args[..]].concat()) {
        Ok(Cli {
            command: Command::Run(args),
            ..
        }) => RunOptions::from(args).limits.limits().expect("limits"),
        other => panic!("{other:?}"),
    };
    assert_eq!(Described(&limits.tasks, &limits.requests).to_string(), want);
    let limits = match parse(&[&["serve"], &args[..]].concat()) {
        Ok(Cli {
            command: Command::Serve(args),
            ..
        }) => crate::serve::ServeOptions::from(args)
            .limits
            .limits()
            .expect("limits"),
        other => panic!("{other:?}"),
    };
    assert_eq!(Described(&limits.tasks, &limits.requests).to_string(), want);
    assert_error(
        &["run", "--store", "s", "--limit", "llm=4,60/fortnight"],
        ErrorKind::ValueValidation,
        "error: invalid value 'llm=4,60/fortnight' for '--limit <KIND=SPEC>': \
         `60/fortnight`: the period must be s, min or h\n",
    );
    assert_error(
        &["serve", "--store", "s", "--limit", "tool:=2"],
        ErrorKind::ValueValidation,
        "error: invalid value 'tool:=2' for '--limit <KIND=SPEC>': `tool:` is not a \
         request kind: `tool:` needs a tool name after the colon\n",
    );
    assert_error(
        &["serve", "--store", "s", "--agent-max-in-flight", "0"],
        ErrorKind::ValueValidation,
        "error: invalid value '0' for '--agent-max-in-flight <N>': 0 is not in 1..=4294967295",
    );
}

#[test]
fn help_and_version_in_every_spelling() {
    for args in [
        &["help"][..],
        &["--help"],
        &["-h"],
        &["demo", "--help"],
        &["demo", "-h"],
        &["help", "demo"],
        &["inspect", "--help"],
        &["help", "replay"],
        // Help stops the parse: what follows it is not looked at.
        &["demo", "--help", "--agents", "0"],
    ] {
        let (kind, message) = error(args);
        assert_eq!(kind, ErrorKind::DisplayHelp, "{args:?}: {message}");
        assert!(message.contains("Usage: spool"), "{args:?}: {message}");
    }
    let (kind, message) = error(&["--version"]);
    assert_eq!(kind, ErrorKind::DisplayVersion);
    assert_eq!(message, format!("spool {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn help_lists_the_commands_and_demo_help_its_options_and_environment() {
    let (_, top) = error(&["--help"]);
    for line in [
        "spool — a deterministic, coroutine-style runtime for LLM agents",
        "Usage: spool [OPTIONS] <COMMAND>",
        "      --log-format <FORMAT>  Log lines on stderr: text (the default) or json (one object\n",
        "  demo      Run scripted ReAct agents",
        "  inspect   Print the task table",
        "  replay    Replay a journal of the demo",
        "  run       Run a store's schedules and tasks with the built-in agent",
        "  schedule  Cron next-fire times, and the schedules of a store or of a running server",
        "  help      Print this message or the help of the given subcommand(s)",
        "  -V, --version              Print version",
    ] {
        assert!(top.contains(line), "{line:?} missing from\n{top}");
    }
    let (_, demo) = error(&["demo", "--help"]);
    for line in [
        "Usage: spool demo [OPTIONS]",
        "--agents <N>",
        "[default: 300]",
        "--seed <S>",
        "[default: 42]",
        "--max-latency-ms <M>",
        "[default: 40]",
        "--store <PATH>",
        "--journal <FILE>",
        "--retention-secs <N>",
        "[default: 600]",
        "-q, --quiet",
        "Environment for demo:\n  OPENAI_BASE_URL",
        "OPENAI_MODEL     Its model (default gpt-4o-mini)",
    ] {
        assert!(demo.contains(line), "{line:?} missing from\n{demo}");
    }
}

/// The help of `spool` and of each of its commands, with the arguments that print it.
fn every_help() -> Vec<(Vec<String>, String)> {
    fn walk(command: &clap::Command, path: Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(path.clone());
        for sub in command.get_subcommands().filter(|c| c.get_name() != "help") {
            let mut path = path.clone();
            path.push(sub.get_name().to_owned());
            walk(sub, path, out);
        }
    }
    let mut paths = Vec::new();
    walk(&Cli::command(), Vec::new(), &mut paths);
    paths
        .into_iter()
        .map(|mut path| {
            path.push("--help".to_owned());
            let args: Vec<&str> = path.iter().map(String::as_str).collect();
            let (kind, text) = error(&args);
            assert_eq!(kind, ErrorKind::DisplayHelp, "{path:?}");
            (path, text)
        })
        .collect()
}

#[test]
fn every_help_line_fits_in_100_columns() {
    let helps = every_help();
    assert!(helps.len() > 15, "{} helps", helps.len());
    for (path, text) in helps {
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "`spool {}` has a line of {} columns:\n{line}",
                path.join(" "),
                line.chars().count()
            );
        }
    }
}

#[test]
fn test_only_options_are_not_in_the_help() {
    for (path, text) in every_help() {
        assert!(!text.contains("--report-acks"), "{path:?}:\n{text}");
    }
    // Still taken, for the tests that use it.
    assert!(demo(&["--report-acks"]).report_acks);
}
