//! Content-defined chunking and the hash tree over chunk lists.
//!
//! A blob (a snapshot, a large journal entry) is cut where a gear hash of the last 64
//! bytes hits a pattern (FastCDC's normalized chunking: a harder pattern before the
//! average size, an easier one after it, cuts never before the minimum or after the
//! maximum). The cuts depend on the bytes alone, so a blob that repeats another's text
//! repeats its chunks, wherever the text sits: only the chunks around what changed are
//! new. Each chunk is keyed by its BLAKE3 hash.
//!
//! The list of a blob's chunk hashes is itself grouped, with group ends chosen by the
//! hashes (so unchanged runs of chunks give unchanged groups), and each group stored
//! as an index chunk, level upon level, until a few hashes remain: the blob's roots.
//! A snapshot that differs from the last one in a few places thus writes a few data
//! chunks and a few index chunks, not a list as long as the snapshot.

use std::ops::Range;
use std::sync::LazyLock;

/// A chunk's key: its BLAKE3 hash (an index chunk's is keyed apart, see [`index_hash`]).
pub(crate) type Hash = [u8; 32];

/// Bytes of a hash.
pub(crate) const HASH_LEN: usize = 32;

/// No cut before this many bytes (except at the end of the blob).
pub const MIN_CHUNK: usize = 64;
/// The size cuts aim at (a power of two).
pub const AVG_CHUNK: usize = 256;
/// A cut at the latest here.
pub const MAX_CHUNK: usize = 2048;

/// Index chunks end after a child whose hash hits a pattern one time in this many.
pub const GROUP_AVG: usize = 8;
/// At least this many children in an index chunk (so each level at least halves).
const GROUP_MIN: usize = 2;
/// At most this many children in an index chunk.
const GROUP_MAX: usize = 64;
/// Levels are added until at most this many hashes remain: the roots.
pub const ROOTS_MAX: usize = 8;

/// What a chunk holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum ChunkKind {
    /// Bytes of a blob.
    Data,
    /// The hashes of other chunks, in order.
    Index,
}

impl ChunkKind {
    /// The value stored in the `kind` column.
    pub(crate) fn code(self) -> i64 {
        match self {
            ChunkKind::Data => 0,
            ChunkKind::Index => 1,
        }
    }

    /// The kind for a `kind` column value.
    pub(crate) fn from_code(code: i64) -> Option<ChunkKind> {
        match code {
            0 => Some(ChunkKind::Data),
            1 => Some(ChunkKind::Index),
            _ => None,
        }
    }

    /// The hash a chunk of this kind with these bytes has.
    pub(crate) fn hash(self, bytes: &[u8]) -> Hash {
        match self {
            ChunkKind::Data => *blake3::hash(bytes).as_bytes(),
            ChunkKind::Index => index_hash(bytes),
        }
    }
}

/// The key index chunks are hashed with, so that no data chunk can pass for one.
static INDEX_KEY: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key("spool-store v1 index chunk", &[]));

/// An index chunk's hash: BLAKE3 keyed apart from data chunks.
pub(crate) fn index_hash(bytes: &[u8]) -> Hash {
    *blake3::keyed_hash(&INDEX_KEY, bytes).as_bytes()
}

/// The gear table: 256 fixed pseudo-random words (splitmix64 from a fixed seed), so
/// that cuts are the same in every build.
const GEAR: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut state: u64 = 0x5350_4f4f_4c53_5452; // "SPOOLSTR"
    let mut i = 0;
    while i < 256 {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        table[i] = z ^ (z >> 31);
        i += 1;
    }
    table
};

/// A mask of the `bits` highest bits: the gear hash's high bits depend on the last 64
/// bytes, its low bits only on the last few.
const fn high_bits(bits: u32) -> u64 {
    !0u64 << (64 - bits)
}

const AVG_BITS: u32 = AVG_CHUNK.trailing_zeros();
/// Before the average size: one bit more, so cuts are rarer.
const MASK_HARD: u64 = high_bits(AVG_BITS + 1);
/// After it: one bit less, so cuts come sooner.
const MASK_EASY: u64 = high_bits(AVG_BITS - 1);

/// Where the chunk starting at `data[0]` ends.
fn cut(data: &[u8]) -> usize {
    let len = data.len();
    if len <= MIN_CHUNK {
        return len;
    }
    let end = len.min(MAX_CHUNK);
    let normal = end.min(AVG_CHUNK);
    let mut hash = 0u64;
    let mut i = MIN_CHUNK;
    while i < normal {
        hash = (hash << 1).wrapping_add(GEAR[data[i] as usize]);
        if hash & MASK_HARD == 0 {
            return i + 1;
        }
        i += 1;
    }
    while i < end {
        hash = (hash << 1).wrapping_add(GEAR[data[i] as usize]);
        if hash & MASK_EASY == 0 {
            return i + 1;
        }
        i += 1;
    }
    end
}

/// The chunks of `data`, in order, covering it (none for empty data).
pub(crate) fn chunks(data: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::with_capacity(data.len() / AVG_CHUNK + 1);
    let mut start = 0;
    while start < data.len() {
        let end = start + cut(&data[start..]);
        out.push(start..end);
        start = end;
    }
    out
}

/// A chunk of a blob's tree: its hash, and where its bytes are.
#[derive(Debug)]
pub(crate) struct Node {
    /// The chunk's key.
    pub(crate) hash: Hash,
    /// Level 0: the range of the blob. Higher levels: the range of children in the
    /// level below.
    pub(crate) span: Range<usize>,
}

/// A blob cut into chunks, with the index levels over them.
#[derive(Debug)]
pub(crate) struct Tree<'a> {
    /// The blob.
    pub(crate) data: &'a [u8],
    /// Level 0: the data chunks; each level above groups the one below.
    pub(crate) levels: Vec<Vec<Node>>,
}

impl<'a> Tree<'a> {
    /// Cuts `data` and hashes every chunk, index chunks included.
    pub(crate) fn build(data: &'a [u8]) -> Tree<'a> {
        let leaves: Vec<Node> = chunks(data)
            .into_iter()
            .map(|span| Node {
                hash: ChunkKind::Data.hash(&data[span.clone()]),
                span,
            })
            .collect();
        let mut levels = vec![leaves];
        while let Some(below) = levels.last().filter(|l| l.len() > ROOTS_MAX) {
            let mut level = Vec::with_capacity(below.len() / GROUP_AVG + 1);
            let mut start = 0;
            for (i, node) in below.iter().enumerate() {
                let size = i + 1 - start;
                let hit = (u16::from_le_bytes([node.hash[0], node.hash[1]]) as usize)
                    .is_multiple_of(GROUP_AVG);
                if (hit && size >= GROUP_MIN) || size >= GROUP_MAX || i + 1 == below.len() {
                    let span = start..i + 1;
                    let bytes = Tree::index_bytes(&below[span.clone()]);
                    level.push(Node {
                        hash: ChunkKind::Index.hash(&bytes),
                        span,
                    });
                    start = i + 1;
                }
            }
            levels.push(level);
        }
        Tree { data, levels }
    }

    /// The bytes of an index chunk over `children`: their hashes, in order.
    pub(crate) fn index_bytes(children: &[Node]) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(children.len() * HASH_LEN);
        for child in children {
            bytes.extend_from_slice(&child.hash);
        }
        bytes
    }

    /// The top level's hashes, concatenated: what a row keeps.
    pub(crate) fn roots(&self) -> Vec<u8> {
        self.levels
            .last()
            .map(|top| Tree::index_bytes(top))
            .unwrap_or_default()
    }

    /// The level the roots are on.
    pub(crate) fn top(&self) -> usize {
        self.levels.len() - 1
    }

    /// The bytes chunk `index` of `level` holds.
    pub(crate) fn bytes(&self, level: usize, index: usize) -> Vec<u8> {
        let node = &self.levels[level][index];
        if level == 0 {
            self.data[node.span.clone()].to_vec()
        } else {
            Tree::index_bytes(&self.levels[level - 1][node.span.clone()])
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Pseudo-random bytes (splitmix64), for text that does not repeat by itself.
    fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) as u8
            })
            .collect()
    }

    /// Chunks cover the data exactly, in order, within the size bounds, and average
    /// near the aim.
    #[test]
    fn chunks_cover_the_data_within_bounds() {
        let data = noise(1, 1 << 20);
        let chunks = chunks(&data);
        let mut at = 0;
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(c.start, at);
            assert!(c.len() <= MAX_CHUNK);
            if i + 1 < chunks.len() {
                assert!(c.len() > MIN_CHUNK, "chunk {i} has {} bytes", c.len());
            }
            at = c.end;
        }
        assert_eq!(at, data.len());
        let avg = data.len() / chunks.len();
        assert!(
            (AVG_CHUNK / 2..AVG_CHUNK * 2).contains(&avg),
            "average {avg}"
        );
        assert!(super::chunks(&[]).is_empty());
        assert_eq!(super::chunks(&[7; 10]), vec![0..10]);
    }

    /// Bytes inserted in the middle change only the chunks around them: the chunks
    /// before and after are found again.
    #[test]
    fn an_insertion_changes_only_the_chunks_around_it() {
        let data = noise(2, 64 * 1024);
        let mut changed = data[..30_000].to_vec();
        changed.extend_from_slice(b"a few new words in the middle");
        changed.extend_from_slice(&data[30_000..]);
        let hashes = |d: &[u8]| -> std::collections::HashSet<Hash> {
            Tree::build(d).levels[0].iter().map(|n| n.hash).collect()
        };
        let before = hashes(&data);
        let tree = Tree::build(&changed);
        let new: usize = tree.levels[0]
            .iter()
            .filter(|n| !before.contains(&n.hash))
            .map(|n| n.span.len())
            .sum();
        assert!(new <= 3 * MAX_CHUNK, "{new} new bytes");
        assert!(new >= 29);
    }

    /// A large blob gets index levels down to a few roots; a small one is its own root.
    #[test]
    fn trees_end_in_a_few_roots() {
        let data = noise(3, 1 << 20);
        let tree = Tree::build(&data);
        assert!(tree.levels.len() >= 3);
        assert!(tree.levels[tree.top()].len() <= ROOTS_MAX);
        assert_eq!(tree.roots().len() % HASH_LEN, 0);
        for level in 1..tree.levels.len() {
            let children: usize = tree.levels[level].iter().map(|n| n.span.len()).sum();
            assert_eq!(children, tree.levels[level - 1].len());
        }
        let small = Tree::build(b"hello");
        assert_eq!(small.levels.len(), 1);
        assert_eq!(small.roots(), ChunkKind::Data.hash(b"hello").to_vec());
        assert_ne!(ChunkKind::Data.hash(b"x"), ChunkKind::Index.hash(b"x"));
    }
}
