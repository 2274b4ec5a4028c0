//! The node table: FUSE node ids and the engine handles behind them.
//!
//! # Ids
//! The kernel names files by node id; the engine names them by open description. Every
//! node the kernel knows holds one engine `O_PATH | O_NOFOLLOW` handle (`H`: a
//! [`scalevfs::Handle`] in the server, a plain number in the tests), keyed by the object's
//! (`st_dev`, `st_ino`), so that two hard links of one file are one node. On the file
//! system mounted at the FUSE root (the primary device) the node id *is* the engine's inode
//! number: memfs never reuses one and its root is inode 1, FUSE's root id. fuser sends the
//! node id as `st_ino` too, so `stat` and `readdir` agree. Objects of other devices (engine
//! mounts inside the tree) get ids from a separate range ([`SYNTHETIC_BASE`] up).
//!
//! # Lookup counts
//! Each reply that hands the kernel a node (lookup, mknod, mkdir, symlink, link, create,
//! readdirplus) counts one lookup; `forget(id, n)` takes `n` away. At zero the node leaves
//! the table and its handle is returned to the caller to drop; the kernel no longer
//! refers to the id. A lookup that races with a forget of the same node is ordered by the
//! table lock: either it revives the count first, or the forget removes the node and the
//! lookup inserts a new one under the same id (with its own handle). The root is never
//! forgotten.
//!
//! The table only hands out and takes back handles; it never calls the engine, so the
//! caller drops what [`NodeTable::forget`] and [`NodeTable::remember`] return outside the
//! table lock (dropping the last handle of an unlinked file frees its data).

use std::collections::HashMap;

/// A FUSE node id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct NodeId(pub u64);

impl NodeId {
    /// FUSE's root node.
    pub const ROOT: NodeId = NodeId(1);
}

/// First id given to objects that are not on the primary device.
pub const SYNTHETIC_BASE: u64 = 1 << 63;

/// An object's identity in the engine: (`st_dev`, `st_ino`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ObjKey {
    /// Device.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

#[derive(Debug)]
struct Node<H> {
    fd: H,
    key: ObjKey,
    /// Lookups the kernel has not forgotten yet.
    lookups: u64,
}

/// Node ids, their handles and lookup counts. Not synchronized: the caller wraps it in
/// a mutex.
#[derive(Debug)]
pub struct NodeTable<H> {
    nodes: HashMap<NodeId, Node<H>>,
    by_key: HashMap<ObjKey, NodeId>,
    primary_dev: u64,
    next_synthetic: u64,
}

impl<H: Clone> NodeTable<H> {
    /// A table whose root node (id 1) is `root_fd`, the object `root`.
    pub fn new(root_fd: H, root: ObjKey) -> NodeTable<H> {
        let mut t = NodeTable {
            nodes: HashMap::new(),
            by_key: HashMap::new(),
            primary_dev: root.dev,
            next_synthetic: SYNTHETIC_BASE,
        };
        t.nodes.insert(
            NodeId::ROOT,
            Node {
                fd: root_fd,
                key: root,
                lookups: 1,
            },
        );
        t.by_key.insert(root, NodeId::ROOT);
        t
    }

    /// The handle of node `id` (a clone), if the kernel may still name it.
    pub fn fd(&self, id: NodeId) -> Option<H> {
        self.nodes.get(&id).map(|n| n.fd.clone())
    }

    /// The node of object `key`, if there is one.
    pub fn find(&self, key: ObjKey) -> Option<NodeId> {
        self.by_key.get(&key).copied()
    }

    /// The lookup count of node `id` (0 if it is not in the table).
    pub fn lookups(&self, id: NodeId) -> u64 {
        self.nodes.get(&id).map_or(0, |n| n.lookups)
    }

    /// How many nodes (the root included) the table holds.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the table holds only the root.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// The id a new node of `key` gets: its inode number on the primary device, unless a
    /// node holds that id already (the root, or a stale node of an object whose number the
    /// file system gave to a new one), else one of the synthetic range.
    fn new_id(&mut self, key: ObjKey) -> NodeId {
        if key.dev == self.primary_dev
            && key.ino < SYNTHETIC_BASE
            && !self.nodes.contains_key(&NodeId(key.ino))
        {
            return NodeId(key.ino);
        }
        let id = NodeId(self.next_synthetic);
        self.next_synthetic += 1;
        id
    }

    /// Counts one lookup of object `key`, whose fresh handle is `fd`. Returns the node id
    /// and, when the object already had a node, `fd` back for the caller to drop. `stale`
    /// tells whether the handle of the node found under `key` is of another object than
    /// `fd`'s (a file system that reuses inode numbers, such as hostfs: the old object is
    /// gone, but the kernel may still name its node); the new object then gets a node of
    /// its own, and the old one stays until the kernel forgets it.
    pub fn remember(
        &mut self,
        key: ObjKey,
        fd: H,
        stale: impl FnOnce(&H) -> bool,
    ) -> (NodeId, Option<H>) {
        let found = self.by_key.get(&key).copied();
        let id = match found {
            Some(id) if !self.nodes.get(&id).is_some_and(|n| stale(&n.fd)) => id,
            _ => self.new_id(key),
        };
        match self.nodes.get_mut(&id) {
            Some(n) => {
                debug_assert_eq!(n.key, key);
                n.lookups += 1;
                (id, Some(fd))
            }
            None => {
                self.nodes.insert(
                    id,
                    Node {
                        fd,
                        key,
                        lookups: 1,
                    },
                );
                self.by_key.insert(key, id);
                (id, None)
            }
        }
    }

    /// Counts one more lookup of a node the kernel already holds (a hard link's reply).
    /// Returns whether the node exists.
    pub fn add_lookup(&mut self, id: NodeId) -> bool {
        match self.nodes.get_mut(&id) {
            Some(n) => {
                n.lookups += 1;
                true
            }
            None => false,
        }
    }

    /// Takes `n` lookups away from node `id` (FUSE `forget`). Returns the handle to drop
    /// when the count reaches zero. The root stays. Forgetting more than was counted, or an
    /// unknown id, clamps to zero (the kernel never does it; a bug there must not leak here).
    pub fn forget(&mut self, id: NodeId, n: u64) -> Option<H> {
        if id == NodeId::ROOT {
            return None;
        }
        let node = self.nodes.get_mut(&id)?;
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups > 0 {
            return None;
        }
        let node = self.nodes.remove(&id)?;
        // A stale node's key may name a newer node already.
        if self.by_key.get(&node.key) == Some(&id) {
            self.by_key.remove(&node.key);
        }
        Some(node.fd)
    }

    /// Removes every node but the root; returns their handles (for unmount).
    pub fn drain(&mut self) -> Vec<H> {
        let root = self.nodes.remove(&NodeId::ROOT);
        let fds = self.nodes.drain().map(|(_, n)| n.fd).collect();
        self.by_key.clear();
        if let Some(r) = root {
            self.by_key.insert(r.key, NodeId::ROOT);
            self.nodes.insert(NodeId::ROOT, r);
        }
        fds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scalevfs::Fd;

    const DEV: u64 = 7;

    fn key(ino: u64) -> ObjKey {
        ObjKey { dev: DEV, ino }
    }

    fn table() -> NodeTable<Fd> {
        NodeTable::new(Fd(3), key(1))
    }

    #[test]
    fn primary_ids_are_inode_numbers() {
        let mut t = table();
        assert_eq!(t.fd(NodeId::ROOT), Some(Fd(3)));
        let (id, extra) = t.remember(key(42), Fd(4), |_| false);
        assert_eq!((id, extra), (NodeId(42), None));
        assert_eq!(t.fd(NodeId(42)), Some(Fd(4)));
        assert_eq!(t.find(key(42)), Some(NodeId(42)));
    }

    #[test]
    fn hard_links_share_a_node_and_count_lookups() {
        let mut t = table();
        assert_eq!(t.remember(key(5), Fd(4), |_| false), (NodeId(5), None));
        // The second name of the same object: same id, the new descriptor comes back.
        assert_eq!(
            t.remember(key(5), Fd(9), |_| false),
            (NodeId(5), Some(Fd(9)))
        );
        assert!(t.add_lookup(NodeId(5)));
        assert_eq!(t.lookups(NodeId(5)), 3);
        assert_eq!(t.forget(NodeId(5), 2), None);
        assert_eq!(t.fd(NodeId(5)), Some(Fd(4)), "still referenced");
        assert_eq!(t.forget(NodeId(5), 1), Some(Fd(4)));
        assert_eq!(t.fd(NodeId(5)), None);
        assert_eq!(t.find(key(5)), None);
        assert!(!t.add_lookup(NodeId(5)));
    }

    #[test]
    fn forget_then_lookup_makes_a_fresh_node() {
        let mut t = table();
        t.remember(key(8), Fd(4), |_| false);
        assert_eq!(t.forget(NodeId(8), 1), Some(Fd(4)));
        assert_eq!(t.remember(key(8), Fd(5), |_| false), (NodeId(8), None));
        assert_eq!(t.fd(NodeId(8)), Some(Fd(5)));
    }

    #[test]
    fn root_is_never_forgotten() {
        let mut t = table();
        assert_eq!(t.forget(NodeId::ROOT, u64::MAX), None);
        assert_eq!(t.fd(NodeId::ROOT), Some(Fd(3)));
        // A lookup that reaches the root (e.g. through an engine path) counts but keeps it.
        assert_eq!(
            t.remember(key(1), Fd(6), |_| false),
            (NodeId::ROOT, Some(Fd(6)))
        );
    }

    #[test]
    fn over_forget_and_unknown_ids_clamp() {
        let mut t = table();
        t.remember(key(9), Fd(4), |_| false);
        assert_eq!(t.forget(NodeId(9), 10), Some(Fd(4)));
        assert_eq!(t.forget(NodeId(9), 1), None);
        assert_eq!(t.forget(NodeId(12345), 1), None);
    }

    #[test]
    fn other_devices_get_synthetic_ids() {
        let mut t = table();
        let other = ObjKey {
            dev: DEV + 1,
            ino: 5,
        };
        let (a, _) = t.remember(other, Fd(4), |_| false);
        assert!(a.0 >= SYNTHETIC_BASE);
        let (b, _) = t.remember(
            ObjKey {
                dev: DEV + 1,
                ino: 6,
            },
            Fd(5),
            |_| false,
        );
        assert_ne!(a, b);
        // Same object again: same id; and the primary device's inode 5 is a different node.
        assert_eq!(t.remember(other, Fd(6), |_| false), (a, Some(Fd(6))));
        assert_eq!(t.remember(key(5), Fd(7), |_| false), (NodeId(5), None));
        assert_eq!(t.forget(a, 2), Some(Fd(4)));
    }

    /// A file system that reuses inode numbers: the kernel still holds the node of a gone
    /// object when a new object gets its number. The new object gets a node of its own,
    /// and forgetting the old one leaves the new one findable.
    #[test]
    fn a_reused_number_gets_a_new_node() {
        let mut t = table();
        assert_eq!(t.remember(key(5), Fd(4), |_| false), (NodeId(5), None));
        // Fd(4)'s object is gone; Fd(8) is a new object numbered 5.
        let (b, extra) = t.remember(key(5), Fd(8), |old| *old == Fd(4));
        assert_eq!(extra, None);
        assert!(b.0 >= SYNTHETIC_BASE, "a new id, not the stale node's");
        assert_eq!(t.fd(NodeId(5)), Some(Fd(4)));
        assert_eq!(t.fd(b), Some(Fd(8)));
        assert_eq!(t.find(key(5)), Some(b));
        assert_eq!(t.forget(NodeId(5), 1), Some(Fd(4)));
        assert_eq!(
            t.find(key(5)),
            Some(b),
            "the old node's forget keeps the new key"
        );
        // Without the staleness check the old node would have been handed out again.
        let mut u = table();
        u.remember(key(5), Fd(4), |_| false);
        assert_eq!(
            u.remember(key(5), Fd(8), |_| false),
            (NodeId(5), Some(Fd(8)))
        );
    }

    #[test]
    fn drain_keeps_the_root() {
        let mut t = table();
        t.remember(key(2), Fd(4), |_| false);
        t.remember(key(3), Fd(5), |_| false);
        let mut fds = t.drain();
        fds.sort();
        assert_eq!(fds, vec![Fd(4), Fd(5)]);
        assert_eq!(t.len(), 1);
        assert!(t.is_empty());
        assert_eq!(t.fd(NodeId::ROOT), Some(Fd(3)));
    }
}
