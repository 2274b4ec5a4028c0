//! A program written from `std::fs` habits (`tree.rs`: build a tree, walk it, copy it,
//! rename, remove), run twice with only its import changed: on `std::fs` (the kernel, in
//! a directory under the system's temporary directory) and on `scalevfs::fs` (the
//! engine's current process, an in-memory namespace). The two runs must see the same.
//!
//! ```sh
//! cargo run --release -p scalevfs --example std_habits
//! ```

mod on_std {
    use std::fs::{self, File};
    use std::os::unix::fs::symlink;
    include!("tree.rs");
}

mod on_scalevfs {
    use scalevfs::fs::{self, symlink, File};
    include!("tree.rs");
}

fn main() -> std::io::Result<()> {
    let root = std::env::temp_dir().join(format!("scalevfs-std-habits-{}", std::process::id()));
    let kernel = on_std::run(&root)?;
    let engine = on_scalevfs::run(&root)?;
    for (k, e) in kernel.iter().zip(&engine) {
        println!("{k:<44} {}", if k == e { "same" } else { e });
    }
    assert_eq!(
        kernel, engine,
        "std::fs and scalevfs::fs saw different trees"
    );
    println!(
        "{} facts, the same on std::fs and scalevfs::fs",
        kernel.len()
    );
    Ok(())
}
