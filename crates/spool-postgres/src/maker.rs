//! What made a store: a name its maker records once, in `spool.meta` under the key
//! `maker`, so that a program given a store another program made can say so instead of
//! running it.

use postgres::GenericClient;

use crate::error::PgStoreError;
use crate::schema::meta_value;

/// The key the maker is recorded under.
const MAKER: &str = "maker";

/// The maker recorded in the store, if any.
pub(crate) fn maker(client: &mut impl GenericClient) -> Result<Option<String>, PgStoreError> {
    Ok(meta_value(client, MAKER)?)
}

/// Records `name` as the maker unless a maker is recorded already, in one transaction;
/// returns the maker recorded after it.
pub(crate) fn claim(client: &mut postgres::Client, name: &str) -> Result<String, PgStoreError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(PgStoreError::Unsupported(
            "a store's maker must be named: the name given is empty".to_owned(),
        ));
    }
    let mut tx = client.transaction()?;
    tx.execute(
        "INSERT INTO spool.meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        &[&MAKER, &name],
    )?;
    let found = meta_value(&mut tx, MAKER)?;
    tx.commit()?;
    Ok(found.unwrap_or_else(|| name.to_owned()))
}
