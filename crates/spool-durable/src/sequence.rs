//! The order a backend reads journal entries back in, checked the same on every
//! backend: each entry after a checkpoint, numbered one after another, up to the last
//! one the head row says was committed.

/// Checks the sequence numbers of the entries read after a checkpoint.
#[derive(Debug)]
pub struct EntrySequence {
    /// The number the next entry must have.
    expected: u64,
    /// The last entry the head row says was committed.
    last: u64,
}

/// What is wrong with the entries read: the words of a
/// [`DurableError::Corrupt`](crate::DurableError::Corrupt), naming the entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SequenceError {
    /// An entry past the last committed.
    #[error("journal entry {seq} is past the last one committed ({last})")]
    PastLast {
        /// The entry read.
        seq: u64,
        /// The last committed.
        last: u64,
    },
    /// An entry missing before the one read.
    #[error("journal entry {missing} is missing (the next kept is {seq})")]
    Missing {
        /// The entry that should have come.
        missing: u64,
        /// The entry read.
        seq: u64,
    },
    /// An entry read out of order.
    #[error("journal entry {seq} is out of order (after entry {after})")]
    OutOfOrder {
        /// The entry read.
        seq: u64,
        /// The entry before it.
        after: u64,
    },
    /// Entries up to the last committed that were not read.
    #[error("{}", missing_tail(*from, *last))]
    MissingTail {
        /// The first not read.
        from: u64,
        /// The last committed.
        last: u64,
    },
}

/// The words of [`SequenceError::MissingTail`].
fn missing_tail(from: u64, last: u64) -> String {
    if from < last {
        format!("journal entries {from} to {last}, the last committed, are missing")
    } else {
        format!("journal entry {from}, the last committed, is missing")
    }
}

impl EntrySequence {
    /// Entries after entry `after` (the checkpoint's last), up to `last` committed.
    pub fn new(after: u64, last: u64) -> EntrySequence {
        EntrySequence {
            expected: after + 1,
            last,
        }
    }

    /// Takes the next entry read, numbered `seq`.
    ///
    /// # Errors
    /// A [`SequenceError`]: an entry past the last committed, one missing before
    /// `seq`, or `seq` out of order.
    pub fn take(&mut self, seq: u64) -> Result<(), SequenceError> {
        let last = self.last;
        if seq > last {
            return Err(SequenceError::PastLast { seq, last });
        }
        if seq > self.expected {
            return Err(SequenceError::Missing {
                missing: self.expected,
                seq,
            });
        }
        if seq < self.expected {
            return Err(SequenceError::OutOfOrder {
                seq,
                after: self.expected - 1,
            });
        }
        self.expected += 1;
        Ok(())
    }

    /// Says that every entry was read.
    ///
    /// # Errors
    /// [`SequenceError::MissingTail`]: entries up to the last committed were not read.
    pub fn finish(&self) -> Result<(), SequenceError> {
        if self.expected <= self.last {
            Err(SequenceError::MissingTail {
                from: self.expected,
                last: self.last,
            })
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way a run of numbers can be wrong is said, naming the entry.
    #[test]
    fn each_fault_names_the_entry() {
        let mut run = EntrySequence::new(3, 6);
        assert_eq!(run.take(4).map_err(|e| e.to_string()), Ok(()));
        assert_eq!(
            run.take(4).map_err(|e| e.to_string()),
            Err("journal entry 4 is out of order (after entry 4)".to_owned())
        );
        assert_eq!(
            run.take(6).map_err(|e| e.to_string()),
            Err("journal entry 5 is missing (the next kept is 6)".to_owned())
        );
        assert_eq!(
            run.take(7).map_err(|e| e.to_string()),
            Err("journal entry 7 is past the last one committed (6)".to_owned())
        );
        assert_eq!(
            run.finish().map_err(|e| e.to_string()),
            Err("journal entries 5 to 6, the last committed, are missing".to_owned())
        );
        assert_eq!(run.take(5).map_err(|e| e.to_string()), Ok(()));
        assert_eq!(
            run.finish().map_err(|e| e.to_string()),
            Err("journal entry 6, the last committed, is missing".to_owned())
        );
        assert_eq!(run.take(6).map_err(|e| e.to_string()), Ok(()));
        assert_eq!(run.finish().map_err(|e| e.to_string()), Ok(()));
        assert_eq!(
            EntrySequence::new(6, 6).finish().map_err(|e| e.to_string()),
            Ok(())
        );
    }
}
