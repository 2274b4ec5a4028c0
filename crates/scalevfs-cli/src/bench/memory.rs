//! W12: bytes of memory per empty file.
//!
//! Each system builds the same tree, `w12/d<i>/f<j>`, of empty regular files, [`PER_DIR`] to a
//! directory, and the figure is the memory the tree added over the number of files.
//!
//! - **In-process systems** (scalevfs and the peers) are measured in a child process of their
//!   own (this binary, re-run with a hidden flag): the growth of its resident set (`statm`)
//!   while it builds the tree. A fresh process keeps memory that earlier workloads freed, and
//!   that the allocator would hand out again, from hiding part of the growth. The figure
//!   includes everything the tree costs: the system's own structures, the allocator's
//!   overhead, and the pages it holds. Each reading comes after the heap settled
//!   (`settle_heap`: deferred frees run, empty pages given back), so memory freed while
//!   the tree was built does not count.
//! - **The kernel** (tmpfs) keeps its files in kernel memory: the figure is the growth of
//!   `Slab` in `/proc/meminfo` (dentries, shmem inodes, and what they point to), with the
//!   object sizes of the `dentry` and `shmem_inode_cache` slabs as context where
//!   `/proc/slabinfo` is readable. Other activity on the machine shows up in this figure; with
//!   a million files it is small against the tree.

use std::process::Command;
use std::time::Duration;

use super::target::{Engine, Kernel, System, Target};
#[cfg(feature = "peers")]
use super::target::{VfsMem, WasmerMem};
use super::Error;

/// Files per directory of the tree.
pub const PER_DIR: usize = 1000;

/// One system's figure.
#[derive(Clone, Debug)]
pub struct MemFigure {
    /// The system.
    pub system: System,
    /// Files in the tree.
    pub files: usize,
    /// Memory added by the tree, over `files`.
    pub bytes_per_file: f64,
    /// How it was measured, and what else is known (object sizes).
    pub detail: String,
}

/// Builds `w12/d<i>/f<j>`: `files` empty files, [`PER_DIR`] to a directory.
fn fill<T: Target>(t: &T, files: usize) -> Result<(), Error> {
    let mkdir = |rel: &str| {
        let p = t.path(rel);
        t.mkdir(&p, 0o755)
            .map_err(|e| Error::from(format!("mkdir {p:?}: {e}")))
    };
    mkdir("w12")?;
    for i in 0..files.div_ceil(PER_DIR) {
        mkdir(&format!("w12/d{i}"))?;
        for j in 0..PER_DIR.min(files - i * PER_DIR) {
            let p = t.path(&format!("w12/d{i}/f{j}"));
            t.create_close(&p, 0o644)
                .map_err(|e| format!("create {p:?}: {e}"))?;
        }
    }
    Ok(())
}

/// Removes what [`fill`] built.
fn empty<T: Target>(t: &T, files: usize) -> Result<(), Error> {
    for i in 0..files.div_ceil(PER_DIR) {
        for j in 0..PER_DIR.min(files - i * PER_DIR) {
            let p = t.path(&format!("w12/d{i}/f{j}"));
            t.unlink(&p).map_err(|e| format!("unlink {p:?}: {e}"))?;
        }
        let p = t.path(&format!("w12/d{i}"));
        t.rmdir(&p).map_err(|e| format!("rmdir {p:?}: {e}"))?;
    }
    let p = t.path("w12");
    t.rmdir(&p)
        .map_err(|e| Error::from(format!("rmdir {p:?}: {e}")))
}

/// This process's resident set, in bytes.
fn rss() -> Result<u64, Error> {
    let statm = std::fs::read_to_string("/proc/self/statm")
        .map_err(|e| format!("/proc/self/statm: {e}"))?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| format!("/proc/self/statm: unexpected {statm:?}"))?;
    Ok(pages * rustix::param::page_size() as u64)
}

/// A field of `/proc/meminfo`, in bytes.
fn meminfo(field: &str) -> Result<u64, Error> {
    let info =
        std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("/proc/meminfo: {e}"))?;
    info.lines()
        .find_map(|l| {
            let rest = l.strip_prefix(field)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
        .map(|kb| kb * 1024)
        .ok_or_else(|| format!("/proc/meminfo has no {field}").into())
}

/// The object size of slab cache `name`, from `/proc/slabinfo` (root only).
fn slab_object_size(name: &str) -> Option<u64> {
    let info = std::fs::read_to_string("/proc/slabinfo").ok()?;
    info.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next()? == name).then_some(())?;
        // name active_objs num_objs objsize ...
        f.nth(2)?.parse().ok()
    })
}

/// Lets freed kernel objects (RCU-deferred) and this process's allocator settle.
fn settle() {
    std::thread::sleep(Duration::from_millis(300));
}

/// Brings this process's heap to what is live before a reading of the resident set: the
/// engine's deferred frees run (a few grace periods), and the allocator gives back the
/// pages that freed memory left empty (`mi_collect`). Without it, memory a system freed
/// while it built the tree (a hash table's old array after it grew) still counted,
/// whether the allocator had purged it by the reading or not: the `vfs` crate's figure
/// was 252 B or 346 B per file from one run to the next.
fn settle_heap() {
    for _ in 0..64 {
        scalevfs::clear_thread_cache();
    }
    // SAFETY: `mi_collect` takes no pointer; this binary's allocator is mimalloc
    // (`main.rs`), whose collection only returns pages no live allocation uses.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

/// The kernel's figure, on tmpfs under `k`'s directory.
pub fn kernel(k: &Kernel, files: usize) -> Result<MemFigure, Error> {
    settle();
    let before = meminfo("Slab")? + meminfo("Shmem")?;
    fill(k, files)?;
    settle();
    let after = meminfo("Slab")? + meminfo("Shmem")?;
    empty(k, files)?;
    let mut detail = "growth of Slab + Shmem in /proc/meminfo".to_owned();
    if let (Some(d), Some(i)) = (
        slab_object_size("dentry"),
        slab_object_size("shmem_inode_cache"),
    ) {
        detail.push_str(&format!(
            "; slab objects: dentry {d} B, shmem_inode_cache {i} B"
        ));
    }
    Ok(MemFigure {
        system: System::Kernel,
        files,
        bytes_per_file: after.saturating_sub(before) as f64 / files as f64,
        detail,
    })
}

/// An in-process system's figure, measured in a child process ([`child`]).
pub fn in_child(system: System, files: usize) -> Result<MemFigure, Error> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let out = Command::new(&exe)
        .args(["bench", "--memory-child", system.name(), "--memory-files"])
        .arg(files.to_string())
        .output()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "W12 on {}: child failed ({}): {}",
            system.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let (bytes, detail) = stdout
        .trim()
        .split_once(' ')
        .and_then(|(b, d)| Some((b.parse::<u64>().ok()?, d.to_owned())))
        .ok_or_else(|| format!("W12 on {}: unexpected output {stdout:?}", system.name()))?;
    Ok(MemFigure {
        system,
        files,
        bytes_per_file: bytes as f64 / files as f64,
        detail,
    })
}

/// The child's side: builds the tree on a fresh `system` and prints the growth of the
/// resident set in bytes, then a description.
pub fn child(system: System, files: usize) -> Result<(), Error> {
    fn measure<T: Target>(t: T, files: usize) -> Result<u64, Error> {
        settle_heap();
        let before = rss()?;
        fill(&t, files)?;
        settle_heap();
        let after = rss()?;
        // The tree is still alive here: `t` is dropped after the second reading.
        drop(t);
        Ok(after.saturating_sub(before))
    }
    let (bytes, what) = match system {
        System::Scalevfs => (measure(Engine::new_memfs(), files)?, scalevfs_layout()),
        #[cfg(feature = "peers")]
        System::Vfs => (measure(VfsMem::new(), files)?, String::new()),
        #[cfg(feature = "peers")]
        System::Wasmer => (measure(WasmerMem::new(), files)?, String::new()),
        #[cfg(not(feature = "peers"))]
        System::Vfs | System::Wasmer => {
            return Err(format!("{} is not in this build", system.name()).into())
        }
        System::Kernel | System::Fuse | System::Control => {
            return Err(format!("W12 is not measured in a child for {}", system.name()).into())
        }
    };
    let mut detail = "growth of the resident set of a fresh process".to_owned();
    if !what.is_empty() {
        detail.push_str("; ");
        detail.push_str(&what);
    }
    println!("{bytes} {detail}");
    Ok(())
}

/// The sizes of scalevfs's per-file structures, from the engine.
fn scalevfs_layout() -> String {
    let l = scalevfs::layout();
    format!(
        "dentry {} B, inode {} B (allocated with its reference count: {} B)",
        l.dentry, l.inode, l.inode_alloc
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_empty_build_and_remove_the_tree() {
        let t = Engine::new_memfs();
        fill(&t, 2 * PER_DIR + 5).unwrap();
        assert!(t.stat(&t.path("w12/d2/f4")).unwrap().is_file());
        assert!(t.stat(&t.path("w12/d2/f5")).is_err());
        empty(&t, 2 * PER_DIR + 5).unwrap();
        assert!(t.stat(&t.path("w12")).is_err());
    }

    #[test]
    fn meminfo_and_rss_read() {
        assert!(meminfo("MemTotal").unwrap() > 0);
        assert!(rss().unwrap() > 0);
    }
}
