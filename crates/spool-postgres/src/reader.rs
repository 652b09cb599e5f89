//! The reading connection of a store: every read runs in a read-only transaction of
//! its own at `REPEATABLE READ`, so the head row and the rows it reads are of one
//! moment while the writer goes on writing.

use std::sync::{Mutex, MutexGuard};

use postgres::{Client, IsolationLevel, Transaction};

use crate::address::Address;
use crate::error::PgStoreError;
use crate::write::is_lost;

/// A connection for reads, made when first needed and again after it is lost.
pub(crate) struct Reader {
    address: Address,
    client: Mutex<Option<Client>>,
}

impl Reader {
    /// A reader of the store at `address`, with `client` connected already (or none).
    pub(crate) fn new(address: Address, client: Option<Client>) -> Reader {
        Reader {
            address,
            client: Mutex::new(client),
        }
    }

    /// The store's address.
    pub(crate) fn address(&self) -> &Address {
        &self.address
    }

    fn lock(&self) -> MutexGuard<'_, Option<Client>> {
        // A panic while the lock was held dropped its transaction, which rolled back.
        self.client
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `read` in a read-only transaction; a connection found lost is made again
    /// and `read` run once more.
    pub(crate) fn read<T>(
        &self,
        read: impl Fn(&mut Transaction<'_>) -> Result<T, PgStoreError>,
    ) -> Result<T, PgStoreError> {
        let mut client = self.lock();
        let mut tries = 0;
        loop {
            tries += 1;
            if client.as_ref().is_none_or(Client::is_closed) {
                *client = Some(self.address.connect()?);
            }
            let Some(connected) = client.as_mut() else {
                continue;
            };
            match run(connected, &read) {
                Err(PgStoreError::Postgres(e)) if is_lost(&e) && tries < 2 => *client = None,
                Err(PgStoreError::Postgres(e)) if is_lost(&e) => {
                    *client = None;
                    return Err(PgStoreError::Postgres(e));
                }
                other => return other,
            }
        }
    }
}

fn run<T>(
    client: &mut Client,
    read: &impl Fn(&mut Transaction<'_>) -> Result<T, PgStoreError>,
) -> Result<T, PgStoreError> {
    let mut tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()?;
    let value = read(&mut tx)?;
    tx.commit()?;
    Ok(value)
}
