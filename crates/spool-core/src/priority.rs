//! A task's priority level: what the priority policy, the request gates and the
//! schedules order by, apart from the task model so that they need not reach it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A task's priority level. Higher levels run first under the priority policy; a
/// child inherits its parent's level unless told otherwise.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Priority {
    /// Background work.
    Low,
    /// The default.
    #[default]
    Normal,
    /// User-facing work.
    High,
    /// Work that must not wait.
    Critical,
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
            Priority::Critical => "critical",
        })
    }
}
