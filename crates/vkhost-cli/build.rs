//! Records the git commit the binary was built from, for `vkhost bench`'s run metadata:
//! `VKHOST_GIT_COMMIT` is `git rev-parse HEAD` (with `-dirty` when tracked files differ), or
//! "unknown" outside a git checkout or without git.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(o.stdout).ok()?.trim().to_string();
    (o.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).map(|c| {
        let dirty = Command::new("git").args(["diff", "--quiet", "HEAD", "--"]).status().map(|s| s.code() == Some(1)).unwrap_or(false);
        if dirty { format!("{c}-dirty") } else { c }
    });
    println!("cargo:rustc-env=VKHOST_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    // Rebuild when HEAD moves: HEAD itself (a worktree has its own) and the branch it names.
    let gitdir = git(&["rev-parse", "--git-dir"]);
    let common = git(&["rev-parse", "--git-common-dir"]);
    let mut watch = Vec::new();
    if let Some(g) = &gitdir {
        watch.push(Path::new(g).join("HEAD"));
        watch.push(Path::new(g).join("index"));
        if let (Some(c), Ok(head)) = (&common, std::fs::read_to_string(Path::new(g).join("HEAD"))) {
            if let Some(r) = head.trim().strip_prefix("ref: ") {
                watch.push(Path::new(c).join(r));
            }
            watch.push(Path::new(c).join("packed-refs"));
        }
    }
    for w in watch.iter().filter(|w| w.exists()) {
        println!("cargo:rerun-if-changed={}", w.display());
    }
    // And when the sources change, so that `-dirty` is recomputed.
    for d in ["build.rs", "src", "Cargo.toml", "../vkhost/src", "../vkhost/Cargo.toml"] {
        println!("cargo:rerun-if-changed={d}");
    }
}
