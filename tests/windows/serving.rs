//! Serving on Windows: the cache and its folder's DACL, a stdin that
//! never closes, and the names the kubelet finds the plugin by.

use super::*;

/// The cache on Windows: a miss exchanges and stores, a hit answers from
/// the folder without a call, another service account never gets the
/// first one's credential, and the folder the plugin creates is private.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn the_cache_hits_misses_and_keeps_service_accounts_apart() {
    use std::os::unix::fs::PermissionsExt;
    const IMAGE: &str = "contoso.azurecr.io/team/app";
    let mut app = App::trusting("team", "puller");
    app.federated.push(azure::FederatedCredential {
        issuer: support::token::ISSUER.into(),
        subject: "system:serviceaccount:team:other".into(),
        audience: azure::AUDIENCE.into(),
    });
    let entra = FakeEntra::start(app);
    let acr = FakeAcr::start("contoso.azurecr.io", &entra);
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    let cache = windows::path(&dir);
    let args = azure::flags(&entra, &acr, &[AZURE, &["--cache-dir", &cache]].concat());
    let puller = TokenSpec::new("team", "puller", azure::AUDIENCE).mint();
    let other = TokenSpec::new("team", "other", azure::AUDIENCE).mint();

    let first = exec(&args, &[], IMAGE, &puller, &AZURE_IDENTITY);
    let password = served(
        &first,
        IMAGE,
        "contoso.azurecr.io",
        acr.minted(),
        &puller,
    )["auth"]["contoso.azurecr.io"]["password"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(entra.server.request_count(), 1);
    assert!(dir.is_dir(), "the miss created the cache folder");

    let hit = exec(&args, &[], IMAGE, &puller, &AZURE_IDENTITY);
    served(
        &hit,
        IMAGE,
        "contoso.azurecr.io",
        vec![password.clone()],
        &puller,
    );
    assert_eq!(entra.server.request_count(), 1, "a hit makes no call");

    let theirs = exec(&args, &[], IMAGE, &other, &AZURE_IDENTITY);
    let response = theirs.response_for(IMAGE);
    assert_ne!(
        response["auth"]["contoso.azurecr.io"]["password"],
        password.as_str()
    );
    assert_eq!(entra.server.request_count(), 2, "another account is a miss");

    // The folder and its entries carry the descriptor the plugin asked
    // Windows for: access for SYSTEM, Administrators and the user running
    // the plugin only. Wine 8 keeps no DACL of its own: it turns the
    // descriptor into the Unix mode of the file, and a descriptor that
    // grants others nothing leaves no "other" bits (without it, the folder
    // would get the umask's 0755 and the files 0644).
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    for path in std::iter::once(dir.clone()).chain(entries) {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o007, 0, "{}: mode {mode:o}", path.display());
    }
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn a_cache_folder_everyone_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    const IMAGE: &str = "contoso.azurecr.io/team/app";
    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let acr = FakeAcr::start("contoso.azurecr.io", &entra);
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("open");
    std::fs::create_dir(&dir).unwrap();
    // Wine gives a folder with no stored descriptor the DACL its Unix mode
    // means: 0777 is an entry that lets Everyone (S-1-1-0) write.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let token = TokenSpec::new("team", "puller", azure::AUDIENCE).mint();
    let args = azure::flags(
        &entra,
        &acr,
        &[AZURE, &["--cache-dir", &windows::path(&dir)]].concat(),
    );
    let out = exec(&args, &[], IMAGE, &token, &AZURE_IDENTITY);
    let line = out.failure();
    support::assert_says(&line, &["writable by group or others", "S-1-1-0"]);
    assert_eq!(entra.server.request_count(), 0, "refused before any call");
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn a_stdin_that_never_closes_ends_at_the_timeout_with_json_logs() {
    use std::io::Write;
    let mut child = on_windows(|| {
        let (program, first) = windows::wrap(&windows::exe());
        support::plugin::piped(program)
            .args(first)
            .args([
                "--provider",
                "passthrough",
                "--registry",
                "r.test",
                "--timeout",
                "3s",
                "--log-format",
                "json",
            ])
            .spawn()
            .unwrap()
    });
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"{\"kind\":").unwrap();
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = started.elapsed();
    drop(stdin);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(20),
        "{took:?}"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    let errors: Vec<&Value> = lines.iter().filter(|l| l["level"] == "error").collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0]["message"].as_str().unwrap().contains("stdin"),
        "{stderr}"
    );
}

/// Round-5 item 6: the Windows kubelet finds `NAME.exe` for an entry
/// `NAME` (exec.LookPath tries PATHEXT), so check-config does too, and a
/// name in any case picks its provider, as Windows finds the file in any
/// case.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn windows_names_are_found_as_the_kubelet_finds_them() {
    let token = TokenSpec::new("team", "puller", "harbor.test").mint();
    let args = ["--registry", "harbor.test", "--audience", "harbor.test"];
    let stdin = request("harbor.test/team/app", Some(&token), &[]);
    let out = on_windows(|| {
        run_as(
            "WI-CREDENTIAL-PROVIDER-PASSTHROUGH",
            &args,
            &[],
            stdin.as_bytes(),
        )
    });
    served(
        &out,
        "harbor.test/team/app",
        "harbor.test",
        vec![token.clone()],
        &token,
    );

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: wi-credential-provider-passthrough\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n    matchImages: [\"harbor.test\"]\n    defaultCacheDuration: \"0s\"\n    args: [\"--registry\", \"harbor.test\"]\n    tokenAttributes:\n      serviceAccountTokenAudience: harbor.test\n      cacheType: Token\n      requireServiceAccount: true\n",
    )
    .unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let check = || {
        let (config, bin) = (windows::path(&config), windows::path(&bin));
        let out = on_windows(|| run(&["check-config", &config, "--bin-dir", &bin], &[], b""));
        format!("{}{}", report(&out), out.stderr)
    };
    assert!(check().contains("executable is missing"), "{}", check());
    std::fs::copy(
        windows::exe(),
        bin.join("wi-credential-provider-passthrough.exe"),
    )
    .unwrap();
    let said = check();
    assert!(
        !said.contains("executable is missing") && said.contains("0 errors"),
        "{said}"
    );
}
