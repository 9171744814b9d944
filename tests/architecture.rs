//! The shape of the source tree, checked where the compiler cannot.
//!
//! The layers are crates (wicp-base <- wicp-kubelet <- wicp-net <-
//! wicp-providers <- the binary), so an import that reaches up does not
//! compile: no test here reads `use` paths to catch one. What is left:
//! that the manifests keep the layer order and keep the OS bindings in the
//! base crate, that no two modules of one crate use each other in a circle
//! at any depth (the old `cli`/`config`/`explain` circle; `doctor` and
//! `observed` once did), few long functions, OS differences and `unsafe`
//! in the platform layer only, and every test file compiled.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: each crate's directory and package name. A
/// crate may depend only on those before it.
const LAYERS: [(&str, &str); 5] = [
    ("crates/base", "wicp-base"),
    ("crates/kubelet", "wicp-kubelet"),
    ("crates/net", "wicp-net"),
    ("crates/providers", "wicp-providers"),
    (".", "wi-credential-provider"),
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `src/` of every crate of the workspace, lowest layer first.
fn source_roots() -> Vec<PathBuf> {
    LAYERS
        .iter()
        .map(|(dir, _)| repo().join(dir).join("src"))
        .collect()
}

/// Every Rust file of every crate's `src/`.
fn all_rust_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for src in source_roots() {
        rust_files(&src, &mut files);
    }
    files
}

/// The dependency names of a manifest's `[dependencies]` and
/// `[target.*.dependencies]` tables (not dev-dependencies: a test may
/// reach anything), with the table each was found in.
fn dependencies(manifest: &str) -> Vec<(String, String)> {
    let mut table = String::new();
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            table = line.to_string();
        } else if (table == "[dependencies]"
            || (table.starts_with("[target.") && table.ends_with(".dependencies]")))
            && !line.starts_with('#')
            && let Some((name, _)) = line.split_once(['=', '.'])
        {
            let name = name.trim();
            if !name.is_empty() {
                found.push((table.clone(), name.to_string()));
            }
        }
    }
    found
}

/// Cargo refuses a circle between crates, not a dependency that points up
/// the layers (base using net would compile if net did not use base). The
/// manifests keep the order; a workspace member outside it fails here.
#[test]
fn each_crate_depends_only_on_the_layers_below() {
    let members: BTreeSet<String> = std::fs::read_dir(repo().join("crates"))
        .unwrap()
        .map(|e| format!("crates/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    let layered: BTreeSet<String> = LAYERS[..4].iter().map(|(d, _)| d.to_string()).collect();
    assert_eq!(members, layered, "every crate has its place in LAYERS");
    for (at, (dir, package)) in LAYERS.iter().enumerate() {
        let manifest = std::fs::read_to_string(repo().join(dir).join("Cargo.toml")).unwrap();
        assert!(manifest.contains(&format!("name = \"{package}\"")), "{dir}");
        for (_, name) in dependencies(&manifest) {
            if let Some(layer) = LAYERS.iter().position(|(_, p)| *p == name) {
                assert!(
                    layer < at,
                    "{package} depends on {name}, a layer above or beside it"
                );
            }
        }
    }
}

/// The OS bindings belong to the platform layer: only wicp-base names
/// libc, rustix, mio or windows-sys as a dependency, so no other crate can
/// call the system directly.
#[test]
fn only_the_base_crate_binds_the_operating_system() {
    const BINDINGS: [&str; 4] = ["libc", "rustix", "mio", "windows-sys"];
    for (dir, package) in &LAYERS[1..] {
        let manifest = std::fs::read_to_string(repo().join(dir).join("Cargo.toml")).unwrap();
        for (table, name) in dependencies(&manifest) {
            assert!(
                !BINDINGS.contains(&name.as_str()),
                "{package} depends on {name} ({table}); only wicp-base may"
            );
        }
    }
    let base = std::fs::read_to_string(repo().join("crates/base/Cargo.toml")).unwrap();
    let names: Vec<String> = dependencies(&base).into_iter().map(|(_, n)| n).collect();
    assert!(names.iter().any(|n| n == "rustix"), "{names:?}");
    assert_eq!(
        dependencies("[dependencies]\na.workspace = true\n# b = 1\nc = { path = \"x\" }\n[dev-dependencies]\nd = 1\n[target.'cfg(unix)'.dependencies]\ne = 2\n")
            .into_iter()
            .map(|(_, n)| n)
            .collect::<Vec<_>>(),
        ["a", "c", "e"]
    );
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

#[test]
fn the_checker_finds_a_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default();
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&g).unwrap(),
        ["a", "b", "c", "a"].map(String::from)
    );
}

/// A file's module path in its crate: `src/commands/node/verify/doctor.rs`
/// is `commands::node::verify::doctor`, `crates/providers/src/aws/mod.rs`
/// is `aws`, a `lib.rs` the root.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let mut path: Vec<String> = file
        .strip_prefix(src)
        .unwrap()
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if matches!(
        path.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        path.pop();
    }
    path
}

/// The paths one `use` tree or expression names, from just after its
/// `crate::`/`super::`/`self::`: `a::{b, c::d}` is `a::b` and `a::c::d`.
fn expand(text: &str) -> Vec<Vec<String>> {
    fn tree(chars: &[char], at: &mut usize) -> Vec<Vec<String>> {
        let mut prefix: Vec<String> = Vec::new();
        loop {
            if chars.get(*at) == Some(&'{') {
                *at += 1;
                return group(chars, at, &prefix);
            }
            let start = *at;
            while chars
                .get(*at)
                .is_some_and(|c| c.is_alphanumeric() || *c == '_')
            {
                *at += 1;
            }
            if *at == start {
                return vec![prefix];
            }
            prefix.push(chars[start..*at].iter().collect());
            if chars.get(*at) == Some(&':') && chars.get(*at + 1) == Some(&':') {
                *at += 2;
            } else {
                return vec![prefix];
            }
        }
    }
    fn group(chars: &[char], at: &mut usize, prefix: &[String]) -> Vec<Vec<String>> {
        let mut all = Vec::new();
        loop {
            while chars
                .get(*at)
                .is_some_and(|c| c.is_whitespace() || *c == ',')
            {
                *at += 1;
            }
            match chars.get(*at) {
                None => return all,
                Some('}') => {
                    *at += 1;
                    return all;
                }
                _ => {}
            }
            let before = *at;
            for tail in tree(chars, at) {
                all.push(prefix.iter().cloned().chain(tail).collect());
            }
            if *at == before {
                *at += 1;
            }
        }
    }
    let chars: Vec<char> = text.chars().collect();
    tree(&chars, &mut 0)
}

/// Every module path `text` names, absolute, for code in module `here`.
fn named_paths(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    for (at, _) in text.match_indices("::") {
        // The start of the path this `::` ends the first segment of.
        let start = text[..at]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        if start > 0 && (bytes[start - 1] == b':' || bytes[start - 1].is_ascii_alphanumeric()) {
            continue;
        }
        let mut base: Vec<String> = match &text[start..at] {
            "crate" => Vec::new(),
            "self" => here.to_vec(),
            "super" => here[..here.len().saturating_sub(1)].to_vec(),
            _ => continue,
        };
        let mut rest = &text[at + 2..];
        while let Some(next) = rest.strip_prefix("super::") {
            base.pop();
            rest = next;
        }
        for tail in expand(rest) {
            found.push(base.iter().cloned().chain(tail).collect());
        }
    }
    found
}

/// For every module with submodules, the graph of its children: `a`
/// uses `b` when code anywhere below `a` names `b` (or anything in it),
/// by `crate::`, `super::` or `self::`. The top level is one of them.
fn graphs_at_every_depth(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let is_child = |parent: &[String], name: &str| {
        let dir = parent.iter().fold(src.to_path_buf(), |d, p| d.join(p));
        name != "mod" && (dir.join(format!("{name}.rs")).is_file() || dir.join(name).is_dir())
    };
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in &files {
        let here = module_path(src, file);
        let text = code_only(&std::fs::read_to_string(file).unwrap());
        // A file's `mod tests` is one level down: its `super::` is the file.
        let (code, tests) = match text.find("mod tests {") {
            Some(at) => text.split_at(at),
            None => (text.as_str(), ""),
        };
        let in_tests: Vec<String> = here.iter().cloned().chain(["tests".to_string()]).collect();
        let named = named_paths(code, &here)
            .into_iter()
            .chain(named_paths(tests, &in_tests));
        for to in named {
            let shared = here.iter().zip(&to).take_while(|(a, b)| a == b).count();
            let (Some(from_child), Some(to_child)) = (here.get(shared), to.get(shared)) else {
                continue;
            };
            let parent = &here[..shared];
            if from_child == "tests" || !is_child(parent, to_child) || !is_child(parent, from_child)
            {
                continue;
            }
            graphs
                .entry(parent.join("::"))
                .or_default()
                .entry(from_child.clone())
                .or_default()
                .insert(to_child.clone());
        }
    }
    graphs
}

#[test]
fn no_module_circle_at_any_depth() {
    let mut circles = Vec::new();
    let mut parents = BTreeSet::new();
    for (dir, _) in LAYERS {
        for (parent, graph) in graphs_at_every_depth(&repo().join(dir).join("src")) {
            parents.insert(format!("{dir}:{parent}"));
            if let Some(cycle) = find_cycle(&graph) {
                circles.push(format!("in {dir} crate::{parent}: {}", cycle.join(" -> ")));
            }
        }
    }
    for (dir, parent) in [
        (".", ""),
        (".", "commands"),
        (".", "commands::node"),
        ("crates/providers", ""),
        ("crates/providers", "azure"),
        ("crates/base", ""),
    ] {
        let key = format!("{dir}:{parent}");
        assert!(parents.contains(&key), "no graph for {key}: {parents:?}");
    }
    assert!(
        circles.is_empty(),
        "modules depend on each other in a circle:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_depth_checker_resolves_relative_paths_and_groups() {
    let here: Vec<String> = ["commands", "node", "doctor"].map(String::from).to_vec();
    let names = |text: &str| {
        named_paths(text, &here)
            .into_iter()
            .map(|p| p.join("::"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names("use super::{observed, doctor::{Check, check}}; use super::{};"),
        [
            "commands::node::observed",
            "commands::node::doctor::Check",
            "commands::node::doctor::check"
        ]
    );
    assert_eq!(
        names("let x = super::super::cache::run();"),
        ["commands::cache::run"]
    );
    assert_eq!(
        names("crate::serve::prepare(self::inner::f())"),
        ["serve::prepare", "commands::node::doctor::inner::f"]
    );
    assert_eq!(
        names("Self::new(); my_super::x; a::crate::b"),
        Vec::<String>::new()
    );
}

/// `text` with comments, string and char literals blanked (newlines kept),
/// so that braces and `fn` are read only where they are code.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push_str("  ");
            i += 2;
        } else if c == 'r' && !prev_ident && matches!(next, Some('"' | '#')) {
            // A raw string: r"...", r#"..."#.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let end: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let start = i;
            i += 2 + hashes;
            while i < chars.len() && !chars[i..].iter().collect::<String>().starts_with(&end) {
                i += 1;
            }
            i += end.len();
            out.extend(chars[start..i.min(chars.len())].iter().map(|&c| blank(c)));
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let step = if chars[i] == '\\' { 2 } else { 1 };
                for k in 0..step {
                    out.push(blank(*chars.get(i + k).unwrap_or(&' ')));
                }
                i += step;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\''); a lifetime has no closing quote.
            let end = if next == Some('\\') {
                (i + 3..chars.len())
                    .find(|&k| chars[k] == '\'')
                    .unwrap_or(i)
            } else {
                i + 2
            };
            out.extend(std::iter::repeat_n(' ', end + 1 - i));
            i = end + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Each function of `text` outside its `#[cfg(test)]` module, as its name
/// and its length in lines, from `fn` to the closing brace.
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let code = code_only(text);
    let tests_at = code.find("#[cfg(test)]\nmod ").unwrap_or(code.len());
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = code[at..tests_at].find("fn ") {
        let start = at + offset;
        at = start + 3;
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let name: String = code[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body: the first `{` outside brackets, unless a `;` ends a declaration first.
        let mut depth = 0i32;
        let mut open = None;
        for (k, c) in code[at..].char_indices() {
            match c {
                '(' | '[' | '<' => depth += 1,
                ')' | ']' | '>' => depth -= 1,
                ';' if depth <= 0 => break,
                '{' if depth <= 0 => {
                    open = Some(at + k);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut braces = 0;
        let close = code[open..].char_indices().find_map(|(k, c)| {
            match c {
                '{' => braces += 1,
                '}' => braces -= 1,
                _ => {}
            }
            (braces == 0).then_some(open + k)
        });
        let Some(close) = close else { continue };
        let lines = code[start..=close].matches('\n').count() + 1;
        found.push((name, lines));
    }
    found
}

/// Long functions are split where the domain splits: at most
/// `MAX_LONG` functions outside tests run over `LONG` lines. The ones that
/// remain are one algorithm each (a parser, a path walk, one cloud's plan).
#[test]
fn few_functions_are_long() {
    const LONG: usize = 80;
    const MAX_LONG: usize = 8;
    let files = all_rust_files();
    let mut long: Vec<String> = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (name, lines) in function_lengths(&text) {
            if lines > LONG {
                long.push(format!("{} {name}: {lines} lines", file.display()));
            }
        }
    }
    assert!(
        long.len() <= MAX_LONG,
        "{} functions over {LONG} lines (at most {MAX_LONG}); split where the domain splits:\n{}",
        long.len(),
        long.join("\n")
    );
}

#[test]
fn the_length_check_reads_code_not_strings_or_comments() {
    let text = "fn a() {\n    let s = \"fn b() { }\";\n    // fn c() {\n    let r = r#\"}\"#;\n    let c = '}';\n}\n\
                fn d<'x>(v: &'x str) -> Vec<u8> where u8: Copy;\n\
                fn e() -> Result<(), ()> {\n    Ok(())\n}\n#[cfg(test)]\nmod tests {\n    fn f() {}\n}\n";
    assert_eq!(
        function_lengths(text),
        [("a".to_string(), 6), ("e".to_string(), 3)]
    );
}

/// What differs between Linux and Windows lives in `crates/base/src/platform/`: no
/// other file (outside its tests) names an operating system, by `cfg` or
/// by an OS-only API, so a change there cannot silently leave the other
/// system's build behind.
#[test]
fn only_the_platform_module_names_an_operating_system() {
    const OS_SPECIFIC: [&str; 11] = [
        "cfg(unix",
        "cfg(windows",
        "cfg(target_os",
        "cfg(not(unix",
        "cfg(not(windows",
        "std::os::unix",
        "std::os::windows",
        "std::os::fd",
        "rustix::",
        "libc::",
        "windows_sys::",
    ];
    let platform = repo().join("crates/base/src/platform");
    let files = all_rust_files();
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(&platform)) {
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        let tests_at = ["#[cfg(test)]\nmod ", "#[cfg(test)]\npub(crate) mod "]
            .iter()
            .filter_map(|m| code.find(m))
            .min()
            .unwrap_or(code.len());
        let outside_tests = &code[..tests_at];
        for needle in OS_SPECIFIC {
            if outside_tests.replace(' ', "").contains(needle) {
                found.push(format!("{}: {needle}", file.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "OS-specific code outside crates/base/src/platform/ (move it behind a platform function):\n{}",
        found.join("\n")
    );
    // The checker sees through spacing.
    let code = code_only("#[cfg( unix )]\nfn a() {}\n");
    assert!(code.replace(' ', "").contains("cfg(unix"));
}

/// `unsafe` is denied in the workspace and allowed in two files of the
/// base crate: the Win32 calls of the Windows platform half, security and
/// services (the Linux build has no unsafe code of ours at all). Every
/// other crate forbids it at its root, where no file can allow it back.
#[test]
fn unsafe_code_lives_in_two_files_of_the_base_crate() {
    let windows = repo().join("crates/base/src/platform/windows");
    let allowed = [windows.join("security.rs"), windows.join("service.rs")];
    let declares = windows.join("mod.rs");
    for file in &all_rust_files() {
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        let uses_unsafe = code
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|word| word == "unsafe");
        assert!(
            !uses_unsafe || allowed.contains(file),
            "{} uses unsafe; only {:?} may",
            file.display(),
            allowed
        );
        let allows = code.contains("allow(unsafe_code)");
        assert!(
            !allows || file == &declares,
            "{} allows unsafe code",
            file.display()
        );
    }
    for src in &source_roots()[1..] {
        let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
        assert!(
            lib.contains("#![forbid(unsafe_code)]"),
            "{}/lib.rs forbids unsafe code",
            src.display()
        );
    }
    let main = std::fs::read_to_string(repo().join("src/main.rs")).unwrap();
    assert!(main.contains("#![forbid(unsafe_code)]"), "src/main.rs");
    let workspace = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    assert!(
        workspace.contains("[workspace.lints.rust]\n")
            && workspace.contains("unsafe_code = \"deny\""),
        "the workspace denies unsafe code"
    );
}

/// The integration tests are one binary (`autotests = false`): a file of
/// tests/ that tests/tests.rs does not declare would never be compiled or
/// run, and nothing else would say so.
#[test]
fn every_test_file_is_a_module_of_the_one_binary() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = std::fs::read_to_string(tests.join("tests.rs")).unwrap();
    let declared: BTreeSet<&str> = root
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&tests).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(module) = name.strip_suffix(".rs") else {
            continue;
        };
        if module != "tests" && !declared.contains(module) {
            missing.push(name.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "tests/tests.rs declares no `mod` for {missing:?}: their tests never run"
    );
    assert!(
        declared.contains("support") && declared.len() > 20,
        "{declared:?}"
    );
}
