//! Path components: scanning, hashing a word at a time, and the inline name a dentry keeps.
//!
//! A path is scanned eight bytes at a time: the slash search and the hash both consume
//! whole `u64` words (like Linux `hash_name`), so a 40-byte component costs five word
//! steps, not forty byte steps.
//!
//! # Keys against crafted names
//! The component hash starts from a random key drawn once per process ([`name_key`]), so
//! names that collide cannot be computed without it (the word mix is invertible: with a
//! known start, any number of names with one hash is easy to make, and a directory of them
//! turns every lookup into a walk of one long chain). A dentry's key then mixes in its
//! parent and a key of its file system's table and goes through a full avalanche
//! ([`key_hash`]), so that every bit of it depends on every bit of the name.
//!
//! [`DName`] and [`LongName`] store a dentry's name. Its first [`INLINE`] bytes live
//! inline in atomic words, zero padded (a name holds no NUL, so no length is kept); a
//! longer name also lives whole in an epoch-protected heap buffer. Both are rewritten by rename
//! under the dentry's sequence counter, and read with atomic loads, so a reader racing with
//! a rename reads a stale name, never undefined behaviour, and the sequence counter tells
//! it to retry.

use crate::errno::{Errno, Result};
use crate::sync::AtomicU64;
use crate::types::limits::NAME_MAX;
use crossbeam_epoch::{Atomic, Guard, Owned};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Bytes of a name kept inline in the dentry's lookup line.
pub const INLINE: usize = 24;
const WORDS: usize = INLINE / 8;
// `DName::eq` and `DName::to_vec` go over the three words one by one.
const _: () = assert!(WORDS == 3);

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;
const SLASHES: u64 = 0x2f2f_2f2f_2f2f_2f2f;
const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xD6E8_FEB8_6659_FD93;

/// Loads up to eight bytes at `i` as a little-endian word, zero padded.
#[inline(always)]
fn load_word(b: &[u8], i: usize) -> u64 {
    let rest = &b[i..];
    let n = rest.len();
    if n >= 8 {
        u64::from_le_bytes(rest[..8].try_into().expect("eight bytes"))
    } else if n >= 4 {
        // Two loads that overlap, the second moved up to its place: no loop, and no copy
        // into a buffer (which would call memcpy for a few bytes).
        let lo = u32::from_le_bytes(rest[..4].try_into().expect("four bytes")) as u64;
        let hi = u32::from_le_bytes(rest[n - 4..].try_into().expect("four bytes")) as u64;
        lo | (hi << (8 * (n - 4)))
    } else if n >= 2 {
        let lo = u16::from_le_bytes(rest[..2].try_into().expect("two bytes")) as u64;
        let hi = u16::from_le_bytes(rest[n - 2..].try_into().expect("two bytes")) as u64;
        lo | (hi << (8 * (n - 2)))
    } else if n == 1 {
        rest[0] as u64
    } else {
        0
    }
}

/// Whether `p` contains a NUL byte, a word at a time.
#[inline]
pub fn has_nul(p: &[u8]) -> bool {
    let n = p.len();
    if n < 8 {
        #[allow(clippy::manual_contains)] // `contains` would call memchr for a few bytes
        return p.iter().any(|&b| b == 0);
    }
    let mut i = 0;
    while i + 8 <= n {
        if zero_bytes(load_word(p, i)) != 0 {
            return true;
        }
        i += 8;
    }
    // The last word overlaps the one before: bytes checked twice are harmless.
    i < n && zero_bytes(load_word(p, n - 8)) != 0
}

/// Up to eight bytes as a word without a byte loop: two overlapping loads.
#[inline(always)]
fn load_short(p: &[u8]) -> u64 {
    let n = p.len();
    if n >= 8 {
        load_word(p, 0)
    } else if n >= 4 {
        let lo = u32::from_le_bytes(p[..4].try_into().expect("four bytes")) as u64;
        let hi = u32::from_le_bytes(p[n - 4..].try_into().expect("four bytes")) as u64;
        lo | (hi << 32)
    } else if n >= 2 {
        let lo = u16::from_le_bytes(p[..2].try_into().expect("two bytes")) as u64;
        let hi = u16::from_le_bytes(p[n - 2..].try_into().expect("two bytes")) as u64;
        lo | (hi << 16)
    } else if n == 1 {
        p[0] as u64
    } else {
        0
    }
}

/// Whether two byte strings are equal, a word at a time and inline: the path cache compares
/// a probed path with its entry's after their hashes matched, almost always to find them
/// equal, and a call to `bcmp` there cost more than the comparison (the registers the
/// caller saved around it). Up to 16 bytes take two overlapping loads per side.
#[inline(always)]
pub fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n <= 8 {
        return load_short(a) == load_short(b);
    }
    if n <= 16 {
        return load8(a, 0) == load8(b, 0) && load8(a, n - 8) == load8(b, n - 8);
    }
    a == b
}

/// A hash of a whole path, a word at a time (the key of the path cache). The tail is read
/// with overlapping loads; the length is mixed in, so overlaps cannot alias.
#[inline(always)]
pub fn path_hash(p: &[u8]) -> u64 {
    path_hash_nul(p).0
}

/// [`path_hash`] and whether the path holds a NUL byte, in one pass over it.
///
/// Paths longer than [`VECTOR_MIN`] bytes go 16 bytes at a step through AES rounds where
/// the CPU has them (see [`aes`]); shorter ones, and every path on a CPU without them, a
/// word at a step ([`path_hash_nul_words`]). Which one a path takes depends only on its
/// length and the CPU, so every hash of one path in a process is the same.
// Always: the hit paths of stat, open and the parent lookups are what it is for, and with
// a third caller the compiler took it out of line.
#[inline(always)]
pub fn path_hash_nul(p: &[u8]) -> (u64, bool) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if p.len() > VECTOR_MIN && aes::available() {
        // SAFETY: `available` found AES-NI and AVX on this CPU, and the path is longer
        // than 16 bytes, as `aes::path_hash_nul` requires.
        return unsafe { aes::path_hash_nul(p) };
    }
    path_hash_nul_words(p)
}

/// Paths up to this many bytes are hashed a word at a time on every CPU: the AES path's
/// call and its finishing rounds cost more than a few words' steps.
pub const VECTOR_MIN: usize = 32;

/// [`path_hash_nul`] a word at a time, on any CPU: each word's NUL test and multiply.
#[inline(always)]
pub fn path_hash_nul_words(p: &[u8]) -> (u64, bool) {
    let n = p.len();
    let mut h = (n as u64).wrapping_mul(K2);
    if n <= 8 {
        #[allow(clippy::manual_contains)] // `contains` would call memchr for a few bytes
        let nul = p.iter().any(|&b| b == 0);
        h = mix(h, load_short(p));
        return (finish(h), nul);
    }
    // Each word's zero-byte test before its mask (`zero_bits`), masked once at the end.
    let mut zeros = 0u64;
    let mut i = 0;
    if n > 32 {
        // Four independent lanes: long paths hash at the multiplier's throughput, not
        // its latency. The strides are the 32-byte blocks that end before the last byte.
        let mut l = [h, h ^ K1, h ^ K2, h.rotate_left(17)];
        let blocks = p[..n - 1].chunks_exact(32);
        i = 32 * blocks.len();
        for b in blocks {
            for (k, lane) in l.iter_mut().enumerate() {
                let w = load8(b, 8 * k);
                zeros |= zero_bits(w);
                *lane = mix(*lane, w);
            }
        }
        h = mix(mix(l[0], l[1]), mix(l[2], l[3]));
    }
    while i + 8 < n {
        let w = load8(p, i);
        zeros |= zero_bits(w);
        h = mix(h, w);
        i += 8;
    }
    let w = load8(p, n - 8);
    zeros |= zero_bits(w);
    h = mix(h, w);
    (finish(h), zeros & HIGHS != 0)
}

/// [`path_hash_nul`] for long paths, 16 bytes at a step, on CPUs with AES-NI and AVX.
///
/// A 656-byte path (W3's deepest) took about 590 instructions a word at a time, eight per
/// word, half of them the NUL test; here a 16-byte step is four: a load, a byte compare
/// with zero, an OR into the NUL mask, and one AES round (`aesenc`) of a lane with the
/// bytes as its round key. Four lanes take the 64-byte blocks, so the rounds' latency
/// overlaps. A round is a permutation of its lane followed by an XOR of the block, and the
/// lanes join one chain of rounds at the end, so two paths of one length that differ
/// within only one of the 16-byte blocks read never collide. Two that differ in two blocks
/// of different lanes collide only if the rounds turn both differences into the same
/// one. A round spreads a byte over one column of the state: had the lanes joined as they
/// are, a byte changed at one offset of two lanes would have collided once in about 128
/// values of the byte under it (as the first version did, for bytes 44 and 60 of an
/// 88-byte path). So each lane is transposed as it joins (its columns become rows), and
/// such differences never take the same shape. Two rounds with constant keys spread the
/// last block over all 128 bits before they are folded to 64. This is not a keyed hash,
/// and need not be: a collision in the path cache costs a miss (the path's bytes are
/// compared on every hit), never a wrong answer, and a set-associative cache has no
/// chains for colliding paths to lengthen.
///
/// Hand-written: no hash crate picks AES at run time (ahash and gxhash need it enabled at
/// build time, which a portable binary cannot do), and none tests for NUL bytes in the
/// same pass.
#[cfg(all(target_arch = "x86_64", not(miri)))]
pub(crate) mod aes {
    use super::{K1, K2};
    use std::arch::x86_64::{
        __m128i, _mm_aesenc_si128, _mm_cmpeq_epi8, _mm_cvtsi128_si64, _mm_loadu_si128,
        _mm_movemask_epi8, _mm_or_si128, _mm_set_epi64x, _mm_set_epi8, _mm_setzero_si128,
        _mm_shuffle_epi8, _mm_unpackhi_epi64, _mm_xor_si128,
    };

    /// Whether this CPU has what [`path_hash_nul`] needs (the answer is cached by std).
    #[inline(always)]
    pub(crate) fn available() -> bool {
        std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("avx")
    }

    /// The hash and the NUL test of `p`.
    ///
    /// # Safety
    /// The CPU has AES-NI and AVX ([`available`]), and `p` is longer than 16 bytes.
    #[target_feature(enable = "aes,avx")]
    // The intrinsics are safe to call here from Rust 1.86 (target_feature 1.1) but unsafe on
    // the crate's MSRV (1.80): one block serves both.
    #[allow(unused_unsafe)]
    pub(crate) unsafe fn path_hash_nul(p: &[u8]) -> (u64, bool) {
        // SAFETY: the caller promises AES-NI and AVX, all these intrinsics need; each load
        // is in bounds (see its own line).
        unsafe {
            let n = p.len();
            debug_assert!(n > 16);
            let zero = _mm_setzero_si128();
            let seed = _mm_set_epi64x(K1 as i64, (n as u64).wrapping_mul(K2) as i64);
            let mut lanes = [
                seed,
                _mm_xor_si128(seed, _mm_set_epi64x(0, K1 as i64)),
                _mm_xor_si128(seed, _mm_set_epi64x(0, K2 as i64)),
                _mm_xor_si128(seed, _mm_set_epi64x(K2 as i64, 0)),
            ];
            let mut zeros = zero;
            let mut i = 0;
            // The 64-byte blocks that end before the last byte, then the 16-byte ones, then the
            // last 16 bytes (overlapping what came before; the length in the seed keeps
            // overlaps from aliasing).
            while i + 64 < n {
                for (k, lane) in lanes.iter_mut().enumerate() {
                    // SAFETY: `i + 16 * k + 16 <= i + 64 < n`.
                    let d = unsafe { load16(p, i + 16 * k) };
                    zeros = _mm_or_si128(zeros, _mm_cmpeq_epi8(d, zero));
                    *lane = _mm_aesenc_si128(*lane, d);
                }
                i += 64;
            }
            let mut k = 0;
            while i + 16 < n {
                // SAFETY: `i + 16 < n`.
                let d = unsafe { load16(p, i) };
                zeros = _mm_or_si128(zeros, _mm_cmpeq_epi8(d, zero));
                lanes[k] = _mm_aesenc_si128(lanes[k], d);
                k += 1;
                i += 16;
            }
            // SAFETY: `n > 16`.
            let d = unsafe { load16(p, n - 16) };
            zeros = _mm_or_si128(zeros, _mm_cmpeq_epi8(d, zero));
            lanes[3] = _mm_aesenc_si128(lanes[3], d);
            // The lanes join one chain, each transposed (a column of the AES state, which one
            // round spreads a byte over, becomes a row): see above.
            let t = _mm_set_epi8(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
            let mut h = _mm_aesenc_si128(lanes[0], _mm_shuffle_epi8(lanes[1], t));
            h = _mm_aesenc_si128(h, _mm_shuffle_epi8(lanes[2], t));
            h = _mm_aesenc_si128(h, _mm_shuffle_epi8(lanes[3], t));
            h = _mm_aesenc_si128(h, _mm_set_epi64x(K1 as i64, K2 as i64));
            h = _mm_aesenc_si128(h, _mm_set_epi64x(K2 as i64, K1 as i64));
            let folded = _mm_xor_si128(h, _mm_unpackhi_epi64(h, h));
            (
                _mm_cvtsi128_si64(folded) as u64,
                _mm_movemask_epi8(zeros) != 0,
            )
        }
    }

    /// The 16 bytes of `p` at `i`, unaligned.
    ///
    /// # Safety
    /// `i + 16 <= p.len()`.
    #[inline(always)]
    unsafe fn load16(p: &[u8], i: usize) -> __m128i {
        debug_assert!(i + 16 <= p.len());
        // SAFETY: the 16 bytes at `i` are in `p` (the caller's promise); the load is unaligned.
        unsafe { _mm_loadu_si128(p.as_ptr().add(i).cast::<__m128i>()) }
    }
}

/// The eight bytes at `i` (the caller knows they are there) as a little-endian word.
#[inline(always)]
fn load8(p: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(p[i..i + 8].try_into().expect("eight bytes"))
}

/// Spreads every bit of `h` over the low bits, which the path cache indexes its sets by:
/// a multiply carries a byte's difference only upwards, so paths that differ in one byte
/// of their last word (`/d/f0001`, `/d/f0002`) would otherwise share their low bits.
#[inline(always)]
fn finish(h: u64) -> u64 {
    let h = (h ^ (h >> 32)).wrapping_mul(K2);
    h ^ (h >> 29)
}

/// A mask with the high bit set in each byte of `w` that is zero (exact for the lowest
/// zero byte, which is all the scan uses).
#[inline(always)]
fn zero_bytes(w: u64) -> u64 {
    zero_bits(w) & HIGHS
}

/// [`zero_bytes`] before its mask: ORs of these, masked once, are the ORs of the masks.
#[inline(always)]
fn zero_bits(w: u64) -> u64 {
    w.wrapping_sub(ONES) & !w
}

#[inline(always)]
fn mix(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(K1).rotate_left(29)
}

/// One component of a path with its hash.
#[derive(Clone, Copy, Debug)]
pub struct Component<'a> {
    /// The bytes, never containing `/`.
    pub bytes: &'a [u8],
    /// The word-at-a-time hash of `bytes`.
    pub hash: u64,
}

impl<'a> Component<'a> {
    /// Hashes `bytes` (one component, no `/`).
    #[cfg(all(test, not(loom)))]
    pub fn new(bytes: &'a [u8]) -> Component<'a> {
        let mut h = name_key();
        let mut i = 0;
        while i < bytes.len() {
            h = mix(h, load_word(bytes, i));
            i += 8;
        }
        Component { bytes, hash: h }
    }

    /// Whether this is `.`.
    #[inline]
    pub fn is_dot(&self) -> bool {
        self.bytes == b"."
    }

    /// Whether this is `..`.
    #[inline]
    pub fn is_dotdot(&self) -> bool {
        self.bytes == b".."
    }
}

/// The component hash's key: random, drawn once per process. Fixed under loom, whose
/// models must run the same way every time.
#[inline]
pub fn name_key() -> u64 {
    #[cfg(loom)]
    return 0;
    #[cfg(not(loom))]
    {
        static KEY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        *KEY.get_or_init(random_u64)
    }
}

/// A random 64-bit value (from the standard library's randomly keyed hasher, which the
/// operating system seeds).
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x9E37_79B9_7F4A_7C15);
    h.finish()
}

/// Scans the next component at the start of `p` (which has no leading slash), hashing as
/// it goes (from [`name_key`]). Returns the component and the length consumed (the
/// component only). Always inlined: it is the walk's inner loop, and the compiler's own
/// choice moved with the size of its callers (callgrind: out of line in `parent_of`,
/// create+close+unlink paid about 40 instructions more).
#[inline(always)]
pub fn scan(p: &[u8]) -> Component<'_> {
    let mut h = name_key();
    let mut i = 0;
    loop {
        let w = load_word(p, i);
        let avail = (p.len() - i).min(8);
        // Bytes past the end load as zero; a slash shows as a zero byte after the XOR.
        let slash = zero_bytes(w ^ SLASHES);
        let stop = if slash != 0 {
            (slash.trailing_zeros() / 8) as usize
        } else {
            8
        };
        let n = stop.min(avail);
        if n < 8 {
            let keep = if n == 0 {
                0
            } else {
                w & (u64::MAX >> (64 - 8 * n))
            };
            if n > 0 {
                h = mix(h, keep);
            }
            return Component {
                bytes: &p[..i + n],
                hash: h,
            };
        }
        h = mix(h, w);
        i += 8;
    }
}

/// The key a dentry is hashed under: its name's hash, its parent's address and its
/// table's key, through a full avalanche (Murmur3's finalizer), so that the bucket bits
/// depend on every bit of the name.
#[inline]
pub fn key_hash(table_key: u64, parent: usize, name_hash: u64) -> u64 {
    let mut x = (parent as u64 >> 4).wrapping_mul(K2) ^ name_hash ^ table_key;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Checks a component for `NAME_MAX`.
#[inline]
pub fn check_len(c: &Component<'_>) -> Result<()> {
    if c.bytes.len() > NAME_MAX {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(())
    }
}

/// The first [`INLINE`] bytes of a dentry's name, zero padded, in atomic words on the
/// dentry's lookup line; with [`LongName`], the name. Names hold no NUL byte, so the first
/// zero byte ends a name shorter than `INLINE`, and no length is kept: two names shorter
/// than `INLINE` are equal when their padded words are. A name of `INLINE` bytes or more
/// keeps its first `INLINE` bytes here too (none of them zero) and, if longer, its whole
/// self in the `LongName`, which a lookup reads only then. Written only under the owning
/// dentry's sequence counter (and its parent's lock); read with atomic loads under an
/// epoch guard.
#[repr(C)]
pub struct DName {
    words: [AtomicU64; WORDS],
}

/// The whole of a dentry's name when it is longer than [`INLINE`] bytes (an epoch-protected
/// buffer), or null. Kept off the dentry's lookup line: see [`DName`].
pub struct LongName(Atomic<Box<[u8]>>);

/// The word of `b` at byte `i`, zero padded, and zero past its end.
#[inline(always)]
fn word_at(b: &[u8], i: usize) -> u64 {
    if i < b.len() {
        load_word(b, i)
    } else {
        0
    }
}

impl DName {
    /// The inline part of a name holding `bytes`; [`LongName::new`] makes the rest.
    pub fn new(bytes: &[u8]) -> DName {
        debug_assert!(!bytes.contains(&0), "a name with a NUL byte");
        DName {
            words: std::array::from_fn(|i| AtomicU64::new(word_at(bytes, i * 8))),
        }
    }

    /// Replaces the name, both parts.
    ///
    /// # Safety
    /// The caller serializes writers (holds the parent directory lock and is inside the
    /// dentry's sequence-counter write section), and `guard` protects readers of the old
    /// buffer (or no reader can exist).
    pub unsafe fn set(&self, long: &LongName, bytes: &[u8], guard: &Guard) {
        debug_assert!(!bytes.contains(&0), "a name with a NUL byte");
        for (i, w) in self.words.iter().enumerate() {
            w.store(word_at(bytes, i * 8), Relaxed);
        }
        let new = if bytes.len() > INLINE {
            Owned::<Box<[u8]>>::new(bytes.into()).into_shared(guard)
        } else {
            crossbeam_epoch::Shared::null()
        };
        let old = long.0.swap(new, Release, guard);
        if !old.is_null() {
            // SAFETY: unlinked above; readers that still see it hold a guard.
            unsafe { guard.defer_destroy(old) };
        }
    }

    /// Whether the name equals `c`. Racy under rename: validate with the dentry's sequence
    /// counter before trusting a `true`.
    #[inline]
    pub fn eq(&self, long: &LongName, c: &[u8], guard: &Guard) -> bool {
        let n = c.len();
        if n > INLINE {
            return long.eq(c, guard);
        }
        // The words up to the one that holds the zero after `c` (or all three): equal, the
        // stored name ends where `c` does.
        if self.words[0].load(Relaxed) != word_at(c, 0) {
            return false;
        }
        if n < 8 {
            return true;
        }
        if self.words[1].load(Relaxed) != word_at(c, 8) {
            return false;
        }
        if n < 16 {
            return true;
        }
        if self.words[2].load(Relaxed) != word_at(c, 16) {
            return false;
        }
        // At exactly `INLINE` bytes, the stored name may go on in its long buffer.
        n < INLINE || long.is_empty(guard)
    }

    /// A copy of the name. Racy under rename, as [`DName::eq`].
    pub fn to_vec(&self, long: &LongName, guard: &Guard) -> Vec<u8> {
        // Through a buffer on the stack: extending a vector of `len` bytes by every
        // word grew it (a reallocation per name, 750 instructions of a `getdents`
        // entry's 850).
        let w: [u64; WORDS] = std::array::from_fn(|i| self.words[i].load(Relaxed));
        let mut buf = [0u8; INLINE];
        for (chunk, w) in buf.chunks_exact_mut(8).zip(w) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        // The name ends at the lowest zero byte (exact in `zero_bytes`).
        let at = |i: usize| i * 8 + zero_bytes(w[i]).trailing_zeros() as usize / 8;
        let len = if zero_bytes(w[0]) != 0 {
            Some(at(0))
        } else if zero_bytes(w[1]) != 0 {
            Some(at(1))
        } else if zero_bytes(w[2]) != 0 {
            Some(at(2))
        } else {
            None
        };
        match (len, long.get(guard)) {
            (Some(len), _) => buf[..len].to_vec(),
            (None, Some(b)) => b.to_vec(),
            (None, None) => buf.to_vec(),
        }
    }
}

impl LongName {
    /// The long part of a name holding `bytes`: null unless it is longer than [`INLINE`].
    pub fn new(bytes: &[u8]) -> LongName {
        LongName(if bytes.len() > INLINE {
            Atomic::new(bytes.into())
        } else {
            Atomic::null()
        })
    }

    /// The buffer, or `None` if the name fits inline.
    #[inline]
    fn get<'g>(&self, guard: &'g Guard) -> Option<&'g [u8]> {
        let p = self.0.load(Acquire, guard);
        // SAFETY: `guard` keeps the buffer alive; it is immutable once published.
        unsafe { p.as_ref() }.map(|b| &b[..])
    }

    /// Whether the name fits inline (no buffer).
    #[inline]
    fn is_empty(&self, guard: &Guard) -> bool {
        self.0.load(Acquire, guard).is_null()
    }

    /// Whether the buffer holds `c`; false if there is none.
    #[inline]
    fn eq(&self, c: &[u8], guard: &Guard) -> bool {
        self.get(guard) == Some(c)
    }
}

impl Drop for LongName {
    fn drop(&mut self) {
        // SAFETY: dropping means no reader remains (the dentry is reclaimed after a grace
        // period), so the buffer can go at once.
        unsafe {
            let g = crossbeam_epoch::unprotected();
            let p = self.0.load(Relaxed, g);
            if !p.is_null() {
                drop(p.into_owned());
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `load_word` is the bytes at `i`, little-endian and zero padded, for every length
    /// left: its overlapping loads put each byte where a byte-by-byte load would.
    #[test]
    fn load_word_pads_every_tail_with_zeros() {
        let bytes: Vec<u8> = (0..24u8).map(|b| b.wrapping_mul(37) | 1).collect();
        for len in 0..bytes.len() {
            for i in 0..=len {
                let rest = &bytes[i..len];
                let want = rest
                    .iter()
                    .take(8)
                    .enumerate()
                    .fold(0u64, |w, (k, &b)| w | (b as u64) << (8 * k));
                assert_eq!(load_word(&bytes[..len], i), want, "len {len}, at {i}");
            }
        }
    }

    /// Paths that differ in a byte or two (a tree's files) spread over the low bits of the
    /// hash as random values would: the path cache picks its set by them. 1,024 such paths
    /// over 512 sets fill about 443 of them at random; before `finish`, they filled 15.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "hash quality; the loads it runs are nul_detection's, and it took minutes under Miri"
    )]
    fn similar_paths_spread_over_the_low_bits() {
        // Width 40 makes paths longer than `VECTOR_MIN`: the AES path where the CPU has it.
        for width in [4usize, 12, 40] {
            let mut used = std::collections::HashSet::new();
            for i in 0..1024 {
                let p = format!("/w5/d{:02}/f{:0width$}", i % 16, i / 16);
                used.insert(path_hash(p.as_bytes()) % 512);
            }
            assert!(
                used.len() > 400,
                "{} of 512 sets for width {width}",
                used.len()
            );
        }
    }

    /// `bytes_eq` agrees with `==` for every length up to 40 and a difference at every
    /// position (its short cases read overlapping words: a byte read twice, or one missed,
    /// would show here), and for strings of different lengths with a common prefix.
    #[test]
    fn bytes_eq_agrees_with_slice_equality() {
        let base: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=40 {
            let a = &base[..n];
            assert!(bytes_eq(a, &base[..n]), "len {n}");
            for i in 0..n {
                let mut b = a.to_vec();
                b[i] ^= 0x20;
                assert!(!bytes_eq(a, &b), "len {n}, byte {i}");
            }
            for m in 0..=40 {
                assert_eq!(bytes_eq(a, &base[..m]), n == m, "len {n} against {m}");
                assert_eq!(
                    bytes_eq(a, &vec![0u8; m]),
                    a == &vec![0u8; m][..],
                    "len {n} against {m} zeros"
                );
            }
        }
    }

    #[test]
    fn scan_agrees_with_new() {
        for s in [
            &b"a"[..],
            b"abcdefg",
            b"abcdefgh",
            b"abcdefghi",
            b"0123456789abcdef0123456789abcdef0123456789",
            b"x",
        ] {
            let mut p = s.to_vec();
            let (cb, ch) = {
                let c = scan(&p);
                (c.bytes.to_vec(), c.hash)
            };
            assert_eq!(cb, s);
            assert_eq!(ch, Component::new(s).hash);
            p.extend_from_slice(b"/rest");
            let c2 = scan(&p);
            assert_eq!(c2.bytes, s);
            assert_eq!(c2.hash, ch);
        }
    }

    #[test]
    fn nul_detection() {
        assert!(!has_nul(b"/a/b/c/file"));
        assert!(has_nul(b"/a/b\0c"));
        assert!(has_nul(b"0123456789abcde\0"));
        assert!(has_nul(b"\0"));
        assert!(!has_nul(b""));
        assert!(has_nul(b"0123456789\0bcdefgh"));
        assert!(!has_nul(b"0123456789abcdefghi"));
        for n in 0..20 {
            let v = vec![b'a'; n];
            assert!(!has_nul(&v));
            for k in 0..n {
                let mut w = v.clone();
                w[k] = 0;
                assert!(has_nul(&w), "missed a NUL at {k} of {n}");
            }
        }
        assert_ne!(path_hash(b"/a/b"), path_hash(b"/a/c"));
        // Every non-zero byte value, at every offset of every lane: no false NUL.
        // Under Miri (where this test took seven minutes) every 13th length and shift:
        // 13 is odd, so the shifts still fall on every offset of an 8- or 16-byte word.
        let all: Vec<u8> = (0..600).map(|i| (i % 255 + 1) as u8).collect();
        for n in (0..all.len()).step_by(if cfg!(miri) { 13 } else { 1 }) {
            assert!(!path_hash_nul(&all[..n]).1, "a false NUL in {n} bytes");
            assert!(!path_hash_nul(&all[n % 255..]).1);
        }
        // Up to 200 bytes: several of the AES path's 64-byte blocks, 16-byte steps and tails.
        for n in 0..if cfg!(miri) { 40 } else { 200 } {
            let v = vec![b'a'; n];
            assert!(!path_hash_nul(&v).1);
            for k in 0..n {
                let mut w = v.clone();
                w[k] = 0;
                assert!(path_hash_nul(&w).1, "missed a NUL at {k} of {n}");
            }
        }
    }

    /// The AES path finds every NUL byte the word path finds, and no other, and a change
    /// of any one byte of a path (or of its length) changes its hash: every length up to
    /// 300, every offset. Where the CPU lacks AES-NI or AVX, there is nothing to check.
    #[test]
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    fn aes_path_agrees_with_words() {
        if !aes::available() {
            eprintln!("no AES-NI and AVX here: the word path serves every length");
            return;
        }
        // SAFETY: `available` said yes, and every path passed is longer than 16 bytes.
        let hash = |p: &[u8]| unsafe { aes::path_hash_nul(p) };
        let all: Vec<u8> = (0..300).map(|i| (i % 251 + 1) as u8).collect();
        let mut lengths = std::collections::HashSet::new();
        for n in 17..all.len() {
            let v = &all[..n];
            let (base, nul) = hash(v);
            assert!(
                !nul && !path_hash_nul_words(v).1,
                "a false NUL in {n} bytes"
            );
            assert!(
                lengths.insert(base),
                "length {n} collides with a shorter prefix"
            );
            // Any two of these differ in one or two bytes, in the same or different blocks
            // and lanes, by the same or different bits.
            let mut seen = std::collections::HashSet::from([base]);
            for k in 0..n {
                let mut w = v.to_vec();
                w[k] = 0;
                assert!(hash(&w).1 && path_hash_nul_words(&w).1, "NUL at {k} of {n}");
                for bits in [0x01, 0x20, 0xfe] {
                    w[k] = v[k] ^ bits;
                    assert!(
                        seen.insert(hash(&w).0),
                        "byte {k} of {n} ^ {bits:#x}: a collision"
                    );
                }
            }
        }
        // Deep paths of a tree (W3's shape: 40-byte names, numbered at both ends, 3 to 16
        // deep): 64-bit hashes of 20,000 of them, all different.
        let mut seen = std::collections::HashSet::new();
        for i in 0..20_000u32 {
            let x = "x".repeat(34);
            let p: String = (0..3 + i % 14)
                .map(|c| format!("/{:03}{x}{:03}", (i + c) % 997, i / 997 + c))
                .collect();
            assert!(seen.insert(hash(p.as_bytes()).0), "{p}: a collision");
        }
    }

    #[test]
    fn scan_stops_at_slash() {
        assert_eq!(scan(b"ab/cd").bytes, b"ab");
        assert_eq!(scan(b"/cd").bytes, b"");
        assert_eq!(scan(b"").bytes, b"");
        assert_eq!(scan(b"12345678/x").bytes, b"12345678");
        assert_eq!(scan(b"123456789/x").bytes, b"123456789");
    }

    /// A name of every length up to past the inline bytes, and its prefixes and
    /// extensions: `eq` says equal exactly when the bytes are, and `to_vec` gives the bytes
    /// back in a vector of just their length (a listing holds one per entry), whether the
    /// name was made or set over another.
    #[test]
    fn dname_compares_and_copies_at_every_length() {
        let g = crossbeam_epoch::pin();
        let names: Vec<Vec<u8>> = (0..=INLINE + 9)
            .map(|len| (0..len).map(|i| b'a' + (i % 26) as u8).collect())
            .collect();
        for a in &names {
            let made = (DName::new(a), LongName::new(a));
            let set = (DName::new(b"x"), LongName::new(b"x"));
            for b in &names {
                // SAFETY: single-threaded test; guard held.
                unsafe { set.0.set(&set.1, b, &g) };
                // SAFETY: as above.
                unsafe { set.0.set(&set.1, a, &g) };
                for (n, how) in [(&made, "made"), (&set, "set")] {
                    assert_eq!(n.0.eq(&n.1, b, &g), a == b, "{how} {a:?} against {b:?}");
                    let v = n.0.to_vec(&n.1, &g);
                    assert_eq!(&v, a, "{how}");
                    assert_eq!(v.capacity(), a.len(), "{how}");
                }
            }
            // One byte changed anywhere is another name.
            for i in 0..a.len() {
                let mut other = a.clone();
                other[i] = b'Z';
                assert!(!made.0.eq(&made.1, &other, &g), "{a:?} at {i}");
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::SeqCount;
    use loom::sync::Arc;
    use loom::thread;
    use std::sync::atomic::{AtomicBool as StdBool, Ordering::SeqCst};

    /// A rename rewrites a name from `old` to `new` (inside the dentry's write section, when
    /// `sequenced`) while a lookup compares it with `probe`. A compare that validates must
    /// be right: true only if `probe` is `old` or `new`. Returns whether some execution
    /// validated a wrong answer.
    fn set_vs_compare(
        old: &'static [u8],
        new: &'static [u8],
        probe: Vec<u8>,
        sequenced: bool,
    ) -> bool {
        let wrong = std::sync::Arc::new(StdBool::new(false));
        let seen = wrong.clone();
        let heap = old.len() > INLINE || new.len() > INLINE;
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let seq = Arc::new(SeqCount::new());
            let name = Arc::new((DName::new(old), LongName::new(old)));
            let w = {
                let (seq, name) = (seq.clone(), name.clone());
                thread::spawn(move || {
                    if sequenced {
                        seq.write_begin();
                    }
                    if heap {
                        let g = crossbeam_epoch::pin();
                        // SAFETY: the only writer; the guard protects readers of the old
                        // buffer.
                        unsafe { name.0.set(&name.1, new, &g) };
                    } else {
                        // SAFETY: the only writer, and no heap buffer is involved.
                        unsafe { name.0.set(&name.1, new, crossbeam_epoch::unprotected()) };
                    }
                    if sequenced {
                        seq.write_end();
                    }
                })
            };
            let truth = probe[..] == *old || probe[..] == *new;
            let check = |g: &Guard| {
                if let Some(s) = seq.read_begin() {
                    let eq = name.0.eq(&name.1, &probe, g);
                    if !seq.read_retry(s) && eq && !truth {
                        seen.store(true, SeqCst);
                    }
                }
            };
            if heap {
                check(&crossbeam_epoch::pin());
            } else {
                // SAFETY: no heap buffer is involved.
                check(unsafe { crossbeam_epoch::unprotected() });
            }
            w.join().unwrap();
        });
        wrong.load(SeqCst)
    }

    const OLD: &[u8] = b"AAAAAAAABBBBBBBB";
    const NEW: &[u8] = b"CCCCCCCCDDDDDDDD";

    /// Inline names, two words each: neither half-and-half mix validates.
    #[test]
    fn dname_inline_set_vs_compare() {
        assert!(!set_vs_compare(
            OLD,
            NEW,
            b"CCCCCCCCBBBBBBBB".to_vec(),
            true
        ));
        assert!(!set_vs_compare(
            OLD,
            NEW,
            b"AAAAAAAADDDDDDDD".to_vec(),
            true
        ));
    }

    /// An inline name replaced by a long one (a heap buffer published by pointer), and back.
    #[test]
    fn dname_long_set_vs_compare() {
        let long: &'static [u8] = b"0123456789012345678901234567890123456789";
        let mut torn = long.to_vec();
        torn[0] = b'a';
        assert!(!set_vs_compare(b"ab", long, torn.clone(), true));
        assert!(!set_vs_compare(long, b"ab", torn, true));
    }

    /// A short name replaced by a long one whose first 24 bytes (the inline words) are a
    /// name of exactly 24 bytes: a compare that read the new words and the old, empty
    /// buffer would take the name for those 24 bytes, and must not validate.
    #[test]
    fn dname_inline_prefix_of_a_long_name() {
        let long: &'static [u8] = b"012345678901234567890123-and-more";
        let prefix = long[..INLINE].to_vec();
        assert!(!set_vs_compare(b"ab", long, prefix.clone(), true));
        assert!(!set_vs_compare(long, b"ab", prefix, true));
    }

    /// Without the write section, a torn name validates: the model sees it.
    #[test]
    fn dname_unsequenced_set_is_caught() {
        assert!(set_vs_compare(
            OLD,
            NEW,
            b"CCCCCCCCBBBBBBBB".to_vec(),
            false
        ));
    }
}
