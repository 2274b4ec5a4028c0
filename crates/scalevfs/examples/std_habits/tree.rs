// The program, written as for `std::fs`. It has no `fs` import of its own: main.rs
// includes it twice, under `use std::fs::{self, File}` and under
// `use scalevfs::fs::{self, File}`, and compares what the two saw.
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Builds a tree under `root`, walks it, copies it, renames and removes parts of it, and
/// returns what it saw, one line per fact.
pub fn run(root: &Path) -> io::Result<Vec<String>> {
    let mut seen = Vec::new();
    let src = root.join("src");
    for dir in ["docs/guide", "data/2026/11", "empty"] {
        fs::create_dir_all(src.join(dir))?;
    }
    for (i, name) in ["docs/guide/intro.md", "docs/README", "data/2026/11/log.csv"].iter().enumerate() {
        let mut f = File::create(src.join(name))?;
        for line in 0..=i * 3 {
            writeln!(f, "{name},{line}")?;
        }
    }
    fs::write(src.join("data/empty.bin"), b"")?;
    symlink("../docs/README", src.join("data/readme"))?;

    let copy = root.join("copy");
    copy_tree(&src, &copy)?;
    fs::rename(copy.join("docs/guide"), copy.join("guide"))?;
    fs::remove_file(copy.join("data/empty.bin"))?;
    fs::remove_dir_all(copy.join("data/2026"))?;
    let lines = BufReader::new(File::open(copy.join("guide/intro.md"))?).lines().count();
    seen.push(format!("intro.md has {lines} lines"));
    seen.push(format!("README holds {:?}", fs::read_to_string(copy.join("docs/README"))?));
    let through_link = fs::read(copy.join("data/readme"))?;
    seen.push(format!("data/readme reads {} bytes", through_link.len()));

    for tree in [&src, &copy] {
        let mut paths = Vec::new();
        walk(tree, &mut paths)?;
        paths.sort();
        for p in paths {
            let m = fs::symlink_metadata(&p)?;
            assert!(m.modified()? <= SystemTime::now());
            let kind = if m.is_dir() { "dir" } else if m.is_symlink() { "link" } else { "file" };
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            seen.push(format!("{kind} {rel} {}", if m.is_file() { m.len() } else { 0 }));
        }
    }
    fs::remove_dir_all(root)?;
    seen.push(format!("root gone after removal: {}", fs::metadata(root).is_err()));
    Ok(seen)
}

/// Copies the tree at `from` to `to`: directories made, files copied, symlinks remade.
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let (kind, dest) = (entry.file_type()?, to.join(entry.file_name()));
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_symlink() {
            symlink(fs::read_link(entry.path())?, dest)?;
        } else {
            fs::copy(entry.path(), dest)?;
        }
    }
    Ok(())
}

/// Every path beneath `dir`, depth first.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        out.push(path.clone());
        if fs::symlink_metadata(&path)?.is_dir() {
            walk(&path, out)?;
        }
    }
    Ok(())
}
