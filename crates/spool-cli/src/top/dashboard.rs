//! The dashboard's start and its terminal: it enters raw mode and the alternate screen,
//! and restores them on exit and on panic.

use std::io::{BufWriter, Stdout};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyEventKind};

use super::app::{Action, App};
use super::client;
use super::model::Model;
use super::ui;
use crate::cli::top::TopArgs;
use crate::remote::{self, AddrError, Endpoint};

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

impl From<AddrError> for TopError {
    fn from(error: AddrError) -> TopError {
        match error {
            AddrError::BadAddr(addr) => TopError::BadAddr(addr),
            AddrError::Token { path, why } => TopError::Token { path, why },
        }
    }
}

/// `--addr` as a base URL without a trailing slash ([`remote::base_url`]).
pub(super) fn base_url(addr: &str) -> Result<String, TopError> {
    Ok(remote::base_url(addr)?)
}

/// The token: the file's content trimmed, else `SPOOL_TOKEN`, else none
/// ([`remote::token`]).
pub(super) fn token(
    file: Option<&PathBuf>,
    env: Option<String>,
) -> Result<Option<String>, TopError> {
    Ok(remote::token(file.map(PathBuf::as_path), env)?)
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
    let token = token(
        args.token_file.as_ref(),
        std::env::var(remote::TOKEN_VAR).ok(),
    )?;
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
