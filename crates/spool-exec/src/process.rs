//! The subprocess tool: each request runs the configured command in a process group of
//! its own, watched by helper threads so the executor thread never waits on it; the
//! answer is the exit status and the (capped) output, and a timeout, a cancellation or
//! a passed deadline kills the whole group. The helpers end a bounded time after the
//! command does, whoever else still holds its pipes.

use crate::json_type;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use spool_core::{CancelSignal, OutboundRequest, RequestError, RequestKey, Response};
use spool_core::{Executor, Replier, Replies};

/// The shell that runs the command line when [`ProcessConfig::shell`] is set.
const SHELL: &str = "/bin/sh";

/// How long the output may still take to reach its end once the command has ended (or
/// was killed) and what was left of its group was killed. Past it, what was read is the
/// output and the pipes are closed: a process that left the group (a new session) may
/// hold them open for as long as it likes, and neither the answer nor the tool's threads
/// wait for it.
const OUTPUT_GRACE: Duration = Duration::from_millis(100);

/// How many reads (of 8 KiB) of each output, at most, take in what is still in the
/// pipes at the end of the grace period: 2 MiB, many times what a pipe holds.
const FINAL_READS: usize = 256;

/// How to run the command of a [`ProcessTool`].
///
/// The request's `args` are appended to [`args`](ProcessConfig::args). The child's
/// environment is empty except the variables named in
/// [`env_allow`](ProcessConfig::env_allow) (copied from the executor's environment when
/// they are set there) and those in [`env`](ProcessConfig::env), which win. A bare
/// program name is looked up in the child's `PATH` — so allow or set `PATH` — or, with
/// none, in the C library's default (`/bin:/usr/bin` on glibc).
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_exec::ProcessConfig;
///
/// let config = ProcessConfig::new("git")
///     .args(["log", "--oneline"])
///     .workdir("/srv/repo")
///     .allow_env("PATH")
///     .env("GIT_PAGER", "cat")
///     .timeout(Duration::from_secs(10))
///     .max_output(16 * 1024);
/// assert_eq!(config.args, ["log", "--oneline"]);
/// assert!(!config.shell);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessConfig {
    /// The program to run; with [`shell`](ProcessConfig::shell), the start of the shell
    /// command line.
    pub program: String,
    /// Arguments before the request's own.
    pub args: Vec<String>,
    /// The working directory; `None`: the executor's.
    pub workdir: Option<PathBuf>,
    /// Variables of the executor's environment the child may see.
    pub env_allow: Vec<String>,
    /// Variables set for the child, after the allowed ones.
    pub env: Vec<(String, String)>,
    /// How long a run may take, from its start until its output is read to the end; past
    /// it, its process group is killed and the task gets [`RequestError::Timeout`].
    pub timeout: Duration,
    /// How many bytes of stdout, and of stderr, are kept; the rest is counted and cut.
    pub max_output: usize,
    /// Run the command line with `/bin/sh -c` (see [`ProcessConfig::shell`]); `false`
    /// (the default): the program is executed directly and no shell ever sees the
    /// arguments.
    pub shell: bool,
}

impl ProcessConfig {
    /// The default [`timeout`](ProcessConfig::timeout): 30 s.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// The default [`max_output`](ProcessConfig::max_output): 64 KiB per stream.
    pub const DEFAULT_MAX_OUTPUT: usize = 64 * 1024;

    /// Runs `program` directly, with no arguments of its own, an empty environment, the
    /// executor's working directory, the default timeout and output cap.
    pub fn new(program: impl Into<String>) -> ProcessConfig {
        ProcessConfig {
            program: program.into(),
            args: Vec::new(),
            workdir: None,
            env_allow: Vec::new(),
            env: Vec::new(),
            timeout: ProcessConfig::DEFAULT_TIMEOUT,
            max_output: ProcessConfig::DEFAULT_MAX_OUTPUT,
            shell: false,
        }
    }

    /// Adds a configured argument.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> ProcessConfig {
        self.args.push(arg.into());
        self
    }

    /// Adds configured arguments.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> ProcessConfig
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Runs the command in `dir`.
    #[must_use]
    pub fn workdir(mut self, dir: impl Into<PathBuf>) -> ProcessConfig {
        self.workdir = Some(dir.into());
        self
    }

    /// Lets the child see the executor's variable `name` (if it is set).
    #[must_use]
    pub fn allow_env(mut self, name: impl Into<String>) -> ProcessConfig {
        self.env_allow.push(name.into());
        self
    }

    /// Sets the variable `name` to `value` for the child.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> ProcessConfig {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Sets how long a run may take.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> ProcessConfig {
        self.timeout = timeout;
        self
    }

    /// Sets how many bytes of each of stdout and stderr are kept.
    #[must_use]
    pub fn max_output(mut self, bytes: usize) -> ProcessConfig {
        self.max_output = bytes;
        self
    }

    /// Runs the command through `/bin/sh -c` (`true`) or directly (`false`, the
    /// default).
    ///
    /// The shell's command line is the program, the configured arguments as they are
    /// (they are shell text the embedder wrote: pipes, redirections and `$VAR` work),
    /// then each of the request's arguments in single quotes (a `'` inside one becomes
    /// `'\''`), all joined by single spaces. So the configuration decides the shell
    /// syntax and the request's arguments always reach the command as literal words:
    /// `ProcessConfig::new("grep -n").arg("--").shell(true)` with the request's
    /// `["a b", "$(rm -rf ~)"]` runs `grep -n -- 'a b' '$(rm -rf ~)'`.
    #[must_use]
    pub fn shell(mut self, shell: bool) -> ProcessConfig {
        self.shell = shell;
        self
    }

    /// The command for one run, its environment, directory and pipes set.
    fn command(&self, invocation: &Invocation) -> Command {
        let mut command = if self.shell {
            let mut line = self.program.clone();
            for arg in &self.args {
                line.push(' ');
                line.push_str(arg);
            }
            for arg in &invocation.args {
                line.push(' ');
                line.push_str(&shell_quote(arg));
            }
            let mut command = Command::new(SHELL);
            command.arg("-c").arg(line);
            command
        } else {
            let mut command = Command::new(&self.program);
            command.args(&self.args).args(&invocation.args);
            command
        };
        command.env_clear();
        for name in &self.env_allow {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        for (name, value) in &self.env {
            command.env(name, value);
        }
        if let Some(dir) = &self.workdir {
            command.current_dir(dir);
        }
        let stdin = match invocation.stdin {
            Some(_) => Stdio::piped(),
            None => Stdio::null(),
        };
        command
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        command
    }

    /// How a failure to start is reported: the program, where, and the OS's reason.
    fn start_failed(&self, error: &io::Error) -> RequestError {
        let program = if self.shell { SHELL } else { &self.program };
        let message = match &self.workdir {
            Some(dir) => format!("cannot start `{program}` in `{}`: {error}", dir.display()),
            None => format!("cannot start `{program}`: {error}"),
        };
        RequestError::failed(message)
    }
}

/// Quotes `word` for `sh` so that it stays one literal word.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

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
/// ```
/// use std::time::Duration;
/// use spool_core::Kind;
/// use spool_exec::{ProcessConfig, ProcessTool};
/// use spool_runtime::Runtime;
///
/// let grep = ProcessConfig::new("grep")
///     .args(["-rn", "--"])          // before the request's arguments
///     .workdir("/srv/docs")
///     .allow_env("PATH")            // seen by the child if set here
///     .env("LC_ALL", "C")           // set for the child
///     .timeout(Duration::from_secs(10))
///     .max_output(32 * 1024);       // bytes kept of stdout, and of stderr
/// let runtime = Runtime::builder()
///     .executor(Kind::tool("grep"), ProcessTool::new(grep))
///     .build();
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
        let mut child = config
            .command(&invocation)
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
        let pgid = Pid::from_raw(raw);
        let run = self.groups.insert(key, pgid);
        tracing::debug!(program = %config.program, pid = raw, "process started");

        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let stdin = child.stdin.take();
        let (events, inbox) = mpsc::channel();
        let (permit, reap_when) = mpsc::channel::<()>();

        let waiter = {
            let events = events.clone();
            helper("wait", move || wait_child(child, &events, &reap_when))
        };
        if let Err(error) = waiter {
            // The child went with the closure, unreaped: kill its group and reap it here.
            self.groups.finish(run);
            let _ = nix::sys::wait::waitpid(pgid, None);
            return Err(thread_failed(&error));
        }
        let started = (|| {
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
            helper("pipes", move || pipes.serve(&stop, &pipe_events))?;
            let watch = Watch {
                run,
                groups: Arc::clone(&self.groups),
                config: Arc::clone(config),
                key,
                replier,
                deadline: Instant::now().checked_add(config.timeout),
            };
            helper("watch", move || watch.run(&inbox, permit, stop_sender))
        })();
        drop(events);
        // On failure the permit went with the unstarted watcher, so the waiter reaps; the
        // stop socket went with it too, so the pipes' thread, if it started, stops.
        started.map_err(|error| {
            self.groups.finish(run);
            thread_failed(&error)
        })
    }
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

/// What a request asks to run: arguments to append, input to write.
#[derive(Debug, Default)]
struct Invocation {
    args: Vec<String>,
    stdin: Option<String>,
}

impl Invocation {
    /// Reads `{"args": [..], "stdin": ".."}`; `null` is an empty request.
    fn parse(payload: &Value) -> Result<Invocation, RequestError> {
        let invalid = |message: String| RequestError::InvalidArguments { message };
        let mut invocation = Invocation::default();
        let fields = match payload {
            Value::Null => return Ok(invocation),
            Value::Object(fields) => fields,
            other => {
                return Err(invalid(format!(
                    "the payload must be an object {{\"args\": [strings], \"stdin\": string}}, not {}",
                    json_type(other)
                )));
            }
        };
        for (name, value) in fields {
            match (name.as_str(), value) {
                (_, Value::Null) if name == "args" || name == "stdin" => {}
                ("args", Value::Array(items)) => {
                    for (index, item) in items.iter().enumerate() {
                        match item {
                            Value::String(arg) if arg.contains('\0') => {
                                return Err(invalid(format!(
                                    "`args[{index}]` contains a NUL byte"
                                )));
                            }
                            Value::String(arg) => invocation.args.push(arg.clone()),
                            other => {
                                return Err(invalid(format!(
                                    "`args[{index}]` must be a string, not {}",
                                    json_type(other)
                                )));
                            }
                        }
                    }
                }
                ("args", other) => {
                    return Err(invalid(format!(
                        "`args` must be an array of strings, not {}",
                        json_type(other)
                    )));
                }
                ("stdin", Value::String(text)) => invocation.stdin = Some(text.clone()),
                ("stdin", other) => {
                    return Err(invalid(format!(
                        "`stdin` must be a string, not {}",
                        json_type(other)
                    )));
                }
                (other, _) => {
                    return Err(invalid(format!(
                        "unknown field `{other}`: the payload takes `args` and `stdin`"
                    )));
                }
            }
        }
        Ok(invocation)
    }
}

/// The process groups of the runs still going, by run: the executor's cancel and the
/// watchers' ends meet here.
///
/// A group's id is its leader's pid, and a pid is not reused while its process is
/// unreaped; leaders are reaped only after their run left this map (where supported,
/// see [`wait_unreaped`]), so a group found here is still the run's own to kill.
#[derive(Debug, Default)]
struct Groups {
    next: AtomicU64,
    live: Mutex<HashMap<u64, (RequestKey, Pid)>>,
}

impl Groups {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, (RequestKey, Pid)>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a started run; returns its id.
    fn insert(&self, key: RequestKey, pgid: Pid) -> u64 {
        let run = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(run, (key, pgid));
        run
    }

    /// Ends run `run`: kills what is left of its group. `false` if it had already been
    /// ended by a cancel (or the tool was dropped): then nobody wants its answer.
    fn finish(&self, run: u64) -> bool {
        let mut live = self.lock();
        match live.remove(&run) {
            Some((_, pgid)) => {
                kill_group(pgid);
                true
            }
            None => false,
        }
    }

    /// Kills the groups of every run of request `key`; returns how many.
    fn cancel(&self, key: RequestKey) -> usize {
        let mut live = self.lock();
        let mut killed = 0;
        live.retain(|_, (k, pgid)| {
            if *k != key {
                return true;
            }
            kill_group(*pgid);
            killed += 1;
            false
        });
        killed
    }

    /// Kills every group still running.
    fn kill_all(&self) {
        for (_, (_, pgid)) in self.lock().drain() {
            kill_group(pgid);
        }
    }
}

/// Kills the runs still going when the last clone of a [`ProcessTool`] is dropped.
#[derive(Debug)]
struct Owner(Arc<Groups>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.kill_all();
    }
}

fn kill_group(pgid: Pid) {
    match killpg(pgid, Signal::SIGKILL) {
        // Already gone: nothing to kill.
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => {
            tracing::warn!(pgid = pgid.as_raw(), %error, "could not kill a process group")
        }
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

/// What the helper threads tell a run's watcher.
enum Event {
    /// The program ended and is not reaped yet (its group id cannot be reused).
    Exited,
    /// The program was reaped, with its status.
    Reaped(io::Result<ExitStatus>),
    /// Stdout and stderr, read to their end or to the end of the grace period.
    Output { stdout: Captured, stderr: Captured },
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

/// The first bytes of a stream and its full length.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    total: u64,
}

/// The request's input on its way to the program.
struct Input {
    pipe: ChildStdin,
    text: Vec<u8>,
    written: usize,
}

/// A run's pipes, all served by one thread that never blocks on any of them, so that it
/// can stop when told, whoever else holds them.
struct Pipes {
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    stdin: Option<Input>,
    /// How many bytes of each output are kept.
    cap: usize,
}

/// What one pass over the pipes found ready.
#[derive(Default)]
struct Ready {
    stdout: bool,
    stderr: bool,
    stdin: bool,
    stop: bool,
}

impl Pipes {
    /// Reads stdout and stderr to their end and writes the input, and reports the output
    /// once both ended; when `stop` is closed (the run has ended), goes on for
    /// [`OUTPUT_GRACE`] at most, then reports what was read and closes the pipes. A
    /// program that exits without reading all its input is no error.
    fn serve(mut self, stop: &UnixStream, events: &Sender<Event>) {
        for fd in [
            self.stdout.as_ref().map(AsFd::as_fd),
            self.stderr.as_ref().map(AsFd::as_fd),
            self.stdin.as_ref().map(|input| input.pipe.as_fd()),
        ]
        .into_iter()
        .flatten()
        {
            // Our ends only (the child's are other open files): the program's pipes stay
            // as they were.
            if let Err(error) = fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)) {
                tracing::warn!(%error, "cannot make a pipe of a process non-blocking");
                return;
            }
        }
        if self
            .stdin
            .as_ref()
            .is_some_and(|input| input.text.is_empty())
        {
            self.stdin = None;
        }
        let mut stdout = Captured::default();
        let mut stderr = Captured::default();
        let mut reported = false;
        let mut stopped = false;
        let mut give_up_at: Option<Instant> = None;
        let mut buffer = [0u8; 8192];
        loop {
            if !reported && self.stdout.is_none() && self.stderr.is_none() {
                reported = true;
                let output = Event::Output {
                    stdout: std::mem::take(&mut stdout),
                    stderr: std::mem::take(&mut stderr),
                };
                let _ = events.send(output);
            }
            if reported && (self.stdin.is_none() || stopped) {
                return;
            }
            let timeout = match give_up_at {
                None => PollTimeout::NONE,
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX)
                }
            };
            let ready = match self.wait(stop, stopped, timeout) {
                Ok(ready) => ready,
                Err(Errno::EINTR) => continue,
                Err(error) => {
                    tracing::warn!(%error, "cannot poll the pipes of a process");
                    break;
                }
            };
            if ready.stdout
                && read_some(&mut self.stdout, &mut stdout, self.cap, &mut buffer) == Flow::Ended
            {
                self.stdout = None;
            }
            if ready.stderr
                && read_some(&mut self.stderr, &mut stderr, self.cap, &mut buffer) == Flow::Ended
            {
                self.stderr = None;
            }
            if ready.stdin && self.stdin.as_mut().is_none_or(Input::write_some) {
                // Written to the end, or the program will read no more: closed.
                self.stdin = None;
            }
            if ready.stop && !stopped {
                stopped = true;
                let now = Instant::now();
                give_up_at = Some(now.checked_add(OUTPUT_GRACE).unwrap_or(now));
            }
        }
        if !reported {
            // What the ended processes wrote is in the pipes already, however late this
            // thread ran: take it, but not more than a pipe holds many times over, from a
            // process that keeps writing.
            for _ in 0..FINAL_READS {
                if read_some(&mut self.stdout, &mut stdout, self.cap, &mut buffer) != Flow::Data {
                    break;
                }
            }
            for _ in 0..FINAL_READS {
                if read_some(&mut self.stderr, &mut stderr, self.cap, &mut buffer) != Flow::Data {
                    break;
                }
            }
            let _ = events.send(Event::Output { stdout, stderr });
        }
    }

    /// Waits until a pipe, or `stop` (unless already `stopped`), is ready, or `timeout`.
    fn wait(&self, stop: &UnixStream, stopped: bool, timeout: PollTimeout) -> nix::Result<Ready> {
        let input = PollFlags::POLLIN;
        let candidates = [
            self.stdout.as_ref().map(|pipe| (pipe.as_fd(), input)),
            self.stderr.as_ref().map(|pipe| (pipe.as_fd(), input)),
            self.stdin
                .as_ref()
                .map(|stdin| (stdin.pipe.as_fd(), PollFlags::POLLOUT)),
            (!stopped).then(|| (stop.as_fd(), input)),
        ];
        let mut fds = Vec::with_capacity(candidates.len());
        let mut which = Vec::with_capacity(candidates.len());
        for (i, candidate) in candidates.into_iter().enumerate() {
            if let Some((fd, events)) = candidate {
                fds.push(PollFd::new(fd, events));
                which.push(i);
            }
        }
        poll(&mut fds, timeout)?;
        let mut ready = Ready::default();
        for (fd, i) in fds.iter().zip(which) {
            // Readable, writable, or closed at the other end: each is worth a look.
            if fd.revents().is_some_and(|events| !events.is_empty()) {
                match i {
                    0 => ready.stdout = true,
                    1 => ready.stderr = true,
                    2 => ready.stdin = true,
                    _ => ready.stop = true,
                }
            }
        }
        Ok(ready)
    }
}

impl Input {
    /// Writes what the pipe takes now; `true` when it is all written or the pipe is
    /// broken (the program and whoever shares its input closed it).
    fn write_some(&mut self) -> bool {
        match self.pipe.write(&self.text[self.written..]) {
            Ok(n) => {
                self.written += n;
                self.written >= self.text.len()
            }
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                false
            }
            Err(_) => true,
        }
    }
}

/// What one read of an output found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Bytes, and maybe more to come.
    Data,
    /// Nothing for now.
    Dry,
    /// The stream has ended: at its end, or failed (what came is still reported), or
    /// closed before.
    Ended,
}

/// Reads once from a pipe into `into`, keeping the first `cap` bytes. One read a pass,
/// so a stream that never pauses does not starve the others or the stop.
fn read_some(
    pipe: &mut Option<impl Read>,
    into: &mut Captured,
    cap: usize,
    buffer: &mut [u8],
) -> Flow {
    let Some(pipe) = pipe else {
        return Flow::Ended;
    };
    match pipe.read(buffer) {
        Ok(0) => Flow::Ended,
        Ok(n) => {
            into.total += n as u64;
            let room = cap.saturating_sub(into.kept.len()).min(n);
            into.kept.extend_from_slice(&buffer[..room]);
            Flow::Data
        }
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Flow::Dry
        }
        Err(_) => Flow::Ended,
    }
}

impl Captured {
    /// The text of the stream, cut with a marker if it was over the cap; and whether it
    /// was.
    fn render(self) -> (String, bool) {
        if self.total <= self.kept.len() as u64 {
            return (String::from_utf8_lossy(&self.kept).into_owned(), false);
        }
        let end = char_boundary(&self.kept);
        let more = self.total - end as u64;
        let mut text = String::from_utf8_lossy(&self.kept[..end]).into_owned();
        text.push_str(&format!("\n[… truncated: {more} more bytes]"));
        (text, true)
    }
}

/// Where `bytes` ends without a UTF-8 character cut in two.
fn char_boundary(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=len.min(3) {
        let byte = bytes[len - back];
        if byte < 0x80 {
            break;
        }
        if byte >= 0xC0 {
            let width = match byte {
                0xF0.. => 4,
                0xE0.. => 3,
                _ => 2,
            };
            return if width > back { len - back } else { len };
        }
    }
    len
}

/// One run's watcher: collects what the helpers report and answers.
struct Watch {
    run: u64,
    groups: Arc<Groups>,
    config: Arc<ProcessConfig>,
    key: RequestKey,
    replier: Replier,
    deadline: Option<Instant>,
}

impl Watch {
    /// Collects the run's end and output and answers; `stop` is closed as soon as the
    /// program has ended (and at the latest when this returns), so the pipes' thread
    /// gives up on output that never ends.
    fn run(self, inbox: &Receiver<Event>, permit: Sender<()>, stop: UnixStream) {
        let mut permit = Some(permit);
        let mut stop = Some(stop);
        let mut ended = false;
        let mut status = None;
        let mut output = None;
        while status.is_none() || output.is_none() {
            let event = match self.deadline {
                Some(at) => inbox.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(Event::Output { stdout, stderr }) => output = Some((stdout, stderr)),
                Ok(Event::Exited) => {
                    ended = true;
                    let ours = self.groups.finish(self.run);
                    // Let the waiter reap the leader now its group is dead, and the
                    // pipes' thread give up on what still holds the output open.
                    permit = None;
                    stop = None;
                    if !ours {
                        return;
                    }
                }
                Ok(Event::Reaped(result)) => {
                    if !ended {
                        ended = true;
                        stop = None;
                        if !self.groups.finish(self.run) {
                            return;
                        }
                    }
                    match result {
                        Ok(exit) => status = Some(exit),
                        Err(error) => {
                            self.answer(Err(RequestError::failed(format!(
                                "waiting for `{}` failed: {error}",
                                self.config.program
                            ))));
                            return;
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    // Past the timeout. Once ended, the group is dead already (and the
                    // output at most the grace period away, so this is a near miss).
                    if ended || self.groups.finish(self.run) {
                        tracing::debug!(program = %self.config.program, "process timed out; group killed");
                        self.answer(Err(RequestError::Timeout {
                            after: self.config.timeout,
                        }));
                    }
                    return;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // Every helper is gone without reporting: one of them panicked.
                    if ended || self.groups.finish(self.run) {
                        self.answer(Err(RequestError::failed(format!(
                            "lost track of `{}`",
                            self.config.program
                        ))));
                    }
                    return;
                }
            }
        }
        drop(permit);
        drop(stop);
        let (Some(exit), Some((stdout, stderr))) = (status, output) else {
            return;
        };
        let (stdout, stdout_cut) = stdout.render();
        let (stderr, stderr_cut) = stderr.render();
        self.answer(Ok(json!({
            "status": exit.code(),
            "signal": exit.signal(),
            "stdout": stdout,
            "stderr": stderr,
            "truncated": {"stdout": stdout_cut, "stderr": stderr_cut},
        })));
    }

    fn answer(&self, result: Result<Value, RequestError>) {
        // `false`: the runtime is gone, and nobody is left to tell.
        let _ = self.replier.send(Response::new(self.key, result));
    }
}
