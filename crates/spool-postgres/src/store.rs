//! The store's handle, [`PgStore`], and its API; the modules beside it do the work.

use std::fmt;
use std::sync::{Arc, Mutex};

#[cfg(doc)]
use spool_core::{DurableNotifier, JournalSink};
use spool_core::{Journal, JournalEntry, Snapshot};
use spool_durable::{
    CheckpointInfo, CrashCounter, Op, SegmentInfo, SinkGroup, StoreSizes, WriteStats,
};

use crate::address::Address;
use crate::error::PgStoreError;
use crate::fence::{application_name, take_lease};
use crate::maker;
use crate::options::PgOptions;
use crate::reader::Reader;
use crate::recover::{journal_from, snapshot_bytes};
use crate::rows::{checkpoint_rows, read_head};
use crate::schema::{prepare, session_id, set_session, take_epoch, try_lock};
use crate::sizes::sizes;
use crate::verify::verify;
use crate::write::{Statements, Writer};
use crate::writer::{Shared, THREAD};

/// The durable store in a PostgreSQL database: checkpoints and the journal since, in
/// the database's `spool` schema.
///
/// Like `spool-store`'s `Store`, a `PgStore` is a [`JournalSink`]: give it to
/// `RuntimeBuilder::journal` (in `spool-runtime`) and the runtime writes to it as it
/// runs; after a crash, [`PgStore::recover`] gives the journal to
/// `RuntimeBuilder::recover`. Clones share one writer thread and its connection, which
/// holds the store's writer lock: one process writes a store at a time. Reads run on a
/// connection of their own and see what is committed; a handle from
/// [`PgStore::connect_read_only`] reads while another process writes, and writes
/// nothing.
///
/// As a sink, a store buffers what is recorded and hands each group (a loop turn) to
/// the writer at [`JournalSink::commit`], through a bounded queue
/// ([`PgOptions::queue_groups`]); the writer commits it — with the groups waiting behind
/// it, in one transaction — and tells the runtime through its [`DurableNotifier`]. The
/// store's own methods ([`append`](PgStore::append),
/// [`write_checkpoint`](PgStore::write_checkpoint)...) wait for their commit. The last
/// clone dropped waits for the writer to commit what was queued and closes the
/// connection.
pub struct PgStore {
    /// The writer: `None` for a read-only handle.
    shared: Option<Arc<Shared>>,
    reader: Arc<Reader>,
    name: Arc<str>,
    /// The shard this handle writes or reads.
    shard: i32,
    /// What the writer wrote since the store was connected.
    written: Arc<Mutex<WriteStats>>,
    /// What this handle, as a sink, recorded since its last commit.
    sink: SinkGroup,
}

/// A clone shares the connections and the writer; as a sink it starts with nothing
/// recorded and no notifier.
impl Clone for PgStore {
    fn clone(&self) -> PgStore {
        PgStore {
            shared: self.shared.clone(),
            reader: Arc::clone(&self.reader),
            name: Arc::clone(&self.name),
            shard: self.shard,
            written: Arc::clone(&self.written),
            sink: SinkGroup::default(),
        }
    }
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("name", &self.name)
            .field("read_only", &self.shared.is_none())
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects as the writer of the store in the database at `url` (a `postgres://`
    /// URL or a `key=value` connection string), with the default [`PgOptions`]: makes
    /// the store's schema in an empty database, takes the writer's lock, and takes the
    /// next epoch (a writer connected before it writes nothing more). TLS is used as
    /// the URL's `sslmode` says (libpq's values; `prefer` by default), the server's
    /// certificate checked against `sslrootcert` or the Mozilla roots.
    ///
    /// # Errors
    /// [`PgStoreError::BadUrl`] for a URL that does not parse, [`PgStoreError::RootCert`]
    /// for an `sslrootcert` that cannot be read, [`PgStoreError::Refused`] if the server
    /// cannot be reached or its certificate is refused, [`PgStoreError::NotAStore`] for a database with
    /// another program's tables or `spool` schema, [`PgStoreError::NewerSchema`] /
    /// [`PgStoreError::OlderSchema`] for a store of another version,
    /// [`PgStoreError::InUse`] if another connection holds the writer's lock,
    /// [`PgStoreError::Corrupt`] if a table or the head row is missing or damaged.
    pub fn connect(url: &str) -> Result<PgStore, PgStoreError> {
        PgStore::connect_with(url, PgOptions::default())
    }

    /// Connects as the writer, with `options`: of the shard [`PgOptions::shard`]
    /// names (its head row made if the shard is new), and in lease mode with
    /// [`PgOptions::lease_epoch`] (no writer's lock; older lease writers of the shard
    /// are ended and the head row takes the lease's epoch).
    ///
    /// # Errors
    /// As [`PgStore::connect`]; in lease mode never [`PgStoreError::InUse`], but
    /// [`PgStoreError::Fenced`] if the shard's epoch is the lease's or newer (a newer
    /// owner exists) and [`PgStoreError::HeadLocked`] if the head row stays locked by
    /// a session that is not an older lease writer for [`PgOptions::connect_timeout`].
    pub fn connect_with(url: &str, options: PgOptions) -> Result<PgStore, PgStoreError> {
        let shard = shard_number(options.shard)?;
        let address = Address::parse(url, options.connect_timeout)?;
        let reader_address = address.clone();
        let mut address = address;
        let epoch = options
            .lease_epoch
            .map(|epoch| {
                i64::try_from(epoch).map_err(|_| {
                    PgStoreError::Unsupported(format!("lease epoch {epoch} is too large"))
                })
            })
            .transpose()?;
        if let Some(epoch) = epoch {
            // What a newer owner of the shard finds this writer's sessions by.
            address
                .config
                .application_name(&application_name(shard, epoch));
        }
        let mut client = address.connect()?;
        set_session(&mut client, options.synchronous_commit)?;
        prepare(&mut client, &address, shard, true)?;
        let head = match epoch {
            Some(epoch) => take_lease(
                &mut client,
                &address.name,
                shard,
                epoch,
                options.connect_timeout,
            )?,
            None => {
                if !try_lock(&mut client, shard)? {
                    return Err(PgStoreError::InUse {
                        what: address.name.clone(),
                    });
                }
                take_epoch(&mut client, shard)?
            }
        };
        let session = session_id(&mut client)?;
        let tail_bytes = crate::history::tail_bytes(&mut client, shard, head)?;
        let statements = Statements::prepare(&mut client)?;
        let name: Arc<str> = Arc::from(address.name.as_str());
        let reader = Arc::new(Reader::new(reader_address, None));
        let groups = options.queue_groups;
        let written = Arc::new(Mutex::new(WriteStats::default()));
        let writer = Writer {
            address,
            crash: CrashCounter::new(options.crash_at),
            options,
            shard,
            lease: epoch.is_some(),
            client: Some(client),
            statements: Some(statements),
            session,
            head,
            kept: None,
            rows: None,
            tail_bytes,
            written: Arc::clone(&written),
            sent: WriteStats::default(),
            committing: false,
            in_doubt: None,
        };
        Ok(PgStore {
            shared: Some(Arc::new(Shared::start(writer, groups, THREAD)?)),
            reader,
            name,
            shard,
            written,
            sink: SinkGroup::default(),
        })
    }

    /// Connects to read only: no writer's lock is taken (reads work while another
    /// process writes the store), and every write is refused
    /// ([`PgStoreError::ReadOnly`]). The schema is never made.
    ///
    /// # Errors
    /// As [`PgStore::connect`] (but never [`PgStoreError::InUse`]), and
    /// [`PgStoreError::NotAStore`] for an empty database.
    pub fn connect_read_only(url: &str) -> Result<PgStore, PgStoreError> {
        PgStore::connect_read_only_with(url, PgOptions::default())
    }

    /// Connects to read only the shard [`PgOptions::shard`] names, waiting at most
    /// [`PgOptions::connect_timeout`] to connect; the other options are for writers.
    ///
    /// # Errors
    /// As [`PgStore::connect_read_only`].
    pub fn connect_read_only_with(url: &str, options: PgOptions) -> Result<PgStore, PgStoreError> {
        let shard = shard_number(options.shard)?;
        let address = Address::parse(url, options.connect_timeout)?;
        let mut client = address.connect()?;
        prepare(&mut client, &address, shard, false)?;
        read_head(&mut client, shard, false)?;
        let name: Arc<str> = Arc::from(address.name.as_str());
        Ok(PgStore {
            shared: None,
            reader: Arc::new(Reader::new(address, Some(client))),
            name,
            shard,
            written: Arc::default(),
            sink: SinkGroup::default(),
        })
    }

    /// The shard this handle writes or reads ([`PgOptions::shard`]).
    pub fn shard(&self) -> u32 {
        self.shard.unsigned_abs()
    }

    /// The database, as `postgres://user@host:port/db`: never with a password.
    pub fn name(&self) -> String {
        self.name.to_string()
    }

    /// The writer, or the refusal of a read-only handle to do `action`.
    fn writer(&self, action: &'static str) -> Result<&Shared, PgStoreError> {
        self.shared
            .as_deref()
            .ok_or_else(|| PgStoreError::ReadOnly {
                what: self.name(),
                action,
            })
    }

    /// As a sink: its group, and the writer that commits it or the refusal of a
    /// read-only handle (see [`spool_durable::journal_sink!`]).
    fn sink_and_writer(&mut self) -> (&mut SinkGroup, Result<&Shared, PgStoreError>) {
        let writer = self
            .shared
            .as_deref()
            .ok_or_else(|| PgStoreError::ReadOnly {
                what: self.name.to_string(),
                action: "committing a group",
            });
        (&mut self.sink, writer)
    }

    /// Has the writer write `op` after everything queued before it, and waits for its
    /// number.
    fn call(&self, op: Op, action: &'static str) -> Result<u64, PgStoreError> {
        self.writer(action)?.call_one(op)
    }

    /// Starts a new journal at `snapshot` (encoded): a checkpoint after which the
    /// journal goes on from `snapshot`. Without history it deletes every checkpoint and
    /// entry before it, whatever [`PgOptions::keep_checkpoints`] says; with history
    /// ([`PgOptions::history`]) the segments before it stay, as retention says.
    /// What [`JournalSink::start`] does. Returns the checkpoint's id.
    ///
    /// # Errors
    /// [`PgStoreError::ReadOnly`] on a read-only handle; [`PgStoreError::Fenced`] if
    /// another writer took over; [`PgStoreError::Unavailable`] if the server was gone
    /// longer than [`PgOptions::retry_for`]; [`PgStoreError::Postgres`] if the write
    /// failed otherwise. Nothing is changed then.
    pub fn start_journal(&self, snapshot: &[u8]) -> Result<u64, PgStoreError> {
        let op = Op::Checkpoint {
            snapshot: snapshot.to_vec(),
            start: true,
        };
        self.call(op, "starting a journal")
    }

    /// Writes a checkpoint: `snapshot` (encoded) is the state after every entry
    /// appended so far. In the same transaction, deletes the checkpoints beyond
    /// [`PgOptions::keep_checkpoints`] and the entries no kept checkpoint needs.
    /// Returns the checkpoint's id.
    ///
    /// # Errors
    /// As [`PgStore::start_journal`].
    pub fn write_checkpoint(&self, snapshot: &[u8]) -> Result<u64, PgStoreError> {
        let op = Op::Checkpoint {
            snapshot: snapshot.to_vec(),
            start: false,
        };
        self.call(op, "writing a checkpoint")
    }

    /// Appends one journal entry in a transaction of its own, durable (as
    /// [`PgOptions::synchronous_commit`] says) before returning. Returns the entry's
    /// sequence number.
    ///
    /// # Errors
    /// [`PgStoreError::Encode`] if the entry cannot be encoded; otherwise as
    /// [`PgStore::start_journal`].
    pub fn append(&self, entry: &JournalEntry) -> Result<u64, PgStoreError> {
        self.call(Op::Entry(entry.clone()), "appending an entry")
    }

    /// The latest checkpoint's snapshot (as [`Journal::start`]) and every entry after
    /// it, in order: what `RuntimeBuilder::recover` goes on from. `None` for a store
    /// with no checkpoint.
    ///
    /// # Errors
    /// [`PgStoreError::Corrupt`] naming what is damaged: a row that does not match its
    /// checksum, an entry or the latest checkpoint missing, a row past the head;
    /// [`PgStoreError::Entry`] for an entry that does not decode,
    /// [`PgStoreError::Snapshot`] for parts that do not make a snapshot.
    pub fn recover(&self) -> Result<Option<Journal>, PgStoreError> {
        let shard = self.shard;
        self.reader.read(|tx| {
            let head = read_head(tx, shard, false)?;
            if head.checkpoint == 0 {
                return Ok(None);
            }
            journal_from(tx, shard, head.checkpoint, head).map(Some)
        })
    }

    /// Like [`recover`](PgStore::recover), from the kept checkpoint `id` (see
    /// [`checkpoints`](PgStore::checkpoints)) rather than the latest.
    ///
    /// # Errors
    /// [`PgStoreError::NoCheckpoint`] if no checkpoint `id` is kept; otherwise as
    /// [`recover`](PgStore::recover).
    pub fn recover_from(&self, id: u64) -> Result<Journal, PgStoreError> {
        let shard = self.shard;
        self.reader.read(|tx| {
            let head = read_head(tx, shard, false)?;
            if id == 0 || id > head.checkpoint {
                return Err(PgStoreError::NoCheckpoint(id));
            }
            journal_from(tx, shard, id, head)
        })
    }

    /// The latest checkpoint's snapshot, decoded. `None` for a store with no
    /// checkpoint.
    ///
    /// # Errors
    /// As [`recover`](PgStore::recover), and [`PgStoreError::Snapshot`] if the bytes
    /// are not a snapshot this build reads.
    pub fn latest_snapshot(&self) -> Result<Option<Snapshot>, PgStoreError> {
        let shard = self.shard;
        self.reader.read(|tx| {
            let head = read_head(tx, shard, false)?;
            if head.checkpoint == 0 {
                return Ok(None);
            }
            let bytes = snapshot_bytes(tx, shard, head.checkpoint, head)?;
            Snapshot::decode(&bytes)
                .map(Some)
                .map_err(PgStoreError::Snapshot)
        })
    }

    /// The checkpoints kept, oldest first.
    ///
    /// # Errors
    /// [`PgStoreError::Corrupt`] for a row that does not match its checksum or is past
    /// the head; [`PgStoreError::Postgres`] if the read failed.
    pub fn checkpoints(&self) -> Result<Vec<CheckpointInfo>, PgStoreError> {
        let shard = self.shard;
        self.reader.read(|tx| {
            let head = read_head(tx, shard, false)?;
            let rows = checkpoint_rows(tx, shard, head)?;
            let mut infos = Vec::with_capacity(rows.len());
            for row in rows {
                let after: i64 = tx
                    .query_one(
                        "SELECT count(*) FROM spool.entries WHERE shard = $1 AND seq > $2",
                        &[&shard, &(row.last_seq as i64)],
                    )?
                    .try_get(0)?;
                let mut info = CheckpointInfo::default();
                info.id = row.id;
                info.after_entry = row.last_seq;
                info.snapshot_bytes = row.body.len() as u64;
                info.entries_after = u64::try_from(after).unwrap_or(0);
                infos.push(info);
            }
            Ok(infos)
        })
    }

    /// The segments of history kept, oldest first: each kept checkpoint, the wall time
    /// it was written, and its entries up to the next checkpoint (the latest's up to the
    /// last entry). [`recover_from`](PgStore::recover_from) reads the history from any
    /// of them to the last entry. A read-only handle reads them while a writer writes.
    ///
    /// # Errors
    /// [`PgStoreError::Corrupt`] for a row that does not match its checksum or is past
    /// the head; [`PgStoreError::Postgres`] if the read failed.
    pub fn segments(&self) -> Result<Vec<SegmentInfo>, PgStoreError> {
        let shard = self.shard;
        self.reader.read(|tx| crate::history::segments(tx, shard))
    }

    /// What the store holds now: entries, checkpoints, and its tables' size.
    ///
    /// # Errors
    /// [`PgStoreError::Postgres`] if the read failed.
    pub fn sizes(&self) -> Result<StoreSizes, PgStoreError> {
        self.reader.read(|tx| sizes(tx, self.shard))
    }

    /// The name of what made the store, as recorded by
    /// [`claim_maker`](PgStore::claim_maker); `None` if none is. Reading it writes
    /// nothing.
    ///
    /// # Errors
    /// [`PgStoreError::Postgres`] if the read failed.
    pub fn maker(&self) -> Result<Option<String>, PgStoreError> {
        self.reader.read(|tx| maker::maker(tx))
    }

    /// Records `maker` as what made the store, unless a maker is recorded already:
    /// returns the maker recorded after the call. Durable when this returns.
    ///
    /// # Errors
    /// [`PgStoreError::Unsupported`] for an empty (or blank) name,
    /// [`PgStoreError::ReadOnly`] on a read-only handle, [`PgStoreError::Refused`] if
    /// the server cannot be reached, [`PgStoreError::Postgres`] if the write failed
    /// (nothing is changed then).
    pub fn claim_maker(&self, maker: &str) -> Result<String, PgStoreError> {
        // On a connection of its own: the record is the database's, not the journal's,
        // and is made once, so it needs neither the writer's queue nor its connection
        // (which may be between two tries).
        self.writer("recording the maker")?;
        maker::claim(&mut self.reader.address().connect()?, maker)
    }

    /// What this handle's store was given and wrote since it was connected (nothing,
    /// for a read-only handle).
    pub fn write_stats(&self) -> WriteStats {
        self.written
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Checks the whole store: every row against its checksum, no entry missing or
    /// past the head, the latest checkpoint where the head row says, and every kept
    /// checkpoint's journal readable as [`recover_from`](PgStore::recover_from) reads
    /// it. Reads everything: for tests and tools.
    ///
    /// # Errors
    /// [`PgStoreError::Corrupt`] naming the first problem found, or as
    /// [`recover`](PgStore::recover).
    pub fn verify(&self) -> Result<(), PgStoreError> {
        self.reader.read(|tx| verify(tx, self.shard))
    }
}

spool_durable::journal_sink!(PgStore);

/// `shard` as the tables keep it.
fn shard_number(shard: u32) -> Result<i32, PgStoreError> {
    i32::try_from(shard)
        .map_err(|_| PgStoreError::Unsupported(format!("shard {shard} is too large")))
}
