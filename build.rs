//! Embeds the git commit the binary was built from, so `--version` on a node
//! says exactly which source is running there. Outside a git checkout (a
//! source tarball) the commit is "unknown", unless WICP_GIT_COMMIT is set by
//! whoever builds it.
//!
//! Also writes the `rust` code blocks of docs/adding-a-provider.md to
//! `$OUT_DIR/adding_a_provider.rs`, one module each, which a unit test
//! compiles and runs inside the crate (`providers::adding_a_provider_samples`):
//! the sample a newcomer copies is the code as it is today.

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
    doc_samples();
}

/// The `rust` blocks of docs/adding-a-provider.md (indented as list
/// items are), each as `mod sample_N { ... }`.
fn doc_samples() {
    const DOC: &str = "docs/adding-a-provider.md";
    println!("cargo:rerun-if-changed={DOC}");
    let text = std::fs::read_to_string(DOC).unwrap_or_default();
    let mut out = String::new();
    let mut block: Option<(usize, Vec<String>)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match block.as_mut() {
            None if trimmed == "```rust" => block = Some((indent, Vec::new())),
            None => {}
            Some((_, lines)) if trimmed == "```" => {
                out.push_str(&format!(
                    "mod sample_{} {{\n{}\n}}\n",
                    out.matches("mod sample_").count(),
                    lines.join("\n")
                ));
                block = None;
            }
            Some((at, lines)) => {
                // Inner doc comments (`//!`) cannot follow `mod ... {`.
                let code = line.get(*at..).unwrap_or("").replacen("//!", "//", 1);
                lines.push(code);
            }
        }
    }
    let dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".to_string());
    let _ = std::fs::write(Path::new(&dir).join("adding_a_provider.rs"), out);
}
