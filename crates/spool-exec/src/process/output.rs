//! An output stream as captured: its first bytes and its full length, read one pass at
//! a time, and rendered as text with a marker where it was cut.

use std::io::{self, Read};

/// The first bytes of a stream and its full length.
#[derive(Default)]
pub(super) struct Captured {
    kept: Vec<u8>,
    total: u64,
}

/// What one read of an output found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Bytes, and maybe more to come.
    Data,
    /// Nothing for now.
    Dry,
    /// The stream has ended: at its end, or failed (what came is still reported), or
    /// closed before.
    Ended,
}

/// Reads once from a pipe into `into`, keeping the first `cap` bytes. One read a pass,
/// so a stream that never pauses does not starve the others or the stop.
pub(super) fn read_some(
    pipe: &mut Option<impl Read>,
    into: &mut Captured,
    cap: usize,
    buffer: &mut [u8],
) -> Flow {
    let Some(pipe) = pipe else {
        return Flow::Ended;
    };
    match pipe.read(buffer) {
        Ok(0) => Flow::Ended,
        Ok(n) => {
            into.total += n as u64;
            let room = cap.saturating_sub(into.kept.len()).min(n);
            into.kept.extend_from_slice(&buffer[..room]);
            Flow::Data
        }
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Flow::Dry
        }
        Err(_) => Flow::Ended,
    }
}

impl Captured {
    /// The text of the stream, cut with a marker if it was over the cap; and whether it
    /// was.
    pub(super) fn render(self) -> (String, bool) {
        if self.total <= self.kept.len() as u64 {
            return (String::from_utf8_lossy(&self.kept).into_owned(), false);
        }
        let end = char_boundary(&self.kept);
        let more = self.total - end as u64;
        let mut text = String::from_utf8_lossy(&self.kept[..end]).into_owned();
        text.push_str(&format!("\n[… truncated: {more} more bytes]"));
        (text, true)
    }
}

/// Where `bytes` ends without a UTF-8 character cut in two.
fn char_boundary(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=len.min(3) {
        let byte = bytes[len - back];
        if byte < 0x80 {
            break;
        }
        if byte >= 0xC0 {
            let width = match byte {
                0xF0.. => 4,
                0xE0.. => 3,
                _ => 2,
            };
            return if width > back { len - back } else { len };
        }
    }
    len
}
