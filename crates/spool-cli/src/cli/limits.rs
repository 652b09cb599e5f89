//! The limit options `spool serve` and `spool run` share: `--max-running`, `--limit
//! KIND=SPEC`, `--agent-limit KIND=SPEC` and `--agent-max-in-flight`, parsed into the
//! core's [`TaskLimits`] and [`RequestLimits`].
//!
//! A `--limit` spec is one to three parts, comma-separated, at most one of each:
//! `N` (at most N requests of the kind in flight), `N/s`, `N/min` or `N/h` (at most N
//! requests sent in any such window), `Ntok/s|min|h` (at most N estimated tokens sent in
//! any such window). An `--agent-limit` spec is the same without a token window, and
//! holds each agent to it.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use clap::Args;
use clap::builder::RangedU64ValueParser;
use spool_core::{AgentKindLimits, Kind, RequestLimits, TaskLimits};
use spool_durable::History;

/// The limit options of `spool serve` and `spool run`, and the history their store
/// keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Args)]
pub(crate) struct LimitArgs {
    /// At most N tasks running at once; the others wait for a slot
    #[arg(
        long,
        value_name = "N",
        value_parser = RangedU64ValueParser::<usize>::new().range(1..),
        display_order = 100,
    )]
    pub(crate) max_running: Option<usize>,
    /// Limit requests of KIND (llm, tool:NAME, ...); SPEC is up to
    /// three of N (in flight at once), N/s|N/min|N/h (sent per window)
    /// and Ntok/s|Ntok/min|Ntok/h (estimated tokens per window),
    /// comma-separated; e.g. --limit llm=4,60/min, --limit
    /// tool:search=2 (repeatable, a kind once)
    #[arg(
        long = "limit",
        value_name = "KIND=SPEC",
        value_parser = parse_kind_limit,
        verbatim_doc_comment,
        display_order = 101,
    )]
    pub(crate) limits: Vec<KindLimit>,
    /// Limit each agent's requests of KIND; SPEC is up to two of N
    /// (in flight at once) and N/s|N/min|N/h (sent per window),
    /// beside KIND's --limit; e.g. --agent-limit llm=1,10/min
    /// (repeatable, a kind once)
    #[arg(
        long = "agent-limit",
        value_name = "KIND=SPEC",
        value_parser = parse_agent_limit,
        verbatim_doc_comment,
        display_order = 101,
    )]
    pub(crate) agent_limits: Vec<AgentLimit>,
    /// At most N requests in flight for each agent, across kinds
    #[arg(
        long,
        value_name = "N",
        value_parser = RangedU64ValueParser::<u32>::new().range(1..=u64::from(u32::MAX)),
        display_order = 102,
    )]
    pub(crate) agent_max_in_flight: Option<u32>,
    /// The history the store keeps: segments (a checkpoint and the
    /// journal after it) younger than AGE, newest first up to SIZE;
    /// e.g. 7d, 12h, 7d,2GiB, 500MiB, off (the latest segment only),
    /// all
    #[arg(
        long,
        value_name = "AGE,SIZE",
        default_value = "7d,1GiB",
        verbatim_doc_comment,
        display_order = 103
    )]
    pub(crate) history: History,
}

/// One `--limit`: a kind and what it may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KindLimit {
    /// The kind limited.
    pub(crate) kind: Kind,
    /// At most this many in flight.
    pub(crate) max_in_flight: Option<u32>,
    /// At most `.0` requests in any window of `.1`.
    pub(crate) window: Option<(u32, Duration)>,
    /// At most `.0` estimated tokens in any window of `.1`.
    pub(crate) tokens: Option<(u64, Duration)>,
}

/// One `--agent-limit`: a kind and what each agent may do with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AgentLimit {
    /// The kind limited.
    pub(crate) kind: Kind,
    /// What each agent may do.
    pub(crate) limits: AgentKindLimits,
}

/// Why a `--limit` (or the set of them) does not fit; each says which part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LimitError {
    /// No `=` between the kind and the spec.
    #[error("expected KIND=SPEC, e.g. llm=4,60/min")]
    NoEquals,
    /// The kind is not one.
    #[error("{0}")]
    Kind(#[from] spool_core::KindError),
    /// Nothing after `=`.
    #[error("`{kind}=` says no limit: give N, N/min or Ntok/min")]
    Empty {
        /// The kind.
        kind: String,
    },
    /// An empty part between commas.
    #[error("an empty part between commas")]
    EmptyPart,
    /// A count that is not a whole number.
    #[error("`{part}`: `{number}` is not a whole number")]
    NotANumber {
        /// The part.
        part: String,
        /// What stood for the number.
        number: String,
    },
    /// A count over the most the limit takes.
    #[error("`{part}`: `{number}` is too large")]
    TooLarge {
        /// The part.
        part: String,
        /// The number.
        number: String,
    },
    /// A count of 0, which would hold every request back.
    #[error("`{part}`: 0 would hold every request back; give 1 or more")]
    Zero {
        /// The part.
        part: String,
    },
    /// A period that is not s, min or h.
    #[error("`{part}`: the period must be s, min or h")]
    Period {
        /// The part.
        part: String,
    },
    /// Two parts of the same sort.
    #[error("`{part}`: a second {what}; give one of each")]
    Twice {
        /// The second part.
        part: String,
        /// Its sort: an in-flight cap, a request window, a token window.
        what: &'static str,
    },
    /// The same kind in two `--limit`s.
    #[error("--limit {kind} is given twice; give each kind once, its parts comma-separated")]
    KindTwice {
        /// The kind.
        kind: Kind,
    },
    /// A token window in an `--agent-limit`.
    #[error("`{part}`: an agent's limit takes no token window; give N or N/PERIOD")]
    AgentTokens {
        /// The part.
        part: String,
    },
    /// The same kind in two `--agent-limit`s.
    #[error("--agent-limit {kind} is given twice; give each kind once, its parts comma-separated")]
    AgentKindTwice {
        /// The kind.
        kind: Kind,
    },
}

/// Parses `KIND=SPEC` (clap's value parser for `--limit`).
fn parse_kind_limit(text: &str) -> Result<KindLimit, LimitError> {
    text.parse()
}

/// Parses `KIND=SPEC` (clap's value parser for `--agent-limit`).
fn parse_agent_limit(text: &str) -> Result<AgentLimit, LimitError> {
    text.parse()
}

impl FromStr for AgentLimit {
    type Err = LimitError;

    /// As a [`KindLimit`], with no token window.
    fn from_str(text: &str) -> Result<AgentLimit, LimitError> {
        let limit: KindLimit = text.parse()?;
        if limit.tokens.is_some() {
            let part = text
                .split_once('=')
                .and_then(|(_, spec)| spec.split(',').find(|p| p.contains("tok/")))
                .unwrap_or(text);
            return Err(LimitError::AgentTokens {
                part: part.to_owned(),
            });
        }
        let mut limits = AgentKindLimits::new();
        if let Some(max) = limit.max_in_flight {
            limits = limits.max_in_flight(max);
        }
        if let Some((max, per)) = limit.window {
            limits = limits.window(max, per);
        }
        Ok(AgentLimit {
            kind: limit.kind,
            limits,
        })
    }
}

impl FromStr for KindLimit {
    type Err = LimitError;

    fn from_str(text: &str) -> Result<KindLimit, LimitError> {
        let (kind, spec) = text.split_once('=').ok_or(LimitError::NoEquals)?;
        let kind: Kind = kind.parse()?;
        if spec.is_empty() {
            return Err(LimitError::Empty {
                kind: kind.to_string(),
            });
        }
        let mut limit = KindLimit {
            kind,
            max_in_flight: None,
            window: None,
            tokens: None,
        };
        for part in spec.split(',') {
            limit.add(part)?;
        }
        Ok(limit)
    }
}

impl KindLimit {
    /// Adds one part of a spec: `N`, `N/PERIOD` or `Ntok/PERIOD`.
    fn add(&mut self, part: &str) -> Result<(), LimitError> {
        if part.is_empty() {
            return Err(LimitError::EmptyPart);
        }
        let twice = |what| LimitError::Twice {
            part: part.to_owned(),
            what,
        };
        let Some((count, period)) = part.split_once('/') else {
            if self.max_in_flight.is_some() {
                return Err(twice("in-flight cap"));
            }
            self.max_in_flight = Some(number(part, part)?);
            return Ok(());
        };
        let per = match period {
            "s" => Duration::from_secs(1),
            "min" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => {
                return Err(LimitError::Period {
                    part: part.to_owned(),
                });
            }
        };
        match count.strip_suffix("tok") {
            Some(tokens) => {
                if self.tokens.is_some() {
                    return Err(twice("token window"));
                }
                self.tokens = Some((number(part, tokens)?, per));
            }
            None => {
                if self.window.is_some() {
                    return Err(twice("request window"));
                }
                self.window = Some((number(part, count)?, per));
            }
        }
        Ok(())
    }
}

/// `text` (of `part`) as a count of 1 or more.
fn number<N: FromStr + Default + PartialEq>(part: &str, text: &str) -> Result<N, LimitError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(LimitError::NotANumber {
            part: part.to_owned(),
            number: text.to_owned(),
        });
    }
    // Only digits: a number that does not parse is too large for its type.
    let n: N = text.parse().map_err(|_| LimitError::TooLarge {
        part: part.to_owned(),
        number: text.to_owned(),
    })?;
    if n == N::default() {
        return Err(LimitError::Zero {
            part: part.to_owned(),
        });
    }
    Ok(n)
}

/// The limits the options give: on tasks, and on requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    /// On tasks (`--max-running`).
    pub(crate) tasks: TaskLimits,
    /// On requests (`--limit`, `--agent-limit`, `--agent-max-in-flight`).
    pub(crate) requests: RequestLimits,
    /// Whether any limit option was given.
    pub(crate) given: bool,
    /// The history the store keeps (`--history`).
    pub(crate) history: History,
}

impl LimitArgs {
    /// The limits these options give.
    ///
    /// # Errors
    /// [`LimitError::KindTwice`] if two `--limit`s name the same kind,
    /// [`LimitError::AgentKindTwice`] if two `--agent-limit`s do.
    pub(crate) fn limits(&self) -> Result<Limits, LimitError> {
        let mut tasks = TaskLimits::new();
        if let Some(max) = self.max_running {
            tasks = tasks.max_running(max);
        }
        let mut requests = RequestLimits::new();
        let mut seen = BTreeMap::new();
        for limit in &self.limits {
            if seen.insert(limit.kind.clone(), ()).is_some() {
                return Err(LimitError::KindTwice {
                    kind: limit.kind.clone(),
                });
            }
            if let Some(max) = limit.max_in_flight {
                requests = requests.max_in_flight(limit.kind.clone(), max);
            }
            if let Some((max, per)) = limit.window {
                requests = requests.window(limit.kind.clone(), max, per);
            }
            if let Some((max, per)) = limit.tokens {
                requests = requests.tokens(limit.kind.clone(), max, per);
            }
        }
        let mut seen = BTreeMap::new();
        for limit in &self.agent_limits {
            if seen.insert(limit.kind.clone(), ()).is_some() {
                return Err(LimitError::AgentKindTwice {
                    kind: limit.kind.clone(),
                });
            }
            requests = requests.agent_limit(limit.kind.clone(), limit.limits);
        }
        if let Some(max) = self.agent_max_in_flight {
            requests = requests.per_agent_in_flight(max);
        }
        Ok(Limits {
            tasks,
            requests,
            given: self.max_running.is_some()
                || !self.limits.is_empty()
                || !self.agent_limits.is_empty()
                || self.agent_max_in_flight.is_some(),
            history: self.history,
        })
    }
}

#[cfg(test)]
impl LimitArgs {
    /// Every option given once, for tests: `--max-running 5 --limit
    /// llm=3,60/min,90000tok/min --limit tool:search=2 --agent-max-in-flight 4`.
    pub(crate) fn example() -> LimitArgs {
        LimitArgs {
            max_running: Some(5),
            limits: vec![
                "llm=3,60/min,90000tok/min".parse().expect("a limit"),
                "tool:search=2".parse().expect("a limit"),
            ],
            agent_limits: Vec::new(),
            agent_max_in_flight: Some(4),
            history: History::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<KindLimit, String> {
        text.parse::<KindLimit>().map_err(|e| e.to_string())
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn a_spec_takes_a_cap_a_request_window_and_a_token_window_in_any_order() {
        let llm = |max_in_flight, window, tokens| {
            Ok(KindLimit {
                kind: Kind::Llm,
                max_in_flight,
                window,
                tokens,
            })
        };
        assert_eq!(parse("llm=4"), llm(Some(4), None, None));
        assert_eq!(parse("llm=4,60/min"), llm(Some(4), Some((60, MIN)), None));
        assert_eq!(
            parse("llm=60/min,90000tok/min"),
            llm(None, Some((60, MIN)), Some((90_000, MIN)))
        );
        assert_eq!(
            parse("llm=90000tok/h,2/s,8"),
            llm(
                Some(8),
                Some((2, Duration::from_secs(1))),
                Some((90_000, Duration::from_secs(3600)))
            )
        );
        assert_eq!(
            parse("tool:search=2"),
            Ok(KindLimit {
                kind: Kind::tool("search"),
                max_in_flight: Some(2),
                window: None,
                tokens: None,
            })
        );
    }

    #[test]
    fn a_bad_spec_names_its_bad_part() {
        for (text, message) in [
            ("llm", "expected KIND=SPEC, e.g. llm=4,60/min"),
            ("llm=", "`llm=` says no limit: give N, N/min or Ntok/min"),
            ("=4", "`` is not a request kind: a kind needs a name"),
            (
                "tool:=4",
                "`tool:` is not a request kind: `tool:` needs a tool name after the colon",
            ),
            ("llm=4,,60/min", "an empty part between commas"),
            ("llm=4,", "an empty part between commas"),
            (
                "llm=4,60/fortnight",
                "`60/fortnight`: the period must be s, min or h",
            ),
            ("llm=60/", "`60/`: the period must be s, min or h"),
            ("llm=four", "`four`: `four` is not a whole number"),
            ("llm=-4", "`-4`: `-4` is not a whole number"),
            ("llm=+4", "`+4`: `+4` is not a whole number"),
            ("llm=x/min", "`x/min`: `x` is not a whole number"),
            ("llm=/min", "`/min`: `` is not a whole number"),
            ("llm=tok/min", "`tok/min`: `` is not a whole number"),
            ("llm=4294967296", "`4294967296`: `4294967296` is too large"),
            (
                "llm=0",
                "`0`: 0 would hold every request back; give 1 or more",
            ),
            (
                "llm=0tok/min",
                "`0tok/min`: 0 would hold every request back; give 1 or more",
            ),
            ("llm=4,5", "`5`: a second in-flight cap; give one of each"),
            (
                "llm=1/s,60/min",
                "`60/min`: a second request window; give one of each",
            ),
            (
                "llm=1tok/s,6tok/min",
                "`6tok/min`: a second token window; give one of each",
            ),
        ] {
            assert_eq!(parse(text), Err(message.to_owned()), "{text}");
        }
    }

    #[test]
    fn the_options_make_the_cores_limits_and_a_kind_is_given_once() {
        let args = LimitArgs::example();
        let limits = args.limits().expect("limits");
        assert_eq!(limits.tasks, TaskLimits::new().max_running(5));
        assert_eq!(
            limits.requests,
            RequestLimits::new()
                .max_in_flight(Kind::Llm, 3)
                .window(Kind::Llm, 60, MIN)
                .tokens(Kind::Llm, 90_000, MIN)
                .max_in_flight(Kind::tool("search"), 2)
                .per_agent_in_flight(4)
        );
        assert!(limits.given);
        let none = LimitArgs::default().limits().expect("limits");
        assert_eq!(none, Limits::default());
        let twice = LimitArgs {
            limits: vec![
                "llm=3".parse().expect("a limit"),
                "llm=60/min".parse().expect("a limit"),
            ],
            ..LimitArgs::default()
        };
        assert_eq!(
            twice.limits().map_err(|e| e.to_string()),
            Err(
                "--limit llm is given twice; give each kind once, its parts comma-separated"
                    .to_owned()
            )
        );
    }

    /// An `--agent-limit` takes a cap and a request window, like a `--limit` without a
    /// token window, and holds each agent to it beside the kind's own limits; a kind
    /// is given once.
    #[test]
    fn an_agent_limit_takes_a_cap_and_a_window_and_a_kind_once() {
        let agent = |text: &str| text.parse::<AgentLimit>().map_err(|e| e.to_string());
        assert_eq!(
            agent("llm=1,10/min"),
            Ok(AgentLimit {
                kind: Kind::Llm,
                limits: AgentKindLimits::new().max_in_flight(1).window(10, MIN),
            })
        );
        assert_eq!(
            agent("tool:search=2"),
            Ok(AgentLimit {
                kind: Kind::tool("search"),
                limits: AgentKindLimits::new().max_in_flight(2),
            })
        );
        assert_eq!(
            agent("llm=1,900tok/min"),
            Err(
                "`900tok/min`: an agent's limit takes no token window; give N or N/PERIOD"
                    .to_owned()
            )
        );
        assert_eq!(
            agent("llm=0"),
            Err("`0`: 0 would hold every request back; give 1 or more".to_owned())
        );
        let args = LimitArgs {
            limits: vec!["llm=4,60/min".parse().expect("a limit")],
            agent_limits: vec!["llm=1,10/min".parse().expect("an agent limit")],
            ..LimitArgs::default()
        };
        let limits = args.limits().expect("limits");
        assert_eq!(
            limits.requests,
            RequestLimits::new()
                .max_in_flight(Kind::Llm, 4)
                .window(Kind::Llm, 60, MIN)
                .agent_limit(
                    Kind::Llm,
                    AgentKindLimits::new().max_in_flight(1).window(10, MIN)
                )
        );
        assert!(limits.given);
        let twice = LimitArgs {
            agent_limits: vec![
                "llm=1".parse().expect("an agent limit"),
                "llm=10/min".parse().expect("an agent limit"),
            ],
            ..LimitArgs::default()
        };
        assert_eq!(
            twice.limits().map_err(|e| e.to_string()),
            Err(
                "--agent-limit llm is given twice; give each kind once, its parts \
                 comma-separated"
                    .to_owned()
            )
        );
    }

    /// A command with the shared options alone, to parse `--history`.
    #[derive(clap::Parser, Debug)]
    struct WithLimits {
        #[command(flatten)]
        limits: LimitArgs,
    }

    fn history(args: &[&str]) -> Result<History, String> {
        use clap::Parser;
        let args = std::iter::once("spool").chain(args.iter().copied());
        WithLimits::try_parse_from(args)
            .map(|parsed| parsed.limits.history)
            .map_err(|e| e.to_string())
    }

    /// `--history` takes an age, a size, both, `off` or `all`, and defaults to 7 days
    /// and 1 GiB; a bad one is a one-line usage error naming what is wrong.
    #[test]
    fn history_takes_an_age_a_size_or_off() {
        use std::time::Duration;
        const DAY: u64 = 86_400;
        let week = Some(Duration::from_secs(7 * DAY));
        assert_eq!(history(&[]), Ok(History::keep(week, Some(1 << 30))));
        assert_eq!(history(&["--history", "7d"]), Ok(History::keep(week, None)));
        assert_eq!(
            history(&["--history", "7d,2GiB"]),
            Ok(History::keep(week, Some(2 << 30)))
        );
        assert_eq!(history(&["--history=off"]), Ok(History::off()));
        let error = history(&["--history", "7 days"]).expect_err("refused");
        assert_eq!(
            error.trim_end(),
            "error: invalid value '7 days' for '--history <AGE,SIZE>': bad history `7 days`: \
             ` days` is not a unit (expected `off`, `all`, an age like `7d`, a size like \
             `2GiB`, or both: `7d,2GiB`)\n\nFor more information, try '--help'."
        );
        assert!(history(&["--history", "7d,1d"]).is_err());
    }
}
