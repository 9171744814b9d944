//! The one command-line parser on arbitrary words and variables: every
//! line is read or refused with a usage error, never a panic. Input: one
//! word a line, the program's name first; a line `WICP_NAME=value` is a
//! variable instead. Words need not be UTF-8.
#![no_main]
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use libfuzzer_sys::fuzz_target;
use wi_credential_provider::options::{self, CommandLine};
use wicp_base::flags::Asked;

fuzz_target!(|data: &[u8]| {
    let mut args: Vec<OsString> = Vec::new();
    let mut variables: Vec<(OsString, OsString)> = Vec::new();
    for line in data.split(|b| *b == b'\n') {
        match line.iter().position(|b| *b == b'=') {
            Some(at) if line.starts_with(b"WICP_") => variables.push((
                OsStr::from_bytes(&line[..at]).to_os_string(),
                OsStr::from_bytes(&line[at + 1..]).to_os_string(),
            )),
            _ => args.push(OsStr::from_bytes(line).to_os_string()),
        }
    }
    let (given, asked) = options::parse(
        &args,
        variables
            .iter()
            .map(|(n, v)| (n.as_os_str(), v.as_os_str())),
    );
    let _ = options::log_format_of(&given);
    if asked == Asked::Serve {
        let arg0 = args.first().cloned().unwrap_or_default();
        let _ = CommandLine::read(&arg0, &given);
    }
});
