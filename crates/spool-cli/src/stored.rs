//! A runtime on a store, as `spool run`, `spool serve` and the `spool schedule`
//! commands open it: the store — an SQLite file or a PostgreSQL database, either as a
//! `Box<dyn DurableStore>` ([`connect`]) — as its one writer, what it holds recovered,
//! the built-in task types for runs, and every input journaled to its sink; and the
//! kind of a store, which says which commands may run it ([`StoreKind`]).

use std::fmt;
use std::process::ExitCode;

use spool_core::{Journal, Scheduler};

use crate::cli::limits::Limits;
use crate::cli::location::Location;
use crate::limits::{Described, same_limits};
use spool_durable::{CrashAt, DurableStore, History};
use spool_runtime::{Runtime, RuntimeBuilder};
use spool_store::{Store, StoreOptions};

use crate::agent::{TYPE_NAME as AGENT_TYPE_NAME, registry};

/// Journal entries between two checkpoints of a store.
const CHECKPOINT_EVERY: u64 = 500;

/// Why a command failed: its message, and the exit status it gives.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The command line does not fit (exit status 2, as clap's own errors).
    Usage(String),
    /// It could not do what it was asked (exit status 1); nothing was changed.
    Failed(String),
}

impl Failure {
    /// Prints the message, prefixed with `command`, and gives the exit status. The
    /// message may quote text from outside (a reason a run could not start): its
    /// control characters are written visibly.
    pub(crate) fn report(&self, command: &str) -> ExitCode {
        eprintln!("{command}: {}", crate::terminal::safe(&self.to_string()));
        match self {
            Failure::Usage(_) => ExitCode::from(2),
            Failure::Failed(_) => ExitCode::FAILURE,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(message) | Failure::Failed(message) => f.write_str(message),
        }
    }
}

/// What a command says in a build without its feature: `spool serve` needs `serve`,
/// `spool top` needs `top` (both on by default, left out by `--no-default-features`).
#[cfg(any(not(feature = "serve"), not(feature = "top")))]
pub(crate) fn not_built(feature: &str) -> String {
    format!(
        "this spool was built without `spool {feature}` (cargo's `--no-default-features` \
         leaves out the `{feature}` feature): build it with `cargo build --release -p \
         spool-cli`, or add `--features {feature}`"
    )
}

/// A failure to run, with `what` said before `error`.
pub(crate) fn failed(what: &str, error: impl fmt::Display) -> Failure {
    Failure::Failed(format!("{what}: {error}"))
}

/// How a command opens a store.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// As its one writer, creating it if missing (an SQLite file, or the schema in an
    /// empty PostgreSQL database); a store another process writes is refused.
    Write,
    /// To read only: a store that is not there is refused, never created. On
    /// PostgreSQL it takes no writer lock, so it reads a store another process writes;
    /// an SQLite file is opened as for writing (its lock taken) and not written to.
    Read,
}

/// Connects to the store at `location` as `access` says, with the crash tests'
/// moment `crash_at` (for the writer; `None` in production). `Err` is what the backend
/// says, for a message that names the store first (an SQLite store's error reads as
/// `spool_store::StoreError` says it; a PostgreSQL URL's password is never in it).
pub(crate) fn connect(
    location: &Location,
    access: Access,
    crash_at: Option<CrashAt>,
) -> Result<Box<dyn DurableStore>, String> {
    connect_keeping(location, access, crash_at, History::default())
}

/// As [`connect`], the writer keeping `history`.
fn connect_keeping(
    location: &Location,
    access: Access,
    crash_at: Option<CrashAt>,
    history: History,
) -> Result<Box<dyn DurableStore>, String> {
    match location {
        Location::Sqlite(path) => {
            let options = StoreOptions::new().crash_at(crash_at).history(history);
            Store::open_with(path, options)
                .map(|store| Box::new(store) as Box<dyn DurableStore>)
                .map_err(|e| e.to_string())
        }
        Location::Postgres(url) => connect_postgres(url, access, crash_at, history),
    }
}

/// Connects to the store in the PostgreSQL database at `url`: as its writer (taking
/// its writer lock), or read only.
#[cfg(feature = "postgres")]
fn connect_postgres(
    url: &str,
    access: Access,
    crash_at: Option<CrashAt>,
    history: History,
) -> Result<Box<dyn DurableStore>, String> {
    use spool_postgres::{Cluster, PgOptions, PgStore};
    if access == Access::Write {
        // A cluster's shards are written by the nodes that lease them; a lone writer
        // would take shard 0 from its node (raising its epoch) and write beside it.
        if let Ok(cluster) = Cluster::connect(url) {
            return Err(format!(
                "{} holds a cluster of {} shards, written by its nodes: change it through a \
                 node's API (`--addr http://NODE --token-file FILE`), or run `spool serve \
                 --postgres` to start a node",
                cluster.name(),
                cluster.shards()
            ));
        }
    }
    match access {
        Access::Write => {
            PgStore::connect_with(url, PgOptions::new().crash_at(crash_at).history(history))
        }
        Access::Read => PgStore::connect_read_only(url),
    }
    .map(|store| Box::new(store) as Box<dyn DurableStore>)
    .map_err(|e| e.to_string())
}

/// Opens, read only, the store that holds task `task` in the PostgreSQL database at
/// `url`: on a cluster's database the shard its id names (see
/// [`spool_cluster::shard_of_task`]), else the database's one store (shard 0).
#[cfg(feature = "postgres")]
pub(crate) fn open_task_postgres(url: &str, task: u64) -> Result<Box<dyn DurableStore>, Failure> {
    use spool_postgres::{PgOptions, PgStore};
    let shard = spool_cluster::shard_of_task(task);
    PgStore::connect_read_only_with(url, PgOptions::new().shard(shard))
        .map(|store| Box::new(store) as Box<dyn DurableStore>)
        .map_err(|e| failed("cannot open the store", e))
}

/// In a build without the `postgres` feature: says how to get one.
#[cfg(not(feature = "postgres"))]
pub(crate) fn open_task_postgres(_url: &str, _task: u64) -> Result<Box<dyn DurableStore>, Failure> {
    Err(Failure::Failed(format!(
        "cannot open the store: {NO_POSTGRES}"
    )))
}

/// In a build without the `postgres` feature: says how to get one.
#[cfg(not(feature = "postgres"))]
fn connect_postgres(
    _url: &str,
    _access: Access,
    _crash_at: Option<CrashAt>,
    _history: History,
) -> Result<Box<dyn DurableStore>, String> {
    Err(NO_POSTGRES.to_owned())
}

/// What a build without the `postgres` feature says when given `--postgres`.
#[cfg(not(feature = "postgres"))]
const NO_POSTGRES: &str = "this spool was built without PostgreSQL stores (cargo's \
     `--no-default-features` leaves out the `postgres` feature): build it with `cargo \
     build --release -p spool-cli`, or add `--features postgres`";

/// Opens the store at `location` as `access` says: [`connect`], with the messages of
/// the commands that open a store: `there is no store at PATH` for an SQLite file that
/// is not there when only read, else `cannot open the store: WHY`.
pub(crate) fn open_durable(
    location: &Location,
    access: Access,
) -> Result<Box<dyn DurableStore>, Failure> {
    open_keeping(location, access, History::default())
}

/// As [`open_durable`], the writer keeping `history`.
fn open_keeping(
    location: &Location,
    access: Access,
    history: History,
) -> Result<Box<dyn DurableStore>, Failure> {
    if let (Location::Sqlite(path), Access::Read) = (location, access)
        && !path.exists()
    {
        return Err(Failure::Failed(format!(
            "there is no store at {}",
            path.display()
        )));
    }
    connect_keeping(location, access, None, history).map_err(|e| failed("cannot open the store", e))
}

/// Opens the store at `location` (creating it) as its writer and builds a runtime on
/// it with `builder`: it goes on from what the store holds, makes schedules' runs of
/// the built-in task types, tells the core the wall clock, and journals every input to
/// the store.
pub(crate) fn open_runtime_at(
    location: &Location,
    builder: RuntimeBuilder,
) -> Result<Runtime, Failure> {
    let (store, journal) = open_store(location, History::default())?;
    let mut builder = builder.registry(registry());
    if let Some(journal) = &journal {
        builder = builder
            .recover(journal, &registry())
            .map_err(|e| failed("cannot go on from the store", e))?;
    }
    journaled(builder, store.as_ref())
}

/// As [`open_runtime_at`], under `limits` (which `builder` is configured with). A
/// store keeps the limits it runs under (they are in its snapshots, and a replay of its
/// journal needs them): without limit options it goes on under them; with options that
/// differ, they replace them if no task is live, and are refused if one is. Returns
/// the store too, for what the command says of it.
pub(crate) fn open_limited(
    location: &Location,
    builder: RuntimeBuilder,
    limits: &Limits,
) -> Result<(Runtime, std::sync::Arc<dyn DurableStore>), Failure> {
    let (store, journal) = open_store(location, limits.history)?;
    // Shared with the runtime, which reads tasks' histories from it.
    let store: std::sync::Arc<dyn DurableStore> = std::sync::Arc::from(store);
    let mut builder = builder.registry(registry());
    if let Some(journal) = &journal {
        builder = if limits.given {
            with_limits(builder, journal, limits, &store.name())?
        } else {
            builder
                .recover(journal, &registry())
                .map_err(|e| failed("cannot go on from the store", e))?
        };
    }
    let builder = builder.history(history_reader(location, &store));
    let runtime = journaled(builder, store.as_ref())?;
    Ok((runtime, store))
}

/// What the runtime reads tasks' histories through: a read-only handle of its own, so
/// that a long read never holds up the writer's commits (an SQLite store's handle
/// shares one connection with its writer); the writer's handle if none can be opened.
fn history_reader(
    location: &Location,
    writer: &std::sync::Arc<dyn DurableStore>,
) -> std::sync::Arc<dyn DurableStore> {
    let reader = match location {
        Location::Sqlite(path) => Store::open_read_only(path)
            .map(|store| Box::new(store) as Box<dyn DurableStore>)
            .map_err(|e| e.to_string()),
        Location::Postgres(_) => connect(location, Access::Read, None),
    };
    match reader {
        Ok(reader) => std::sync::Arc::from(reader),
        Err(error) => {
            tracing::warn!(%error, "histories are read through the writer's connection");
            std::sync::Arc::clone(writer)
        }
    }
}

/// `builder` going on from `journal` (of the store called `name`) under `limits`: the
/// store's own if they are the same, else the new ones if no task is live.
fn with_limits(
    builder: RuntimeBuilder,
    journal: &Journal,
    limits: &Limits,
    name: &str,
) -> Result<RuntimeBuilder, Failure> {
    let mut core = Scheduler::replay(journal, &registry())
        .map_err(|e| failed("cannot go on from the store", e))?
        .scheduler;
    if same_limits(&core, limits) {
        return Ok(builder.recover_from(core, &registry()));
    }
    let old = Described(core.task_limits(), core.request_limits()).to_string();
    core.record_trace(false);
    core.trace_mut().take_events();
    let snapshot = core
        .snapshot()
        .map_err(|e| failed("cannot go on from the store", e))?;
    let Some(changed) = snapshot.with_limits(limits.tasks.clone(), limits.requests.clone()) else {
        return Err(Failure::Failed(format!(
            "the store {name} has {}, started under {old}; limits change only \
             when no task is live: start it without limit options (it keeps its \
             limits) and let its tasks end, or use another store",
            crate::output::counted(core.live_len(), "live task")
        )));
    };
    tracing::info!("the store {name} ran under {old}; from now on under the options given");
    builder
        .restore(&changed, &registry())
        .map_err(|e| failed("cannot go on from the store", e))
}

/// Opens the store at `location` (creating it) as its writer, keeping `history`, and
/// reads what it holds, once it is known to be a store of `spool run` (and stamped so
/// if it was not).
fn open_store(
    location: &Location,
    history: History,
) -> Result<(Box<dyn DurableStore>, Option<Journal>), Failure> {
    let store = open_keeping(location, Access::Write, history)?;
    let journal = store
        .recover()
        .map_err(|e| failed("cannot read the store", e))?;
    claim_kind(store.as_ref(), journal.as_ref(), StoreKind::Run, true)?;
    Ok((store, journal))
}

/// Which commands a store is for, recorded in the store as its maker
/// ([`Store::claim_maker`]): the demo's scripted agents and the built-in agent's
/// schedules and runs do not mix (the demo would run a store's schedules with its
/// scripted model, and `spool run` would go on with the demo's agents).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum StoreKind {
    /// A store of `spool demo`.
    Demo,
    /// A store of `spool run`, `spool serve` and `spool schedule`, which share stores.
    Run,
}

impl StoreKind {
    /// The name recorded in the store.
    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreKind::Demo => "demo",
            StoreKind::Run => "run",
        }
    }

    /// The kind recorded as `name`, if it is one of these.
    fn from_name(name: &str) -> Option<StoreKind> {
        [StoreKind::Demo, StoreKind::Run]
            .into_iter()
            .find(|kind| kind.name() == name)
    }

    /// What makes a store of this kind, and what it holds, for a message.
    pub(crate) fn made_by(self) -> &'static str {
        match self {
            StoreKind::Demo => "spool demo (its scripted agents)",
            StoreKind::Run => "spool run/serve (its schedules and agents)",
        }
    }

    /// The commands a store of this kind is for, and what to do instead, for a refusal.
    fn instead(self) -> &'static str {
        match self {
            StoreKind::Demo => "not by spool demo: give the demo a store of its own",
            StoreKind::Run => "not by spool run, serve or schedule: give them a store of their own",
        }
    }
}

/// What a store made before the maker was recorded holds, as far as kinds go.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Inferred {
    /// Nothing either kind would run: no schedule, no task, no agent ever submitted.
    Empty,
    /// Only the demo's agents (or only schedules, tasks and keys of another kind).
    Kind(StoreKind),
    /// Its journal cannot be replayed here, so what it holds is unknown.
    Unknown,
}

/// What the run in `journal` says about the kind of the store that holds it: a store
/// with a schedule, or with any task that is not one of the demo's agents (`agent-N`
/// of the demo's agent type, submitted under its name as key), is of `spool run`; one
/// whose every task is a demo agent and that has had its first (`agent-0`, which the
/// demo always submits) is of `spool demo`; one with none of these is empty.
pub(crate) fn infer_kind(journal: Option<&Journal>) -> Inferred {
    let Some(journal) = journal else {
        return Inferred::Empty;
    };
    let Ok(replay) = Scheduler::replay(journal, &registry()) else {
        return Inferred::Unknown;
    };
    let core = replay.scheduler;
    if !core.schedules().is_empty() {
        return Inferred::Kind(StoreKind::Run);
    }
    let demo_agent = |id, agent: &str, type_name: &str| {
        type_name == AGENT_TYPE_NAME
            && agent
                .strip_prefix("agent-")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            && core.key(agent).is_some_and(|key| key.task == id)
    };
    let mut tasks = 0;
    for task in core.tasks() {
        tasks += 1;
        if !demo_agent(task.id, &task.agent, &task.type_name) {
            return Inferred::Kind(StoreKind::Run);
        }
    }
    if core.key("agent-0").is_some() {
        Inferred::Kind(StoreKind::Demo)
    } else if tasks == 0 {
        Inferred::Empty
    } else {
        Inferred::Kind(StoreKind::Run)
    }
}

/// Checks that `store` (holding `journal`) is a store of `kind`, and with
/// `stamp` records `kind` in it if no kind is recorded: a store of another kind is
/// refused with one line naming it, its kind and what made it, and nothing is written
/// to it. A store made before the kind was recorded is taken as of the kind its
/// content says ([`infer_kind`]): refused if of another kind, else stamped `kind`
/// (with `stamp`); one whose content cannot be read here is left as it is.
pub(crate) fn claim_kind(
    store: &dyn DurableStore,
    journal: Option<&Journal>,
    kind: StoreKind,
    stamp: bool,
) -> Result<(), Failure> {
    let recorded = store
        .maker()
        .map_err(|e| failed("cannot read the store", e))?;
    let refuse = |made_by: String| {
        Failure::Failed(format!(
            "{} was made by {made_by}, {}",
            store.name(),
            kind.instead()
        ))
    };
    match recorded {
        Some(name) => match StoreKind::from_name(&name) {
            Some(found) if found == kind => Ok(()),
            Some(found) => Err(refuse(found.made_by().to_owned())),
            None => Err(refuse(format!("{name:?}"))),
        },
        None => match infer_kind(journal) {
            Inferred::Kind(found) if found != kind => Err(refuse(found.made_by().to_owned())),
            Inferred::Unknown => Ok(()),
            Inferred::Empty | Inferred::Kind(_) if stamp => store
                .claim_maker(kind.name())
                .map(drop)
                .map_err(|e| failed("cannot write to the store", e)),
            Inferred::Empty | Inferred::Kind(_) => Ok(()),
        },
    }
}

/// Builds the runtime journaling to `store`'s sink, checkpointing every
/// [`CHECKPOINT_EVERY`] entries.
fn journaled(builder: RuntimeBuilder, store: &dyn DurableStore) -> Result<Runtime, Failure> {
    builder
        .journal(store.sink())
        .checkpoint_every(CHECKPOINT_EVERY)
        .try_build()
        .map_err(|e| failed("cannot start the runtime", e))
}

/// Reads the store at `location` without writing to it: the scheduler as of its last
/// entry (an empty one for a new store). On PostgreSQL it connects read only, so it
/// works while another process writes the store.
pub(crate) fn read_scheduler_at(location: &Location) -> Result<Scheduler, Failure> {
    let store = open_durable(location, Access::Read)?;
    let journal = store
        .recover()
        .map_err(|e| failed("cannot read the store", e))?;
    claim_kind(store.as_ref(), journal.as_ref(), StoreKind::Run, false)?;
    match journal {
        None => Ok(Scheduler::new(spool_core::Config::new())),
        Some(journal) => Scheduler::replay(&journal, &registry())
            .map(|replay| replay.scheduler)
            .map_err(|e| failed("cannot read the store", e)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use spool_core::{NewTask, ScheduleDef, Spec};
    use spool_runtime::Runtime;
    use spool_store::Store;

    use super::{Failure, Inferred, StoreKind, claim_kind, infer_kind};
    use crate::agent::{AGENT_TYPE, ReactAgent, registry};

    /// A store written as before the kind was recorded: a runtime journals to it and
    /// `fill` submits what it holds; nothing claims it.
    fn unstamped(path: &std::path::Path, fill: impl FnOnce(&mut Runtime)) {
        let store = Store::open(path).expect("a new store");
        let mut runtime = Runtime::builder()
            .registry(registry())
            .journal(store)
            .try_build()
            .expect("a runtime on the store");
        fill(&mut runtime);
    }

    /// The demo's agents, submitted as the demo submits them.
    fn demo_agents(runtime: &mut Runtime) {
        for i in 0..2 {
            let name = format!("agent-{i}");
            runtime
                .submit(
                    NewTask::new(ReactAgent::new(name.clone(), "question".to_owned()))
                        .agent(name.clone())
                        .key(name),
                )
                .expect("submitted");
        }
    }

    /// A schedule of the built-in agent, as `spool schedule add` makes it.
    fn a_schedule(runtime: &mut Runtime) {
        let def = ScheduleDef::new(
            "standup".to_owned(),
            Spec::Every(Duration::from_secs(90)),
            AGENT_TYPE,
            json!({"prompt": "hi"}),
        );
        runtime.put_schedule(def).expect("the schedule is added");
    }

    fn opened(path: &std::path::Path) -> (Store, Option<spool_core::Journal>) {
        let store = Store::open(path).expect("opened");
        let journal = store.recover().expect("read");
        (store, journal)
    }

    fn message(result: Result<(), Failure>) -> String {
        match result {
            Err(Failure::Failed(message)) => message,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// What a store made before the kind was recorded holds says its kind: the demo's
    /// agents alone, a schedule, a task of another name, or nothing at all.
    #[test]
    fn the_kind_of_an_unstamped_store_is_read_from_what_it_holds() {
        let dir = tempfile::tempdir().expect("a directory");
        let kind = |name: &str, fill: &dyn Fn(&mut Runtime)| {
            let path = dir.path().join(name);
            unstamped(&path, fill);
            let (store, journal) = opened(&path);
            assert_eq!(store.maker().expect("read"), None);
            infer_kind(journal.as_ref())
        };
        assert_eq!(kind("demo", &demo_agents), Inferred::Kind(StoreKind::Demo));
        assert_eq!(
            kind("schedule", &a_schedule),
            Inferred::Kind(StoreKind::Run)
        );
        let both = |runtime: &mut Runtime| {
            demo_agents(runtime);
            a_schedule(runtime);
        };
        assert_eq!(kind("both", &both), Inferred::Kind(StoreKind::Run));
        let prompt = |runtime: &mut Runtime| {
            let task = registry()
                .make(AGENT_TYPE, &json!({"prompt": "standup"}))
                .expect("made");
            runtime
                .submit(NewTask::boxed(task).agent("alice"))
                .expect("submitted");
        };
        assert_eq!(kind("prompt", &prompt), Inferred::Kind(StoreKind::Run));
        assert_eq!(kind("empty", &|_: &mut Runtime| {}), Inferred::Empty);
        assert_eq!(infer_kind(None), Inferred::Empty);
    }

    /// An unstamped store is refused by a command of the other kind (and left
    /// unstamped), and adopted and stamped by one of its own.
    #[test]
    fn an_unstamped_store_is_refused_by_the_other_kind_and_stamped_by_its_own() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("old.spool");
        unstamped(&path, demo_agents);
        let (store, journal) = opened(&path);
        assert_eq!(
            message(claim_kind(&store, journal.as_ref(), StoreKind::Run, true)),
            format!(
                "{} was made by spool demo (its scripted agents), not by spool run, serve or \
                 schedule: give them a store of their own",
                path.display()
            )
        );
        assert_eq!(store.maker().expect("read"), None);
        // A read-only command takes it as it is, without stamping it.
        claim_kind(&store, journal.as_ref(), StoreKind::Demo, false).expect("the demo's");
        assert_eq!(store.maker().expect("read"), None);
        claim_kind(&store, journal.as_ref(), StoreKind::Demo, true).expect("the demo's");
        assert_eq!(store.maker().expect("read"), Some("demo".to_owned()));
    }

    /// An empty store, old or new, is adopted by the first command that runs it.
    #[test]
    fn an_empty_store_is_stamped_by_the_first_command() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("new.spool");
        let (store, journal) = opened(&path);
        claim_kind(&store, journal.as_ref(), StoreKind::Run, true).expect("adopted");
        assert_eq!(store.maker().expect("read"), Some("run".to_owned()));
        assert_eq!(
            message(claim_kind(&store, journal.as_ref(), StoreKind::Demo, true)),
            format!(
                "{} was made by spool run/serve (its schedules and agents), not by spool demo: \
                 give the demo a store of its own",
                path.display()
            )
        );
    }

    /// A store some other program claimed is refused by both kinds, naming its maker.
    #[test]
    fn a_store_of_an_unknown_maker_is_refused_with_its_name() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("app.spool");
        let (store, journal) = opened(&path);
        store.claim_maker("my-app").expect("claimed");
        assert_eq!(
            message(claim_kind(&store, journal.as_ref(), StoreKind::Demo, true)),
            format!(
                "{} was made by \"my-app\", not by spool demo: give the demo a store of its own",
                path.display()
            )
        );
        assert_eq!(store.maker().expect("read"), Some("my-app".to_owned()));
    }
}
