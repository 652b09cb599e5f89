//! The limits a store runs under, as the limit options write them, and whether a
//! store runs under the ones given ([`crate::cli::limits`] parses the options).

use std::fmt;
use std::time::Duration;

use spool_core::{RequestLimits, Scheduler, TaskLimits};

use crate::cli::limits::Limits;

/// A period as the options write it.
fn period(per: Duration) -> String {
    match per.as_secs() {
        1 => "s".to_owned(),
        60 => "min".to_owned(),
        3600 => "h".to_owned(),
        _ => format!("{}ms", per.as_millis()),
    }
}

/// Limits as the options would give them: `limits --max-running 5 --limit
/// llm=3,60/min --agent-limit llm=1,10/min`, or `no limits`. (An agent's own limits,
/// which no option gives, are not shown.)
pub(crate) struct Described<'a>(pub(crate) &'a TaskLimits, pub(crate) &'a RequestLimits);

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Described(tasks, requests) = self;
        let mut words = Vec::new();
        if let Some(max) = tasks.max_running {
            words.push(format!("--max-running {max}"));
        }
        for (kind, limits) in &requests.kinds {
            let mut parts = Vec::new();
            if let Some(max) = limits.max_in_flight {
                parts.push(max.to_string());
            }
            if let Some((max, per)) = limits.window {
                parts.push(format!("{max}/{}", period(per)));
            }
            if let Some((max, per)) = limits.tokens {
                parts.push(format!("{max}tok/{}", period(per)));
            }
            words.push(format!("--limit {kind}={}", parts.join(",")));
        }
        for (kind, limits) in &requests.agent_kinds {
            let mut parts = Vec::new();
            if let Some(max) = limits.max_in_flight {
                parts.push(max.to_string());
            }
            if let Some((max, per)) = limits.window {
                parts.push(format!("{max}/{}", period(per)));
            }
            words.push(format!("--agent-limit {kind}={}", parts.join(",")));
        }
        if let Some(max) = requests.per_agent_in_flight {
            words.push(format!("--agent-max-in-flight {max}"));
        }
        if words.is_empty() {
            f.write_str("no limits")
        } else {
            write!(f, "limits {}", words.join(" "))
        }
    }
}

/// Whether `scheduler` (gone on with from a store) runs under `limits`.
pub(crate) fn same_limits(scheduler: &Scheduler, limits: &Limits) -> bool {
    scheduler.task_limits() == &limits.tasks && scheduler.request_limits() == &limits.requests
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::limits::LimitArgs;

    #[test]
    fn limits_read_as_the_options_that_give_them() {
        let args = LimitArgs::example();
        let limits = args.limits().expect("limits");
        assert_eq!(
            Described(&limits.tasks, &limits.requests).to_string(),
            "limits --max-running 5 --limit llm=3,60/min,90000tok/min --limit tool:search=2 \
             --agent-max-in-flight 4"
        );
        let none = LimitArgs::default().limits().expect("limits");
        assert_eq!(
            Described(&none.tasks, &none.requests).to_string(),
            "no limits"
        );
        let shares = LimitArgs {
            limits: vec!["llm=4,60/min".parse().expect("a limit")],
            agent_limits: vec![
                "llm=1,10/min".parse().expect("an agent limit"),
                "tool:search=2/s".parse().expect("an agent limit"),
            ],
            ..LimitArgs::default()
        };
        let limits = shares.limits().expect("limits");
        assert_eq!(
            Described(&limits.tasks, &limits.requests).to_string(),
            "limits --limit llm=4,60/min --agent-limit llm=1,10/min \
             --agent-limit tool:search=2/s"
        );
    }
}
