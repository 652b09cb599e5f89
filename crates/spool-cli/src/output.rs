//! What the commands print on stdout, written through one place so that a stdout
//! nobody reads any more ends the command quietly.
//!
//! `spool inspect S | head` closes the pipe once `head` has its lines; the next write
//! fails with a broken pipe. `println!` would panic (`failed printing to stdout: Broken
//! pipe (os error 32)`), and an error report would print the same words: the reader
//! went away on purpose, so the command stops at once with status 0 and says nothing,
//! as `head`'s other writers do. Any other failure to write (a full disk) is said on
//! stderr and ends the command with status 1. Use `outln!` and `out!` as
//! `println!` and `print!`, and [`failed`] for an `io::Error` from a writer of stdout;
//! a command that serves uses [`say`], which never stops it.

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

/// Writes `args` to stdout, or ends the process (see the module's docs).
pub(crate) fn write(args: fmt::Arguments<'_>) {
    let written = {
        let mut out = io::stdout().lock();
        out.write_fmt(args).and_then(|()| out.flush())
    };
    if let Err(error) = written {
        let code = if closed(&error) {
            0
        } else {
            crate::logs::say(&format!("spool: cannot write to stdout: {error}"));
            1
        };
        std::process::exit(code);
    }
}

/// Writes `line` on stdout for whoever reads it, and goes on whatever happens: for a
/// command that keeps running after it (`spool serve`'s web page address), which must
/// not stop because nobody reads its stdout.
#[cfg(feature = "serve")]
pub(crate) fn say(line: &str) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// `count` and its noun, singular for one: `1 run`, `0 runs`, `2 runs`.
pub(crate) fn counted(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// Whether `error` says that nobody reads stdout any more.
pub(crate) fn closed(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::BrokenPipe
}

/// The exit status for `error` from a write to stdout by `command`: success, said
/// nowhere, when the reader went away; else the error on stderr and status 1.
pub(crate) fn failed(command: &str, error: &io::Error) -> ExitCode {
    if closed(error) {
        return ExitCode::SUCCESS;
    }
    crate::logs::say(&format!("{command}: cannot write to stdout: {error}"));
    ExitCode::FAILURE
}
