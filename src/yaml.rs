//! Bounds on the YAML (and JSON) files the admin commands read:
//! check-config's kubelet configuration and explain's ServiceAccount
//! manifest.
//!
//! The YAML parser's cost grows with the square of the nesting depth (a
//! file 100,000 levels deep took check-config 32 s), so a file is measured
//! before it is parsed, cheaply and conservatively: its size, how far
//! right any line's content starts (each block level, indentation or a
//! compact `- `, moves content right by at least one column), and how many
//! flow collections (`[` or `{`, wherever they appear, quoted or not) it
//! holds, which bounds their nesting. A kubelet config or a ServiceAccount
//! manifest is a few kilobytes, a handful of levels and a few dozen
//! brackets; the bounds are far above that and far below a slow parse.

use std::path::Path;

/// Largest file read.
pub(crate) const MAX_BYTES: u64 = 1 << 20;
/// Rightmost column at which a line's content may start.
const MAX_CONTENT_COLUMN: usize = 200;
/// Most `[` and `{` in a file.
const MAX_FLOW_OPENERS: usize = 1_000;

/// Reads `path`, refusing a file larger than [`MAX_BYTES`] without reading
/// all of it, and anything but a regular file (a FIFO would block, a device
/// such as `/dev/zero` would never end) without reading it at all. The
/// error is a sentence about the file.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, String> {
    crate::file::read_regular(path, MAX_BYTES).map_err(|refused| match refused {
        crate::file::Refused::Unreadable(why) => format!("cannot read the file: {why}"),
        crate::file::Refused::TooLarge => format!(
            "the file is larger than {MAX_BYTES} bytes, far more than a kubelet config or a manifest; it is not parsed"
        ),
    })
}

/// Parses bytes already read within [`MAX_BYTES`] as one YAML (or JSON)
/// document, after [`check_depth`], with merge keys (`<<`) applied as the
/// kubelet's YAML library (go-yaml, through sigs.k8s.io/yaml) applies them.
pub(crate) fn parse(bytes: &[u8]) -> Result<yaml_serde::Value, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the file is not UTF-8".to_string())?;
    check_depth(text)?;
    let mut value: yaml_serde::Value =
        yaml_serde::from_str(text).map_err(|e| format!("it is not valid YAML or JSON: {e}"))?;
    value
        .apply_merge()
        .map_err(|e| format!("its merge keys (<<) cannot be applied: {e}"))?;
    Ok(value)
}

/// Checks that `text` is shallow enough to parse quickly.
pub(crate) fn check_depth(text: &str) -> Result<(), String> {
    let mut openers = 0usize;
    for (number, line) in text.lines().enumerate() {
        let mut column = 0;
        let mut rest = line;
        loop {
            let trimmed = rest.trim_start_matches([' ', '\t']);
            column += rest.len() - trimmed.len();
            rest = trimmed;
            match rest.strip_prefix("- ").or_else(|| rest.strip_prefix("? ")) {
                Some(after) => {
                    column += 2;
                    rest = after;
                }
                None => break,
            }
            if column > MAX_CONTENT_COLUMN {
                break;
            }
        }
        if column > MAX_CONTENT_COLUMN {
            return Err(format!(
                "the file is nested too deeply to parse safely: the content of line {} starts beyond column {MAX_CONTENT_COLUMN}",
                number + 1
            ));
        }
        openers += line.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
        if openers > MAX_FLOW_OPENERS {
            return Err(format!(
                "the file is nested too deeply to parse safely: it has more than {MAX_FLOW_OPENERS} flow collections ('[' or '{{')"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_files_pass() {
        let config = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: x\n    matchImages: [\"*.azurecr.io\", \"[::1]:5000\"]\n    args: [\"--registry\", \"a\"]\n";
        assert_eq!(check_depth(config), Ok(()));
        assert_eq!(
            check_depth(&"{\"a\": [1, {\"b\": {}}]}\n".repeat(100)),
            Ok(())
        );
    }

    #[test]
    fn merge_keys_are_applied() {
        let v = parse(b"base: &b\n  a: 1\nuse:\n  <<: *b\n  c: 2\n").unwrap();
        assert_eq!(v["use"]["a"].as_u64(), Some(1));
        assert_eq!(v["use"]["c"].as_u64(), Some(2));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        crate::platform::tests::mkfifo(&fifo);
        let err = read(&fifo).unwrap_err();
        assert!(err.contains("a FIFO"), "{err}");
        let err = read(Path::new("/dev/zero")).unwrap_err();
        assert!(err.contains("character device"), "{err}");
    }

    #[test]
    fn deep_files_are_refused() {
        for deep in [
            format!("{}1{}", "{a: ".repeat(2_000), "}".repeat(2_000)),
            format!("{}{}", "[".repeat(1_001), "]".repeat(1_001)),
            format!("{}x", "- ".repeat(101)),
            (0..300).map(|i| format!("{}a:\n", " ".repeat(i))).collect(),
        ] {
            let err = check_depth(&deep).unwrap_err();
            assert!(err.contains("nested too deeply"), "{err}");
        }
    }
}
