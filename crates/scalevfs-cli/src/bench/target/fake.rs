//! A toy file system for the harness's own tests: a map from path to mode and contents, and a
//! call budget after which every operation fails with `EIO`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{Access, Errno, Meta, OpResult, System, Target};

const ENOENT: Errno = Errno(2);
const EIO: Errno = Errno(5);
const ENOTDIR: Errno = Errno(20);
const EISDIR: Errno = Errno(21);
const ENOTEMPTY: Errno = Errno(39);
const DIR: u32 = 0o040755;
const FILE: u32 = 0o100644;

/// The toy file system; clones share it.
#[derive(Clone)]
pub struct Fake(Arc<Inner>);

/// An entry: its mode and, for a file, its contents.
type Entry = (u32, Vec<u8>);

struct Inner {
    entries: Mutex<HashMap<String, Entry>>,
    calls: AtomicU64,
    budget: u64,
}

impl Fake {
    /// An empty file system whose operations fail after `budget` calls.
    pub fn failing_after(budget: u64) -> Fake {
        let entries = HashMap::from([(String::new(), (DIR, Vec::new()))]);
        Fake(Arc::new(Inner {
            entries: Mutex::new(entries),
            calls: AtomicU64::new(0),
            budget,
        }))
    }

    /// An empty file system.
    pub fn new() -> Fake {
        Fake::failing_after(u64::MAX)
    }

    fn entries(&self) -> OpResult<std::sync::MutexGuard<'_, HashMap<String, Entry>>> {
        if self.0.calls.fetch_add(1, Ordering::Relaxed) >= self.0.budget {
            return Err(EIO);
        }
        Ok(self.0.entries.lock().expect("fake fs lock"))
    }

    fn lookup(&self, p: &str) -> OpResult<Meta> {
        let mode = self.entries()?.get(p).ok_or(ENOENT)?.0;
        Ok(Meta { ino: 1, mode })
    }

    fn insert(&self, p: &str, mode: u32, data: &[u8]) -> OpResult<()> {
        let mut e = self.entries()?;
        let parent = p.rsplit_once('/').map_or("", |(d, _)| d);
        match e.get(parent) {
            None => return Err(ENOENT),
            Some(&(m, _)) if m != DIR => return Err(ENOTDIR),
            Some(_) => {}
        }
        if e.contains_key(p) {
            return Err(Errno::EEXIST);
        }
        e.insert(p.to_owned(), (mode, data.to_vec()));
        Ok(())
    }
}

impl Target for Fake {
    type Path = String;
    type Dir = String;

    fn system(&self) -> System {
        System::Scalevfs
    }

    fn fork(&self) -> Self {
        self.clone()
    }

    fn path(&self, rel: &str) -> String {
        rel.to_owned()
    }

    fn rel_path(&self, rel: &str) -> String {
        rel.to_owned()
    }

    fn stat(&self, p: &String) -> OpResult<Meta> {
        self.lookup(p)
    }

    fn access(&self, p: &String, _mode: Access) -> OpResult<()> {
        self.lookup(p).map(drop)
    }

    fn open_dir(&self, p: &String) -> OpResult<String> {
        match self.lookup(p)? {
            m if m.is_dir() => Ok(p.clone()),
            _ => Err(ENOTDIR),
        }
    }

    fn fstatat(&self, dir: &String, p: &String) -> OpResult<Meta> {
        self.lookup(&format!("{dir}/{p}"))
    }

    fn mkdir(&self, p: &String, _mode: u32) -> OpResult<()> {
        self.insert(p, DIR, &[])
    }

    fn create_close(&self, p: &String, _mode: u32) -> OpResult<()> {
        self.insert(p, FILE, &[])
    }

    fn unlink(&self, p: &String) -> OpResult<()> {
        let mut e = self.entries()?;
        match e.get(p.as_str()) {
            None => Err(ENOENT),
            Some(&(DIR, _)) => Err(EISDIR),
            Some(_) => e.remove(p.as_str()).map(drop).ok_or(ENOENT),
        }
    }

    fn create_with(&self, p: &String, _mode: u32, data: &[u8]) -> OpResult<()> {
        self.insert(p, FILE, data)
    }

    fn open_read_close(&self, p: &String, buf: &mut [u8]) -> OpResult<usize> {
        let e = self.entries()?;
        match e.get(p.as_str()) {
            None => Err(ENOENT),
            Some(&(DIR, _)) => Err(EISDIR),
            Some((_, data)) => {
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                Ok(n)
            }
        }
    }

    fn rename(&self, from: &String, to: &String) -> OpResult<()> {
        let mut e = self.entries()?;
        let entry = e.remove(from.as_str()).ok_or(ENOENT)?;
        e.insert(to.clone(), entry);
        Ok(())
    }

    fn rmdir(&self, p: &String) -> OpResult<()> {
        let mut e = self.entries()?;
        let prefix = format!("{p}/");
        match e.get(p.as_str()) {
            None => Err(ENOENT),
            Some(&(m, _)) if m != DIR => Err(ENOTDIR),
            Some(_) if e.keys().any(|k| k.starts_with(&prefix)) => Err(ENOTEMPTY),
            Some(_) => e.remove(p.as_str()).map(drop).ok_or(ENOENT),
        }
    }

    fn readdir_fstatat(&self, p: &String) -> OpResult<usize> {
        let prefix = format!("{p}/");
        let names: Vec<String> = self
            .entries()?
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|rest| !rest.contains('/'))
            .map(str::to_owned)
            .collect();
        for name in &names {
            self.fstatat(p, name)?;
        }
        Ok(names.len())
    }
}
