//! The order a backend reads journal entries back in, checked the same on every
//! backend: each entry after a checkpoint, numbered one after another, up to the last
//! one the head row says was committed.

/// Checks the sequence numbers of the entries read after a checkpoint. Each error is
/// the words of a [`DurableError::Corrupt`](crate::DurableError::Corrupt), naming the
/// entry.
#[derive(Debug)]
pub struct EntrySequence {
    /// The number the next entry must have.
    expected: u64,
    /// The last entry the head row says was committed.
    last: u64,
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
    /// What is wrong: an entry past the last committed, one missing before `seq`, or
    /// `seq` out of order.
    pub fn take(&mut self, seq: u64) -> Result<(), String> {
        if seq > self.last {
            return Err(format!(
                "journal entry {seq} is past the last one committed ({})",
                self.last
            ));
        }
        if seq > self.expected {
            return Err(format!(
                "journal entry {} is missing (the next kept is {seq})",
                self.expected
            ));
        }
        if seq < self.expected {
            return Err(format!(
                "journal entry {seq} is out of order (after entry {})",
                self.expected - 1
            ));
        }
        self.expected += 1;
        Ok(())
    }

    /// Says that every entry was read.
    ///
    /// # Errors
    /// The entries up to the last committed that were not read.
    pub fn finish(&self) -> Result<(), String> {
        let expected = self.expected;
        if expected < self.last {
            Err(format!(
                "journal entries {expected} to {}, the last committed, are missing",
                self.last
            ))
        } else if expected == self.last {
            Err(format!(
                "journal entry {expected}, the last committed, is missing"
            ))
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
        assert_eq!(run.take(4), Ok(()));
        assert_eq!(
            run.take(4),
            Err("journal entry 4 is out of order (after entry 4)".to_owned())
        );
        assert_eq!(
            run.take(6),
            Err("journal entry 5 is missing (the next kept is 6)".to_owned())
        );
        assert_eq!(
            run.take(7),
            Err("journal entry 7 is past the last one committed (6)".to_owned())
        );
        assert_eq!(
            run.finish(),
            Err("journal entries 5 to 6, the last committed, are missing".to_owned())
        );
        assert_eq!(run.take(5), Ok(()));
        assert_eq!(
            run.finish(),
            Err("journal entry 6, the last committed, is missing".to_owned())
        );
        assert_eq!(run.take(6), Ok(()));
        assert_eq!(run.finish(), Ok(()));
        assert_eq!(EntrySequence::new(6, 6).finish(), Ok(()));
    }
}
