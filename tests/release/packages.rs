//! The .deb and .rpm, installed and removed, and the image-bake examples
//! that install them.

use super::*;

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_deb_installs_its_files_only_and_removes_them_all() {
    let deb = artefact(&format!("wi-credential-provider_{VERSION}_amd64.deb"));
    let node = package_root();
    let root = node.path().to_str().unwrap();
    let root_flag = format!("--root={root}");
    install_use_remove(
        node.path(),
        &[
            &root_flag,
            "--force-script-chrootless",
            "--install",
            deb.to_str().unwrap(),
        ],
        &[
            &root_flag,
            "--force-script-chrootless",
            "--purge",
            "wi-credential-provider",
        ],
        "dpkg",
    );
    let cut_dir = tempfile::tempdir().unwrap();
    let cut = truncated(&deb, cut_dir.path());
    let before = snapshot(node.path());
    let out = run(
        "dpkg",
        &[
            &root_flag,
            "--force-script-chrootless",
            "--install",
            cut.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        !out.status.success(),
        "dpkg installed a cut package: {}",
        show(&out)
    );
    assert!(text(&out.stderr).contains("error"), "{}", show(&out));
    assert!(!node.path().join("usr/bin/wi-credential-provider").exists());
    assert!(outside_databases(changed(&before, &snapshot(node.path()))).is_empty());
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_rpm_installs_its_files_only_and_removes_them_all() {
    let rpm = artefact(&format!("wi-credential-provider-{VERSION}-1.x86_64.rpm"));
    let node = package_root();
    let root = node.path().to_str().unwrap();
    let db = ["--root", root, "--dbpath", "/var/lib/rpm"];
    assert_ok(
        &run("rpm", &[&db[..], &["--initdb"]].concat(), None),
        "rpm --initdb",
    );
    // An empty database provides nothing: the package requires nothing
    // (a static binary, and a Lua scriptlet rather than a /bin/sh one).
    install_use_remove(
        node.path(),
        &[&db[..], &["--install", rpm.to_str().unwrap()]].concat(),
        &[&db[..], &["--erase", "wi-credential-provider"]].concat(),
        "rpm",
    );
    let cut_dir = tempfile::tempdir().unwrap();
    let cut = truncated(&rpm, cut_dir.path());
    let before = snapshot(node.path());
    let out = run(
        "rpm",
        &[&db[..], &["--install", cut.to_str().unwrap()]].concat(),
        None,
    );
    assert!(
        !out.status.success(),
        "rpm installed a cut package: {}",
        show(&out)
    );
    assert!(!node.path().join("usr/bin/wi-credential-provider").exists());
    assert!(outside_databases(changed(&before, &snapshot(node.path()))).is_empty());
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_packer_example_verifies_installs_the_package_and_runs_node_install() {
    for file in [
        format!("wi-credential-provider-{VERSION}-1.x86_64.rpm"),
        format!("wi-credential-provider_{VERSION}_amd64.deb"),
    ] {
        let dir = bake_download();
        let node = package_root();
        let out = packer_install(dir.path(), &file, node.path());
        assert_ok(&out, &file);
        let said = text(&out.stdout);
        assert!(
            said.contains("signature and sha256 verified; installing"),
            "{said}"
        );
        assert!(
            said.contains("added wi-credential-provider-passthrough"),
            "{said}"
        );
        assert_eq!(
            sha256(&node.path().join("usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec/wi-credential-provider")),
            sha256(&artefact(&binary_name()))
        );

        // The same package, one byte changed: nothing installed.
        let dir = bake_download();
        flip_byte(&dir.path().join(&file), 2048);
        let node = package_root();
        let before = snapshot(node.path());
        let out = packer_install(dir.path(), &file, node.path());
        assert_refused(&out, "sha256 mismatch");
        assert!(
            changed(&before, &snapshot(node.path())).is_empty(),
            "{file}"
        );
    }
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_cloud_init_example_verifies_installs_the_package_and_runs_node_install() {
    let release = bake_download();
    let dir = tempfile::tempdir().unwrap();
    let node = package_root();
    let out = cloud_init_run(dir.path(), release.path(), node.path());
    assert_ok(&out, "cloud-init's script");
    let said = text(&out.stdout);
    assert!(said.contains("install.sh: OK"), "{said}");
    assert!(
        said.contains("signature and sha256 verified; installing"),
        "{said}"
    );
    assert!(node.path().join("usr/bin/wi-credential-provider").is_file());
    assert!(
        node.path()
            .join("etc/kubernetes/credential-provider.yaml")
            .is_file()
    );

    // A changed install.sh is caught before it runs.
    let release = bake_download();
    let script = release.path().join("install.sh");
    let mut changed_script = std::fs::read_to_string(&script).unwrap();
    changed_script.push_str("# changed\n");
    std::fs::write(&script, changed_script).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let node = package_root();
    let before = snapshot(node.path());
    let out = cloud_init_run(dir.path(), release.path(), node.path());
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("install.sh: FAILED"),
        "{}",
        show(&out)
    );
    assert!(changed(&before, &snapshot(node.path())).is_empty());
}
