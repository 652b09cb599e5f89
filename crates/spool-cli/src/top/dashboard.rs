//! The dashboard's start and its terminal: it enters raw mode and the alternate screen,
//! and restores them on exit and on panic.

use std::io::{BufWriter, Stdout};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyEventKind};

use super::app::{Action, App};
use super::client::{self, Endpoint};
use super::model::Model;
use super::ui;
use crate::cli::top::TopArgs;

/// Why `spool top` could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TopError {
    /// `--addr` is not an `http://` URL.
    #[error("--addr {0:?} is not a URL like http://127.0.0.1:7420 (https is not supported)")]
    BadAddr(String),
    /// The token file could not be read, or holds no token.
    #[error("the token file {path}: {why}")]
    Token { path: PathBuf, why: String },
    /// The terminal could not be set up or drawn on.
    #[error("the terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

/// `--addr` as a base URL without a trailing slash.
pub(super) fn base_url(addr: &str) -> Result<String, TopError> {
    let trimmed = addr.trim().trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("http://")
        .ok_or_else(|| TopError::BadAddr(addr.to_owned()))?;
    if rest.is_empty() || rest.contains(['/', '?', '#', ' ']) {
        return Err(TopError::BadAddr(addr.to_owned()));
    }
    Ok(trimmed.to_owned())
}

/// The token: the file's content trimmed, else `SPOOL_TOKEN`, else none.
pub(super) fn token(
    file: Option<&PathBuf>,
    env: Option<String>,
) -> Result<Option<String>, TopError> {
    let Some(path) = file else {
        return Ok(env.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()));
    };
    let text = std::fs::read_to_string(path).map_err(|e| TopError::Token {
        path: path.clone(),
        why: format!("cannot be read: {e}"),
    })?;
    let token = text.trim();
    if token.is_empty() || token.chars().any(char::is_whitespace) {
        return Err(TopError::Token {
            path: path.clone(),
            why: "must hold one token: visible characters, no spaces".to_owned(),
        });
    }
    Ok(Some(token.to_owned()))
}

/// `spool top`.
pub(crate) fn run(args: &TopArgs) -> ExitCode {
    match top(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The error may quote what the server said.
            eprintln!("spool top: {}", crate::terminal::safe(&error.to_string()));
            // A URL that is not one is a usage error, as clap's own.
            match error {
                TopError::BadAddr(_) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn top(args: &TopArgs) -> Result<(), TopError> {
    let base = base_url(&args.addr)?;
    let token = token(args.token_file.as_ref(), std::env::var("SPOOL_TOKEN").ok())?;
    let client = client::start(Endpoint {
        base: base.clone(),
        token,
    })?;
    let mut app = App::new(Model::new(base));
    let mut terminal = enter()?;
    let result = event_loop(&mut terminal, &mut app, &client);
    ratatui::try_restore()?;
    result
}

/// The terminal the dashboard draws on.
type Screen = ratatui::Terminal<CrosstermBackend<BufWriter<Stdout>>>;

/// Raw mode and the alternate screen, restored by a panic too. Frames go through a
/// buffer written once per frame: a terminal (or `tmux capture-pane`) never shows half
/// of one, as it could through stdout's own 1 KiB line buffer.
fn enter() -> Result<Screen, TopError> {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        ratatui::restore();
        previous(info);
    }));
    ratatui::crossterm::terminal::enable_raw_mode()?;
    ratatui::crossterm::execute!(
        std::io::stdout(),
        ratatui::crossterm::terminal::EnterAlternateScreen
    )?;
    let backend = CrosstermBackend::new(BufWriter::with_capacity(1 << 16, std::io::stdout()));
    Ok(ratatui::Terminal::new(backend)?)
}

fn event_loop(
    terminal: &mut Screen,
    app: &mut App,
    client: &client::Client,
) -> Result<(), TopError> {
    loop {
        while let Ok(update) = client.updates.try_recv() {
            app.model.apply(update);
        }
        terminal.draw(|frame| ui::draw(frame, app))?;
        // Wake for a key, a resize, or the next update (polled every 500 ms).
        if !event::poll(Duration::from_millis(100))? {
            continue;
        }
        match event::read()? {
            Event::Key(key) if key.kind != KeyEventKind::Release => match app.key(key) {
                Action::Quit => return Ok(()),
                Action::Send(command) => {
                    // The poller ends only when this end is dropped.
                    let _ = client.commands.send(command);
                }
                Action::Redraw => {}
            },
            // A resize is drawn at the next turn, at the new size.
            _ => {}
        }
    }
}
