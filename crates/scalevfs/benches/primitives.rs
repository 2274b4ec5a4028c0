//! Micro-benchmarks of the primitives on the path walk's hot path, so that a regression
//! in a whole call shows where it comes from:
//!
//! - `name/*`: the component scan and hash (`scan`), the whole-path hash and NUL check of
//!   the path cache (`path_hash_nul`, and `path_hash_nul_words`: the word-at-a-time one a
//!   CPU without AES-NI runs) and the dentry hash key (`key_hash`);
//! - `dhash/*`: one lockless probe of the dentry hash (`DHash::lookup_rcu`), hit and miss,
//!   in a file system with 1000 and 100 000 entries in one directory;
//! - `epoch/*`: pinning and unpinning the epoch, as every call does;
//! - `seqcount/*`: a sequence counter read section (begin and retry check);
//! - `refcount/*`, `dref/*`: taking and dropping a reference;
//! - `stat/*`: the whole `Process::stat` of a cached four-component path, for scale: as a
//!   path cache hit, and as a lockless walk of its four cached dentries;
//! - `fd/*`: finding the lowest free descriptor: an `open` and `close` of an `O_PATH`
//!   descriptor while N others are held, with the one free number below them all
//!   (`low_hole`); and the pattern FUSE's create made on the engine's table, where a
//!   second descriptor is taken just past that hole and N taken numbers lie between it
//!   and the first free one (`past_hole`).
//!
//! Run: `cargo bench -p scalevfs --bench primitives`; quick: add
//! `-- --warm-up-time 1 --measurement-time 2`; smoke (each once): `-- --test`.

// As the `scalevfs` binary does (see ARCHITECTURE.md, "Allocation").
#[global_allocator]
static ALLOC: scalevfs_alloc::Alloc = scalevfs_alloc::Alloc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use scalevfs::__bench::{self, Dir, Name};
use scalevfs::sync::{RefCount, SeqCount};
use scalevfs::{mode, Creds, Fd, Vfs};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// A component of `n` bytes (no `/`).
fn component(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

fn name_hash(c: &mut Criterion) {
    let mut g = c.benchmark_group("name");
    for n in [1usize, 8, 40] {
        let last = component(n);
        // Inside a path the walk scans up to the next slash; the last component ends the
        // buffer, and its tail word is read byte by byte.
        let mut mid = last.clone();
        mid.extend_from_slice(b"/next/component");
        g.throughput(Throughput::Bytes(n as u64));
        g.bench_with_input(BenchmarkId::new("scan_last", n), &last, |b, p| {
            b.iter(|| __bench::scan(black_box(p)))
        });
        g.bench_with_input(BenchmarkId::new("scan_mid", n), &mid, |b, p| {
            b.iter(|| __bench::scan(black_box(p)))
        });
    }
    let stat_path = STAT_PATH.as_bytes().to_vec();
    let mut p64 = b"/srv/data/".to_vec();
    p64.resize(64, b'x');
    let mut p256 = b"/srv/data/".to_vec();
    p256.resize(256, b'y');
    // W3's deepest path: 16 components of 40 bytes.
    let p656: Vec<u8> = (0..16)
        .flat_map(|i| format!("/d{i:02}{}", "x".repeat(37)).into_bytes())
        .collect();
    for p in [stat_path, p64, p256, p656] {
        g.throughput(Throughput::Bytes(p.len() as u64));
        g.bench_with_input(BenchmarkId::new("path_hash_nul", p.len()), &p, |b, p| {
            b.iter(|| __bench::path_hash_nul(black_box(p)))
        });
        // The word-at-a-time hash beside it: what a CPU without AES-NI and AVX runs.
        g.bench_with_input(
            BenchmarkId::new("path_hash_nul_words", p.len()),
            &p,
            |b, p| b.iter(|| __bench::path_hash_nul_words(black_box(p))),
        );
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("key_hash", |b| {
        b.iter(|| __bench::key_hash(black_box(0x7f12_3456_7840), black_box(0x1234_5678_9abc)))
    });
    g.finish();
}

/// A file system with `n` files in `/d`, the directory to probe, and names to probe with.
struct Table {
    _vfs: Arc<Vfs>,
    dir: Dir,
    /// Names that are in `/d`, in a shuffled order (so a sweep does not visit the dentries
    /// in allocation order, which the hardware prefetcher would help).
    hits: Vec<Name>,
    /// Names that were never looked up (no negative entry either).
    misses: Vec<Name>,
}

const SIZES: [usize; 2] = [1000, 100_000];

/// The table of `SIZES[i]` entries, built on first use (so a filtered run skips it).
fn table(i: usize) -> &'static Table {
    static TABLES: [OnceLock<Table>; 2] = [OnceLock::new(), OnceLock::new()];
    TABLES[i].get_or_init(|| {
        let n = SIZES[i];
        let vfs = Vfs::new_memfs();
        let p = vfs.process(Creds::root());
        p.mkdir("/d", 0o755).expect("mkdir /d");
        for k in 0..n {
            p.mknodat(Fd::CWD, format!("/d/f{k:06}"), mode::S_IFREG | 0o644, 0)
                .expect("create a file");
        }
        let dir = Dir::open(&vfs, b"/d").expect("/d is cached");
        // Fisher-Yates with xorshift: a fixed order, unrelated to allocation order.
        let mut order: Vec<usize> = (0..n).collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for k in (1..n).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(k, (x % (k as u64 + 1)) as usize);
        }
        // Built in sweep order, so the probe names themselves are read sequentially and
        // only the dentry hash's own memory is accessed at random.
        let hits: Vec<Name> = order
            .iter()
            .map(|k| Name::new(format!("f{k:06}").as_bytes()))
            .collect();
        let misses: Vec<Name> = (0..n)
            .map(|k| Name::new(format!("missing{k:06}").as_bytes()))
            .collect();
        let g = __bench::pin();
        assert!(
            hits.iter().all(|h| dir.lookup_rcu(h, &g)),
            "every hit is found"
        );
        assert!(
            !misses.iter().any(|m| dir.lookup_rcu(m, &g)),
            "no miss is found"
        );
        Table {
            _vfs: vfs,
            dir,
            hits,
            misses,
        }
    })
}

fn dhash_probe(c: &mut Criterion) {
    let mut g = c.benchmark_group("dhash");
    for (i, n) in SIZES.iter().enumerate() {
        // One name over and over: the chain and dentry stay in L1.
        g.bench_function(BenchmarkId::new("hit_hot", n), |b| {
            let t = table(i);
            let guard = __bench::pin();
            let h = &t.hits[0];
            b.iter(|| t.dir.lookup_rcu(black_box(h), &guard))
        });
        // Every entry in turn: at 100k entries the dentries no longer fit in cache.
        g.bench_function(BenchmarkId::new("hit_sweep", n), |b| {
            let t = table(i);
            let guard = __bench::pin();
            let mut k = 0;
            b.iter(|| {
                k = if k + 1 == t.hits.len() { 0 } else { k + 1 };
                t.dir.lookup_rcu(black_box(&t.hits[k]), &guard)
            })
        });
        g.bench_function(BenchmarkId::new("miss_hot", n), |b| {
            let t = table(i);
            let guard = __bench::pin();
            let m = &t.misses[0];
            b.iter(|| t.dir.lookup_rcu(black_box(m), &guard))
        });
        g.bench_function(BenchmarkId::new("miss_sweep", n), |b| {
            let t = table(i);
            let guard = __bench::pin();
            let mut k = 0;
            b.iter(|| {
                k = if k + 1 == t.misses.len() { 0 } else { k + 1 };
                t.dir.lookup_rcu(black_box(&t.misses[k]), &guard)
            })
        });
    }
    g.finish();
}

fn epoch(c: &mut Criterion) {
    let mut g = c.benchmark_group("epoch");
    g.bench_function("pin_unpin", |b| b.iter(|| drop(black_box(__bench::pin()))));
    // A pin inside a pinned section (a reference dropped during a call) only counts.
    g.bench_function("pin_unpin_nested", |b| {
        let _outer = __bench::pin();
        b.iter(|| drop(black_box(__bench::pin())))
    });
    g.finish();
}

fn seqcount(c: &mut Criterion) {
    let mut g = c.benchmark_group("seqcount");
    let s = SeqCount::new();
    g.bench_function("read_begin_retry", |b| {
        b.iter(|| {
            let s = black_box(&s);
            s.read_begin().map(|v| s.read_retry(v))
        })
    });
    g.finish();
}

fn refcount(c: &mut Criterion) {
    let mut g = c.benchmark_group("refcount");
    let r = RefCount::new(1);
    g.bench_function("get_put", |b| {
        b.iter(|| {
            let r = black_box(&r);
            r.get();
            r.put()
        })
    });
    // What a reader that found an object under the epoch does (the path cache fill).
    g.bench_function("try_get_put", |b| {
        b.iter(|| {
            let r = black_box(&r);
            r.try_get() && r.put()
        })
    });
    g.finish();
    let mut g = c.benchmark_group("dref");
    g.bench_function("clone_drop", |b| {
        let vfs = Vfs::new_memfs();
        vfs.process(Creds::root())
            .mkdir("/d", 0o755)
            .expect("mkdir /d");
        let dir = Dir::open(&vfs, b"/d").expect("/d is cached");
        let r = dir.dref();
        b.iter(|| drop(black_box(&r).clone()))
    });
    g.finish();
}

/// Four components; the last a regular file.
const STAT_PATH: &str = "/usr/share/doc/README";

fn stat(c: &mut Criterion) {
    let mut g = c.benchmark_group("stat");
    let vfs = Vfs::new_memfs();
    let p = vfs.process(Creds::root());
    p.create_dir_all("/usr/share/doc").expect("mkdir -p");
    p.write_file(STAT_PATH, b"hello").expect("create the file");
    // The dentries are cached and the path cache answers: one probe, no walk.
    g.bench_function("4comp_cached", |b| {
        let path = Path::new(STAT_PATH);
        p.stat(path).expect("stat");
        b.iter(|| p.stat(black_box(path)).map(|s| s.ino))
    });
    // The same file through 4096 spellings (1 to 8 slashes before each component), many
    // more than the thread's path cache holds: each stat misses the path cache (but for a
    // rare slot survivor) and walks four cached dentries locklessly. Whether the walk's
    // result is then inserted is up to the path cache's admission policy.
    g.bench_function("4comp_pathcache_miss", |b| {
        let comps = ["usr", "share", "doc", "README"];
        let mut paths = Vec::new();
        for k in 0..8usize.pow(4) {
            let mut s = String::new();
            for (j, comp) in comps.iter().enumerate() {
                let slashes = 1 + (k / 8usize.pow(j as u32)) % 8;
                s.push_str(&"/".repeat(slashes));
                s.push_str(comp);
            }
            paths.push(PathBuf::from(s));
        }
        let ino = p.stat(STAT_PATH).expect("stat").ino;
        assert!(paths.iter().all(|q| p.stat(q).map(|s| s.ino) == Ok(ino)));
        let mut k = 0;
        b.iter(|| {
            k = if k + 1 == paths.len() { 0 } else { k + 1 };
            p.stat(black_box(&paths[k])).map(|s| s.ino)
        })
    });
    g.finish();
}

fn fd_alloc(c: &mut Criterion) {
    let mut g = c.benchmark_group("fd");
    for n in [1000usize, 400_000] {
        let vfs = Vfs::new_memfs();
        let p = vfs.process(Creds::root());
        p.write_file("/f", b"x").expect("create");
        let first = p.open("/f", scalevfs::OFlags::PATH, 0).expect("open");
        for _ in 0..n {
            p.dup(first).expect("dup");
        }
        // A hole at 0: open takes it at once; close gives it back.
        p.close(first).expect("close");
        g.bench_function(BenchmarkId::new("low_hole", n), |b| {
            b.iter(|| {
                let fd = p
                    .open(black_box("/f"), scalevfs::OFlags::PATH, 0)
                    .expect("open");
                p.close(fd).expect("close");
            })
        });
        // The FUSE create pattern: take the hole at 0 (a file handle), then one more (a
        // node): its search starts just past the hole, with the n taken numbers above it
        // to skip; then close both.
        g.bench_function(BenchmarkId::new("past_hole", n), |b| {
            b.iter(|| {
                let a = p
                    .open(black_box("/f"), scalevfs::OFlags::PATH, 0)
                    .expect("open");
                let c = p
                    .open(black_box("/f"), scalevfs::OFlags::PATH, 0)
                    .expect("open");
                p.close(a).expect("close");
                p.close(c).expect("close");
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    fd_alloc,
    name_hash,
    dhash_probe,
    epoch,
    seqcount,
    refcount,
    stat
);
criterion_main!(benches);
