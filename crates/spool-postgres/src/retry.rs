//! A batch written through a lost connection: the writer tries again with back-off
//! until [`PgOptions::retry_for`](crate::PgOptions::retry_for) has passed. Each try
//! reconnects, takes the writer's lock again and reads the head: another writer's
//! epoch there ends the writer ([`PgStoreError::Fenced`]); a head that shows the batch
//! committed (the connection broke during `COMMIT`) counts it as committed; else the
//! batch is written again. A batch given up on after its `COMMIT` was sent is in doubt:
//! the next write first finds out whether it was committed, and goes on after it if it
//! was.

use std::time::{Duration, Instant};

use spool_durable::WriteStats;

use crate::error::PgStoreError;
use crate::rows::Head;
use crate::rows::read_head;
use crate::schema::{end_session, lock_holder, session_alive, session_id, set_session, try_lock};
use crate::write::{Failure, Op, Plan, Statements, Writer};

/// The first wait before trying again; it doubles up to [`LONGEST_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(50);

/// The longest wait between two tries.
const LONGEST_WAIT: Duration = Duration::from_secs(2);

/// Where the head is after a reconnect.
enum Found {
    /// The batch is not there: write it again.
    Before,
    /// The batch was committed before the connection broke.
    Committed,
}

impl Writer {
    /// Writes `ops` in one transaction, trying again through lost connections for up to
    /// `retry_for`. Returns each op's number.
    pub(crate) fn write(&mut self, ops: &[&Op]) -> Result<Vec<u64>, PgStoreError> {
        if let Some(after) = self.in_doubt {
            self.settle(after)?;
        }
        let plan = self.plan(ops);
        let mut first = true;
        let mut since: Option<Instant> = None;
        let mut wait = FIRST_WAIT;
        loop {
            let failure = match self.write_once(ops, &plan, first) {
                Ok(()) => return Ok(plan.ids),
                Err(Failure::Fatal(error)) => return Err(error),
                Err(Failure::Lost(reason)) => reason,
            };
            first = false;
            self.client = None;
            self.statements = None;
            // Once a COMMIT of this batch went out unanswered, giving up leaves it in
            // doubt (a later try that is refused before its COMMIT does not clear that).
            let mut doubt = std::mem::take(&mut self.committing);
            let mut reason = failure;
            loop {
                let started = *since.get_or_insert_with(Instant::now);
                let waited = started.elapsed();
                if waited >= self.options.retry_for {
                    if doubt {
                        self.in_doubt = Some(plan.after);
                        reason.push_str(
                            "; the batch's COMMIT was sent and not answered: it may have \
                             been committed (the next write finds out)",
                        );
                    }
                    return Err(PgStoreError::Unavailable {
                        what: self.address.name.clone(),
                        seconds: self.options.retry_for.as_secs(),
                        reason,
                    });
                }
                tracing::warn!(
                    store = %self.address.name,
                    error = %reason,
                    waited_ms = waited.as_millis() as u64,
                    "the store's connection is lost: trying again in {} ms",
                    wait.as_millis()
                );
                std::thread::sleep(wait.min(self.options.retry_for.saturating_sub(waited)));
                wait = (wait * 2).min(LONGEST_WAIT);
                match self.reconnect(&plan) {
                    Ok(Found::Committed) => {
                        tracing::warn!(store = %self.address.name, "the store is back: the batch was committed");
                        let written = std::mem::take(&mut self.sent);
                        self.committed(&plan, &written);
                        return Ok(plan.ids);
                    }
                    Ok(Found::Before) => {
                        tracing::warn!(store = %self.address.name, "the store is back: writing the batch again");
                        doubt = false;
                        break;
                    }
                    Err(Failure::Lost(again)) => reason = again,
                    Err(Failure::Fatal(error)) => return Err(error),
                }
            }
        }
    }

    /// Finds out whether the batch given up on in doubt (`after`: the head it would
    /// leave) was committed, trying for up to `retry_for`: if it was, the writer goes on
    /// after it; if not, from where it was. Until the server answers, nothing is
    /// written.
    fn settle(&mut self, after: Head) -> Result<(), PgStoreError> {
        let doubtful = Plan {
            after,
            ids: Vec::new(),
        };
        let started = Instant::now();
        let mut wait = FIRST_WAIT;
        loop {
            match self.reconnect(&doubtful) {
                Ok(Found::Committed) => {
                    tracing::warn!(store = %self.address.name, "the store is back: the batch in doubt was committed");
                    let written = std::mem::take(&mut self.sent);
                    self.committed(&doubtful, &written);
                    break;
                }
                Ok(Found::Before) => {
                    tracing::warn!(store = %self.address.name, "the store is back: the batch in doubt was not committed");
                    self.sent = WriteStats::default();
                    break;
                }
                Err(Failure::Fatal(error)) => return Err(error),
                Err(Failure::Lost(reason)) => {
                    let waited = started.elapsed();
                    if waited >= self.options.retry_for {
                        return Err(PgStoreError::Unavailable {
                            what: self.address.name.clone(),
                            seconds: self.options.retry_for.as_secs(),
                            reason: format!(
                                "{reason}; a batch given up on earlier may have been \
                                 committed, and nothing is written until that is known"
                            ),
                        });
                    }
                    std::thread::sleep(wait.min(self.options.retry_for.saturating_sub(waited)));
                    wait = (wait * 2).min(LONGEST_WAIT);
                }
            }
        }
        self.in_doubt = None;
        Ok(())
    }

    /// Connects again, takes the writer's lock (in lease mode: ends the writer's
    /// previous session instead), checks the epoch and finds whether the batch `plan`
    /// describes was committed.
    fn reconnect(&mut self, plan: &Plan) -> Result<Found, Failure> {
        let mut client = self.address.connect()?;
        set_session(&mut client, self.options.synchronous_commit)?;
        let shard = self.shard;
        let fenced = |found: i64, ours: i64, name: &str| {
            Failure::Fatal(PgStoreError::Fenced {
                what: name.to_owned(),
                ours,
                found,
            })
        };
        if self.lease && session_alive(&mut client, &self.session)? {
            // No lock shows whether the previous session of this lease writer is
            // still inside a transaction (its connection cut, the server not yet aware):
            // it is ended, and the batch is looked for only once it is gone, so that
            // it can never commit after the look.
            end_session(&mut client, &self.session)?;
            if session_alive(&mut client, &self.session)? {
                return Err(Failure::Lost(
                    "the writer's previous session is still ending".to_owned(),
                ));
            }
        }
        let seen = read_head(&mut client, shard, false)?;
        if seen.epoch != self.head.epoch {
            return Err(fenced(seen.epoch, self.head.epoch, &self.address.name));
        }
        if !self.lease && !try_lock(&mut client, shard)? {
            // The old session of this writer may still hold it, until the server
            // notices its connection is gone: it is ended (it is this writer's own).
            if lock_holder(&mut client, shard)? == Some(self.session.0)
                && session_alive(&mut client, &self.session)?
            {
                end_session(&mut client, &self.session)?;
            }
            if !try_lock(&mut client, shard)? {
                return Err(Failure::Lost(
                    "another session holds the writer's lock".to_owned(),
                ));
            }
        }
        let head = read_head(&mut client, shard, false)?;
        if head.epoch != self.head.epoch {
            return Err(fenced(head.epoch, self.head.epoch, &self.address.name));
        }
        let found = if head == plan.after {
            Found::Committed
        } else if head == self.head {
            Found::Before
        } else if head.last_seq < self.head.last_seq || head.checkpoint < self.head.checkpoint {
            return Err(Failure::Fatal(PgStoreError::LostCommits {
                what: self.address.name.clone(),
                found_entry: head.last_seq,
                found_checkpoint: head.checkpoint,
                ours_entry: self.head.last_seq,
                ours_checkpoint: self.head.checkpoint,
            }));
        } else {
            return Err(Failure::Fatal(PgStoreError::Corrupt(format!(
                "the head row says entry {} and checkpoint {}: neither before this writer's \
                 last batch (entry {}, checkpoint {}) nor after it",
                head.last_seq, head.checkpoint, self.head.last_seq, self.head.checkpoint
            ))));
        };
        self.session = session_id(&mut client)?;
        self.statements = Some(Statements::prepare(&mut client)?);
        self.client = Some(client);
        Ok(found)
    }
}
