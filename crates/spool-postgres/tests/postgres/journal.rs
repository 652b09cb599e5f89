//! Writing and reading back a journal: through the sink and the store's own methods.

use spool_postgres::PgStore;

use crate::common::{database, entry};

/// Entries appended after a start, read back after the store is connected again.
#[test]
fn appended_entries_are_recovered_after_reconnecting() {
    let url = database("appended_entries_recovered");
    let store = PgStore::connect(&url).expect("connects");
    assert_eq!(store.recover().expect("reads"), None);
    assert_eq!(store.start_journal(b"start").expect("starts"), 1);
    assert_eq!(store.append(&entry(1)).expect("appends"), 1);
    assert_eq!(store.append(&entry(2)).expect("appends"), 2);
    drop(store);
    let store = PgStore::connect(&url).expect("connects again");
    let journal = store.recover().expect("reads").expect("a journal");
    assert_eq!(journal.start, b"start");
    assert_eq!(journal.entries, vec![entry(1), entry(2)]);
    store.verify().expect("the store checks out");
}
