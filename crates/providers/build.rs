//! Writes the `rust` code blocks of docs/adding-a-provider.md to
//! `$OUT_DIR/adding_a_provider.rs`, one module each, which a unit test
//! compiles and runs inside the crate (`adding_a_provider_samples` in
//! src/lib.rs): the sample a newcomer copies is the code as it is today.

use std::path::Path;

fn main() {
    doc_samples();
}

/// The `rust` blocks of docs/adding-a-provider.md (indented as list
/// items are), each as `mod sample_N { ... }`.
fn doc_samples() {
    const DOC: &str = "../../docs/adding-a-provider.md";
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
