//! The subprocess tool: each request runs the configured command in a process group of
//! its own, watched by helper threads so the executor thread never waits on it; the
//! answer is the exit status and the (capped) output, and a timeout, a cancellation or
//! a passed deadline kills the whole group.

use crate::json_type;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use spool_core::{CancelSignal, OutboundRequest, RequestError, RequestKey, Response};
use spool_runtime::{Executor, Replier, Replies};

/// The shell that runs the command line when [`ProcessConfig::shell`] is set.
const SHELL: &str = "/bin/sh";

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
/// the output open. The group is killed too when the timeout passes (the task gets
/// [`RequestError::Timeout`]), and when the runtime sends a cancel signal — the task was
/// canceled or its deadline passed — (no answer then) or the tool is dropped.
///
/// Errors: a payload that does not fit is [`RequestError::InvalidArguments`]; a program
/// that cannot start is [`RequestError::Failed`] naming it and the OS's reason.
///
/// `execute` only starts the process: helper threads (waiting on it, reading its
/// output, writing its input) answer through a [`Replier`], so one executor thread
/// serves any number of runs at once. Clones share their runs, so a clone per worker of
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
            let cap = config.max_output;
            let out_events = events.clone();
            helper("stdout", move || {
                let captured = stdout.map(|pipe| read_capped(pipe, cap));
                let _ = out_events.send(Event::Stdout(captured.unwrap_or_default()));
            })?;
            let err_events = events.clone();
            helper("stderr", move || {
                let captured = stderr.map(|pipe| read_capped(pipe, cap));
                let _ = err_events.send(Event::Stderr(captured.unwrap_or_default()));
            })?;
            if let (Some(pipe), Some(text)) = (stdin, invocation.stdin) {
                helper("stdin", move || write_input(pipe, &text))?;
            }
            let watch = Watch {
                run,
                groups: Arc::clone(&self.groups),
                config: Arc::clone(config),
                key,
                replier,
                deadline: Instant::now().checked_add(config.timeout),
            };
            helper("watch", move || watch.run(&inbox, permit))
        })();
        drop(events);
        // On failure the permit went with the unstarted watcher, so the waiter reaps.
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
    Stdout(Captured),
    Stderr(Captured),
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

/// Writes the request's input, then closes the pipe. A program that exits without
/// reading it all is no error.
fn write_input(mut pipe: ChildStdin, text: &str) {
    let _ = pipe.write_all(text.as_bytes());
}

/// The first bytes of a stream and its full length.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    total: u64,
}

/// Reads `from` to its end, keeping the first `cap` bytes.
fn read_capped(mut from: impl Read, cap: usize) -> Captured {
    let mut kept = Vec::new();
    let mut total: u64 = 0;
    let mut buffer = [0u8; 8192];
    loop {
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                total += n as u64;
                let room = cap.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buffer[..room]);
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            // A pipe that fails is read as ended: what came is still reported.
            Err(_) => break,
        }
    }
    Captured { kept, total }
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
    fn run(self, inbox: &Receiver<Event>, permit: Sender<()>) {
        let mut permit = Some(permit);
        let mut ended = false;
        let mut status = None;
        let mut stdout = None;
        let mut stderr = None;
        while status.is_none() || stdout.is_none() || stderr.is_none() {
            let event = match self.deadline {
                Some(at) => inbox.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(Event::Stdout(captured)) => stdout = Some(captured),
                Ok(Event::Stderr(captured)) => stderr = Some(captured),
                Ok(Event::Exited) => {
                    ended = true;
                    let ours = self.groups.finish(self.run);
                    // Let the waiter reap the leader now its group is dead.
                    permit = None;
                    if !ours {
                        return;
                    }
                }
                Ok(Event::Reaped(result)) => {
                    if !ended {
                        ended = true;
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
                    // Once ended, the group is dead; what still holds the output open
                    // left it (a new session), and the answer cannot wait for it.
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
        let (Some(exit), Some(stdout), Some(stderr)) = (status, stdout, stderr) else {
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
