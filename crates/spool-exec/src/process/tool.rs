//! The executor, [`ProcessTool`]: it parses a request, starts the program in a process
//! group of its own and the three helper threads of the run (the waiter, the pipes'
//! server, the watcher), and kills the group on a cancel signal.

use std::io;
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::Instant;

use nix::errno::Errno;
use nix::unistd::Pid;
use spool_core::{CancelSignal, OutboundRequest, RequestError, RequestKey, Response};
use spool_core::{Executor, Replier, Replies};

use super::config::{Invocation, ProcessConfig};
use super::groups::{Groups, Owner};
use super::pipes::{Input, Pipes};
use super::watch::{Event, Watch};

/// A tool that runs a command per request: see [`ProcessConfig`] for how.
///
/// The request's payload is `{"args": ["…"], "stdin": "…"}`, both optional; `args`
/// are appended to the configured ones, `stdin` is written to the child's standard
/// input (without it the child reads `/dev/null`). The answer, for any exit status:
///
/// ```json
/// {"status": 0, "signal": null, "stdout": "…", "stderr": "…",
///  "truncated": {"stdout": false, "stderr": false}}
/// ```
///
/// `status` is the exit code, or `null` if a signal (`signal`, its number) ended the
/// program. Output is decoded as UTF-8 (invalid bytes become U+FFFD); a stream longer
/// than `max_output` bytes keeps its first `max_output` bytes (fewer if that would
/// split a character) followed by `\n[… truncated: N more bytes]`.
///
/// Each run is its own process group. When the program exits, whatever it left running
/// in its group is killed, so nothing outlives the answer and no background child holds
/// the output open. A process that left the group (`setsid`) is not the tool's to kill:
/// if it holds the output open, the answer has what was written up to a short grace
/// period after the program ended, and the tool closes its ends of the pipes. The group is killed too when the timeout passes (the task gets
/// [`RequestError::Timeout`]), and when the runtime sends a cancel signal — the task was
/// canceled or its deadline passed — (no answer then) or the tool is dropped.
///
/// Errors: a payload that does not fit is [`RequestError::InvalidArguments`]; a program
/// that cannot start is [`RequestError::Failed`] naming it and the OS's reason.
///
/// `execute` only starts the process: three helper threads per run (one waiting on
/// it, one serving its pipes, one answering) answer through a [`Replier`], so one
/// executor thread serves any number of runs at once; all three end within the grace
/// period after the run ends. Clones share their runs, so a clone per worker of
/// a pool can cancel a run another one started.
///
/// # Example
/// Under `spool_test::TestScheduler` (the threaded runtime takes it the same way, as
/// `.executor(Kind::tool("echo"), tool)`): the run really happens, and its answer comes
/// from the run's watcher thread, so the test steps until it has arrived.
/// ```
/// use std::time::{Duration, Instant};
/// use serde_json::json;
/// use spool_core::{Kind, TaskState, async_task};
/// use spool_exec::{ProcessConfig, ProcessTool};
/// use spool_test::TestScheduler;
///
/// let echo = ProcessConfig::new("echo")
///     .args(["hello"])              // before the request's arguments
///     .workdir(std::env::temp_dir())
///     .allow_env("PATH")            // seen by the child if set here
///     .env("LC_ALL", "C")           // set for the child
///     .timeout(Duration::from_secs(10))
///     .max_output(32 * 1024);       // bytes kept of stdout, and of stderr
/// let mut scheduler = TestScheduler::new();
/// scheduler.executor(Kind::tool("echo"), ProcessTool::new(echo));
/// let id = scheduler.spawn(async_task("greet", |cx| async move {
///     Ok(cx.tool("echo", json!({"args": ["world"]})).await?)
/// }));
/// // Bounded: the tool answers within its timeout, a timeout included.
/// let give_up = Instant::now() + Duration::from_secs(60);
/// while !scheduler.task_state(id).is_terminal() && Instant::now() < give_up {
///     scheduler.step_until_idle();
///     std::thread::sleep(Duration::from_millis(5));
/// }
/// let TaskState::Completed(Ok(answer)) = scheduler.task_state(id) else {
///     panic!("echo did not answer: {}", scheduler.task_state(id));
/// };
/// assert_eq!(answer["status"], 0);
/// assert_eq!(answer["stdout"], "hello world\n");
/// assert_eq!(answer["truncated"], json!({"stdout": false, "stderr": false}));
/// ```
#[derive(Clone, Debug)]
pub struct ProcessTool {
    config: Arc<ProcessConfig>,
    groups: Arc<Groups>,
    /// Kills what is still running when the last clone goes.
    _owner: Arc<Owner>,
}

impl ProcessTool {
    /// A tool running `config`'s command.
    pub fn new(config: ProcessConfig) -> ProcessTool {
        let groups = Arc::new(Groups::default());
        ProcessTool {
            config: Arc::new(config),
            _owner: Arc::new(Owner(Arc::clone(&groups))),
            groups,
        }
    }

    /// The configuration it runs.
    pub fn config(&self) -> &ProcessConfig {
        &self.config
    }

    /// Starts a run whose answer goes through `replier`.
    fn start(
        &self,
        key: RequestKey,
        invocation: Invocation,
        replier: Replier,
    ) -> Result<(), RequestError> {
        let config = &self.config;
        // The watcher closes its end when the run has ended: the pipes' thread then stops
        // waiting for the output's end (see `OUTPUT_GRACE`).
        let (stop_sender, stop) = UnixStream::pair().map_err(|error| {
            RequestError::failed(format!(
                "cannot make a socket pair to watch the process: {error}"
            ))
        })?;
        let (mut child, pgid) = spawn_leader(config, &invocation)?;
        let run = self.groups.insert(key, pgid);
        tracing::debug!(program = %config.program, pid = pgid.as_raw(), "process started");

        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let stdin = child.stdin.take();
        let (events, inbox) = mpsc::channel();
        let (permit, reap_when) = mpsc::channel::<()>();
        self.start_waiter(run, pgid, child, &events, reap_when)?;
        let pipes = Pipes {
            stdout,
            stderr,
            stdin: stdin.zip(invocation.stdin).map(|(pipe, text)| Input {
                pipe,
                text: text.into_bytes(),
                written: 0,
            }),
            cap: config.max_output,
        };
        let pipe_events = events.clone();
        let started = helper("pipes", move || pipes.serve(&stop, &pipe_events))
            .and_then(|()| self.start_watch(run, key, replier, inbox, permit, stop_sender));
        drop(events);
        // On failure the permit went with the unstarted watcher, so the waiter reaps; the
        // stop socket went with it too, so the pipes' thread, if it started, stops.
        started.map_err(|error| {
            self.groups.finish(run);
            thread_failed(&error)
        })
    }

    /// Starts the thread that waits for the `child` of run `run` (the leader of group
    /// `pgid`) and reaps it once `reap_when` says so; if it cannot start, kills the
    /// group and reaps the child here.
    fn start_waiter(
        &self,
        run: u64,
        pgid: Pid,
        child: Child,
        events: &Sender<Event>,
        reap_when: Receiver<()>,
    ) -> Result<(), RequestError> {
        let events = events.clone();
        if let Err(error) = helper("wait", move || wait_child(child, &events, &reap_when)) {
            // The child went with the closure, unreaped: kill its group and reap it here.
            self.groups.finish(run);
            let _ = nix::sys::wait::waitpid(pgid, None);
            return Err(thread_failed(&error));
        }
        Ok(())
    }

    /// Starts the watcher of run `run`, which answers `key` through `replier` with what
    /// `inbox` reports, by the configured timeout from now.
    fn start_watch(
        &self,
        run: u64,
        key: RequestKey,
        replier: Replier,
        inbox: Receiver<Event>,
        permit: Sender<()>,
        stop: UnixStream,
    ) -> io::Result<()> {
        let watch = Watch {
            run,
            groups: Arc::clone(&self.groups),
            config: Arc::clone(&self.config),
            key,
            replier,
            deadline: Instant::now().checked_add(self.config.timeout),
        };
        helper("watch", move || watch.run(&inbox, permit, stop))
    }
}

/// Starts `invocation` of `config`'s command as the leader of a process group of its
/// own: the child, and its group's id (its pid). A pid out of range is killed, reaped
/// and refused.
fn spawn_leader(
    config: &ProcessConfig,
    invocation: &Invocation,
) -> Result<(Child, Pid), RequestError> {
    let mut child = config
        .command(invocation)
        .spawn()
        .map_err(|error| config.start_failed(&error))?;
    let Ok(raw) = i32::try_from(child.id()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(RequestError::failed(format!(
            "`{}` started with a process id out of range: {}",
            config.program,
            child.id()
        )));
    };
    // The child is its own group's leader: the group's id is its pid.
    Ok((child, Pid::from_raw(raw)))
}

impl Executor for ProcessTool {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let key = request.key;
        let started = Invocation::parse(request.request.payload.value())
            .and_then(|invocation| self.start(key, invocation, replies.replier()));
        if let Err(error) = started {
            replies.send(Response::err(key, error));
        }
    }

    fn cancel(&mut self, signal: CancelSignal, _replies: &mut Replies<'_>) {
        let killed = self.groups.cancel(signal.key);
        tracing::debug!(key = ?signal.key, killed, "process run canceled");
    }
}

/// Starts a helper thread for a run.
fn helper(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
    thread::Builder::new()
        .name(format!("spool-process-{name}"))
        .spawn(f)
        .map(drop)
}

fn thread_failed(error: &io::Error) -> RequestError {
    RequestError::failed(format!(
        "cannot start a thread to watch the process: {error}"
    ))
}

/// Waits for the child: tells the watcher when it ended, reaps it once the watcher has
/// killed what was left in its group (or gave up on it), and reports the status.
fn wait_child(mut child: Child, events: &Sender<Event>, reap_when: &Receiver<()>) {
    if wait_unreaped(child.id()) {
        let _ = events.send(Event::Exited);
        // Returns when the watcher drops its permit.
        let _ = reap_when.recv();
    }
    let _ = events.send(Event::Reaped(child.wait()));
}

/// Blocks until the process `pid` has ended, leaving it unreaped; `false` if that could
/// not be done (the caller then reaps at once).
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
fn wait_unreaped(pid: u32) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    loop {
        match waitid(
            Id::Pid(Pid::from_raw(raw)),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
        ) {
            Ok(_) => return true,
            Err(Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// Without `waitid`, the leader is reaped before its group is killed: a pid reused in
/// between could be signaled by mistake.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn wait_unreaped(_pid: u32) -> bool {
    false
}
