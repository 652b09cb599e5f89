//! An idempotency key's fingerprint across restarts: a key reused for a different
//! request is refused by a runtime recovered from its store, whether the store went
//! on from a checkpoint (the fingerprint in its header) or replayed the journal.

use spool_core::{Fingerprint, KeyedSubmission, NewTask};
use spool_runtime::Keyed;
use spool_store::Store;

use crate::tasks::{Stopper, Worker, builder, registry};

fn keyed(name: &str, request: &str) -> NewTask {
    NewTask::new(Worker::new(name, 2, None))
        .key("order-7")
        .fingerprint(Fingerprint::of(request.as_bytes()))
}

/// What a keyed submission came to: `Submitted(id)`, `Existing(id)` or `Reused(id)`.
fn outcome(keyed: &Keyed) -> String {
    match &keyed.outcome {
        KeyedSubmission::Submitted(s) => format!("Submitted({})", s.id),
        KeyedSubmission::Existing { record, .. } => format!("Existing({})", record.task),
        KeyedSubmission::Reused { record, .. } => format!("Reused({})", record.task),
        other => format!("{other:?}"),
    }
}

fn across_a_restart(checkpoint_every: Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fingerprints.spool");
    let store = Store::open(&path).unwrap();
    let mut first = builder(&Stopper::default(), 50, false).journal(store);
    if let Some(n) = checkpoint_every {
        first = first.checkpoint_every(n);
    }
    let mut runtime = first.build();
    let submitted = runtime.submit_keyed(keyed("bob", "a")).unwrap();
    assert_eq!(outcome(&submitted), "Submitted(1)");
    runtime.run_until_idle();
    // A later submission, so that a checkpoint is taken after the keyed task ended.
    runtime
        .submit(NewTask::new(Worker::new("eve", 1, None)))
        .unwrap();
    runtime.run_until_idle();
    assert_eq!(runtime.journal_error(), None);
    drop(runtime);

    let store = Store::open(&path).unwrap();
    let journal = store.recover().unwrap().expect("a journal");
    let mut runtime = builder(&Stopper::default(), 50, false)
        .recover(&journal, &registry())
        .unwrap()
        .journal(store)
        .build();
    let other = runtime.submit_keyed(keyed("mallory", "b")).unwrap();
    assert_eq!(outcome(&other), "Reused(1)");
    assert!(other.holder_state.is_some_and(|s| s.is_ok()));
    let same = runtime.submit_keyed(keyed("bob", "a")).unwrap();
    assert_eq!(outcome(&same), "Existing(1)");
    assert_eq!(runtime.scheduler().stats().submitted, 2, "nothing new ran");
}

#[test]
fn a_reused_key_is_refused_after_a_restart_from_the_journal() {
    across_a_restart(None);
}

#[test]
fn a_reused_key_is_refused_after_a_restart_from_a_checkpoint() {
    across_a_restart(Some(1));
}
