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

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Largest file read.
pub const MAX_BYTES: u64 = 1 << 20;
/// Rightmost column at which a line's content may start.
const MAX_CONTENT_COLUMN: usize = 200;
/// Most `[` and `{` in a file.
const MAX_FLOW_OPENERS: usize = 1_000;

/// Reads `path`, refusing a file larger than [`MAX_BYTES`] without reading
/// all of it, and anything but a regular file (a FIFO would block, a device
/// such as `/dev/zero` would never end) without reading it at all. The
/// error is a sentence about the file.
pub fn read(path: &Path) -> Result<Vec<u8>, String> {
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
pub fn parse(bytes: &[u8]) -> Result<yaml_serde::Value, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the file is not UTF-8".to_string())?;
    check_depth(text)?;
    let mut value: yaml_serde::Value =
        yaml_serde::from_str(text).map_err(|e| format!("it is not valid YAML or JSON: {e}"))?;
    value
        .apply_merge()
        .map_err(|e| format!("its merge keys (<<) cannot be applied: {e}"))?;
    Ok(value)
}

/// Checks the first document of `text` as the kubelet's strict decoder
/// does (sigs.k8s.io/yaml's `YAMLToJSONStrict`, which is go-yaml v2's
/// `UnmarshalStrict`): in a mapping, a key may be set once. go-yaml v2
/// applies a merge key (`<<: *anchor`, or a sequence of them) by setting
/// the merged mapping's keys into the same map, in the merge key's place,
/// through the same duplicate check (`decode.go`: `merge` unmarshals into
/// `out`, `setMapIndex` refuses a key already set when strict), so a key
/// that a merge sets and the mapping sets again, in either order, or that
/// two merged mappings both set, is refused ("key ... already set in
/// map") and the kubelet does not start. A lenient reader lets the
/// explicit key win instead. The error names the key and the line of the
/// refused value, as go-yaml does (for a sequence of merged mappings,
/// which go-yaml walks backwards, the other mapping's line).
pub fn check_strict_keys(text: &str) -> Result<(), String> {
    check_depth(text)?;
    let Some(document) = yaml_serde::Deserializer::from_str(text).next() else {
        return Ok(());
    };
    Strict.deserialize(document).map_err(|e| {
        // yaml_serde's text is `<path>: <message> at line L column C`; the
        // message alone, with go-yaml's `line L:` in front.
        let shown = e.to_string();
        let message = shown.split(" at line ").next().unwrap_or(&shown);
        let message = message.find("key ").map_or(message, |at| &message[at..]);
        match e.location() {
            Some(at) => format!("line {}: {message}", at.line()),
            None => message.to_string(),
        }
    })
}

/// A mapping key as go-yaml v2 compares them (a resolved scalar), or the
/// merge key.
#[derive(Debug, PartialEq)]
enum Key {
    Merge,
    Scalar(String),
}

impl Key {
    fn of(value: &yaml_serde::Value) -> Key {
        match value {
            yaml_serde::Value::String(s) if s == "<<" => Key::Merge,
            yaml_serde::Value::String(s) => Key::Scalar(format!("{s:?}")),
            other => Key::Scalar(
                yaml_serde::to_string(other)
                    .unwrap_or_default()
                    .trim_end()
                    .to_string(),
            ),
        }
    }

    fn shown(&self) -> &str {
        match self {
            Key::Merge => "<<",
            Key::Scalar(s) => s,
        }
    }
}

/// Walks a value, checking every mapping's keys ([`check_strict_keys`]).
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(Walk)
    }
}

struct Walk;

impl<'de> Visitor<'de> for Walk {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(Walk)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        // A tagged value (`!tag value`): check what it tags.
        let (_, variant): (yaml_serde::Value, _) = data.variant()?;
        de::VariantAccess::newtype_variant_seed(variant, Strict)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Strict)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut set: Vec<Key> = Vec::new();
        while let Some(key) = map.next_key::<yaml_serde::Value>()? {
            let key = Key::of(&key);
            if key == Key::Merge {
                // The merged mapping (an alias, resolved), or a sequence of
                // them: their keys are set here, in this place.
                map.next_value_seed(Merge { set: &mut set })?;
                continue;
            }
            if set.contains(&key) {
                return map.next_value_seed(Refuse(&key));
            }
            map.next_value_seed(Strict)?;
            set.push(key);
        }
        Ok(())
    }
}

/// The value of a merge key: its mappings' keys join `set`, refused when
/// already there (go-yaml v2 `merge`, then `setMapIndex`).
struct Merge<'a> {
    set: &'a mut Vec<Key>,
}

impl<'de> DeserializeSeed<'de> for Merge<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Merge<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a mapping or a sequence of mappings to merge")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<yaml_serde::Value>()? {
            let key = Key::of(&key);
            if self.set.contains(&key) {
                return map.next_value_seed(Refuse(&key));
            }
            map.next_value::<de::IgnoredAny>()?;
            self.set.push(key);
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(Merge {
                set: &mut *self.set,
            })?
            .is_some()
        {}
        Ok(())
    }

    // Anything else cannot be merged; the lenient parse says so.
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The value of a key set twice: refused while it is read, so that the
/// error carries that value's line, as go-yaml's does (`n.line`).
struct Refuse<'a>(&'a Key);

impl<'de> DeserializeSeed<'de> for Refuse<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let message = format!("key {} already set in map", self.0.shown());
        deserializer.deserialize_any(Refusal(message))
    }
}

struct Refusal(String);

impl<'de> Visitor<'de> for Refusal {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("nothing")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_some<D: Deserializer<'de>>(self, _: D) -> Result<(), D::Error> {
        Err(de::Error::custom(self.0))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(self.0))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(self.0))
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(self.0))
    }
}

/// Checks that `text` is shallow enough to parse quickly.
pub fn check_depth(text: &str) -> Result<(), String> {
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
        crate::platform::test_support::mkfifo(&fifo);
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

    /// Round-4 item 2: go-yaml v2's strict decode, which the kubelet's
    /// config loader uses (sigs.k8s.io/yaml `YAMLToJSONStrict`), refuses a
    /// key that a merge key `<<` sets and the mapping sets again (in either
    /// order), or that two merged mappings both set: `decode.go` merges into
    /// the same map through `setMapIndex`, which reports "key ... already
    /// set in map" when strict. Line numbers are 1-based, as go-yaml's.
    #[test]
    fn strict_keys_refuse_what_a_merge_key_already_set() {
        let shared = "providers:\n  - &base\n    name: a\n    matchImages: [\"a.io\"]\n";
        for (text, key, line) in [
            // Overriding a merged key: the pattern people use to share an
            // entry's fields, which the kubelet refuses.
            (
                format!("{shared}  - <<: *base\n    name: b\n"),
                "\"name\"",
                6,
            ),
            // The explicit key first, the merge after: the refused setting
            // is the merged one, reported at its value's line in the anchor
            // (line 3), as go-yaml reports the merged node's line.
            (
                format!("{shared}  - name: b\n    <<: *base\n"),
                "\"name\"",
                3,
            ),
            // Two merged mappings setting one key. go-yaml walks a merge
            // sequence backwards and so names line 1 (the first mapping's
            // x); this walk goes forwards and names line 2: same key, the
            // other of the two lines.
            (
                "a: &a {x: 1}\nb: &b {x: 2}\nc:\n  <<: [*a, *b]\n".to_string(),
                "\"x\"",
                2,
            ),
            // A plain duplicate.
            ("a: 1\nb: 2\na: 3\n".to_string(), "\"a\"", 3),
        ] {
            let why = check_strict_keys(&text).unwrap_err();
            assert!(
                why.contains(&format!("key {key} already set in map")),
                "{text}: {why}"
            );
            assert!(why.starts_with(&format!("line {line}:")), "{text}: {why}");
        }
        // A merge that only adds keys is fine, as in go-yaml.
        check_strict_keys(&format!(
            "{shared}  - <<: *base\n    defaultCacheDuration: 1m\n"
        ))
        .unwrap();
        check_strict_keys("a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: [*a, *b]\n  z: 3\n").unwrap();
        check_strict_keys("").unwrap();
    }
}
