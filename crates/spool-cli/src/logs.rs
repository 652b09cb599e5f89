//! Logs: `tracing` events on stderr, filtered by `RUST_LOG` and written as text for
//! people or as JSON, one object a line, for machines (`--log-format`).
//!
//! Without `RUST_LOG`, spool's own crates log from `info` up and every other crate from
//! `warn` up, so the defaults show what a user needs (a server's lifecycle, warnings)
//! and nothing of the dependencies' chatter. In the text format an `info` line of the
//! command itself is its message alone (`spool serve: stopped; ...`), as the command
//! always printed it; a warning or an error of the command says `warning: `/`error: `
//! first; any other event names its level and target. What the commands print as their
//! output proper (`listening on http://ADDR`, a token, the demo's summary, the error
//! that ends a command) is not a log, and is written as before.
//!
//! Neither format writes colours: the text format is plain, and the JSON format's
//! writer has ANSI turned off unless stderr is a terminal and `NO_COLOR` is unset, so a
//! log written to a file or a pipe holds no escape sequence. A field's value may be text
//! from outside (an agent's name, an error a tool wrote): in the text format its control
//! characters, line breaks included, are written visibly (`\x1b`, `\x0a`; see
//! [`crate::terminal`]), so one event is one line and cannot act on the terminal.

use std::fmt;
use std::io::IsTerminal;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::cli::LogFormat;

/// The filter without `RUST_LOG`: spool's crates from `info`, the rest from `warn`.
pub(crate) const DEFAULT_FILTER: &str = "warn,spool=info,spool_core=info,spool_runtime=info,\
    spool_store=info,spool_exec=info,spool_http=info";

/// The target prefix of the `spool` binary's own events.
const OWN_TARGET: &str = "spool::";

/// Installs the subscriber for the process. A `RUST_LOG` that does not parse is said
/// (as a warning) and the default filter is used instead.
pub(crate) fn init(format: LogFormat) {
    let (filter, refused) = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(error) => (
                EnvFilter::new(DEFAULT_FILTER),
                Some(format!("RUST_LOG={spec:?} ignored: {error}")),
            ),
        },
        _ => (EnvFilter::new(DEFAULT_FILTER), None),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .with_writer(|| Quiet(std::io::stderr()));
    // Another subscriber set first (never, in the binary) keeps its place.
    let _ = match format {
        LogFormat::Text => builder.event_format(Text).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    if let Some(why) = refused {
        tracing::warn!("spool: {why}");
    }
}

/// Whether log lines may hold ANSI colours: only on a terminal, and not when `NO_COLOR`
/// is set to anything but the empty string (<https://no-color.org>).
fn colours(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|value| value.is_empty())
}

/// Writes `line` on stderr as a command's output (not a log: `listening on`, a printed
/// token, `spool run`'s lines). A stderr nobody reads any more (a supervisor that went
/// away, a closed pipe) must not stop the command, as `eprintln!` would by panicking:
/// the line is lost, the command goes on.
pub(crate) fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Stderr that takes a failed write as done. A stderr nobody reads any more (a closed
/// pipe) must not stop the process: `tracing-subscriber` reports a writer's error with
/// `eprintln!`, which panics when stderr itself is what failed. The log line is lost;
/// the command goes on.
struct Quiet(std::io::Stderr);

impl std::io::Write for Quiet {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(self.0.write(buf).unwrap_or(buf.len()))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
}

/// The text format (see the module's documentation).
struct Text;

impl<S, N> FormatEvent<S, N> for Text
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let own = meta.target().starts_with(OWN_TARGET) || meta.target() == "spool";
        match (own, *meta.level()) {
            (true, Level::INFO) => {}
            (true, Level::WARN) => write!(writer, "warning: ")?,
            (true, Level::ERROR) => write!(writer, "error: ")?,
            (_, level) => write!(writer, "{level} {}: ", meta.target())?,
        }
        // The fields go through a string (a writer without ANSI) so that what came from
        // outside is written with its control characters made visible.
        let mut fields = String::new();
        ctx.field_format()
            .format_fields(Writer::new(&mut fields), event)?;
        writeln!(writer, "{}", crate::terminal::safe(&fields))
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::colours;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours(true, None));
        assert!(colours(true, Some(OsString::new())));
        assert!(!colours(true, Some(OsString::from("1"))));
        assert!(!colours(false, None));
    }
}
