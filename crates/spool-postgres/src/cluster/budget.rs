//! Cluster-wide request budgets: a per-kind limit (in flight, per minute, estimated
//! tokens per minute) kept in `spool.budgets`, and the slices of it that nodes lease in `spool.budget_slices`.
//!
//! A node leases a slice of a kind's budget with [`Cluster::lease_slice`], in one
//! transaction that locks the budget's row: it gets at most what the other nodes'
//! slices leave free, and at most its fair share (the budget divided by the nodes
//! holding a live slice, rounded up) while another node waits for more than it holds.
//! The same call renews the slice; [`Cluster::release_slice`] gives its in-flight part
//! back. Per-minute slices (of requests, of estimated tokens) are of one minute of
//! PostgreSQL's clock: the slices of a minute together never exceed the budget.

use std::time::Duration;

use super::Cluster;
use super::error::ClusterError;

/// A kind's cluster-wide budget: at most this many requests in flight at once, at most
/// this many sent in each minute of PostgreSQL's clock, and at most this many estimated
/// tokens sent in each minute, over all nodes together. `None` is no limit.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Budget {
    /// At most this many requests of the kind in flight at once in the cluster.
    pub in_flight: Option<u32>,
    /// At most this many requests of the kind sent in one minute of PostgreSQL's
    /// clock, in the cluster.
    pub per_minute: Option<u32>,
    /// At most this many estimated tokens
    /// ([`Request::tokens`](spool_core::Request::tokens)) of the kind's requests sent in
    /// one minute of PostgreSQL's clock, in the cluster.
    pub tokens_per_minute: Option<u64>,
}

impl Budget {
    /// No limit.
    pub fn new() -> Budget {
        Budget::default()
    }

    /// At most `max` in flight at once.
    #[must_use]
    pub fn in_flight(mut self, max: u32) -> Budget {
        self.in_flight = Some(max);
        self
    }

    /// At most `max` sent per minute.
    #[must_use]
    pub fn per_minute(mut self, max: u32) -> Budget {
        self.per_minute = Some(max);
        self
    }

    /// At most `max` estimated tokens sent per minute.
    #[must_use]
    pub fn tokens_per_minute(mut self, max: u64) -> Budget {
        self.tokens_per_minute = Some(max);
        self
    }
}

/// What a node asks for when it leases (or renews) a slice, and what it uses of the
/// slice it holds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SliceWant {
    /// How many requests it wants in flight now: those in flight plus those waiting.
    pub in_flight: u32,
    /// How many it has in flight now: its slice is never recorded below this, since
    /// they are running whatever the slice says.
    pub in_flight_held: u32,
    /// How many it wants to have sent in the current minute: those sent plus those
    /// waiting.
    pub per_minute: u32,
    /// How many it has sent in `minute`.
    pub sent: u32,
    /// The minute (of a previous [`Slice`]) `sent` and `tokens_sent` count in; the
    /// counts are ignored once PostgreSQL's clock is past that minute.
    pub minute: Option<i64>,
    /// How many estimated tokens it wants to have sent in the current minute: those
    /// sent plus those of the requests waiting.
    pub tokens: u64,
    /// How many estimated tokens it has sent in `minute`.
    pub tokens_sent: u64,
}

/// A node's slice of a kind's budget, as leased or renewed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Slice {
    /// How many requests the node may have in flight: it starts one only while it has
    /// fewer (`None`: the kind has no in-flight budget). May be below what it has in
    /// flight after the budget shrank or the node is above its fair share: it starts
    /// none until it is under.
    pub in_flight: Option<u32>,
    /// How many requests the node may have sent in `minute` (`None`: no per-minute
    /// budget).
    pub per_minute: Option<u32>,
    /// How many estimated tokens the node may have sent in `minute` (`None`: no
    /// tokens-per-minute budget).
    pub tokens: Option<u64>,
    /// The kind's whole tokens-per-minute budget, as read at the lease: a request
    /// estimated above it counts as the whole budget, so it goes alone in a minute.
    pub tokens_budget: Option<u64>,
    /// The minute of PostgreSQL's clock the per-minute parts are for, as minutes since
    /// the Unix epoch.
    pub minute: i64,
    /// How long until that minute ends, by PostgreSQL's clock, when it was leased.
    pub minute_left: Duration,
    /// How long until the slice expires, by PostgreSQL's clock, when it was leased.
    pub expires_in: Duration,
}

/// A node's slice of a kind's budget, as [`Cluster::slices`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SliceStatus {
    /// The node holding it.
    pub node: String,
    /// How many requests it may have in flight, as recorded: at least what it had in
    /// flight at its last renewal.
    pub in_flight: u32,
    /// How many it wanted in flight at its last renewal.
    pub want_in_flight: u32,
    /// The minute of PostgreSQL's clock its count is for, as minutes since the Unix
    /// epoch.
    pub minute: i64,
    /// How many it may send in `minute`, as recorded: at least what it had sent.
    pub per_minute: u32,
    /// How many it wanted to have sent in `minute` at its last renewal.
    pub want_per_minute: u32,
    /// How many estimated tokens it may send in `minute`, as recorded: at least what
    /// it had sent.
    pub tokens: u64,
    /// How many estimated tokens it wanted to have sent in `minute` at its last
    /// renewal.
    pub want_tokens: u64,
    /// Whether it has expired (its in-flight part is free).
    pub expired: bool,
}

/// One other node's slice, as the lease reads it.
struct Other {
    live: bool,
    in_flight: u32,
    want_in_flight: u32,
    minute: i64,
    per_minute: u32,
    want_per_minute: u32,
    tokens: u64,
    want_tokens: u64,
}

/// `kind`, if it is a name.
fn kind_name(kind: &str) -> Result<&str, ClusterError> {
    if kind.is_empty() {
        return Err(ClusterError::Empty { what: "a kind" });
    }
    Ok(kind)
}

/// `node`, if it is a name.
fn node_name(node: &str) -> Result<&str, ClusterError> {
    if node.is_empty() {
        return Err(ClusterError::Empty {
            what: "a node's name",
        });
    }
    Ok(node)
}

/// A count as the tables keep it (at most `i32::MAX`).
fn int(count: u32) -> i32 {
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// A number of tokens as the tables keep it (at most `i64::MAX`).
fn bigint(tokens: u64) -> i64 {
    i64::try_from(tokens).unwrap_or(i64::MAX)
}

/// A count the tables keep, which is never negative.
fn count(value: i32, what: &str) -> Result<u32, ClusterError> {
    u32::try_from(value).map_err(|_| ClusterError::Corrupt(format!("{what} is {value}")))
}

/// A number of tokens the tables keep, which is never negative.
fn token_count(value: i64, what: &str) -> Result<u64, ClusterError> {
    u64::try_from(value).map_err(|_| ClusterError::Corrupt(format!("{what} is {value}")))
}

/// What a node gets of `budget`: what it wants, at most what `others` leave free,
/// and at most `cap` when someone waits.
fn share(budget: u64, others: u64, want: u64, cap: Option<u64>) -> u64 {
    let free = budget.saturating_sub(others);
    want.min(free).min(cap.unwrap_or(u64::MAX))
}

/// [`share`] of a count.
fn share_count(budget: u32, others: u32, want: u32, cap: Option<u32>) -> u32 {
    let got = share(
        budget.into(),
        others.into(),
        want.into(),
        cap.map(u64::from),
    );
    u32::try_from(got).unwrap_or(u32::MAX)
}

impl Cluster {
    /// Sets `kind`'s cluster-wide budget (replacing any before). Slices leased before
    /// keep what they hold until they are renewed.
    ///
    /// # Errors
    /// [`ClusterError::Empty`] for an empty kind; [`ClusterError::Postgres`] if the
    /// write failed.
    pub fn set_budget(&self, kind: &str, budget: Budget) -> Result<(), ClusterError> {
        let kind = kind_name(kind)?;
        let in_flight = budget.in_flight.map(int);
        let per_minute = budget.per_minute.map(int);
        let tokens_per_minute = budget.tokens_per_minute.map(bigint);
        self.run(|client| {
            client.execute(
                "INSERT INTO spool.budgets (kind, in_flight, per_minute, tokens_per_minute)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (kind) DO UPDATE SET in_flight = EXCLUDED.in_flight,
                     per_minute = EXCLUDED.per_minute,
                     tokens_per_minute = EXCLUDED.tokens_per_minute",
                &[&kind, &in_flight, &per_minute, &tokens_per_minute],
            )?;
            Ok(())
        })
    }

    /// `kind`'s cluster-wide budget, if one was set.
    ///
    /// # Errors
    /// [`ClusterError::Empty`] for an empty kind; [`ClusterError::Postgres`] if the
    /// read failed.
    pub fn budget(&self, kind: &str) -> Result<Option<Budget>, ClusterError> {
        let kind = kind_name(kind)?;
        self.run(|client| {
            let row = client.query_opt(
                "SELECT in_flight, per_minute, tokens_per_minute FROM spool.budgets
                 WHERE kind = $1",
                &[&kind],
            )?;
            let Some(row) = row else {
                return Ok(None);
            };
            let in_flight: Option<i32> = row.try_get(0)?;
            let per_minute: Option<i32> = row.try_get(1)?;
            let tokens_per_minute: Option<i64> = row.try_get(2)?;
            let what = format!("`{kind}`'s budget");
            Ok(Some(Budget {
                in_flight: in_flight.map(|v| count(v, &what)).transpose()?,
                per_minute: per_minute.map(|v| count(v, &what)).transpose()?,
                tokens_per_minute: tokens_per_minute
                    .map(|v| token_count(v, &what))
                    .transpose()?,
            }))
        })
    }

    /// Leases (or renews) `node`'s slice of `kind`'s budget, to expire `ttl` from now.
    /// In one transaction holding the budget's row lock: the node gets what it wants,
    /// at most what the other nodes' live slices leave free (an expired slice's in-flight
    /// part is free; a per-minute part counts until its minute ends, expired or not,
    /// since its requests were sent; so does a tokens-per-minute part), and at most its
    /// fair share — the budget divided by
    /// the nodes holding a live slice, rounded up — while another node wants more than
    /// it holds. The slice is recorded as at least what the node holds (in flight, sent
    /// this minute, estimated tokens sent this minute), so the others never get what it is using. A kind with no budget
    /// gives a slice without limits (and records none).
    ///
    /// # Errors
    /// [`ClusterError::Empty`] for an empty kind or node; [`ClusterError::Corrupt`] for a
    /// damaged row; [`ClusterError::Postgres`] if the transaction failed (nothing is
    /// changed then).
    pub fn lease_slice(
        &self,
        node: &str,
        kind: &str,
        want: SliceWant,
        ttl: Duration,
    ) -> Result<Slice, ClusterError> {
        let node = node_name(node)?;
        let kind = kind_name(kind)?;
        let ttl_ms = i64::try_from(ttl.as_millis())
            .map_or(i64::from(i32::MAX), |ms| ms.min(i64::from(i32::MAX)));
        self.run(|client| {
            let mut tx = client.transaction()?;
            let now_ms: i64 = tx
                .query_one("SELECT (extract(epoch FROM now()) * 1000)::bigint", &[])?
                .try_get(0)?;
            let minute = now_ms.div_euclid(60_000);
            let minute_left =
                Duration::from_millis(u64::try_from((minute + 1) * 60_000 - now_ms).unwrap_or(0));
            let expires_in = Duration::from_millis(u64::try_from(ttl_ms).unwrap_or(0));
            let row = tx.query_opt(
                "SELECT in_flight, per_minute, tokens_per_minute FROM spool.budgets
                 WHERE kind = $1 FOR UPDATE",
                &[&kind],
            )?;
            let Some(row) = row else {
                tx.commit()?;
                return Ok(Slice {
                    in_flight: None,
                    per_minute: None,
                    tokens: None,
                    tokens_budget: None,
                    minute,
                    minute_left,
                    expires_in,
                });
            };
            let what = format!("`{kind}`'s budget");
            let budget_in_flight: Option<i32> = row.try_get(0)?;
            let budget_in_flight = budget_in_flight.map(|v| count(v, &what)).transpose()?;
            let budget_per_minute: Option<i32> = row.try_get(1)?;
            let budget_per_minute = budget_per_minute.map(|v| count(v, &what)).transpose()?;
            let budget_tokens: Option<i64> = row.try_get(2)?;
            let budget_tokens = budget_tokens.map(|v| token_count(v, &what)).transpose()?;
            let rows = tx.query(
                "SELECT expires_at > now(), in_flight, want_in_flight, minute, per_minute,
                        want_per_minute, tokens, want_tokens
                 FROM spool.budget_slices WHERE kind = $1 AND node <> $2",
                &[&kind, &node],
            )?;
            let what = format!("a slice of `{kind}`'s budget");
            let others = rows
                .iter()
                .map(|row| {
                    Ok(Other {
                        live: row.try_get(0)?,
                        in_flight: count(row.try_get(1)?, &what)?,
                        want_in_flight: count(row.try_get(2)?, &what)?,
                        minute: row.try_get(3)?,
                        per_minute: count(row.try_get(4)?, &what)?,
                        want_per_minute: count(row.try_get(5)?, &what)?,
                        tokens: token_count(row.try_get(6)?, &what)?,
                        want_tokens: token_count(row.try_get(7)?, &what)?,
                    })
                })
                .collect::<Result<Vec<_>, ClusterError>>()?;
            let live = others.iter().filter(|o| o.live);
            let nodes = u32::try_from(live.clone().count() + 1).unwrap_or(u32::MAX);
            let (sent, tokens_sent) = if want.minute == Some(minute) {
                (want.sent, want.tokens_sent)
            } else {
                (0, 0)
            };

            let in_flight = budget_in_flight.map(|budget| {
                let used: u32 = live.clone().map(|o| o.in_flight).sum();
                let waiting = live.clone().any(|o| o.want_in_flight > o.in_flight);
                let cap = waiting.then(|| budget.div_ceil(nodes));
                share_count(budget, used, want.in_flight, cap)
            });
            let per_minute = budget_per_minute.map(|budget| {
                let this_minute = others.iter().filter(|o| o.minute == minute);
                let used: u32 = this_minute.clone().map(|o| o.per_minute).sum();
                let waiting = this_minute
                    .clone()
                    .any(|o| o.live && o.want_per_minute > o.per_minute);
                let cap = waiting.then(|| budget.div_ceil(nodes));
                share_count(budget, used, want.per_minute.max(sent), cap)
            });
            let tokens = budget_tokens.map(|budget| {
                let this_minute = others.iter().filter(|o| o.minute == minute);
                let used: u64 = this_minute.clone().map(|o| o.tokens).sum();
                let waiting = this_minute
                    .clone()
                    .any(|o| o.live && o.want_tokens > o.tokens);
                let cap = waiting.then(|| budget.div_ceil(u64::from(nodes)));
                share(budget, used, want.tokens.max(tokens_sent), cap)
            });
            let recorded_in_flight = in_flight.map_or(0, |got| got.max(want.in_flight_held));
            let recorded_per_minute = per_minute.map_or(0, |got| got.max(sent));
            let recorded_tokens = tokens.map_or(0, |got| got.max(tokens_sent));
            tx.execute(
                "INSERT INTO spool.budget_slices (kind, node, in_flight, want_in_flight, minute,
                     per_minute, want_per_minute, tokens, want_tokens, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
                     now() + $10::bigint * interval '1 millisecond')
                 ON CONFLICT (kind, node) DO UPDATE SET in_flight = EXCLUDED.in_flight,
                     want_in_flight = EXCLUDED.want_in_flight, minute = EXCLUDED.minute,
                     per_minute = EXCLUDED.per_minute,
                     want_per_minute = EXCLUDED.want_per_minute,
                     tokens = EXCLUDED.tokens, want_tokens = EXCLUDED.want_tokens,
                     expires_at = EXCLUDED.expires_at",
                &[
                    &kind,
                    &node,
                    &int(recorded_in_flight),
                    &int(want.in_flight),
                    &minute,
                    &int(recorded_per_minute),
                    &int(want.per_minute.max(sent)),
                    &bigint(recorded_tokens),
                    &bigint(want.tokens.max(tokens_sent)),
                    &ttl_ms,
                ],
            )?;
            tx.commit()?;
            Ok(Slice {
                in_flight,
                per_minute,
                tokens,
                tokens_budget: budget_tokens,
                minute,
                minute_left,
                expires_in,
            })
        })
    }

    /// Every node's slice of `kind`, by node name, and the current minute of
    /// PostgreSQL's clock (as minutes since the Unix epoch).
    ///
    /// # Errors
    /// [`ClusterError::Empty`] for an empty kind; [`ClusterError::Corrupt`] for a
    /// damaged row; [`ClusterError::Postgres`] if the read failed.
    pub fn slices(&self, kind: &str) -> Result<(Vec<SliceStatus>, i64), ClusterError> {
        let kind = kind_name(kind)?;
        self.run(|client| {
            let mut tx = client.transaction()?;
            let now_ms: i64 = tx
                .query_one("SELECT (extract(epoch FROM now()) * 1000)::bigint", &[])?
                .try_get(0)?;
            let rows = tx.query(
                "SELECT node, in_flight, want_in_flight, minute, per_minute, want_per_minute,
                        tokens, want_tokens, expires_at <= now()
                 FROM spool.budget_slices WHERE kind = $1 ORDER BY node",
                &[&kind],
            )?;
            tx.commit()?;
            let what = format!("a slice of `{kind}`'s budget");
            let slices = rows
                .iter()
                .map(|row| {
                    Ok(SliceStatus {
                        node: row.try_get(0)?,
                        in_flight: count(row.try_get(1)?, &what)?,
                        want_in_flight: count(row.try_get(2)?, &what)?,
                        minute: row.try_get(3)?,
                        per_minute: count(row.try_get(4)?, &what)?,
                        want_per_minute: count(row.try_get(5)?, &what)?,
                        tokens: token_count(row.try_get(6)?, &what)?,
                        want_tokens: token_count(row.try_get(7)?, &what)?,
                        expired: row.try_get(8)?,
                    })
                })
                .collect::<Result<Vec<_>, ClusterError>>()?;
            Ok((slices, now_ms.div_euclid(60_000)))
        })
    }

    /// Gives back the in-flight part of `node`'s slice of `kind` (its requests of the
    /// kind finished first): the slice expires now, and other nodes may take it at
    /// once. Its per-minute parts (requests, tokens) count until their minute ends, as
    /// what it sent does.
    /// Returns whether the node held a slice.
    ///
    /// # Errors
    /// [`ClusterError::Empty`] for an empty kind or node; [`ClusterError::Postgres`] if
    /// the write failed.
    pub fn release_slice(&self, node: &str, kind: &str) -> Result<bool, ClusterError> {
        let node = node_name(node)?;
        let kind = kind_name(kind)?;
        self.run(|client| {
            let changed = client.execute(
                "UPDATE spool.budget_slices SET in_flight = 0, want_in_flight = 0,
                     want_per_minute = 0, want_tokens = 0, expires_at = now()
                 WHERE kind = $1 AND node = $2",
                &[&kind, &node],
            )?;
            Ok(changed == 1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_what_is_wanted_within_what_is_free_and_the_cap() {
        assert_eq!(share(2, 0, 2, None), 2);
        assert_eq!(share(2, 1, 2, None), 1);
        assert_eq!(share(2, 3, 2, None), 0);
        assert_eq!(share(60, 0, 50, Some(20)), 20);
        assert_eq!(share(60, 0, 5, Some(20)), 5);
    }
}
