//! The on-disk credential cache, through the built binary as the kubelet
//! runs it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use support::plugin::{request, run};
use support::token::TokenSpec;

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn passthrough_tokens_are_never_cached() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    let token = TokenSpec::new("team", "puller", "harbor.test").mint();
    let run = run(
        &[
            "--provider",
            "passthrough",
            "--registry",
            "harbor.test",
            "--audience",
            "harbor.test",
            "--cache-dir",
            arg(&dir),
        ],
        &[],
        request("harbor.test/team/app", Some(&token), &[]).as_bytes(),
    );
    assert_eq!(
        run.response()["auth"]["harbor.test"]["password"],
        token.as_str()
    );
    assert!(!dir.exists(), "passthrough must not even open the cache");
}

#[test]
fn cache_commands_need_the_directory() {
    for args in [&["cache", "list"][..], &["cache", "purge", "--all"]] {
        let run = run(args, &[], b"");
        assert_eq!(run.code, Some(2), "{}", run.stderr);
        assert!(run.stdout.is_empty());
        assert!(
            run.stderr
                .contains("pass --cache-dir DIR or set WICP_CACHE_DIR"),
            "{}",
            run.stderr
        );
    }
    // purge must be told what to remove.
    let run = run(&["cache", "purge", "--cache-dir", "/nonexistent"], &[], b"");
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--namespace"), "{}", run.stderr);
}

#[test]
fn cache_commands_on_a_missing_and_an_empty_directory() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    let run_list = || run(&["cache", "list"], &[("WICP_CACHE_DIR", arg(&dir))], b"");
    let missing = run_list();
    assert_eq!(missing.code, Some(0), "{}", missing.stderr);
    assert_eq!(
        String::from_utf8(missing.stdout).unwrap(),
        format!("no cache at {}: nothing cached\n", dir.display())
    );
    assert!(!dir.exists(), "listing must not create the directory");

    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let empty = run_list();
    assert_eq!(empty.code, Some(0), "{}", empty.stderr);
    let text = String::from_utf8(empty.stdout).unwrap();
    assert!(text.starts_with("KEY "), "{text}");
    assert!(
        text.ends_with(&format!("0 entries in {}\n", dir.display())),
        "{text}"
    );
}

#[test]
fn cache_commands_refuse_an_unsafe_directory() {
    let parent = tempfile::tempdir().unwrap();
    let real = parent.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = parent.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();

    let run = run(
        &["cache", "purge", "--all", "--cache-dir", arg(&link)],
        &[],
        b"",
    );
    let line = run.failure();
    assert!(line.contains("is a symbolic link"), "{line}");

    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = support::plugin::run(&["cache", "list", "--cache-dir", arg(&real)], &[], b"");
    let line = run.failure();
    assert!(
        line.contains("writable by group or others (mode 0777)"),
        "{line}"
    );
    assert!(line.contains("chmod 0700"), "{line}");
}
