//! Deriving the demo's numbers from the run's seed: every latency, 429, question and
//! search figure is a function of the seed and of what it concerns, never of the order
//! in which threads happen to run.

use spool_core::SeededRng;

/// Mixes a seed with a value into a new, well-spread seed.
pub(crate) fn mix(seed: u64, value: u64) -> u64 {
    SeededRng::new(seed ^ value.wrapping_mul(0xd6e8_feb8_6659_fd93)).next_u64()
}

/// FNV-1a, to turn a text into a seed.
pub(crate) fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
