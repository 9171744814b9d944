//! The command line, declared as data and read by one parser.
//!
//! Each flag is a [`FlagSpec`] static beside the options struct that reads
//! it: its name, its `WICP_*` variable, what it takes, its default and its
//! `--help` text. An options struct lists its flags and reads them out of
//! what the line gave ([`Flags`]). [`parse`] walks the words once and the
//! variables once against those lists, the way ripgrep reads its flag
//! table: nothing is built per flag, so a kubelet's call costs no more
//! than the words it has, and the same list writes `--help`
//! ([`write_help`]). Errors name a flag by its static ([`crate::error::Error::flag`]).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::PathBuf;

/// What a flag takes after its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// One value (`--timeout 10s` or `--timeout=10s`); a second is a mistake.
    One,
    /// Values separated by commas, and the flag may come again:
    /// `--registry a.test,b.test --registry c.test` is three.
    List,
    /// No value: the flag's presence turns it on. Its variable turns it
    /// on unless it is `0`, `false`, `no`, `off`, `n` or `f` (any case).
    Switch,
}

/// A command-line flag, declared once: the parser reads it by this, the
/// help is written from it, and every error about it names it by it, so a
/// message cannot name a flag the command line does not have.
#[derive(Debug, PartialEq, Eq)]
pub struct FlagSpec {
    /// The long name, without its dashes (`vault-address`).
    pub long: &'static str,
    /// The environment variable that sets it (`WICP_VAULT_ADDRESS`), or
    /// `""` for an admin command's flag, which has none.
    pub env: &'static str,
    /// What it takes.
    pub takes: Takes,
    /// Its value's placeholder in `--help` (`DURATION`); `""` for a switch.
    pub value: &'static str,
    /// The value it has when neither the line nor a variable gives one,
    /// read as a given value would be; `""` for none.
    pub default: &'static str,
    /// What it is for, as `--help` writes it: paragraphs separated by a
    /// blank line, wrapped when written.
    pub help: &'static str,
}

impl fmt::Display for FlagSpec {
    /// The flag as an admin writes it: `--vault-address`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--{}", self.long)
    }
}

impl FlagSpec {
    /// The flag with its placeholder, as usage errors write it:
    /// `--timeout <DURATION>`.
    fn with_value(&self) -> String {
        if self.value.is_empty() {
            self.to_string()
        } else {
            format!("--{} <{}>", self.long, self.value)
        }
    }
}

/// An options struct that the command line fills: its flags, in `--help`
/// order, and how it reads them from what the line gave.
pub trait Flags: Sized {
    /// Its flags.
    const FLAGS: &'static [&'static FlagSpec];
    /// The heading of its section of `--help`; `""` for the shared options.
    const HEADING: &'static str = "";
    /// Reads its flags from `given` (their defaults where none was given).
    fn from_flags(given: &Given) -> Result<Self, Usage>;
}

/// A value enum: the words that name each of its values.
pub trait Choice: Sized + Copy + 'static {
    /// Each value's word, in `--help` order.
    const CHOICES: &'static [(&'static str, Self)];
}

/// A command line the parser refuses: one sentence, written after
/// `error: ` with the usage line; the exit status is 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage(String);

impl Usage {
    pub fn new(text: impl Into<String>) -> Self {
        Usage(text.into())
    }

    /// A value `flag` cannot take, and why.
    pub fn invalid(flag: &FlagSpec, value: &OsStr, why: impl fmt::Display) -> Self {
        Usage(format!(
            "invalid value '{}' for '{}': {why}",
            value.to_string_lossy(),
            flag.with_value()
        ))
    }
}

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a command line gave, flag by flag: its words' values, else its
/// variables' (a word wins). A list flag may have several.
#[derive(Debug, Default)]
pub struct Given {
    values: Vec<(&'static FlagSpec, OsString)>,
}

impl Given {
    /// Whether the line or a variable gave `flag` (its default is not
    /// given).
    pub fn has(&self, flag: &FlagSpec) -> bool {
        self.values.iter().any(|(f, _)| f.long == flag.long)
    }

    /// Every value given for `flag`, else its default.
    fn raw<'a>(&'a self, flag: &'a FlagSpec) -> impl Iterator<Item = &'a OsStr> + 'a {
        let given = self.has(flag);
        let default = (!given && !flag.default.is_empty()).then(|| OsStr::new(flag.default));
        self.values
            .iter()
            .filter(move |(f, _)| f.long == flag.long)
            .map(|(_, v)| v.as_os_str())
            .chain(default)
    }

    fn one<'a>(&'a self, flag: &'a FlagSpec) -> Option<&'a OsStr> {
        self.raw(flag).last()
    }

    /// `flag`'s value as text.
    pub fn text(&self, flag: &FlagSpec) -> Result<Option<String>, Usage> {
        self.one(flag)
            .map(|v| utf8(flag, v).map(str::to_string))
            .transpose()
    }

    /// `flag`'s value as a path, which need not be UTF-8.
    pub fn path(&self, flag: &FlagSpec) -> Option<PathBuf> {
        self.one(flag).map(PathBuf::from)
    }

    /// `flag`'s value read by `parse`, whose error says why it is refused.
    pub fn parsed<T, E: fmt::Display>(
        &self,
        flag: &FlagSpec,
        parse: impl Fn(&str) -> Result<T, E>,
    ) -> Result<Option<T>, Usage> {
        self.one(flag)
            .map(|v| parse(utf8(flag, v)?).map_err(|why| Usage::invalid(flag, v, why)))
            .transpose()
    }

    /// `flag`'s value as one of `T`'s words.
    pub fn choice<T: Choice>(&self, flag: &FlagSpec) -> Result<Option<T>, Usage> {
        self.parsed(flag, |text| {
            T::CHOICES
                .iter()
                .find(|(word, _)| *word == text)
                .map(|(_, value)| *value)
                .ok_or_else(|| {
                    let words: Vec<&str> = T::CHOICES.iter().map(|(w, _)| *w).collect();
                    format!("[possible values: {}]", words.join(", "))
                })
        })
    }

    /// A list flag's values, each split at its commas.
    pub fn list(&self, flag: &FlagSpec) -> Result<Vec<String>, Usage> {
        self.list_parsed(flag, |v| Ok::<_, String>(v.to_string()))
    }

    /// A list flag's values, each split at its commas and read by `parse`.
    pub fn list_parsed<T, E: fmt::Display>(
        &self,
        flag: &FlagSpec,
        parse: impl Fn(&str) -> Result<T, E>,
    ) -> Result<Vec<T>, Usage> {
        let mut out = Vec::new();
        for value in self.raw(flag) {
            for item in utf8(flag, value)?.split(',') {
                out.push(parse(item).map_err(|why| Usage::invalid(flag, OsStr::new(item), why))?);
            }
        }
        Ok(out)
    }

    /// Whether a switch is on.
    pub fn switch(&self, flag: &FlagSpec) -> bool {
        self.one(flag).is_some_and(|v| !is_off(v))
    }
}

/// The value of a flag that has a default, which [`Given`]'s readers
/// return when none was given; `None` only if the declaration lacks one.
pub fn defaulted<T>(flag: &FlagSpec, value: Option<T>) -> Result<T, Usage> {
    value.ok_or_else(|| Usage::new(format!("{flag} has no value and no default")))
}

fn utf8<'a>(flag: &FlagSpec, value: &'a OsStr) -> Result<&'a str, Usage> {
    value
        .to_str()
        .ok_or_else(|| Usage::invalid(flag, value, "it is not valid UTF-8"))
}

/// A switch's variable that turns it off (clap's reading of a boolean
/// variable, which the flags had before this parser).
fn is_off(value: &OsStr) -> bool {
    let Some(text) = value.to_str() else {
        return false;
    };
    ["0", "false", "no", "off", "n", "f"]
        .iter()
        .any(|off| text.eq_ignore_ascii_case(off))
}

/// What a command line asks for beside its flags.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    /// Nothing else: the binary serves the kubelet.
    Serve,
    /// A command: its name and the words after it that are not the
    /// command line's own (`global`) flags, which the command parses.
    Command(Vec<OsString>),
    /// `--help` or `-h`.
    Help,
    /// `--version` or `-V`.
    Version,
    /// A line the parser refuses.
    Mistake(Usage),
}

/// Reads `words` (the command line after the program's name) and then the
/// `variables` against the flags of `tables`, once each.
///
/// The words are `--flag VALUE`, `--flag=VALUE` and `--switch`, up to the
/// first word that is no flag: that is a command, and what follows it is
/// the command's, except the flags of `global`, which may come after it
/// (`cache list --cache-dir DIR`). A variable sets a flag of the tables
/// that the words did not give; an empty one is not set, and variables
/// that are not a flag's are not read. `--help` and `--version` end the
/// reading where they are; so does the first mistake, but what was read
/// up to it is returned too (the log format of its error).
pub fn parse<'v>(
    tables: &[&'static [&'static FlagSpec]],
    global: &[&'static FlagSpec],
    words: &[OsString],
    variables: impl IntoIterator<Item = (&'v OsStr, &'v OsStr)>,
) -> (Given, Asked) {
    let mut given = Given::default();
    let asked = read_words(tables, global, words, &mut given);
    for (name, value) in variables {
        let Some(name) = name.to_str().filter(|n| n.starts_with("WICP_")) else {
            continue;
        };
        let Some(flag) = tables.iter().flat_map(|t| t.iter()).find(|f| f.env == name) else {
            continue;
        };
        // A flag's variable is one name, so what it has is from the words.
        if value.is_empty() || given.has(flag) {
            continue;
        }
        given.values.push((flag, value.to_os_string()));
    }
    (given, asked)
}

fn read_words(
    tables: &[&'static [&'static FlagSpec]],
    global: &[&'static FlagSpec],
    words: &[OsString],
    given: &mut Given,
) -> Asked {
    let find = |name: &str| {
        tables
            .iter()
            .flat_map(|t| t.iter())
            .find(|f| f.long == name)
            .copied()
    };
    let mut command: Option<Vec<OsString>> = None;
    let mut words = words.iter();
    while let Some(word) = words.next() {
        let text = word.to_str();
        if command.is_none() {
            match text {
                Some("--help" | "-h") => return Asked::Help,
                Some("--version" | "-V") => return Asked::Version,
                _ => {}
            }
        }
        let flag = text
            .and_then(|t| t.strip_prefix("--"))
            .filter(|t| !t.is_empty());
        let (name, inline) = match flag {
            Some(flag) => match flag.split_once('=') {
                Some((name, value)) => (name, Some(OsStr::new(value))),
                None => (flag, None),
            },
            None => {
                match &mut command {
                    Some(rest) => rest.push(word.clone()),
                    None if text.is_some_and(|t| t.starts_with('-')) => {
                        return Asked::Mistake(unexpected(word));
                    }
                    None => command = Some(vec![word.clone()]),
                }
                continue;
            }
        };
        let spec = match &command {
            None => find(name),
            Some(_) => global.iter().find(|f| f.long == name).copied(),
        };
        let Some(spec) = spec else {
            match &mut command {
                Some(rest) => {
                    rest.push(word.clone());
                    continue;
                }
                None => return Asked::Mistake(unexpected(word)),
            }
        };
        let value = match value_of(spec, inline, &mut words) {
            Ok(value) => value,
            Err(usage) => return Asked::Mistake(usage),
        };
        if spec.takes != Takes::List && given.has(spec) {
            return Asked::Mistake(Usage::new(format!(
                "the argument '{}' cannot be used multiple times",
                spec.with_value()
            )));
        }
        given.values.push((spec, value));
    }
    match command {
        Some(rest) => Asked::Command(rest),
        None => Asked::Serve,
    }
}

/// The value of `spec`, given as `--flag=VALUE` (`inline`) or as the next
/// of `words`, which must not look like a flag; a switch's is `true`.
fn value_of<'w>(
    spec: &FlagSpec,
    inline: Option<&OsStr>,
    words: &mut impl Iterator<Item = &'w OsString>,
) -> Result<OsString, Usage> {
    match (spec.takes, inline) {
        (Takes::Switch, Some(_)) => Err(Usage::new(format!(
            "unexpected value for '{spec}', which takes none"
        ))),
        (Takes::Switch, None) => Ok(OsString::from("true")),
        (_, Some(value)) => Ok(value.to_os_string()),
        (_, None) => match words.next() {
            Some(value) if !value.as_encoded_bytes().starts_with(b"-") || value == "-" => {
                Ok(value.clone())
            }
            _ => Err(Usage::new(format!(
                "a value is required for '{}' but none was supplied",
                spec.with_value()
            ))),
        },
    }
}

fn unexpected(word: &OsStr) -> Usage {
    Usage::new(format!(
        "unexpected argument '{}' found",
        word.to_string_lossy()
    ))
}

/// Writes `flag`'s entry of `--help`: its name and placeholder, its help
/// wrapped to 80 columns, its variable and its default.
pub fn write_help(out: &mut String, flag: &FlagSpec) {
    use fmt::Write;
    let _ = writeln!(out, "      {}", flag.with_value());
    let mut paragraphs: Vec<String> = flag.help.split("\n\n").map(str::to_string).collect();
    let mut notes = Vec::new();
    if !flag.env.is_empty() {
        notes.push(format!("[env: {}=]", flag.env));
    }
    if !flag.default.is_empty() {
        notes.push(format!("[default: {}]", flag.default));
    }
    if !notes.is_empty() {
        paragraphs.push(notes.join(" "));
    }
    for (i, paragraph) in paragraphs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        wrap(out, paragraph, "          ", "          ", 80);
    }
    out.push('\n');
}

/// Writes `text` as lines of at most `width` columns (a longer word
/// stands alone), the first starting with `first` and the others with
/// `rest`.
pub fn wrap(out: &mut String, text: &str, first: &str, rest: &str, width: usize) {
    let mut line = String::new();
    let mut indent = first;
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > width {
            out.push_str(indent);
            out.push_str(&line);
            out.push('\n');
            line.clear();
            indent = rest;
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(indent);
        out.push_str(&line);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static ONE: FlagSpec = FlagSpec {
        long: "timeout",
        env: "WICP_TIMEOUT",
        takes: Takes::One,
        value: "DURATION",
        default: "",
        help: "How long.",
    };
    static LIST: FlagSpec = FlagSpec {
        long: "registry",
        env: "WICP_REGISTRY",
        takes: Takes::List,
        value: "PATTERN",
        default: "",
        help: "Where.",
    };
    static SWITCH: FlagSpec = FlagSpec {
        long: "keep",
        env: "WICP_KEEP",
        takes: Takes::Switch,
        value: "",
        default: "",
        help: "Keep it.",
    };
    static DEFAULTED: FlagSpec = FlagSpec {
        long: "kv-version",
        env: "WICP_KV_VERSION",
        takes: Takes::One,
        value: "VERSION",
        default: "2",
        help: "Which.",
    };
    static GLOBAL: FlagSpec = FlagSpec {
        long: "cache-dir",
        env: "WICP_CACHE_DIR",
        takes: Takes::One,
        value: "DIR",
        default: "",
        help: "The cache.",
    };
    static TABLE: &[&FlagSpec] = &[&ONE, &LIST, &SWITCH, &DEFAULTED];
    static GLOBALS: &[&FlagSpec] = &[&GLOBAL];

    fn read(words: &[&str], variables: &[(&str, &str)]) -> (Given, Asked) {
        let words: Vec<OsString> = words.iter().map(OsString::from).collect();
        let variables: Vec<(OsString, OsString)> = variables
            .iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)))
            .collect();
        parse(
            &[TABLE, GLOBALS],
            GLOBALS,
            &words,
            variables
                .iter()
                .map(|(n, v)| (n.as_os_str(), v.as_os_str())),
        )
    }

    fn mistake(words: &[&str]) -> String {
        match read(words, &[]).1 {
            Asked::Mistake(usage) => usage.to_string(),
            other => panic!("{words:?} was read: {other:?}"),
        }
    }

    #[test]
    fn words_and_variables_are_read_once_a_word_winning() {
        let (given, asked) = read(
            &[
                "--timeout",
                "10s",
                "--registry=a,b",
                "--registry",
                "c",
                "--keep",
            ],
            &[
                ("WICP_TIMEOUT", "20s"),
                ("WICP_KV_VERSION", "1"),
                ("PATH", "/bin"),
            ],
        );
        assert_eq!(asked, Asked::Serve);
        assert_eq!(given.text(&ONE).unwrap().as_deref(), Some("10s"));
        assert_eq!(given.list(&LIST).unwrap(), ["a", "b", "c"]);
        assert!(given.switch(&SWITCH));
        assert_eq!(given.parsed(&DEFAULTED, str::parse::<u8>).unwrap(), Some(1));
    }

    #[test]
    fn defaults_apply_only_when_nothing_was_given() {
        let (given, _) = read(&[], &[("WICP_TIMEOUT", ""), ("WICP_KEEP", "off")]);
        assert_eq!(
            given.text(&ONE).unwrap(),
            None,
            "an empty variable is unset"
        );
        assert_eq!(given.text(&DEFAULTED).unwrap().as_deref(), Some("2"));
        assert!(!given.has(&DEFAULTED));
        assert!(!given.switch(&SWITCH), "off turns a switch off");
        let (given, _) = read(&[], &[("WICP_KEEP", "yes")]);
        assert!(given.switch(&SWITCH));
    }

    #[test]
    fn a_command_takes_the_rest_but_the_global_flags() {
        let (given, asked) = read(
            &[
                "--timeout=1s",
                "cache",
                "list",
                "--cache-dir",
                "/d",
                "--all",
                "x",
            ],
            &[],
        );
        let rest: Vec<OsString> = ["cache", "list", "--all", "x"].map(OsString::from).to_vec();
        assert_eq!(asked, Asked::Command(rest));
        assert_eq!(given.path(&GLOBAL), Some(PathBuf::from("/d")));
        // After the command, help is the command's.
        let (_, asked) = read(&["explain", "--help"], &[]);
        assert_eq!(
            asked,
            Asked::Command(vec!["explain".into(), "--help".into()])
        );
        assert_eq!(read(&["--keep", "-h", "--nope"], &[]).1, Asked::Help);
        assert_eq!(read(&["--version"], &[]).1, Asked::Version);
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!(mistake(&["--nope"]), "unexpected argument '--nope' found");
        assert_eq!(mistake(&["-x"]), "unexpected argument '-x' found");
        assert_eq!(mistake(&["--"]), "unexpected argument '--' found");
        assert_eq!(
            mistake(&["--timeout"]),
            "a value is required for '--timeout <DURATION>' but none was supplied"
        );
        assert_eq!(
            mistake(&["--timeout", "--keep"]),
            "a value is required for '--timeout <DURATION>' but none was supplied"
        );
        assert_eq!(
            mistake(&["--timeout=1s", "--timeout", "2s"]),
            "the argument '--timeout <DURATION>' cannot be used multiple times"
        );
        assert_eq!(
            mistake(&["--keep=1"]),
            "unexpected value for '--keep', which takes none"
        );
        let (given, asked) = read(&["--timeout", "1s", "--nope"], &[]);
        assert!(matches!(asked, Asked::Mistake(_)));
        assert!(given.has(&ONE), "what was read before a mistake is kept");
    }

    #[test]
    fn values_are_refused_with_the_flag_named() {
        let (given, _) = read(&["--kv-version", "7"], &[]);
        let e = given
            .parsed(&DEFAULTED, |v| match v {
                "1" | "2" => Ok(v.len()),
                _ => Err("not 1 or 2"),
            })
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid value '7' for '--kv-version <VERSION>': not 1 or 2"
        );
    }

    #[test]
    fn help_wraps_and_names_the_variable_and_default() {
        let mut out = String::new();
        write_help(&mut out, &DEFAULTED);
        assert_eq!(
            out,
            "      --kv-version <VERSION>\n          Which.\n\n          [env: WICP_KV_VERSION=] [default: 2]\n\n"
        );
        let mut out = String::new();
        wrap(&mut out, &"word ".repeat(30), "- ", "  ", 20);
        assert!(out.lines().all(|l| l.len() <= 20), "{out}");
        assert!(out.starts_with("- word") && out.lines().skip(1).all(|l| l.starts_with("  word")));
    }
}
