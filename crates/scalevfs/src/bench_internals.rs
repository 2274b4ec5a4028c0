//! Thin wrappers over engine internals for the criterion micro-benchmarks
//! (`benches/primitives.rs`). Not part of the API: hidden from the docs, no stability
//! promise. Each wrapper calls the engine's own function and adds nothing to it, so a
//! benchmark measures the primitive the walk runs. [`crate::sync::SeqCount`] and
//! [`crate::sync::RefCount`] are public already and need no wrapper.

use crate::dentry::{DRef, RcuLookup};
use crate::mount::Mount;
use crate::name::{self, Component};
use crate::Vfs;
use std::sync::Arc;

/// The engine's epoch guard: every call pins with `crossbeam_epoch::pin()` directly.
pub use crossbeam_epoch::{pin, Guard};

/// The walk's component scan (`name::scan`): finds the end of the component at the start
/// of `p` (at a `/` or the end) and hashes it a word at a time. Returns the component's
/// length and hash.
#[inline]
pub fn scan(p: &[u8]) -> (usize, u64) {
    let c = name::scan(p);
    (c.bytes.len(), c.hash)
}

/// The whole-path hash and NUL check of a user path (`name::path_hash_nul`, the path
/// cache's key).
#[inline]
pub fn path_hash_nul(p: &[u8]) -> (u64, bool) {
    name::path_hash_nul(p)
}

/// [`path_hash_nul`] a word at a time, whatever the CPU has (`name::path_hash_nul_words`:
/// what paths up to 32 bytes always take, and every path where AES-NI is missing).
#[inline]
pub fn path_hash_nul_words(p: &[u8]) -> (u64, bool) {
    name::path_hash_nul_words(p)
}

/// The dentry hash key of (table key, parent address, name hash) (`name::key_hash`).
#[inline]
pub fn key_hash(parent: usize, name_hash: u64) -> u64 {
    name::key_hash(0x5eed, parent, name_hash)
}

/// A component and its hash, computed once, to probe the dentry hash with.
#[derive(Clone, Debug)]
pub struct Name {
    bytes: Box<[u8]>,
    hash: u64,
}

impl Name {
    /// Hashes `bytes` as the walk would (one component: no `/`).
    pub fn new(bytes: &[u8]) -> Name {
        let (n, hash) = scan(bytes);
        assert_eq!(n, bytes.len(), "a component holds no '/'");
        Name {
            bytes: bytes.into(),
            hash,
        }
    }

    #[inline]
    fn component(&self) -> Component<'_> {
        Component {
            bytes: &self.bytes,
            hash: self.hash,
        }
    }
}

/// A directory of the root mount, held by a counted reference, whose children are looked
/// up in its file system's dentry hash.
pub struct Dir {
    // Declared first so it is dropped before the mount that owns the file system.
    d: DRef,
    mnt: Arc<Mount>,
}

impl Dir {
    /// The directory at the absolute `path` of `vfs`'s root mount, found through the dentry
    /// hash (every component must be cached, a directory, and no mount point or symlink);
    /// `None` if a lookup does not find it.
    pub fn open(vfs: &Arc<Vfs>, path: &[u8]) -> Option<Dir> {
        let mnt = vfs.root_mount().clone();
        let mut d = mnt.root.clone();
        for c in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            let name = Name::new(c);
            let guard = pin();
            let RcuLookup::Found(child, _) =
                mnt.fs.dcache.lookup_rcu(&d, &name.component(), &guard)
            else {
                return None;
            };
            child.inode(&guard)?.dir()?;
            d = DRef::try_get(child)?;
        }
        Some(Dir { d, mnt })
    }

    /// The lockless dentry hash probe (`DHash::lookup_rcu`) for the child `name`: `true` for
    /// a validated match (positive or negative entry), `false` when the walk would fall
    /// back to the locked lookup (always the case for a name never looked up).
    #[inline]
    pub fn lookup_rcu(&self, name: &Name, guard: &Guard) -> bool {
        matches!(
            self.mnt
                .fs
                .dcache
                .lookup_rcu(&self.d, &name.component(), guard),
            RcuLookup::Found(..)
        )
    }

    /// A new counted reference to the directory's dentry.
    pub fn dref(&self) -> DentryRef {
        DentryRef(self.d.clone())
    }
}

/// A counted dentry reference (`DRef`): clone takes a reference, drop gives it up.
#[derive(Clone)]
pub struct DentryRef(#[allow(dead_code)] DRef);
