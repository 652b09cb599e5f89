//! `spool schedule`: a cron expression's next fire times, and the schedules of the
//! built-in agent in a store or on a running server. Each command that changes a store
//! opens it (taking its lock: a store `spool run` is running is refused, with a message
//! naming it), goes on from what it holds, applies the operation durably, prints the
//! result and exits; `list`, `show` and `runs` only read it. With `--addr` the same
//! commands go through the server's HTTP API ([`server`]).

mod server;
mod show;

use std::process::ExitCode;

use jiff::Timestamp;
use serde_json::json;
use spool_core::{CronSpec, FireOutcome, ScheduleDef, SessionMode, Spec};
use spool_runtime::Runtime;

use crate::agent::AGENT_TYPE;
use crate::cli::location::{Location, MISSING};
use crate::cli::schedule::{
    AddArgs, ListArgs, NextArgs, ScheduleArgs, ScheduleCommand, ShowArgs, SlugArgs, StoreArg,
};
use crate::remote::{AddrError, Client, Endpoint};
use crate::stored::{Failure, failed, open_runtime_at, read_scheduler_at};
use server::Server;

/// Where a command finds the schedules.
#[derive(Debug)]
enum Target {
    /// A store: an SQLite file, or a PostgreSQL database.
    Store(Location),
    /// A running server, through its HTTP API.
    Server(Server),
}

/// The usage error of `--token-file` without `--addr`.
pub(crate) const TOKEN_WITHOUT_ADDR: &str =
    "--token-file is the token of a running server: give its address with --addr URL";

/// Where `arg` says the schedules are: `--addr` (which wins over the environment's
/// store), else the store the options or the environment name.
fn target(arg: &StoreArg) -> Result<Target, Failure> {
    if let Some(addr) = &arg.addr {
        return match Endpoint::from_options(addr, arg.token_file.as_deref()) {
            Ok(endpoint) => Ok(Target::Server(Server::new(Client::new(endpoint)))),
            // A URL that is not one is a usage error, as clap's own.
            Err(error @ AddrError::BadAddr(_)) => Err(Failure::Usage(error.to_string())),
            Err(error) => Err(Failure::Failed(error.to_string())),
        };
    }
    if arg.token_file.is_some() {
        // A token is for a server: without --addr the command would work on the store
        // in SPOOL_DATABASE_URL and quietly not use it.
        return Err(Failure::Usage(TOKEN_WITHOUT_ADDR.to_owned()));
    }
    match arg.location.location() {
        Some(location) => Ok(Target::Store(location)),
        None => Err(Failure::Usage(format!(
            "{MISSING}, or a running server with --addr URL"
        ))),
    }
}

/// Opens the store at `location` as its writer, as [`open_runtime_at`]; a store another
/// process writes is refused with a message that says how to reach a server's.
fn open_writer(location: &Location) -> Result<Runtime, Failure> {
    open_runtime_at(location, Runtime::builder()).map_err(|failure| match failure {
        Failure::Failed(message) if message.contains(IN_USE) => Failure::Failed(format!(
            "{message}; while `spool serve` runs it, go through the server: --addr URL"
        )),
        other => other,
    })
}

/// What both backends say of a store another process writes.
const IN_USE: &str = "is in use by another spool process";

/// `spool schedule ...`.
pub(crate) fn run(args: ScheduleArgs) -> ExitCode {
    let (name, done) = match args.command {
        ScheduleCommand::Next(args) => ("next", next(&args)),
        ScheduleCommand::Add(args) => ("add", add(&args)),
        ScheduleCommand::List(args) => ("list", list(&args)),
        ScheduleCommand::Show(args) => ("show", show(&args)),
        ScheduleCommand::Runs(args) => ("runs", runs(&args)),
        ScheduleCommand::Pause(args) => ("pause", change(&args, Change::Pause)),
        ScheduleCommand::Resume(args) => ("resume", change(&args, Change::Resume)),
        ScheduleCommand::Rm(args) => ("rm", change(&args, Change::Delete)),
        ScheduleCommand::Run(args) => ("run", change(&args, Change::Trigger)),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(&format!("spool schedule {name}")),
    }
}

/// `spool schedule next EXPR`: one RFC 3339 UTC instant a line, the local time beside
/// it when `--tz` is given.
fn next(args: &NextArgs) -> Result<(), Failure> {
    let zone = args.tz.as_deref().unwrap_or("UTC");
    let spec = CronSpec::parse(&args.expr, zone).map_err(|e| Failure::Usage(e.to_string()))?;
    let tz = jiff::tz::TimeZone::get(zone).ok();
    let mut at = args.after.unwrap_or_else(Timestamp::now);
    let mut out = String::new();
    for _ in 0..args.count {
        let Some(fire) = spec.next_after(at) else {
            break;
        };
        out.push_str(&fire.to_string());
        if let (Some(_), Some(tz)) = (&args.tz, &tz) {
            let local = fire.to_zoned_datetime(tz.clone());
            out.push_str(&format!("  {}", local.strftime("%a %Y-%m-%d %H:%M:%S %Z")));
        }
        out.push('\n');
        at = fire;
    }
    out!("{out}");
    Ok(())
}

/// `spool schedule add SLUG ...`: a new schedule of the built-in agent.
fn add(args: &AddArgs) -> Result<(), Failure> {
    spool_core::check_slug(&args.slug).map_err(|e| Failure::Usage(e.to_string()))?;
    let spec = match (&args.cron, args.every, args.once) {
        (Some(expr), _, _) => {
            let zone = args.tz.as_deref().unwrap_or("UTC");
            let cron = CronSpec::parse(expr, zone).map_err(|e| {
                let option = match e {
                    spool_core::SpecError::UnknownTimeZone(_) => "--tz",
                    _ => "--cron",
                };
                Failure::Usage(format!("bad {option}: {e}"))
            })?;
            Spec::Cron(cron)
        }
        (None, Some(every), _) => Spec::Every(every),
        (None, None, Some(at)) => Spec::Once(at),
        (None, None, None) => {
            return Err(Failure::Usage("give --cron, --every or --once".to_owned()));
        }
    };
    let mut def = ScheduleDef::new(
        args.slug.clone(),
        spec,
        AGENT_TYPE,
        json!({ "prompt": args.prompt }),
    )
    .overlap(args.overlap)
    .catch_up(args.catch_up);
    if let Some(agent) = &args.agent {
        def = def.agent(agent.clone());
    }
    if let Some(priority) = args.priority {
        def = def.priority(priority);
    }
    if args.fresh_session {
        def = def.session(SessionMode::Fresh);
    }
    if let Some(n) = args.pause_after_failures {
        def = def.pause_after_failures(n);
    }
    let location = match target(&args.store)? {
        Target::Store(location) => location,
        Target::Server(server) => {
            out!("{}", server.add(&def)?);
            return Ok(());
        }
    };
    let mut runtime = open_writer(&location)?;
    if runtime.schedule(&args.slug).is_some() {
        return Err(exists(&args.slug));
    }
    runtime
        .put_schedule(def)
        .map_err(|e| Failure::Failed(e.to_string()))?;
    let info = runtime
        .schedule(&args.slug)
        .ok_or_else(|| Failure::Failed("the schedule is not there after adding it".to_owned()))?;
    outln!(
        "added {} ({}); next run {}",
        args.slug,
        show::when(&info.def.spec),
        show::instant(info.status.next_run)
    );
    Ok(())
}

/// `spool schedule list`.
fn list(args: &ListArgs) -> Result<(), Failure> {
    let location = match target(&args.store)? {
        Target::Store(location) => location,
        Target::Server(server) => {
            out!("{}", server.list(args.json)?);
            return Ok(());
        }
    };
    let scheduler = read_scheduler_at(&location)?;
    let schedules = scheduler.schedules();
    if args.json {
        let all: Vec<_> = schedules.iter().map(show::info_json).collect();
        outln!("{}", pretty(&serde_json::Value::Array(all))?);
    } else {
        out!("{}", show::table(&schedules));
    }
    Ok(())
}

/// `spool schedule show SLUG`.
fn show(args: &ShowArgs) -> Result<(), Failure> {
    spool_core::check_slug(&args.slug).map_err(|e| Failure::Usage(e.to_string()))?;
    let location = match target(&args.store)? {
        Target::Store(location) => location,
        Target::Server(server) => {
            out!("{}", server.show(&args.slug, args.json)?);
            return Ok(());
        }
    };
    let scheduler = read_scheduler_at(&location)?;
    let info = scheduler
        .schedule(&args.slug)
        .ok_or_else(|| not_found(&args.slug))?;
    let messages = info
        .status
        .session
        .as_deref()
        .and_then(|id| scheduler.session(id))
        .map(|session| session.messages.len());
    if args.json {
        let mut value = show::info_json(&info);
        value["session_messages"] = json!(messages.unwrap_or(0));
        outln!("{}", pretty(&value)?);
    } else {
        out!("{}", show::details(&info, messages));
    }
    Ok(())
}

/// `spool schedule runs SLUG`: the runs the store still holds (ended runs are kept
/// for the retention, ten minutes), oldest first.
fn runs(args: &ShowArgs) -> Result<(), Failure> {
    spool_core::check_slug(&args.slug).map_err(|e| Failure::Usage(e.to_string()))?;
    let location = match target(&args.store)? {
        Target::Store(location) => location,
        Target::Server(server) => {
            out!("{}", server.runs(&args.slug, args.json)?);
            return Ok(());
        }
    };
    let scheduler = read_scheduler_at(&location)?;
    let info = scheduler
        .schedule(&args.slug)
        .ok_or_else(|| not_found(&args.slug))?;
    let runs = show::runs(&scheduler, &info);
    if args.json {
        outln!("{}", pretty(&serde_json::Value::Array(runs))?);
    } else {
        out!("{}", show::runs_table(&runs, info.status.runs));
    }
    Ok(())
}

/// What `pause`, `resume`, `rm` and `run` do.
#[derive(Copy, Clone, Debug)]
pub(super) enum Change {
    Pause,
    Resume,
    Delete,
    Trigger,
}

fn change(args: &SlugArgs, change: Change) -> Result<(), Failure> {
    spool_core::check_slug(&args.slug).map_err(|e| Failure::Usage(e.to_string()))?;
    let location = match target(&args.store)? {
        Target::Store(location) => location,
        Target::Server(server) => {
            out!("{}", server.change(&args.slug, change)?);
            return Ok(());
        }
    };
    // A change is made in a store that exists: the wrong path or database gets an
    // error, not a new store with nothing in it.
    match &location {
        Location::Sqlite(path) if !path.exists() => {
            return Err(Failure::Failed(format!(
                "there is no store at {}",
                path.display()
            )));
        }
        Location::Sqlite(_) => {}
        #[cfg(feature = "postgres")]
        Location::Postgres(url) => {
            // Read only, which makes nothing: an empty database, or another program's,
            // is refused as it is. Other failures (a server that refuses) are said by
            // the writer's own open below, as for any command.
            if let Err(error @ spool_postgres::PgStoreError::NotAStore { .. }) =
                spool_postgres::PgStore::connect_read_only(url)
            {
                return Err(failed("cannot open the store", error));
            }
        }
        #[cfg(not(feature = "postgres"))]
        Location::Postgres(_) => {}
    }
    let mut runtime = open_writer(&location)?;
    let slug = args.slug.as_str();
    let refused = |e: spool_core::ScheduleError| Failure::Failed(e.to_string());
    // Said once the store has it: a reader that went away ends the command quietly,
    // so nothing may be left to check after the line.
    let said = match change {
        Change::Pause => {
            runtime.pause_schedule(slug).map_err(refused)?;
            format!("paused {slug}")
        }
        Change::Resume => {
            runtime.resume_schedule(slug).map_err(refused)?;
            let next = runtime.schedule(slug).and_then(|i| i.status.next_run);
            format!("resumed {slug}; next run {}", show::instant(next))
        }
        Change::Delete => {
            runtime.delete_schedule(slug).map_err(refused)?;
            format!("removed {slug}")
        }
        Change::Trigger => match runtime.trigger_schedule(slug).map_err(refused)? {
            FireOutcome::Started(id) => {
                format!("{slug}: run started as task {id}; `spool run` on this store runs it")
            }
            FireOutcome::Buffered => format!("{slug}: a run is going; this one runs after it"),
            FireOutcome::Skipped => {
                format!("{slug}: a run is going; skipped (overlap skip), counted missed")
            }
            FireOutcome::Delayed(at) => {
                format!("{slug}: its session is busy; the run tries again at {at}")
            }
            FireOutcome::Failed(reason) => {
                return Err(failed("the run could not start", reason));
            }
            other => format!("{slug}: {other:?}"),
        },
    };
    if let Some(error) = runtime.journal_error() {
        return Err(failed("the store failed", error));
    }
    outln!("{said}");
    Ok(())
}

/// The refusal of `add` for a schedule that exists.
fn exists(slug: &str) -> Failure {
    Failure::Failed(format!(
        "a schedule named {slug:?} exists already (rm it first)"
    ))
}

/// The refusal of a command naming a schedule that does not exist.
fn not_found(slug: &str) -> Failure {
    Failure::Failed(spool_core::ScheduleError::NotFound(slug.to_owned()).to_string())
}

fn pretty(value: &serde_json::Value) -> Result<String, Failure> {
    serde_json::to_string_pretty(value).map_err(|e| failed("cannot print JSON", e))
}
