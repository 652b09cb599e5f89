//! The options of `spool top`, and the environment its help ends with.

use std::path::PathBuf;

use clap::Args;

/// The address `spool top` reads by default: `spool serve`'s.
pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:7420";

/// The environment `spool top` reads.
pub(crate) const TOP_ENVIRONMENT: &str = "\
Environment for top:
  SPOOL_TOKEN  The bearer token, when --token-file is not given

Keys: j/k or arrows move, / filters, s sorts, Enter opens a task's detail (its
timeline and trace), c cancels a task (asks first), ? shows the keys, q quits.
See docs/top.md.";

/// The options of `spool top`.
#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// The server's URL
    #[arg(long, value_name = "URL", default_value = DEFAULT_URL)]
    pub(crate) addr: String,
    /// A file holding the bearer token (else SPOOL_TOKEN)
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
}
