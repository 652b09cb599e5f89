//! Bad bytes: more than 100,000 inputs made from real encoded snapshots — truncated
//! at every length, every bit flipped, several bits flipped, random bytes, random
//! payloads behind a valid header, every other format version, oversized and wrong
//! length fields, trailing bytes, and payloads mutated with the checksum recomputed so
//! that postcard and the consistency checks see them. None panics; each is a typed
//! `DecodeError` (the exact one where the input was built to cause it), or — for a
//! mutated payload that still reads — a snapshot that restores or fails with a typed
//! `RestoreError`.

use std::panic::{AssertUnwindSafe, catch_unwind};

use spool::{
    Config, DecodeError, FORMAT_VERSION, HEADER_LEN, MAGIC, MAX_PAYLOAD, PolicyChoice, Scheduler,
    SeededRng, Snapshot,
};

use crate::round_trip::{
    backoff_graph, children_graph, gates_graph, mixed_graph, requests_graph, retention_graph,
    slots_graph,
};
use crate::tasks::registry;

/// Real encoded snapshots, small to large, by name.
fn sources() -> Vec<(&'static str, Vec<u8>)> {
    let encode = |s: &Scheduler| s.snapshot().unwrap().encode().unwrap();
    vec![
        ("empty", encode(&Scheduler::new(Config::new()))),
        ("requests", encode(requests_graph().core())),
        ("children", encode(children_graph().core())),
        ("slots", encode(slots_graph().core())),
        ("gates", encode(gates_graph().core())),
        ("backoff", encode(backoff_graph().core())),
        ("retention", encode(retention_graph().core())),
        ("mixed", encode(mixed_graph(PolicyChoice::FairShare).core())),
    ]
}

/// What became of one input.
#[derive(Debug, PartialEq)]
enum Fate {
    /// `decode` returned this error.
    Rejected(DecodeError),
    /// It decoded, and `restore` said this (`Ok` as `None`).
    Decoded(Option<String>),
}

/// Decodes `bytes` (and restores what decodes, and snapshots what restores), catching
/// a panic as `Err` with the input's description.
fn fate(bytes: &[u8]) -> Result<Fate, String> {
    catch_unwind(AssertUnwindSafe(|| match Snapshot::decode(bytes) {
        Err(error) => Fate::Rejected(error),
        Ok(snapshot) => {
            let _ = snapshot.rows();
            match Scheduler::restore(&snapshot, &registry()) {
                Ok(restored) => {
                    // A restored scheduler lists and snapshots itself without a panic.
                    let _ = restored.tasks().count();
                    let _ = restored.queue_state();
                    let _ = restored.snapshot().map(|s| s.encode());
                    Fate::Decoded(None)
                }
                Err(error) => Fate::Decoded(Some(error.to_string())),
            }
        }
    }))
    .map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic".to_owned())
    })
}

/// Tallies the inputs and keeps the first few that panicked or were not what was
/// expected.
#[derive(Default)]
struct Tally {
    inputs: u64,
    problems: Vec<String>,
}

impl Tally {
    /// Feeds one input; `expect` judges its fate. Returns whether it decoded.
    fn feed(
        &mut self,
        what: &dyn Fn() -> String,
        bytes: &[u8],
        expect: impl Fn(&Fate) -> bool,
    ) -> bool {
        self.inputs += 1;
        let fate = fate(bytes);
        let decoded = matches!(fate, Ok(Fate::Decoded(_)));
        let problem = match fate {
            Err(panic) => Some(format!("PANIC `{panic}`")),
            Ok(fate) if !expect(&fate) => Some(format!("unexpected {fate:?}")),
            Ok(_) => None,
        };
        if let Some(problem) = problem {
            if self.problems.len() < 20 {
                let head: Vec<String> = bytes.iter().take(64).map(|b| format!("{b:02x}")).collect();
                self.problems.push(format!(
                    "{}: {problem} ({} bytes: {}..)",
                    what(),
                    bytes.len(),
                    head.join("")
                ));
            } else if self.problems.len() == 20 {
                self.problems.push("...".to_owned());
            }
        }
        decoded
    }

    /// Feeds one input whose error is known exactly.
    fn exact(&mut self, what: &dyn Fn() -> String, bytes: &[u8], expected: DecodeError) {
        let _ = self.feed(what, bytes, |fate| {
            *fate == Fate::Rejected(expected.clone())
        });
    }

    fn assert_clean(&self, name: &str) {
        eprintln!("{name}: {} inputs", self.inputs);
        assert!(
            self.problems.is_empty(),
            "{name}: {} of {} inputs went wrong:\n{}",
            self.problems.len(),
            self.inputs,
            self.problems.join("\n")
        );
    }
}

/// Any typed error of `decode`, or a restore that went either way without a panic.
fn typed(fate: &Fate) -> bool {
    match fate {
        Fate::Rejected(error) => !error.to_string().is_empty(),
        Fate::Decoded(_) => true,
    }
}

/// Only errors of the payload: the envelope was made valid.
fn payload_error(fate: &Fate) -> bool {
    matches!(
        fate,
        Fate::Rejected(DecodeError::Malformed(_) | DecodeError::Invalid(_)) | Fate::Decoded(_)
    )
}

/// CRC-32 (IEEE, as crc32fast computes it), so the tests can make checksums right.
fn crc(payload: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u32; 256];
        for (n, entry) in table.iter_mut().enumerate() {
            let mut c = n as u32;
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *entry = c;
        }
        table
    });
    !payload.iter().fold(!0u32, |c, b| {
        table[((c ^ u32::from(*b)) & 0xff) as usize] ^ (c >> 8)
    })
}

/// The checksum above is the one in real snapshots' headers.
#[test]
fn the_checksum_is_crc32_of_the_payload() {
    for (name, bytes) in sources() {
        assert_eq!(
            crc(&bytes[HEADER_LEN..]).to_le_bytes(),
            bytes[18..22],
            "{name}"
        );
        assert_eq!(bytes[..8], MAGIC);
        // None of them has budgets or agents' shares: version 5, as before version 6.
        assert_eq!(bytes[8..10], 5u16.to_le_bytes(), "{name}");
        assert_eq!(
            bytes[10..18],
            ((bytes.len() - HEADER_LEN) as u64).to_le_bytes()
        );
    }
}

/// The format version a snapshot's header says it was written as.
pub(crate) fn written_version(bytes: &[u8]) -> u16 {
    u16::from_le_bytes([bytes[8], bytes[9]])
}

/// The envelope around `payload`, with its true length and checksum.
pub(crate) fn envelope(version: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn with_length(bytes: &[u8], length: u64) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[10..18].copy_from_slice(&length.to_le_bytes());
    out
}

/// The exact error of a valid snapshot with one bit flipped.
fn bit_flip_error(original: &[u8], flipped: &[u8], byte: usize) -> DecodeError {
    let payload_len = (original.len() - HEADER_LEN) as u64;
    match byte {
        0..8 => DecodeError::BadMagic,
        8..10 => {
            let found = u16::from_le_bytes([flipped[8], flipped[9]]);
            if found == 2 {
                // Version 2 is read with an empty schedule table appended: a version 3
                // payload (here with none) then leaves that table's bytes over.
                DecodeError::Malformed("6 bytes are left over after a version 2 payload".to_owned())
            } else if found == 4 {
                // Version 4 is read with no fork records and decisions appended: a
                // version 5 payload then leaves its own (empty) ones over.
                DecodeError::Malformed("2 bytes are left over after a version 4 payload".to_owned())
            } else if found > FORMAT_VERSION {
                DecodeError::NewerVersion {
                    found,
                    supported: FORMAT_VERSION,
                }
            } else if found == 0 {
                DecodeError::UnknownVersion { found }
            } else {
                DecodeError::OlderVersion {
                    found,
                    supported: FORMAT_VERSION,
                }
            }
        }
        10..18 => {
            let length = u64::from_le_bytes(flipped[10..18].try_into().unwrap());
            if length > MAX_PAYLOAD {
                DecodeError::TooLarge {
                    length,
                    max: MAX_PAYLOAD,
                }
            } else if length > payload_len {
                DecodeError::Truncated {
                    needed: HEADER_LEN as u64 + length,
                    got: original.len() as u64,
                }
            } else {
                DecodeError::TrailingBytes {
                    extra: payload_len - length,
                }
            }
        }
        _ => DecodeError::Corrupt {
            found: crc(&flipped[HEADER_LEN..]),
            expected: u32::from_le_bytes(flipped[18..22].try_into().unwrap()),
        },
    }
}

/// With `SPOOL_FUZZ_CORPUS` set to a directory, writes the source snapshots there as
/// seeds for the `decode_snapshot` fuzz target (see fuzz/README.md); otherwise does
/// nothing.
#[test]
fn writes_the_fuzz_corpus_when_asked() {
    let Some(dir) = std::env::var_os("SPOOL_FUZZ_CORPUS") else {
        return;
    };
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in sources() {
        std::fs::write(std::path::Path::new(&dir).join(name), bytes).unwrap();
    }
}

/// Truncated at every length: `Truncated` with exactly what was needed and present.
#[test]
fn every_truncation_is_truncated() {
    let mut tally = Tally::default();
    for (name, bytes) in sources() {
        for n in 0..bytes.len() {
            let needed = if n < HEADER_LEN {
                HEADER_LEN as u64
            } else {
                bytes.len() as u64
            };
            let expected = DecodeError::Truncated {
                needed,
                got: n as u64,
            };
            tally.exact(&|| format!("{name} cut to {n}"), &bytes[..n], expected);
        }
    }
    tally.assert_clean("truncations");
    // A cut header: 5 and 21 of its 22 bytes.
    let bytes = &sources()[0].1;
    assert_eq!(
        Snapshot::decode(&bytes[..5]),
        Err(DecodeError::Truncated { needed: 22, got: 5 })
    );
    assert_eq!(
        Snapshot::decode(&bytes[..21]),
        Err(DecodeError::Truncated {
            needed: 22,
            got: 21
        })
    );
    assert!(tally.inputs > 6_000, "{} inputs", tally.inputs);
}

/// Every bit of the small snapshots flipped, and 3,000 random bits of each large one:
/// the exact error by where the bit is (magic, version, length, checksum, payload).
#[test]
fn every_single_bit_flip_is_the_exact_error() {
    let mut tally = Tally::default();
    let mut rng = SeededRng::new(11);
    for (name, bytes) in sources() {
        let bits = bytes.len() * 8;
        let positions: Vec<usize> = if bits <= 40_000 {
            (0..bits).collect()
        } else {
            (0..3_000)
                .map(|_| rng.below(bits as u64) as usize)
                .collect()
        };
        for bit in positions {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let expected = bit_flip_error(&bytes, &flipped, bit / 8);
            tally.exact(&|| format!("{name} bit {bit} flipped"), &flipped, expected);
        }
    }
    tally.assert_clean("single bit flips");
    assert!(tally.inputs > 40_000, "{} inputs", tally.inputs);
}

/// 2 to 16 random bits flipped anywhere, 12,000 times: a typed error, never a panic.
#[test]
fn multiple_bit_flips_are_typed_errors() {
    let mut tally = Tally::default();
    let mut rng = SeededRng::new(12);
    let sources = sources();
    for i in 0..12_000 {
        let (name, bytes) = &sources[i % sources.len()];
        let mut flipped = bytes.clone();
        let flips = 2 + rng.below(15);
        let mut at = Vec::new();
        for _ in 0..flips {
            let bit = rng.below(bytes.len() as u64 * 8) as usize;
            flipped[bit / 8] ^= 1 << (bit % 8);
            at.push(bit);
        }
        let changed = flipped != *bytes;
        let _ = tally.feed(
            &|| format!("{name} bits {at:?} flipped"),
            &flipped,
            |fate| {
                if changed {
                    matches!(fate, Fate::Rejected(_))
                } else {
                    typed(fate)
                }
            },
        );
    }
    tally.assert_clean("multiple bit flips");
}

/// Random bytes of random lengths (10,000), and random payloads behind a valid header
/// with the right length: with the right checksum (12,000; postcard reads garbage), and
/// with a wrong one (`Corrupt`, exactly).
#[test]
fn random_bytes_are_typed_errors() {
    let mut tally = Tally::default();
    let mut rng = SeededRng::new(13);
    for i in 0..10_000 {
        let len = rng.below(if i % 10 == 0 { 4_000 } else { 64 }) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        let _ = tally.feed(&|| format!("random bytes #{i}"), &bytes, |fate| {
            matches!(fate, Fate::Rejected(_))
        });
    }
    for i in 0..12_000 {
        let len = rng.below(if i % 10 == 0 { 2_000 } else { 120 }) as usize;
        let payload: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        let _ = tally.feed(
            &|| format!("random payload #{i}"),
            &envelope(FORMAT_VERSION, &payload),
            payload_error,
        );
        let mut wrong = envelope(FORMAT_VERSION, &payload);
        let expected = u32::from_le_bytes(wrong[18..22].try_into().unwrap()) ^ 0x8000_0001;
        wrong[18..22].copy_from_slice(&expected.to_le_bytes());
        if i % 6 == 0 {
            tally.exact(
                &|| format!("random payload #{i}, wrong checksum"),
                &wrong,
                DecodeError::Corrupt {
                    found: crc(&payload),
                    expected,
                },
            );
        }
    }
    tally.assert_clean("random bytes");
}

/// Every format version but ours on a real snapshot: `NewerVersion` above it,
/// `UnknownVersion` for 0; versions 2 to 4, which this build still reads, with
/// a newer payload wrongly labeled and with real older payloads.
#[test]
fn every_other_version_is_refused_exactly() {
    let mut tally = Tally::default();
    let bytes = &sources()[1].1;
    for version in 0..=u16::MAX {
        // Every version this build reads is read (an older label on a newer payload
        // is checked below).
        if (2..=FORMAT_VERSION).contains(&version) {
            continue;
        }
        let mut other = bytes.clone();
        other[8..10].copy_from_slice(&version.to_le_bytes());
        let expected = if version > FORMAT_VERSION {
            DecodeError::NewerVersion {
                found: version,
                supported: FORMAT_VERSION,
            }
        } else if version == 0 {
            DecodeError::UnknownVersion { found: version }
        } else {
            DecodeError::OlderVersion {
                found: version,
                supported: FORMAT_VERSION,
            }
        };
        tally.exact(&|| format!("version {version}"), &other, expected);
    }
    tally.assert_clean("versions");
    let mut two = bytes.clone();
    two[8..10].copy_from_slice(&7u16.to_le_bytes());
    assert_eq!(
        Snapshot::decode(&two),
        Err(DecodeError::NewerVersion {
            found: 7,
            supported: 6
        })
    );
    let mut one = bytes.clone();
    one[8..10].copy_from_slice(&1u16.to_le_bytes());
    assert_eq!(
        Snapshot::decode(&one).map(drop).map_err(|e| e.to_string()),
        Err("the snapshot has format version 1, written by an older spool; this build reads versions 2 to 6".to_owned())
    );
    // A version 5 payload labeled 4 leaves its (empty) fork records and decisions
    // over (2 bytes); labeled 3, its addenda are read where version 3 has none and
    // what version 3 is read with (the default addenda, version 6's record with them)
    // runs past the end; labeled 2, likewise.
    for (version, error) in [
        (4u16, "2 bytes are left over after a version 4 payload"),
        (3, "Hit the end of buffer, expected more data"),
        (2, "Hit the end of buffer, expected more data"),
    ] {
        let mut labeled = bytes.clone();
        labeled[8..10].copy_from_slice(&version.to_le_bytes());
        assert_eq!(
            Snapshot::decode(&labeled).map(drop),
            Err(DecodeError::Malformed(error.to_owned())),
            "labeled {version}"
        );
    }
    // A real version 4 snapshot (version 5 without the fork records and decisions at
    // its end), a
    // real version 3 (without the addenda) and a real version 2 (without the schedule
    // table either) read, as the same snapshot with no forks, no schedules, no key
    // fingerprints and the default session limits.
    for (version, tail) in [(4u16, 2), (3, 8), (2, 14)] {
        let payload = &bytes[HEADER_LEN..bytes.len() - tail];
        let mut old = bytes[..HEADER_LEN].to_vec();
        old[8..10].copy_from_slice(&version.to_le_bytes());
        old[10..18].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        old[18..22].copy_from_slice(&crc(payload).to_le_bytes());
        old.extend_from_slice(payload);
        let read = Snapshot::decode(&old).expect("an older snapshot reads");
        assert_eq!(read.encode().expect("it encodes"), *bytes);
    }
}

/// The envelope's other fields: bad magic (every byte of it changed), oversized
/// lengths (`TooLarge`), lengths longer and shorter than the payload (`Truncated`,
/// `TrailingBytes`), and bytes after the payload (`TrailingBytes`), each exactly.
#[test]
fn bad_envelopes_are_the_exact_errors() {
    let mut tally = Tally::default();
    let mut rng = SeededRng::new(14);
    for (name, bytes) in sources() {
        let payload_len = (bytes.len() - HEADER_LEN) as u64;
        for i in 0..8 {
            for value in [0u8, b'X', 0xff, MAGIC[i].wrapping_add(1)] {
                let mut bad = bytes.clone();
                bad[i] = value;
                tally.exact(
                    &|| format!("{name} magic byte {i} = {value}"),
                    &bad,
                    DecodeError::BadMagic,
                );
            }
        }
        let mut oversized = vec![MAX_PAYLOAD + 1, 1 << 31, 1 << 40, u64::MAX];
        oversized.extend((0..200).map(|_| MAX_PAYLOAD + 1 + rng.below(u64::MAX - MAX_PAYLOAD - 1)));
        for length in oversized {
            tally.exact(
                &|| format!("{name} length {length}"),
                &with_length(&bytes, length),
                DecodeError::TooLarge {
                    length,
                    max: MAX_PAYLOAD,
                },
            );
        }
        let mut longer = vec![payload_len + 1, MAX_PAYLOAD];
        longer.extend((0..200).map(|_| payload_len + 1 + rng.below(MAX_PAYLOAD - payload_len)));
        for length in longer {
            tally.exact(
                &|| format!("{name} length {length}"),
                &with_length(&bytes, length),
                DecodeError::Truncated {
                    needed: HEADER_LEN as u64 + length,
                    got: bytes.len() as u64,
                },
            );
        }
        for length in (0..payload_len).step_by(1 + payload_len as usize / 300) {
            tally.exact(
                &|| format!("{name} length {length}"),
                &with_length(&bytes, length),
                DecodeError::TrailingBytes {
                    extra: payload_len - length,
                },
            );
        }
        for extra in 1..=300u64 {
            let mut trailing = bytes.clone();
            trailing.extend((0..extra).map(|_| rng.next_u64() as u8));
            tally.exact(
                &|| format!("{name} with {extra} trailing bytes"),
                &trailing,
                DecodeError::TrailingBytes { extra },
            );
        }
    }
    tally.assert_clean("envelopes");
    // Two examples spelled out: a wrong magic, a length past the 1 GiB limit.
    let bytes = &sources()[0].1;
    assert_eq!(Snapshot::decode(b"SPOOLSNQ"), Err(DecodeError::BadMagic));
    assert_eq!(
        Snapshot::decode(&with_length(bytes, u64::MAX)),
        Err(DecodeError::TooLarge {
            length: u64::MAX,
            max: 1 << 30
        })
    );
    assert!(tally.inputs > 7_000, "{} inputs", tally.inputs);
}

/// One mutation of a payload: a byte set, inserted or removed, a run zeroed or set to
/// 0xff, a chunk copied from elsewhere (in it or in another snapshot), the end cut off.
fn mutate(rng: &mut SeededRng, payload: &mut Vec<u8>, other: &[u8]) -> String {
    let len = payload.len().max(1) as u64;
    let at = rng.below(len) as usize;
    match rng.below(8) {
        0 => {
            let value = rng.next_u64() as u8;
            if let Some(byte) = payload.get_mut(at) {
                *byte = value;
            }
            format!("byte {at} = {value:#04x}")
        }
        1 => {
            let value = rng.next_u64() as u8;
            payload.insert(at.min(payload.len()), value);
            format!("{value:#04x} inserted at {at}")
        }
        2 => {
            if at < payload.len() {
                payload.remove(at);
            }
            format!("byte {at} removed")
        }
        3 | 4 => {
            let value = if rng.chance(50) { 0 } else { 0xff };
            let end = (at + 1 + rng.below(12) as usize).min(payload.len());
            for byte in &mut payload[at.min(end)..end] {
                *byte = value;
            }
            format!("{at}..{end} = {value:#04x}")
        }
        5 => {
            let from = rng.below(other.len().max(1) as u64) as usize;
            let n = (1 + rng.below(32) as usize).min(other.len() - from.min(other.len()));
            let end = (at + n).min(payload.len());
            let chunk = &other[from..from + (end - at.min(end))];
            payload[at.min(end)..end].copy_from_slice(chunk);
            format!("{at}..{end} copied from elsewhere at {from}")
        }
        6 => {
            payload.truncate(at);
            format!("cut at {at}")
        }
        _ => {
            let value = 1u8 << rng.below(8);
            if let Some(byte) = payload.get_mut(at) {
                *byte ^= value;
            }
            format!("byte {at} ^= {value:#04x}")
        }
    }
}

/// Payloads mutated one to three times, the length and checksum made right again, so
/// that postcard and the consistency checks see them (40,000 inputs): a `Malformed` or
/// `Invalid` error, or a snapshot that restores — or fails to, with a typed error —
/// and then lists and snapshots itself, never a panic.
#[test]
fn payload_mutations_behind_a_valid_envelope_never_panic() {
    let mut tally = Tally::default();
    let mut rng = SeededRng::new(15);
    let sources = sources();
    let mut decoded = 0;
    for i in 0..40_000 {
        let (name, bytes) = &sources[i % sources.len()];
        let (_, other) = &sources[(i / sources.len() + i) % sources.len()];
        let mut payload = bytes[HEADER_LEN..].to_vec();
        let mutations: Vec<String> = (0..1 + rng.below(3))
            .map(|_| mutate(&mut rng, &mut payload, &other[HEADER_LEN..]))
            .collect();
        let input = envelope(written_version(bytes), &payload);
        if tally.feed(
            &|| format!("{name} payload, {}", mutations.join(", ")),
            &input,
            payload_error,
        ) {
            decoded += 1;
        }
    }
    tally.assert_clean("payload mutations");
    // Some mutations leave a snapshot that reads: the restore saw those.
    assert!(decoded > 0, "no mutated payload decoded");
}

/// Checkpoints in parts, damaged: a header that holds tasks, a row filed under
/// another task, a task with two rows, and every byte of every row of a real
/// checkpoint changed (three ways). None panics; each is a typed `DecodeError` naming
/// what was wrong, or parts that still read and restore or fail with a typed
/// `RestoreError`.
#[test]
fn damaged_parts_are_typed_errors() {
    let core = mixed_graph(PolicyChoice::FairShare)
        .core()
        .snapshot()
        .unwrap();
    let parts = core.to_parts().unwrap();
    let rows = || parts.rows.iter().map(|(id, row)| (*id, row.as_slice()));
    let whole = Snapshot::from_parts(&parts.header, rows()).unwrap();
    assert_eq!(whole.encode().unwrap(), core.encode().unwrap());

    // A whole snapshot is not a header.
    let full = core.encode().unwrap();
    let error = Snapshot::from_parts(&full, rows()).unwrap_err();
    assert!(matches!(error, DecodeError::Malformed(_)), "{error}");
    let (first, first_row) = &parts.rows[0];
    let (second, _) = &parts.rows[1];
    assert_eq!(
        Snapshot::from_parts(&parts.header, [(*second, first_row.as_slice())]).unwrap_err(),
        DecodeError::Invalid(format!("the row of task {second} holds task {first}"))
    );
    let mut twice: Vec<_> = rows().skip(1).collect();
    twice.push((*second, parts.rows[1].1.as_slice()));
    assert_eq!(
        Snapshot::from_parts(&parts.header, twice).unwrap_err(),
        DecodeError::Invalid(format!("task {second} has two rows"))
    );
    let mut longer = first_row.clone();
    longer.push(0);
    assert_eq!(
        Snapshot::from_parts(&parts.header, [(*first, longer.as_slice())]).unwrap_err(),
        DecodeError::Malformed(format!(
            "the row of task {first} has 1 bytes after its record"
        ))
    );
    // A row missing: the header counts the tasks.
    assert_eq!(
        Snapshot::from_parts(&parts.header, rows().skip(1)).unwrap_err(),
        DecodeError::Invalid(format!(
            "the checkpoint has {} task rows, its header counts {}",
            parts.rows.len() - 1,
            parts.rows.len()
        ))
    );

    let registry = registry();
    let mut outcomes = [0u32; 3];
    for (index, (id, row)) in parts.rows.iter().enumerate() {
        for byte in 0..row.len() {
            for change in [0x01u8, 0x80, 0xFF] {
                let mut damaged = row.clone();
                damaged[byte] ^= change;
                let all = parts.rows.iter().enumerate().map(|(i, (rid, r))| {
                    (
                        *rid,
                        if i == index {
                            damaged.as_slice()
                        } else {
                            r.as_slice()
                        },
                    )
                });
                let result = catch_unwind(AssertUnwindSafe(|| {
                    Snapshot::from_parts(&parts.header, all)
                        .map(|s| Scheduler::restore(&s, &registry).map(drop))
                }));
                match result {
                    Err(_) => panic!("task {id}'s row, byte {byte} ^ {change:#04x}: a panic"),
                    Ok(Err(_)) => outcomes[0] += 1,
                    Ok(Ok(Err(_))) => outcomes[1] += 1,
                    Ok(Ok(Ok(()))) => outcomes[2] += 1,
                }
            }
        }
    }
    assert!(
        outcomes[0] > 0 && outcomes.iter().sum::<u32>() > 1_000,
        "{outcomes:?}"
    );
}
