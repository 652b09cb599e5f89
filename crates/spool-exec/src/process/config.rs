//! What to run: [`ProcessConfig`] (the program, its arguments, environment, directory,
//! limits) and what a request adds to it ([`Invocation`]), made into one `Command`.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use spool_core::RequestError;

use crate::json_type;

/// The shell that runs the command line when [`ProcessConfig::shell`] is set.
const SHELL: &str = "/bin/sh";

/// How to run the command of a [`ProcessTool`](crate::ProcessTool).
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
#[derive(Clone, PartialEq, Eq)]
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

impl std::fmt::Debug for ProcessConfig {
    /// The variables set for the child are shown by name only: their values may be
    /// credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: Vec<String> = self
            .env
            .iter()
            .map(|(name, _)| format!("{name}=***"))
            .collect();
        f.debug_struct("ProcessConfig")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("workdir", &self.workdir)
            .field("env_allow", &self.env_allow)
            .field("env", &env)
            .field("timeout", &self.timeout)
            .field("max_output", &self.max_output)
            .field("shell", &self.shell)
            .finish()
    }
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
    pub(super) fn command(&self, invocation: &Invocation) -> Command {
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
    pub(super) fn start_failed(&self, error: &io::Error) -> RequestError {
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

/// What a request asks to run: arguments to append, input to write.
#[derive(Debug, Default)]
pub(super) struct Invocation {
    pub(super) args: Vec<String>,
    pub(super) stdin: Option<String>,
}

impl Invocation {
    /// Reads `{"args": [..], "stdin": ".."}`; `null` is an empty request.
    pub(super) fn parse(payload: &Value) -> Result<Invocation, RequestError> {
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
