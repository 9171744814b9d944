//! Embeds the git commit the binary was built from, so `--version` on a node
//! says exactly which source is running there. Outside a git checkout (a
//! source tarball) the commit is "unknown", unless WICP_GIT_COMMIT is set by
//! whoever builds it.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=WICP_GIT_COMMIT");
    let commit = std::env::var("WICP_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    // Rebuild when HEAD moves: HEAD itself (branch switch, detached commit),
    // the ref it points to (a new commit on the branch) and packed refs.
    let reference = git(&["symbolic-ref", "-q", "HEAD"]);
    let watched = ["HEAD", "packed-refs"]
        .into_iter()
        .chain(reference.as_deref())
        .filter_map(|name| git(&["rev-parse", "--git-path", name]))
        .filter(|path| Path::new(path).exists());
    for path in watched {
        println!("cargo:rerun-if-changed={path}");
    }
    println!("cargo:rustc-env=WICP_GIT_COMMIT={commit}");
}
