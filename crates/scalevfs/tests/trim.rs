//! The inode cache's trim, alone in its binary: how much it searches depends on how soon
//! evicted names are freed, and other tests' pins in the same process hold that back.

use scalevfs::*;

mod scratch;

/// The inode cache is trimmed by number: the objects whose names the dentry cache's sweeps
/// evicted go once their names' grace period has passed, and the inode cache's own sweep,
/// which must ask every object it passes (two cold lines each), has almost nothing left to
/// search. Before, with the names' cap equal to the objects' cap, the named objects alone
/// kept the cache at its cap: every trim searched the whole cache for a few victims. (On a
/// budget now: directories this large against the cap keep it over, whatever it searches.)
#[test]
fn a_capped_cache_evicts_swept_objects_by_number() {
    let cap = 1000;
    let (_dir, vfs) = scratch::capped_tree("by-number", 8, 500, cap);
    let p = vfs.process(Creds::root());
    let mut peak = 0;
    for _ in 0..4 {
        for d in 0..8 {
            for f in 0..500 {
                p.lstat(format!("/d{d}/f{f}")).unwrap();
            }
            scalevfs::clear_thread_cache();
            // The grace period of the last sweep's names (other tests pin too).
            for _ in 0..64 {
                crossbeam_epoch::pin().flush();
            }
            peak = peak.max(vfs.stats().root_fs.dentries);
        }
    }
    let st = vfs.stats().root_fs;
    let c = st.inode_cache.unwrap();
    // The names' cap is three quarters of the objects' (plus a directory's load).
    assert!(peak <= cap * 3 / 4 + 500 + 9, "peak {peak} dentries");
    assert!(c.evictions >= 10_000, "{c:?}");
    // 0.28 nodes searched per eviction here; 3.5 when the sweeps' numbers were not used,
    // and more with both caps equal.
    assert!(
        c.searched * 2 <= c.evictions,
        "the inode cache searched {} nodes for {} evictions",
        c.searched,
        c.evictions
    );
}
