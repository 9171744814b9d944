//! The release's files: sums under a signature a user can check,
//! install.sh, the bill of materials, and refusals of a wrong architecture.

use super::*;

#[test]
#[ignore = "needs the release make test-release builds"]
fn every_artefact_is_summed_under_a_signature_a_user_can_check() {
    let dist = dist();
    let files: BTreeSet<String> = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for name in [
        binary_name(),
        format!("{}.cdx.json", binary_name()),
        format!("wi-credential-provider-{VERSION}-image.oci.tar"),
        format!("wi-credential-provider-{VERSION}-image.oci.tar.digest"),
        format!("wi-credential-provider-{VERSION}-talos-extension.oci.tar"),
        format!("wi-credential-provider-{VERSION}-talos-extension.oci.tar.digest"),
        format!("wi-credential-provider_{VERSION}_amd64.deb"),
        format!("wi-credential-provider-{VERSION}-1.x86_64.rpm"),
        "install.sh".to_string(),
        format!("{NAMESPACE}.pub"),
        "SHA256SUMS".to_string(),
        "SHA256SUMS.sig".to_string(),
    ] {
        assert!(files.contains(&name), "no {name} in {files:?}");
    }
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let summed: BTreeSet<String> = sums
        .lines()
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .unwrap()
                .trim_start_matches('*')
                .to_string()
        })
        .collect();
    let expected: BTreeSet<String> = files
        .iter()
        .filter(|f| !f.starts_with("SHA256SUMS"))
        .cloned()
        .collect();
    assert_eq!(summed, expected, "SHA256SUMS must cover every other file");

    // As docs/release.md has a user check it.
    let work = tempfile::tempdir().unwrap();
    let signers = allowed_signers(&dist.join(format!("{NAMESPACE}.pub")), work.path());
    let verify = Command::new("ssh-keygen")
        .args(["-Y", "verify", "-f"])
        .arg(&signers)
        .args(["-I", NAMESPACE, "-n", NAMESPACE, "-s"])
        .arg(dist.join("SHA256SUMS.sig"))
        .stdin(std::fs::File::open(dist.join("SHA256SUMS")).unwrap())
        .output()
        .unwrap();
    assert_ok(&verify, "ssh-keygen -Y verify");
    assert!(
        text(&verify.stdout).contains("Good \"wi-credential-provider-release\" signature"),
        "{}",
        show(&verify)
    );
    assert_ok(
        &run("sha256sum", &["--strict", "-c", "SHA256SUMS"], Some(&dist)),
        "sha256sum -c",
    );
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn install_sh_installs_only_what_the_release_key_signed() {
    let key = artefact(&format!("{NAMESPACE}.pub"));
    // The release as it is: installed.
    let good = download();
    let node = node_root();
    let out = signed_install(good.path(), &key, node.path());
    assert_ok(&out, "install.sh with the release's signature");
    assert!(
        text(&out.stdout).contains("signature and sha256 verified"),
        "{}",
        show(&out)
    );
    assert_eq!(
        sha256(&node.path().join(
            "usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec/wi-credential-provider"
        )),
        sha256(&artefact(&binary_name()))
    );

    let other_key = tempfile::tempdir().unwrap();
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(other_key.path().join("other"))
        .status()
        .unwrap();
    assert!(status.success());

    type Tamper = fn(&Path);
    let cases: [(&str, Tamper, bool, &str); 4] = [
        (
            "a changed binary",
            |d| flip_byte(&d.join(binary_name()), 4096),
            false,
            "sha256 mismatch",
        ),
        (
            "a changed binary with SHA256SUMS changed to match it",
            |d| {
                flip_byte(&d.join(binary_name()), 4096);
                let sums = std::fs::read_to_string(d.join("SHA256SUMS")).unwrap();
                let line = sums.lines().find(|l| l.ends_with(&binary_name())).unwrap();
                let forged = format!("{}  {}", sha256(&d.join(binary_name())), binary_name());
                std::fs::write(d.join("SHA256SUMS"), sums.replace(line, &forged)).unwrap();
            },
            false,
            "does not verify",
        ),
        (
            "a changed signature",
            |d| {
                let sig = std::fs::read_to_string(d.join("SHA256SUMS.sig")).unwrap();
                let mut lines: Vec<String> = sig.lines().map(String::from).collect();
                // The base64 body's third line: inside the signature blob.
                let line = &mut lines[3];
                let flipped: String = line
                    .chars()
                    .enumerate()
                    .map(|(i, c)| {
                        if i == 10 {
                            if c == 'A' { 'B' } else { 'A' }
                        } else {
                            c
                        }
                    })
                    .collect();
                *line = flipped;
                std::fs::write(d.join("SHA256SUMS.sig"), lines.join("\n") + "\n").unwrap();
            },
            false,
            "does not verify",
        ),
        ("another key", |_| {}, true, "does not verify"),
    ];
    for (what, tamper, other, says) in cases {
        let download = download();
        tamper(download.path());
        let node = node_root();
        let before = snapshot(node.path());
        let key = if other {
            other_key.path().join("other.pub")
        } else {
            key.clone()
        };
        let out = signed_install(download.path(), &key, node.path());
        assert_refused(&out, says);
        assert!(
            text(&out.stderr).contains("nothing was run"),
            "{what}: {}",
            show(&out)
        );
        assert!(
            changed(&before, &snapshot(node.path())).is_empty(),
            "{what}: the node changed"
        );
    }
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn image_and_packages_refuse_a_binary_for_another_architecture() {
    let out_dir = tempfile::tempdir().unwrap();
    let binary = artefact(&binary_name());
    let archive = out_dir.path().join("image.tar");
    let wrong = format!("arm64={}", binary.display());
    let dynamic = "amd64=/bin/true".to_string();
    for pair in [&wrong, &dynamic] {
        let out = run(
            "bash",
            &["scripts/image.sh", VERSION, archive.to_str().unwrap(), pair],
            Some(&repo()),
        );
        assert_refused(&out, "is not a static linux/");
        assert!(!archive.exists(), "an image was written for {pair}");
        let out = run(
            "bash",
            &[
                "scripts/package.sh",
                VERSION,
                out_dir.path().to_str().unwrap(),
                pair,
            ],
            Some(&repo()),
        );
        assert_refused(&out, "is not a static linux/");
        assert_eq!(
            std::fs::read_dir(out_dir.path()).unwrap().count(),
            0,
            "a package was written for {pair}"
        );
    }
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_binary_lists_its_crates_and_the_bill_of_materials_agrees() {
    let (root, crates) = embedded_crates(&artefact(&binary_name()));
    assert_eq!(root, format!("wi-credential-provider {VERSION}"));
    for name in ["rustls", "aws-lc-rs", "clap", "serde_json"] {
        assert!(
            crates.contains(&(name.to_string(), locked(name))),
            "{name} {} is not in the embedded list",
            locked(name)
        );
    }
    let bom: Value = serde_json::from_slice(
        &std::fs::read(artefact(&format!("{}.cdx.json", binary_name()))).unwrap(),
    )
    .unwrap();
    assert_eq!(bom["bomFormat"], "CycloneDX");
    assert_eq!(bom["specVersion"], "1.5");
    assert_eq!(
        bom["metadata"]["component"]["name"],
        "wi-credential-provider"
    );
    assert_eq!(bom["metadata"]["component"]["version"], VERSION);
    let listed: BTreeSet<(String, String)> = bom["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["version"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let missing: Vec<_> = crates.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "compiled into the binary but not in its bill of materials: {missing:?}"
    );
}
