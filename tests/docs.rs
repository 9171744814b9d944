//! The documentation holds together: every relative link in README.md and
//! docs/**/*.md reaches a file, every `#fragment` a heading of its target,
//! and every provider the binary reports has its page and its README row.
//!
//! Plain string scanning, no Markdown crate: links are `[text](target)` and
//! `[label]: target` outside fenced code blocks and code spans. External
//! (`http:`, `https:`, `mailto:`) links are not checked.

use crate::support;

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/, relative to the repo.
fn documents() -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("README.md")];
    let mut dirs = vec![PathBuf::from("docs")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(repo().join(&dir)) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let path = dir.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The text outside fenced code blocks, one entry per line, with code spans
/// blanked out (a span may run over several lines).
fn prose(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    let mut span: Option<usize> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if let Some(open) = &fence {
            if trimmed.starts_with(open.as_str())
                && trimmed.trim_start_matches(open.as_str()).trim().is_empty()
            {
                fence = None;
            }
            out.push(String::new());
            continue;
        }
        if span.is_none() {
            for marker in ["```", "~~~"] {
                if trimmed.starts_with(marker) {
                    let run = trimmed
                        .chars()
                        .take_while(|&c| marker.starts_with(c))
                        .count();
                    fence = Some(marker.chars().next().unwrap().to_string().repeat(run));
                }
            }
            if fence.is_some() {
                out.push(String::new());
                continue;
            }
        }
        let mut kept = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == '`' {
                let run = chars[i..].iter().take_while(|&&c| c == '`').count();
                match span {
                    None => span = Some(run),
                    Some(open) if open == run => span = None,
                    Some(_) => {}
                }
                i += run;
                continue;
            }
            if span.is_none() {
                kept.push(chars[i]);
            }
            i += 1;
        }
        out.push(kept);
        // A blank line ends a paragraph, and an unclosed code span with it.
        if line.trim().is_empty() {
            span = None;
        }
    }
    out
}

/// The link targets of a document, with their line numbers.
fn links(markdown: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose(markdown).iter().enumerate() {
        // Reference definitions: `[label]: target`.
        if let Some(rest) = line.trim_start().strip_prefix('[')
            && let Some(close) = rest.find("]:")
        {
            let target = rest[close + 2..].split_whitespace().next().unwrap_or("");
            found.push((n + 1, target.to_string()));
            continue;
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            // `[text](target "title")`: the target is the first word.
            let target = after[..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            found.push((n + 1, target.to_string()));
            rest = &after[end..];
        }
    }
    found
}

/// GitHub's anchor for a heading: lowercase, spaces to `-`, punctuation
/// other than `-` and `_` removed; a repeated anchor gets `-1`, `-2`, ...
pub(crate) fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a document's headings (ATX headings outside code).
pub(crate) fn anchors(markdown: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    // Headings keep their code spans' text: read them from the raw lines
    // that `prose` says are outside fences.
    let outside = prose(markdown);
    for (raw, kept) in markdown.lines().zip(outside) {
        if kept.is_empty() && !raw.is_empty() {
            continue; // inside a fence
        }
        let hashes = raw.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !raw[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(raw[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `base/target` without `.` and `..`, or `None` if it leaves the repo.
fn resolve(base: &Path, target: &str) -> Option<PathBuf> {
    let mut path = PathBuf::new();
    for part in base.join(target).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !path.pop() {
                    return None;
                }
            }
            Component::Normal(p) => path.push(p),
            _ => return None,
        }
    }
    Some(path)
}

/// Every broken relative link or fragment in the given documents, one line
/// each: `file:line: link: why`.
fn broken_links(files: &[PathBuf], read: &dyn Fn(&Path) -> Option<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files {
        let text = read(file).unwrap_or_else(|| panic!("cannot read {}", file.display()));
        for (line, link) in links(&text) {
            let lower = link.to_lowercase();
            if link.is_empty()
                || ["http:", "https:", "mailto:"]
                    .iter()
                    .any(|s| lower.starts_with(s))
            {
                continue;
            }
            let (path, fragment) = match link.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (link.as_str(), None),
            };
            let where_ = format!("{}:{line}: {link}", file.display());
            let target = if path.is_empty() {
                file.clone()
            } else if path.starts_with('/') {
                problems.push(format!("{where_}: absolute path, use a relative link"));
                continue;
            } else {
                match resolve(file.parent().unwrap_or(Path::new("")), path) {
                    Some(t) => t,
                    None => {
                        problems.push(format!("{where_}: leaves the repository"));
                        continue;
                    }
                }
            };
            let on_disk = repo().join(&target);
            let Some(body) = read(&target).or_else(|| on_disk.exists().then(String::new)) else {
                problems.push(format!("{where_}: {} does not exist", target.display()));
                continue;
            };
            if let Some(fragment) = fragment
                && target.extension().is_some_and(|e| e == "md")
            {
                let have = anchors(&body);
                if !have.iter().any(|a| a == fragment) {
                    problems.push(format!(
                        "{where_}: no heading #{fragment} in {} (it has: {})",
                        target.display(),
                        have.join(", ")
                    ));
                }
            }
        }
    }
    problems
}

fn read_repo(path: &Path) -> Option<String> {
    let full = repo().join(path);
    full.is_file()
        .then(|| std::fs::read_to_string(full).unwrap())
}

#[test]
fn every_relative_link_and_fragment_resolves() {
    let files = documents();
    assert!(files.len() > 5, "found only {files:?}");
    let problems = broken_links(&files, &read_repo);
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

/// The providers linked from the first cell of the rows of the README's
/// table under `## Providers`, with the page each row links to.
fn providers_table(readme: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut in_section = false;
    for (kept, line) in prose(readme).iter().zip(readme.lines()) {
        if kept.is_empty() && !line.is_empty() {
            continue; // inside a fence
        }
        if let Some(heading) = line.strip_prefix("## ") {
            in_section = heading.trim() == "Providers";
            continue;
        }
        if !in_section || !line.starts_with('|') {
            continue;
        }
        let first = line
            .trim_start_matches('|')
            .split('|')
            .next()
            .unwrap_or("")
            .trim();
        // [`name`](docs/providers/name.md)
        if let Some((text, target)) = first.strip_prefix('[').and_then(|r| r.split_once("](")) {
            let name = text.trim_end_matches(']').trim_matches('`').to_string();
            rows.push((name, target.trim_end_matches(')').to_string()));
        }
    }
    rows
}

fn missing_provider_docs(
    providers: &[String],
    readme: &str,
    page_exists: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let rows = providers_table(readme);
    let mut problems = Vec::new();
    for name in providers {
        let page = format!("docs/providers/{name}.md");
        if !page_exists(&page) {
            problems.push(format!("provider {name}: no page {page}"));
        }
        match rows.iter().find(|(n, _)| n == name) {
            None => problems.push(format!(
                "provider {name}: no row in README.md's `## Providers` table (| [`{name}`]({page}) | ... |)"
            )),
            Some((_, target)) if *target != page => {
                problems.push(format!("provider {name}: its README row links to {target}, not {page}"))
            }
            Some(_) => {}
        }
    }
    for (name, _) in &rows {
        if !providers.contains(name) {
            problems.push(format!(
                "README.md's providers table lists {name}, which --version does not report ({})",
                providers.join(", ")
            ));
        }
    }
    problems
}

#[test]
fn every_provider_has_its_page_and_its_readme_row() {
    let providers = support::plugin::carried_providers();
    assert!(providers.len() >= 4, "{providers:?}");
    let readme = read_repo(Path::new("README.md")).unwrap();
    let problems = missing_provider_docs(&providers, &readme, &|page| repo().join(page).is_file());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // And no page for a provider the binary does not have.
    for doc in documents() {
        if doc.parent() == Some(Path::new("docs/providers")) {
            let name = doc.file_stem().unwrap().to_string_lossy().into_owned();
            assert!(
                providers.contains(&name),
                "{} documents {name}, which --version does not report ({})",
                doc.display(),
                providers.join(", ")
            );
        }
    }
}

/// The lists of providers kept by hand outside `providers::ALL`, each
/// compared with the providers the binary carries: a provider added to or
/// removed from the binary fails here until every list says so. (README's
/// table and the pages are checked above; config-examples in
/// tests/config_examples.rs; `--provider`'s values and `node install`'s
/// ready entries in unit tests; the fuzz targets and the router read
/// `providers::ALL` itself.)
fn provider_list_drift(
    providers: &[String],
    read: &dyn Fn(&Path) -> Option<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    // docs/development.md quotes the --version line.
    let quoted = format!("providers: {})", sorted(providers).join(", "));
    let guide = read(Path::new("docs/development.md")).unwrap_or_default();
    if !guide.replace('\n', " ").contains(&quoted) {
        problems.push(format!(
            "docs/development.md does not quote --version's `{quoted}`"
        ));
    }
    // docs/flags.md's `--provider` row names every value.
    let flags = read(Path::new("docs/flags.md")).unwrap_or_default();
    let row = flags
        .lines()
        .find(|l| l.starts_with("| `--provider`"))
        .unwrap_or("");
    for name in providers {
        if !row.contains(&format!("`{name}`")) {
            problems.push(format!(
                "docs/flags.md's --provider row does not name {name}"
            ));
        }
    }
    // Each provider's own integration tests: tests/<name>.rs.
    for name in providers {
        let file = format!("tests/{}.rs", name.replace('-', "_"));
        let runs = read(Path::new(&file)).is_some_and(|t| t.contains(&format!("\"{name}\"")));
        if !runs {
            problems.push(format!("{file} does not exist or never names \"{name}\""));
        }
    }
    problems
}

fn sorted(names: &[String]) -> Vec<String> {
    let mut names = names.to_vec();
    names.sort();
    names
}

#[test]
fn every_hand_kept_provider_list_names_every_provider() {
    let providers = support::plugin::carried_providers();
    let problems = provider_list_drift(&providers, &read_repo);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_list_check_fails_when_a_provider_is_missing_from_one_list() {
    let providers: Vec<String> = ["aws", "gcp", "token-exchange"].map(String::from).into();
    let read = in_memory(&[
        (
            "docs/development.md",
            "(commit x, providers: aws, gcp,\ntoken-exchange)",
        ),
        (
            "docs/flags.md",
            "| `--provider` | x | `aws`, `gcp`, `token-exchange` or `auto` |",
        ),
        ("tests/aws.rs", r#"run(&["--provider", "aws"])"#),
        ("tests/gcp.rs", r#"run(&["--provider", "gcp"])"#),
        (
            "tests/token_exchange.rs",
            r#"run(&["--provider", "token-exchange"])"#,
        ),
    ]);
    assert!(provider_list_drift(&providers, &read).is_empty());
    let more: Vec<String> = ["aws", "gcp", "token-exchange", "quay"]
        .map(String::from)
        .into();
    let problems = provider_list_drift(&more, &read).join("\n");
    support::assert_says(
        &problems,
        &[
            "docs/development.md",
            "docs/flags.md's --provider row does not name quay",
            "tests/quay.rs",
        ],
    );
    assert_eq!(problems.lines().count(), 3, "{problems}");
}

// The checks themselves, on documents built here, so each failure they
// exist for is seen to fail.

fn in_memory(files: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
    let files: HashMap<PathBuf, String> = files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect();
    move |p: &Path| files.get(p).cloned()
}

#[test]
fn the_link_check_finds_a_missing_file_and_a_missing_heading() {
    let docs = [
        (
            "README.md",
            "# Top\n\nSee [aws](docs/providers/aws.md#flags), [gone](docs/nope.md),\n\
             [bad](docs/providers/aws.md#no-such-heading), [self](#top), [web](https://example.com/x#y).\n\n\
             ```sh\n[in code](docs/in-code.md)\n```\n\nA span `[x](docs/span.md)` is code.\n\n[ref]: docs/ref.md\n",
        ),
        (
            "docs/providers/aws.md",
            "# AWS: ECR and ECR Public\n\n## Flags\n\nBack to [the top](../../README.md#top), [up](../../../x.md).\n",
        ),
    ];
    let read = in_memory(&docs);
    let files: Vec<PathBuf> = docs.iter().map(|(p, _)| PathBuf::from(p)).collect();
    let problems = broken_links(&files, &read).join("\n");
    support::assert_says(
        &problems,
        &[
            "README.md:3: docs/nope.md: docs/nope.md does not exist",
            "no heading #no-such-heading in docs/providers/aws.md",
            "docs/ref.md does not exist",
            "../../../x.md: leaves the repository",
        ],
    );
    assert!(!problems.contains("in-code"), "{problems}");
    assert!(!problems.contains("span.md"), "{problems}");
    assert!(!problems.contains("example.com"), "{problems}");
    assert!(!problems.contains("#flags"), "{problems}");
    assert!(!problems.contains("#top"), "{problems}");
    assert_eq!(problems.lines().count(), 4, "{problems}");
}

#[test]
fn anchors_follow_githubs_rules() {
    let doc = "# wi-credential-provider\n## Checking a config: `check-config`\n## Network: deadlines, retries, proxies and trust\n\
               ### Why plain requests and not `azure_identity`\n## Flags\n## Flags\n```sh\n# not a heading\n```\n#not-a-heading\n";
    assert_eq!(
        anchors(doc),
        [
            "wi-credential-provider",
            "checking-a-config-check-config",
            "network-deadlines-retries-proxies-and-trust",
            "why-plain-requests-and-not-azure_identity",
            "flags",
            "flags-1",
        ]
    );
}

#[test]
fn the_provider_check_finds_a_missing_page_or_row() {
    let readme = "# x\n\n## Providers\n\n| provider | what |\n|---|---|\n| [`aws`](docs/providers/aws.md) | ECR |\n\
                  | [`gcp`](docs/providers/azure.md) | wrong page |\n| [`old`](docs/providers/old.md) | gone |\n\n\
                  ## Commands\n\n| [`quay`](docs/providers/quay.md) | not the providers table |\n";
    let providers: Vec<String> = ["aws", "gcp", "quay"].map(String::from).into();
    let pages = ["docs/providers/aws.md", "docs/providers/gcp.md"];
    let problems = missing_provider_docs(&providers, readme, &|p| pages.contains(&p)).join("\n");
    support::assert_says(
        &problems,
        &[
            "provider quay: no page docs/providers/quay.md",
            "provider quay: no row in README.md's `## Providers` table",
            "provider gcp: its README row links to docs/providers/azure.md",
            "lists old, which --version does not report",
        ],
    );
    assert_eq!(problems.lines().count(), 4, "{problems}");
}
