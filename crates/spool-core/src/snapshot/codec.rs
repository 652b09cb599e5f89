//! The envelope around a snapshot's bytes: `magic | format version | length | crc32 |
//! payload`, with the payload in postcard. Decoding trusts nothing: every field is
//! checked before it is used, and no allocation is sized by a length field that was not
//! checked against the input: the payload goes through [`bounded`](super::bounded),
//! which never preallocates a collection from its length prefix.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;
use crate::schedule::SessionLimits;

/// The first bytes of every encoded snapshot.
pub const MAGIC: [u8; 8] = *b"SPOOLSNP";
/// The format version this build writes and reads. A snapshot with nothing that
/// version 6 added (a scheduler without budgets) is written as version 5, byte for byte
/// as before.
pub const FORMAT_VERSION: u16 = 6;

/// The version a snapshot without budgets is written as: version 6 less its budget
/// record.
const WITHOUT_BUDGETS: u16 = 5;

/// The oldest format version this build reads: version 2 is version 3 without the
/// schedule table (read as an empty one); version 3 is version 4 without the
/// [`Addenda`] (read as the default: no key has a fingerprint, sessions have the
/// default limits); version 4 is version 5 without the addenda's fork records (read as
/// none); version 5 is version 6 without the budget record (read as no budgets).
pub(crate) const OLDEST_VERSION: u16 = 2;

/// What format version 4 added at the end of a snapshot's data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Addenda {
    /// The fingerprint each idempotency key is kept with, live and ended tasks' keys
    /// alike: `(key, fingerprint)`, by key (a key without one is left out).
    pub(crate) key_fingerprints: Vec<(String, Fingerprint)>,
    /// How much a session keeps.
    pub(crate) session_limits: SessionLimits,
    /// Forked tasks' origins and the answers left on their tapes, by task id (format
    /// version 5; a version 4 payload reads with none).
    pub(crate) forks: Vec<ForkRecord>,
    /// Live tasks' code-version decisions (`TaskContext::patched`): `(task, [(name,
    /// new branch taken)])`, by task id (format version 5; a version 4 payload reads
    /// with none).
    pub(crate) patches: Vec<(crate::id::TaskId, Vec<(String, bool)>)>,
    /// What format version 6 added (a version 5 payload reads with the default).
    pub(crate) v6: Since6,
}

/// What format version 6 added at the end of a snapshot's data. A snapshot with none
/// of it ([`is_empty`](Since6::is_empty)) is written as version 5, byte for byte as
/// before; a part added here must be in `is_empty` too.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Since6 {
    /// The budgets and what was spent (`budgets: None`: a scheduler without budgets).
    pub(crate) budgets: crate::budget::BudgetRecord,
    /// Agents' limits on request kinds and their shares' state (empty: none).
    pub(crate) agent_limits: crate::limiter::QuotasRecord,
}

impl Since6 {
    /// Whether it holds nothing a version 5 snapshot could not say.
    pub(crate) fn is_empty(&self) -> bool {
        !self.budgets.is_set() && self.agent_limits.is_empty()
    }
}

/// A forked task's origin, the recorded answers left to play back to it, and how its
/// playback went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ForkRecord {
    pub(crate) task: crate::id::TaskId,
    pub(crate) origin: crate::tape::ForkOrigin,
    pub(crate) tape: crate::tape::Tape,
    pub(crate) playback: crate::tape::Playback,
}

/// What a version 3 payload lacks at its end: the default [`Addenda`], encoded.
fn v3_tail() -> Vec<u8> {
    postcard::to_allocvec(&Addenda::default()).unwrap_or_default()
}

/// What a version 4 payload lacks at its end: no fork records and no decisions,
/// encoded (then version 5's tail).
fn v4_tail() -> Vec<u8> {
    type Decisions = Vec<(crate::id::TaskId, Vec<(String, bool)>)>;
    let mut tail =
        postcard::to_allocvec(&(Vec::<ForkRecord>::new(), Decisions::new())).unwrap_or_default();
    tail.extend_from_slice(&v5_tail());
    tail
}

/// What a version 5 payload lacks at its end: the default of what version 6 added,
/// encoded.
fn v5_tail() -> Vec<u8> {
    postcard::to_allocvec(&Since6::default()).unwrap_or_default()
}
/// The largest payload a decoder accepts (1 GiB).
pub const MAX_PAYLOAD: u64 = 1 << 30;
/// Bytes before the payload: magic, version, length, crc32.
pub const HEADER_LEN: usize = 8 + 2 + 8 + 4;

/// Why bytes are not a snapshot this build can read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the header or than the length it gives.
    #[error("the snapshot is truncated: {needed} bytes needed, {got} present")]
    Truncated {
        /// Bytes the header (or the length in it) calls for.
        needed: u64,
        /// Bytes present.
        got: u64,
    },
    /// The bytes do not start with the snapshot magic.
    #[error("not a spool snapshot: it does not start with `SPOOLSNP`")]
    BadMagic,
    /// Written by a newer spool.
    #[error("the snapshot has format version {found}, newer than this build reads ({supported})")]
    NewerVersion {
        /// The version in the header.
        found: u16,
        /// The newest this build reads.
        supported: u16,
    },
    /// Written by an older spool, in a format this build no longer reads (version 1
    /// had no idempotency record of ended tasks' keys; version 2, without schedules,
    /// is read).
    #[error(
        "the snapshot has format version {found}, written by an older spool; this build reads versions 2 to {supported}"
    )]
    OlderVersion {
        /// The version in the header.
        found: u16,
        /// The newest version this build reads.
        supported: u16,
    },
    /// A version no spool ever wrote.
    #[error("the snapshot has format version {found}, which no spool wrote")]
    UnknownVersion {
        /// The version in the header.
        found: u16,
    },
    /// The length field is larger than any snapshot this build accepts.
    #[error("the snapshot claims a payload of {length} bytes, more than the {max} accepted")]
    TooLarge {
        /// The claimed length.
        length: u64,
        /// The limit.
        max: u64,
    },
    /// Bytes follow the payload.
    #[error("{extra} bytes follow the snapshot's payload")]
    TrailingBytes {
        /// How many.
        extra: u64,
    },
    /// The payload's checksum does not match: the bytes were damaged.
    #[error("the snapshot is corrupt: crc32 {found:#010x}, expected {expected:#010x}")]
    Corrupt {
        /// The checksum of the payload as read.
        found: u32,
        /// The checksum in the header.
        expected: u32,
    },
    /// The payload passed its checksum but is not a snapshot of this format.
    #[error("the snapshot's payload cannot be read: {0}")]
    Malformed(String),
    /// The payload reads, but what it says does not hang together.
    #[error("the snapshot is inconsistent: {0}")]
    Invalid(String),
}

/// Wraps `value`'s postcard encoding in the envelope, labeled with this build's
/// format version if `newest` (it holds what only version 6 has), else version 5.
///
/// # Errors
/// The serializer's message (a value serde cannot encode).
pub(crate) fn encode<T: Serialize>(value: &T, newest: bool) -> Result<Vec<u8>, String> {
    let payload = postcard::to_allocvec(value).map_err(|e| e.to_string())?;
    let version = if newest {
        FORMAT_VERSION
    } else {
        WITHOUT_BUDGETS
    };
    Ok(envelope(version, &payload))
}

/// Wraps the postcard encoding of a snapshot's data (or of a header holding it, which
/// ends as the data does) in the envelope: with nothing of version 6 in it (`since6`
/// false), as version 5 — the payload without the default [`Since6`] it ends with —
/// so that snapshots of a scheduler using nothing new are what they were before.
pub(crate) fn encode_snapshot<T: Serialize>(value: &T, since6: bool) -> Result<Vec<u8>, String> {
    let payload = postcard::to_allocvec(value).map_err(|e| e.to_string())?;
    let tail = v5_tail();
    if !since6 && payload.ends_with(&tail) {
        return Ok(envelope(
            WITHOUT_BUDGETS,
            &payload[..payload.len() - tail.len()],
        ));
    }
    Ok(envelope(FORMAT_VERSION, &payload))
}

/// `payload` in the envelope, labeled `version`.
fn envelope(version: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Checks the envelope, which starts with `magic`, and decodes the payload.
pub(crate) fn decode_with_magic<T: DeserializeOwned>(
    bytes: &[u8],
    magic: &[u8; 8],
) -> Result<T, DecodeError> {
    decode_versioned(bytes, magic, &[])
}

/// Checks the envelope, which starts with `magic`, and decodes the payload; a payload
/// of version 2 gets `v2_tail` appended first (the encoding of what version 3 added at
/// its end, empty).
pub(crate) fn decode_versioned<T: DeserializeOwned>(
    bytes: &[u8],
    magic: &[u8; 8],
    v2_tail: &[u8],
) -> Result<T, DecodeError> {
    let (version, payload) = open(bytes, magic)?;
    if version < FORMAT_VERSION && !v2_tail.is_empty() {
        return decode_older(payload, version, v2_tail);
    }
    crate::bounded::from_postcard(payload).map_err(|e| DecodeError::Malformed(e.to_string()))
}

/// Checks the envelope of `bytes`, in the order its fields come — magic, version,
/// length, then the payload's length and checksum — and gives the format version and
/// the payload.
fn open<'a>(bytes: &'a [u8], magic: &[u8; 8]) -> Result<(u16, &'a [u8]), DecodeError> {
    let header = read_header(bytes, magic)?;
    let version = u16::from_le_bytes([header[8], header[9]]);
    check_version(version)?;
    let mut length = [0u8; 8];
    length.copy_from_slice(&header[10..18]);
    let length = u64::from_le_bytes(length);
    if length > MAX_PAYLOAD {
        return Err(DecodeError::TooLarge {
            length,
            max: MAX_PAYLOAD,
        });
    }
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&header[18..22]);
    let payload = check_payload(bytes, length, u32::from_le_bytes(crc))?;
    Ok((version, payload))
}

/// The header of `bytes`, which must start with `magic` (a start of `magic` too short
/// to tell is truncated) and hold a whole header.
fn read_header<'a>(bytes: &'a [u8], magic: &[u8; 8]) -> Result<&'a [u8], DecodeError> {
    let truncated = DecodeError::Truncated {
        needed: HEADER_LEN as u64,
        got: bytes.len() as u64,
    };
    if bytes.len() < magic.len() {
        if magic.starts_with(bytes) {
            return Err(truncated);
        }
        return Err(DecodeError::BadMagic);
    }
    if bytes[..magic.len()] != magic[..] {
        return Err(DecodeError::BadMagic);
    }
    bytes.get(..HEADER_LEN).ok_or(truncated)
}

/// Checks that this build reads format `version`.
fn check_version(version: u16) -> Result<(), DecodeError> {
    match version {
        OLDEST_VERSION..=FORMAT_VERSION => Ok(()),
        v if v > FORMAT_VERSION => Err(DecodeError::NewerVersion {
            found: v,
            supported: FORMAT_VERSION,
        }),
        0 => Err(DecodeError::UnknownVersion { found: 0 }),
        v => Err(DecodeError::OlderVersion {
            found: v,
            supported: FORMAT_VERSION,
        }),
    }
}

/// The payload after the header of `bytes`: exactly `length` bytes, nothing after,
/// with the crc32 `expected`.
fn check_payload(bytes: &[u8], length: u64, expected: u32) -> Result<&[u8], DecodeError> {
    let rest = &bytes[HEADER_LEN..];
    let present = rest.len() as u64;
    if present < length {
        return Err(DecodeError::Truncated {
            needed: HEADER_LEN as u64 + length,
            got: bytes.len() as u64,
        });
    }
    if present > length {
        return Err(DecodeError::TrailingBytes {
            extra: present - length,
        });
    }
    let found = crc32fast::hash(rest);
    if found != expected {
        return Err(DecodeError::Corrupt { found, expected });
    }
    Ok(rest)
}

/// Decodes the `payload` of an older format `version`: an older snapshot's data is the
/// newer one's without what was added at its end, so the defaults of those are
/// appended, oldest first (`v2_tail` for version 2, then version 3's), and nothing
/// may be left over: a newer payload labeled older leaves the tail.
fn decode_older<T: DeserializeOwned>(
    payload: &[u8],
    version: u16,
    v2_tail: &[u8],
) -> Result<T, DecodeError> {
    let v3_tail = v3_tail();
    let mut extended = Vec::with_capacity(payload.len() + v2_tail.len() + v3_tail.len());
    extended.extend_from_slice(payload);
    if version == OLDEST_VERSION {
        extended.extend_from_slice(v2_tail);
    }
    match version {
        4 => extended.extend_from_slice(&v4_tail()),
        5 => extended.extend_from_slice(&v5_tail()),
        _ => extended.extend_from_slice(&v3_tail),
    }
    let (value, left) = crate::bounded::take_from_postcard(&extended)
        .map_err(|e| DecodeError::Malformed(e.to_string()))?;
    if !left.is_empty() {
        return Err(DecodeError::Malformed(format!(
            "{} bytes are left over after a version {version} payload",
            left.len()
        )));
    }
    Ok(value)
}
