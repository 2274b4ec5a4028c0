//! The allocator the `scalevfs` command, the engine's examples and its benchmarks link:
//! mimalloc 3 (`libmimalloc-sys`), asked the way it serves fastest, and set up so that
//! the engine's caches do not send their own frees down the cross-thread path.
//!
//! # Why not `mimalloc::MiMalloc`
//! The `mimalloc` crate (0.1.52) asks every allocation through `mi_malloc_aligned`, the
//! type's alignment 8 included. mimalloc 3 serves that from its fast path only while the
//! size class's current page has a free block; when it has none (every new page, so over
//! and over while the engine fills a cache) the request takes the generic aligned path,
//! and for a size class that is not a power of two (an inode was 168 bytes, class 192;
//! hostfs's nodes, vectors, strings) that path *over-allocates* (`size + alignment - 1`)
//! and marks the page as holding interior pointers, which every later free into it then
//! checks. `Alloc` asks a request whose alignment malloc guarantees anyway (at most 16
//! bytes, and no more than its size, the rule std's own allocator uses) with `mi_malloc`,
//! and only the others with `mi_malloc_aligned`. Measured by `bash scripts/icount.sh`
//! (see BENCHMARKS.md): a memfs create costs 2.5% fewer instructions.
//!
//! # Full pages
//! [`keep_full_pages`] sets mimalloc's `page_full_retain` to -1; see its docs.
#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;
use libmimalloc_sys as mi;

/// The alignment every `mi_malloc` block of at least that size has (`MI_MAX_ALIGN_SIZE`).
const MALLOC_ALIGN: usize = 16;

/// mimalloc as a global allocator. See the crate docs.
pub struct Alloc;

/// Whether `mi_malloc(size)` already returns a block aligned to `align`: mimalloc's
/// blocks are aligned to 16 bytes, and a block smaller than 16 to its size's power of
/// two (std's `System` allocator makes the same test of `malloc`).
#[inline(always)]
fn plain(align: usize, size: usize) -> bool {
    align <= MALLOC_ALIGN && align <= size
}

// SAFETY: every block comes from mimalloc and goes back to it (`mi_free` takes any of its
// blocks, aligned or not); a block is at least the layout's size and is aligned to its
// alignment: by `mi_malloc_aligned`, or by `mi_malloc` only where `plain` holds.
unsafe impl GlobalAlloc for Alloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            // SAFETY: takes no pointer.
            unsafe { mi::mi_malloc(layout.size()) as *mut u8 }
        } else {
            // SAFETY: takes no pointer; the alignment is a power of two (a `Layout`'s).
            unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8 }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            // SAFETY: takes no pointer.
            unsafe { mi::mi_zalloc(layout.size()) as *mut u8 }
        } else {
            // SAFETY: as in `alloc`.
            unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8 }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller gives back a block of this allocator's, once.
        unsafe { mi::mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            // SAFETY: the caller gives a live block of this allocator's; mimalloc keeps
            // the contents up to the smaller size.
            unsafe { mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8 }
        } else {
            // SAFETY: as above, with the layout's power-of-two alignment.
            unsafe {
                mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
            }
        }
    }
}

/// mimalloc's `mi_option_page_full_retain` (its place in `mi_option_e`, mimalloc.h of the
/// mimalloc 3 that libmimalloc-sys 0.1.49 builds; a test checks it by the option's
/// default).
const MI_OPTION_PAGE_FULL_RETAIN: mi::mi_option_t = 36;

/// Keeps each thread's full allocator pages its own. mimalloc 3 *abandons* a thread's
/// full pages past two per size class, so that other threads may take them over; every
/// later free into such a page, by its own thread too, takes the cross-thread path (an
/// atomic push, then an attempt to reclaim the page). The engine's caches fill pages and
/// free into them at every eviction: in W5 at two threads that path was about 300
/// instructions a stat (callgrind, `examples/cold_tree`), and none at one thread, where
/// the runs are on the main thread. With a retain of -1 a full page stays in its thread's
/// full queue (mimalloc 2's way), and two threads run W5 in the same instructions per stat
/// as one. Threads started after this call get it: call it first in `main`.
pub fn keep_full_pages() {
    // SAFETY: `mi_option_set` takes no pointer; mimalloc reads the option when it sets up
    // each thread's heap.
    unsafe { mi::mi_option_set(MI_OPTION_PAGE_FULL_RETAIN, -1) };
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    #[global_allocator]
    static A: Alloc = Alloc;

    /// `MI_OPTION_PAGE_FULL_RETAIN` is the option whose default is 2, between two whose
    /// defaults are 0 (`page_reclaim_on_free`) and 4 (`page_max_candidates`): a mimalloc
    /// whose options moved would fail here rather than have `keep_full_pages` set another.
    #[test]
    fn the_full_page_option_is_the_one_named() {
        let k = MI_OPTION_PAGE_FULL_RETAIN;
        // SAFETY: `mi_option_get` takes no pointer.
        let got = unsafe { [k - 1, k, k + 1].map(|o| mi::mi_option_get(o)) };
        assert_eq!(got, [0, 2, 4]);
    }

    /// Every block is aligned as its layout asks, through both paths, for sizes around
    /// each alignment, and reallocation keeps the contents and the alignment.
    #[test]
    fn blocks_have_the_alignment_asked() {
        for align in [1usize, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for size in [1usize, 3, 8, 15, 16, 17, 100, 128, 168, 200, 5000] {
                let l = Layout::from_size_align(size, align).unwrap();
                let blocks: Vec<*mut u8> = (0..300)
                    // SAFETY: a layout of non-zero size.
                    .map(|_| unsafe { A.alloc(l) })
                    .collect();
                for &b in &blocks {
                    assert!(!b.is_null());
                    assert_eq!(b as usize % align, 0, "size {size} align {align}: {b:p}");
                    // SAFETY: `b` is `size` writable bytes.
                    unsafe { b.write_bytes(0xa5, size) };
                }
                for b in blocks {
                    // SAFETY: as above; the grown block is `2 * size + 1` bytes.
                    unsafe {
                        let z = A.alloc_zeroed(l);
                        assert!(core::slice::from_raw_parts(z, size).iter().all(|&x| x == 0));
                        assert_eq!(z as usize % align, 0);
                        A.dealloc(z, l);
                        let r = A.realloc(b, l, 2 * size + 1);
                        assert_eq!(r as usize % align, 0, "realloc {size} align {align}");
                        assert!(core::slice::from_raw_parts(r, size)
                            .iter()
                            .all(|&x| x == 0xa5));
                        let grown = Layout::from_size_align(2 * size + 1, align).unwrap();
                        A.dealloc(r, grown);
                    }
                }
            }
        }
    }
}
