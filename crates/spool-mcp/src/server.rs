//! One server's life: started, watched, and started again with back-off when it stops.
//! A task on the executor's runtime owns the connection; calls find the current one
//! through a watch channel ([`Link`]).

use std::process::Stdio;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::Tool;
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::process::Child;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{ServerConfig, Transport};
use crate::group;

/// A connection that stayed up this long resets the back-off: the next stop is
/// followed by the shortest pause again.
const STABLE: Duration = Duration::from_secs(30);

/// Why a server is not up once the executor is shutting down.
const STOPPED: &str = "the executor is stopping";

/// Where a server is in its life, as calls see it.
#[derive(Clone, Debug)]
pub(crate) enum Link {
    /// Being started for the first time.
    Starting,
    /// Connected: calls go to this peer.
    Up {
        /// The connection's sending side.
        peer: Peer<RoleClient>,
    },
    /// Stopped, or could not be started; started again after a pause.
    Down {
        /// Why.
        reason: String,
    },
    /// Stopped for good: the executor is shutting down.
    Stopped,
}

/// The calls' side of a server: its name, its settings and its [`Link`].
#[derive(Debug)]
pub(crate) struct ServerLink {
    /// Its configuration.
    pub(crate) config: ServerConfig,
    /// Its current state.
    pub(crate) link: watch::Receiver<Link>,
    /// How many times it was started (connected and initialized).
    pub(crate) starts: watch::Receiver<u64>,
}

/// Starts the task that keeps the server `config` running until `stop` says `true`
/// (or its sender goes); the task holds `done` until it has ended the server. Returns
/// the calls' side.
pub(crate) fn supervise(
    config: ServerConfig,
    stop: watch::Receiver<bool>,
    done: mpsc::Sender<()>,
) -> Arc<ServerLink> {
    let (link_tx, link) = watch::channel(Link::Starting);
    let (starts_tx, starts) = watch::channel(0);
    let server = Arc::new(ServerLink {
        config: config.clone(),
        link,
        starts,
    });
    tokio::spawn(async move {
        keep_running(config, link_tx, starts_tx, stop).await;
        drop(done);
    });
    server
}

/// Connects, waits for the connection to end, ends what is left of a stdio server,
/// pauses, and again, until `stop`: then ends the server and says [`Link::Stopped`].
async fn keep_running(
    config: ServerConfig,
    link: watch::Sender<Link>,
    starts: watch::Sender<u64>,
    mut stop: watch::Receiver<bool>,
) {
    let mut stops_in_a_row: u32 = 0;
    let mut generation = 0;
    loop {
        // The stdio server's process, once started: it outlives a connection that is
        // dropped, so that it is ended here, its whole group.
        let mut child = None;
        let connected = tokio::select! {
            connected = connect(&config, &mut child) => Some(connected),
            () = stopping(&mut stop) => None,
        };
        let Some(connected) = connected else {
            link.send_replace(Link::Stopped);
            end(&config.name, child).await;
            return;
        };
        let reason = match connected {
            Ok(service) => {
                generation += 1;
                let since = Instant::now();
                link.send_replace(Link::Up {
                    peer: service.peer().clone(),
                });
                starts.send_replace(generation);
                // On a stop, the connection is dropped: its end closes the server's
                // standard input.
                let ended = tokio::select! {
                    quit = service.waiting() => Some(match quit {
                        Ok(reason) => format!("the connection ended ({reason:?})"),
                        Err(error) => format!("the connection's task failed: {error}"),
                    }),
                    () = stopping(&mut stop) => None,
                };
                let Some(reason) = ended else {
                    link.send_replace(Link::Stopped);
                    end(&config.name, child).await;
                    return;
                };
                if since.elapsed() >= STABLE {
                    stops_in_a_row = 0;
                }
                reason
            }
            Err(reason) => reason,
        };
        // What the server started must not outlive it, nor run beside the next one.
        end(&config.name, child).await;
        let pause = backoff(&config, stops_in_a_row);
        stops_in_a_row = stops_in_a_row.saturating_add(1);
        if generation > 0 {
            tracing::warn!(
                server = %config.name,
                "MCP server `{}` stopped: {reason}; starting it again in {pause:?}",
                config.name
            );
        } else {
            // Not started yet: the executor's start says why, or the next try.
            tracing::debug!(server = %config.name, "MCP server `{}` did not start: {reason}", config.name);
        }
        link.send_replace(Link::Down { reason });
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stopping(&mut stop) => {
                link.send_replace(Link::Stopped);
                return;
            }
        }
    }
}

/// Returns once `stop` says `true`, or its sender is gone.
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Ends the stdio server `child`, if there is one, with its process group.
async fn end(name: &str, child: Option<Child>) {
    if let Some(child) = child {
        group::end(name, child).await;
    }
}

/// The pause after `stops` stops in a row: `restart_base × 2^stops`, at most
/// `restart_max`.
pub(crate) fn backoff(config: &ServerConfig, stops: u32) -> Duration {
    let factor = 2u32.saturating_pow(stops.min(31));
    config
        .restart_base
        .saturating_mul(factor)
        .min(config.restart_max)
}

/// Starts (stdio: its process goes in `child`) or reaches (HTTP) the server and goes
/// through MCP's initialization.
async fn connect(
    config: &ServerConfig,
    child: &mut Option<Child>,
) -> Result<RunningService<RoleClient, ()>, String> {
    match &config.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut process = tokio::process::Command::new(command);
            // Killed should its task be dropped before it ends the server (a runtime
            // shut down without a stop).
            process
                .args(args)
                .envs(env)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true);
            // A group of its own: a Ctrl-C at spool's terminal is spool's to handle (it
            // ends the group when it stops), not the server's, which would otherwise
            // die first and be counted as a crash.
            #[cfg(unix)]
            process.process_group(0);
            if let Some(cwd) = cwd {
                process.current_dir(cwd);
            }
            let started = child.insert(
                process
                    .spawn()
                    .map_err(|error| format!("cannot start `{command}`: {error}"))?,
            );
            let (Some(stdout), Some(stdin)) = (started.stdout.take(), started.stdin.take()) else {
                return Err(format!("`{command}` has no standard input or output"));
            };
            ().serve((stdout, stdin))
                .await
                .map_err(|error| format!("`{command}` did not initialize: {error}"))
        }
        Transport::Http { url, headers } => {
            let mut transport = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            for (name, value) in headers {
                let name = name
                    .parse()
                    .map_err(|_| format!("`{name}` is not a header name"))?;
                let value = value
                    .parse()
                    .map_err(|_| format!("the value of header `{name}` is not a header value"))?;
                transport.custom_headers.insert(name, value);
            }
            let transport = StreamableHttpClientTransport::from_config(transport);
            ().serve(transport)
                .await
                .map_err(|error| format!("{url} did not initialize: {error}"))
        }
    }
}

/// Waits until the server is up, on a connection still open (or until `deadline`):
/// its peer, or the reason it is down.
pub(crate) async fn wait_up(
    server: &ServerLink,
    deadline: Instant,
) -> Result<Peer<RoleClient>, String> {
    let mut link = server.link.clone();
    // A connection that just ended is not up, though its end may not be noticed yet.
    let up = tokio::time::timeout_at(
        deadline,
        link.wait_for(|state| match state {
            Link::Up { peer } => !peer.is_transport_closed(),
            Link::Stopped => true,
            Link::Starting | Link::Down { .. } => false,
        }),
    )
    .await;
    match up {
        Ok(Ok(state)) => match &*state {
            Link::Up { peer } => Ok(peer.clone()),
            Link::Stopped => Err(STOPPED.to_owned()),
            _ => Err("not up".to_owned()),
        },
        Ok(Err(_)) => Err(STOPPED.to_owned()),
        Err(_) => Err(match &*server.link.borrow() {
            Link::Starting => "it is still starting".to_owned(),
            Link::Down { reason } => reason.clone(),
            Link::Up { .. } => "it came up as the wait ended".to_owned(),
            Link::Stopped => STOPPED.to_owned(),
        }),
    }
}

/// Waits for the outcome of the server's first start (or for `deadline`): its peer,
/// or why it did not start. Unlike [`wait_up`], a failed first try is not waited out:
/// a server that cannot start at all is said at once.
pub(crate) async fn first_start(
    server: &ServerLink,
    deadline: Instant,
) -> Result<Peer<RoleClient>, String> {
    let mut link = server.link.clone();
    let outcome = tokio::time::timeout_at(
        deadline,
        link.wait_for(|state| !matches!(state, Link::Starting)),
    )
    .await;
    match outcome {
        Ok(Ok(state)) => match &*state {
            Link::Up { peer } => Ok(peer.clone()),
            Link::Down { reason } => Err(reason.clone()),
            Link::Starting => Err("it is still starting".to_owned()),
            Link::Stopped => Err(STOPPED.to_owned()),
        },
        Ok(Err(_)) => Err(STOPPED.to_owned()),
        Err(_) => Err("it did not start in time".to_owned()),
    }
}

/// The server's tools, as it lists them now.
pub(crate) async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, String> {
    peer.list_all_tools()
        .await
        .map_err(|error| format!("cannot list its tools: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_up_to_its_cap() {
        let config = ServerConfig::new(
            "s",
            Transport::Http {
                url: "http://127.0.0.1:1/mcp".to_owned(),
                headers: Default::default(),
            },
        )
        .restarts(Duration::from_millis(100), Duration::from_secs(1));
        let pauses: Vec<u128> = (0..7).map(|n| backoff(&config, n).as_millis()).collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(backoff(&config, u32::MAX), Duration::from_secs(1));
    }
}
