//! The kubelet's rules for matching an image against a pattern.
//!
//! The kubelet applies the same function (`URLsMatch` in
//! `pkg/credentialprovider/keyring.go`) to `matchImages` entries and to the
//! keys of our response's `auth` map. We implement it here so that every
//! `auth` key we return, and every `--registry` pattern an admin writes, is
//! checked with the rules that will actually decide the pull.
//!
//! The two are read differently before that function, and so are two
//! functions here. A `matchImages` entry is parsed as
//! `ParseSchemelessURL(entry)`, which is `url.Parse("https://" + entry)`
//! (plugin.go `isImageAllowed`): an entry written with a scheme,
//! `https://harbor.example.com`, becomes the host `https:` and the path
//! `//harbor.example.com`, and matches no image ever ([`matches()`]). An
//! `auth` key has its `https://` or `http://` removed first
//! (`BasicDockerKeyring.Add`), so a key with a scheme matches as without
//! ([`matches_auth_key`]). Then:
//!
//! - the host is split on `.` and must have the same number of labels;
//! - each label is matched with Go's `filepath.Match` (`*`, `?`, `[a-z]`,
//!   `\` escapes), so a glob never spans a dot;
//! - the port must be equal as a string (no port matches only no port);
//! - the path is a plain string prefix: `/*` in a pattern is literal.

/// Whether `matchImages` entry (or `--registry` pattern) `pattern` matches
/// `image` (`host[:port]/path`), read as the kubelet reads `matchImages`:
/// a scheme is not removed, so a pattern with one matches nothing. A
/// malformed pattern matches nothing, as in the kubelet.
pub fn matches(pattern: &str, image: &str) -> bool {
    urls_match(pattern, image)
}

/// Whether the key `key` of a response's `auth` map matches `image`, read
/// as the kubelet's keyring reads it: `https://` or `http://` removed
/// first.
pub fn matches_auth_key(key: &str, image: &str) -> bool {
    urls_match(strip_scheme(key), image)
}

/// The scheme a `matchImages` entry was written with (`https` for
/// `https://harbor.example.com`), which makes the kubelet read it as the
/// host `https:` and never match it.
pub fn scheme_of(pattern: &str) -> Option<&str> {
    let (scheme, _) = pattern.split_once("://")?;
    (!scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)))
    .then_some(scheme)
}

/// `URLsMatch` of a pattern and an image, both already without scheme
/// handling.
fn urls_match(pattern: &str, image: &str) -> bool {
    let (p_host, p_path) = split_path(pattern);
    let (t_host, t_path) = split_path(image);
    let (p_host, p_port) = split_host_port(p_host);
    let (t_host, t_port) = split_host_port(t_host);
    if p_port != t_port {
        return false;
    }
    let p_labels: Vec<&str> = p_host.split('.').collect();
    let t_labels: Vec<&str> = t_host.split('.').collect();
    if p_labels.len() != t_labels.len() {
        return false;
    }
    if !t_path.starts_with(p_path) {
        return false;
    }
    p_labels
        .iter()
        .zip(&t_labels)
        .all(|(p, t)| glob(p, t).unwrap_or(false))
}

/// Whether a pattern is well formed under Go's `filepath.Match` for every
/// host label: used to refuse a bad `--registry` up front.
pub fn is_valid_pattern(pattern: &str) -> bool {
    if scheme_of(pattern).is_some() {
        return false;
    }
    let (host, _) = split_path(pattern);
    let (host, _) = split_host_port(host);
    !host.is_empty() && host.split('.').all(|label| glob(label, "").is_ok())
}

/// The path of a pattern, with its leading `/` (`/team-a` for
/// `harbor.example.com/team-a`), or empty for a host-wide pattern.
pub fn pattern_path(pattern: &str) -> &str {
    split_path(pattern).1
}

fn strip_scheme(s: &str) -> &str {
    s.strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .unwrap_or(s)
}

/// Splits `host[:port]/path` into the host part and the path (with its
/// leading `/`, or empty).
fn split_path(s: &str) -> (&str, &str) {
    match s.find('/') {
        Some(i) => (s.get(..i).unwrap_or(s), s.get(i..).unwrap_or("")),
        None => (s, ""),
    }
}

/// Go's `net.SplitHostPort`, falling back to "no port" when it fails, as the
/// kubelet's `SplitURL` does.
fn split_host_port(s: &str) -> (&str, &str) {
    if let Some(rest) = s.strip_prefix('[') {
        if let Some((host, port)) = rest
            .split_once(']')
            .and_then(|(host, tail)| Some((host, tail.strip_prefix(':')?)))
        {
            return (host, port);
        }
        return (s, "");
    }
    match s.split_once(':') {
        // More than one colon without brackets: SplitHostPort fails.
        Some((host, port)) if !port.contains(':') => (host, port),
        _ => (s, ""),
    }
}

/// Whether some image matches both `matchImages` entries `a` and `b` under
/// [`matches()`] (an entry with a scheme matches nothing, so overlaps
/// nothing): the same
/// port, the same number of host labels, label globs with a common word,
/// and paths of which one is a prefix of the other (an image path starts
/// with both). Used to find a node-identity provider that the kubelet would
/// also ask for an image one of our entries serves. A malformed pattern
/// overlaps nothing, as it matches nothing.
pub fn overlaps(a: &str, b: &str) -> bool {
    if scheme_of(a).is_some() || scheme_of(b).is_some() {
        return false;
    }
    let (a_host, a_path) = split_path(a);
    let (b_host, b_path) = split_path(b);
    let (a_host, a_port) = split_host_port(a_host);
    let (b_host, b_port) = split_host_port(b_host);
    if a_port != b_port {
        return false;
    }
    if !(a_path.starts_with(b_path) || b_path.starts_with(a_path)) {
        return false;
    }
    let a_labels: Vec<&str> = a_host.split('.').collect();
    let b_labels: Vec<&str> = b_host.split('.').collect();
    a_labels.len() == b_labels.len()
        && a_labels
            .iter()
            .zip(&b_labels)
            .all(|(x, y)| globs_intersect(x, y).unwrap_or(false))
}

/// Whether two `filepath.Match` label patterns have a common word: a walk
/// over the product of the two patterns (positions in each), where a star
/// may match nothing or one more character. The characters tried are those
/// a host label can hold plus every literal either pattern names, which is
/// enough: a class or `?` that admits some character admits one of these,
/// or no real host could carry it.
fn globs_intersect(a: &str, b: &str) -> Result<bool, BadPattern> {
    let a = tokenize(a)?;
    let b = tokenize(b)?;
    let mut alphabet: Vec<char> = ('a'..='z')
        .chain('A'..='Z')
        .chain('0'..='9')
        .chain(['-', '_'])
        .collect();
    for token in a.iter().chain(&b) {
        match token {
            Token::Literal(c) => alphabet.push(*c),
            Token::Class { ranges, .. } => {
                alphabet.extend(ranges.iter().flat_map(|(lo, hi)| [*lo, *hi]))
            }
            Token::Any | Token::Star => {}
        }
    }
    alphabet.sort_unstable();
    alphabet.dedup();
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![(0usize, 0usize)];
    while let Some((i, j)) = todo.pop() {
        if !seen.insert((i, j)) {
            continue;
        }
        let (x, y) = (a.get(i), b.get(j));
        if x.is_none() && y.is_none() {
            return Ok(true);
        }
        // A star may match the empty string.
        if matches!(x, Some(Token::Star)) {
            todo.push((i + 1, j));
        }
        if matches!(y, Some(Token::Star)) {
            todo.push((i, j + 1));
        }
        let (Some(x), Some(y)) = (x, y) else {
            continue;
        };
        if alphabet
            .iter()
            .any(|&c| matches_one(x, c) && matches_one(y, c))
        {
            let next_i = if matches!(x, Token::Star) { i } else { i + 1 };
            let next_j = if matches!(y, Token::Star) { j } else { j + 1 };
            todo.push((next_i, next_j));
        }
    }
    Ok(false)
}

#[derive(Debug)]
struct BadPattern;

enum Token {
    Literal(char),
    Any,
    Star,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

fn tokenize(pattern: &str) -> Result<Vec<Token>, BadPattern> {
    let mut tokens = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        tokens.push(match c {
            '*' => Token::Star,
            '?' => Token::Any,
            '\\' => Token::Literal(chars.next().ok_or(BadPattern)?),
            '[' => {
                let mut negated = false;
                let mut ranges = Vec::new();
                let mut first = true;
                loop {
                    let mut c = chars.next().ok_or(BadPattern)?;
                    if first && c == '^' {
                        negated = true;
                        c = chars.next().ok_or(BadPattern)?;
                    }
                    if c == ']' && !first {
                        break;
                    }
                    if c == ']' {
                        // Go refuses an empty class.
                        return Err(BadPattern);
                    }
                    first = false;
                    let lo = if c == '\\' {
                        chars.next().ok_or(BadPattern)?
                    } else {
                        c
                    };
                    let mut lookahead = chars.clone();
                    let hi =
                        if lookahead.next() == Some('-') && lookahead.clone().next() != Some(']') {
                            chars.next();
                            let h = chars.next().ok_or(BadPattern)?;
                            let h = if h == '\\' {
                                chars.next().ok_or(BadPattern)?
                            } else {
                                h
                            };
                            if h < lo {
                                return Err(BadPattern);
                            }
                            h
                        } else {
                            lo
                        };
                    ranges.push((lo, hi));
                }
                Token::Class { negated, ranges }
            }
            other => Token::Literal(other),
        });
    }
    Ok(tokens)
}

fn matches_one(token: &Token, c: char) -> bool {
    match token {
        Token::Literal(l) => *l == c,
        Token::Any => true,
        Token::Star => true,
        Token::Class { negated, ranges } => {
            ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated
        }
    }
}

/// Go's `filepath.Match` for one host label (which never contains the path
/// separator). Linear-time matching with a single backtrack point per star.
fn glob(pattern: &str, text: &str) -> Result<bool, BadPattern> {
    let tokens = tokenize(pattern)?;
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match (tokens.get(p), text.get(t)) {
            (Some(Token::Star), _) => {
                star = Some((p, t));
                p += 1;
            }
            (Some(token), Some(&c)) if matches_one(token, c) => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return Ok(false),
            },
        }
    }
    Ok(tokens
        .get(p..)
        .unwrap_or(&[])
        .iter()
        .all(|t| matches!(t, Token::Star)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_examples() {
        // From the kubelet's own plugin_test.go and keyring_test.go.
        assert!(matches("*.registry.io:8080", "test.registry.io:8080/foo"));
        assert!(matches("*.*.registry.io", "foo.bar.registry.io/foo/bar"));
        assert!(matches("test.registry.io", "test.registry.io/foo/bar"));
        assert!(matches(
            "*.dkr.ecr.*.amazonaws.com",
            "123.dkr.ecr.us-east-1.amazonaws.com/app"
        ));
        assert!(matches("*.azurecr.io", "myreg.azurecr.io/app"));
        assert!(matches("docker.io", "docker.io/library/nginx"));
        assert!(matches("reg.io/team", "reg.io/team/app"));
        assert!(matches("reg.io/team", "reg.io/teamx/app"));
        assert!(matches("app*.k8s.io", "app1.k8s.io/x"));
        assert!(matches("k8s.*", "k8s.io/x"));
        assert!(matches("[a-c]eg.io", "beg.io/x"));
        assert!(matches("[^a-c]eg.io", "reg.io/x"));
        assert!(matches("r?g.io", "reg.io/x"));
        assert!(matches("[::1]:5000", "[::1]:5000/x"));
        // An auth key's scheme is removed by the keyring before matching.
        assert!(matches_auth_key("https://reg.io", "reg.io/x"));
        assert!(matches_auth_key("http://reg.io/team", "reg.io/team/app"));
        assert!(matches_auth_key("reg.io", "reg.io/x"));
    }

    #[test]
    fn kubelet_non_matches() {
        // Label count differs: a glob never spans a dot.
        assert!(!matches("*.io", "a.k8s.io/x"));
        assert!(!matches("*.registry.io", "registry.io/x"));
        // Ports compare as strings.
        assert!(!matches("reg.io", "reg.io:5000/x"));
        assert!(!matches("reg.io:5000", "reg.io/x"));
        assert!(!matches("reg.io:*", "reg.io:5000/x"));
        // The path is a literal prefix: "/*" never matches a real image.
        assert!(!matches("reg.io/*", "reg.io/app"));
        assert!(!matches("*.myregistry.io/*", "a.myregistry.io/app"));
        assert!(!matches("reg.io/team", "reg.io/other"));
        // Case-sensitive.
        assert!(!matches("REG.io", "reg.io/x"));
        // A matchImages entry with a scheme: plugin.go parses it as
        // url.Parse("https://" + entry), whose host is "https:" and path
        // "//reg.io"; it matches no image (round-4 item 1).
        assert!(!matches("https://reg.io", "reg.io/x"));
        assert!(!matches("http://*.example.com", "a.example.com/x"));
        assert!(!is_valid_pattern("https://reg.io"));
        assert_eq!(scheme_of("https://reg.io"), Some("https"));
        assert_eq!(scheme_of("reg.io/x://y"), None);
        assert_eq!(scheme_of("reg.io"), None);
        // Lookalikes.
        assert!(!matches("*.azurecr.io", "evil.azurecr.io.attacker.net/x"));
        assert!(!matches("[^a-z]eg.io", "reg.io/x"));
    }

    #[test]
    fn malformed_patterns_match_nothing() {
        for bad in ["[a.io", "a\\", "[].io", "[z-a].io", "[^].io"] {
            assert!(!is_valid_pattern(bad), "{bad}");
            assert!(!matches(bad, "a.io/x"), "{bad}");
        }
        assert!(is_valid_pattern("*.reg.io:5000/team"));
        assert!(!is_valid_pattern(""));
    }

    /// Pattern pairs under the kubelet's rules: (a, b, overlap).
    const OVERLAP_TABLE: &[(&str, &str, bool)] = &[
        (
            "*.dkr.ecr.*.amazonaws.com",
            "*.dkr.ecr.*.amazonaws.com",
            true,
        ),
        (
            "*.dkr.ecr.*.amazonaws.com",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com",
            true,
        ),
        (
            "602401143452.dkr.ecr.*.amazonaws.com",
            "*.dkr.ecr.us-west-2.amazonaws.com",
            true,
        ),
        (
            "*.dkr.ecr.*.amazonaws.com",
            "*.dkr.ecr.*.amazonaws.com.cn",
            false,
        ),
        ("*.dkr.ecr.*.amazonaws.com", "*.dkr-ecr.*.on.aws", false),
        ("*.azurecr.io", "myreg.azurecr.io/team", true),
        ("*.azurecr.io", "*.*.azurecr.io", false),
        ("reg.io/team", "reg.io/team/app", true),
        ("reg.io/team", "reg.io/other", false),
        ("reg.io/team", "reg.io", true),
        ("reg.io", "reg.io:5000", false),
        ("reg.io:5000", "*.io:5000", true),
        ("a*.io", "*b.io", true),
        ("a*", "b*", false),
        ("[a-c]eg.io", "[c-e]eg.io", true),
        ("[a-c]eg.io", "[d-e]eg.io", false),
        ("[^a]eg.io", "aeg.io", false),
        ("r?g.io", "reg.io", true),
        ("r?g.io", "rg.io", false),
        ("*-docker.pkg.dev", "us-docker.pkg.dev", true),
        ("gcr.io", "*.gcr.io", false),
        // A scheme: the kubelet never matches the entry (item 1).
        ("https://reg.io", "reg.io", false),
        ("https://*.example.com", "a.example.com", false),
        ("[a.io", "a.io", false),
    ];

    #[test]
    fn overlap_table() {
        for (a, b, expected) in OVERLAP_TABLE {
            assert_eq!(overlaps(a, b), *expected, "{a} vs {b}");
            assert_eq!(overlaps(b, a), *expected, "{b} vs {a} (symmetric)");
        }
    }

    #[test]
    fn overlap_agrees_with_a_shared_image() {
        // Whenever an image matches both, the patterns overlap.
        let images = [
            "reg.io/team/app",
            "aeg.io/x",
            "123.dkr.ecr.us-east-1.amazonaws.com/app",
        ];
        let patterns = [
            "reg.io",
            "reg.io/team",
            "[a-c]eg.io",
            "*.dkr.ecr.*.amazonaws.com",
            "r?g.io",
        ];
        for image in images {
            for a in patterns {
                for b in patterns {
                    if matches(a, image) && matches(b, image) {
                        assert!(overlaps(a, b), "{a} {b} share {image}");
                    }
                }
            }
        }
    }

    #[test]
    fn pathological_globs_are_fast() {
        let pattern = "*a*a*a*a*a*a*a*a*a*a*b";
        let text = "a".repeat(60);
        assert!(!glob(pattern, &text).unwrap());
    }
}
