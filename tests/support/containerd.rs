//! A real container runtime for end-to-end tests: Debian's `containerd`, with `ctr` as its
//! client.
//!
//! On a node the kubelet hands the plugin's username and password to containerd through CRI,
//! and containerd logs in to the registry itself. Its login is not skopeo's: with credentials
//! it first POSTs an OAuth2 password grant to the token realm (`grant_type=password`,
//! `username`, `password`, `client_id=containerd-client`, `service`, `scope`;
//! remotes/docker/auth/fetch.go, `FetchTokenWithOAuth`) and only when that POST is answered
//! 400, 401, 404, or 405 (405 only with a username) does it fall back to `GET realm` with Basic
//! credentials (remotes/docker/authorizer.go, `doBearerAuth`; containerd/containerd, the 1.6
//! series Debian ships). A registry without a token service gets Basic credentials directly
//! (`doBasicAuth`). `ctr images pull` runs that same remotes/docker code in the client and
//! stores and unpacks the image through the daemon, so it is the CRI path minus the gRPC hop.
//!
//! Each [`Containerd`] is private: its own root, state and temp directories, socket and config,
//! the `native` snapshotter, and every plugin that would touch the host (CRI, other
//! snapshotters, runtimes and task service, cgroup monitor, tracing, `opt`) disabled. Dropping
//! it stops the daemon and removes its directories, also when the test panics.

// Test support, not production code: a panic is how it reports a broken environment to the
// test that uses it, and stderr is where Drop says what it could not clean up.
#![allow(
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::print_stderr
)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long containerd may take to answer on its socket after being spawned.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a stopping containerd gets after `SIGTERM` before `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound for every ctr command (`ctr --timeout`), so a hung registry fails the test.
const CTR_TIMEOUT: &str = "60s";
/// The containerd namespace the tests' images live in.
const NAMESPACE: &str = "wicp-test";
const INSTALL_HINT: &str = "run `bash .ci/run`, or `apt-get install -y containerd`";

/// Plugins a private, unprivileged-looking containerd must not load: CRI (not needed, and it
/// would want CNI and the host's runtime), the snapshotters other than `native` (overlayfs and
/// friends need kernel support and mount the host's filesystems), everything that runs or
/// monitors containers, tracing, and `opt` (it writes under /opt).
const DISABLED_PLUGINS: &[&str] = &[
    "io.containerd.grpc.v1.cri",
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.overlayfs",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.runtime.v1.linux",
    "io.containerd.runtime.v2.task",
    "io.containerd.monitor.v1.cgroups",
    "io.containerd.service.v1.tasks-service",
    "io.containerd.grpc.v1.tasks",
    "io.containerd.internal.v1.restart",
    "io.containerd.internal.v1.opt",
    "io.containerd.internal.v1.tracing",
    "io.containerd.tracing.processor.v1.otlp",
];

/// A running private containerd. Keep it in a local of the test, never in a `static` (statics
/// are not dropped).
pub struct Containerd {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
    /// Root, state, temp, socket, config and log; removed on drop.
    dir: Option<TempDir>,
}

impl Containerd {
    /// Starts containerd and waits until it answers `ctr version` on its socket.
    ///
    /// # Panics
    /// With containerd's log, if it is not installed, exits, or does not answer in time: a
    /// runtime that cannot run here fails the test, it never skips it.
    pub fn start() -> Self {
        Self::start_with(DISABLED_PLUGINS)
    }

    /// [`Containerd::start`] that can also run containers (runc through the
    /// runtime v2 shim, and the task service), for the tests that run an image
    /// as a node would: the node image's install (tests/release.rs).
    pub fn start_runner() -> Self {
        let runs = [
            "io.containerd.runtime.v1.linux",
            "io.containerd.runtime.v2.task",
            "io.containerd.monitor.v1.cgroups",
            "io.containerd.service.v1.tasks-service",
            "io.containerd.grpc.v1.tasks",
            "io.containerd.internal.v1.restart",
        ];
        let disabled: Vec<&str> = DISABLED_PLUGINS
            .iter()
            .copied()
            .filter(|p| !runs.contains(p))
            .collect();
        super::require_tools("containerd", INSTALL_HINT, &["runc"]);
        Self::start_with(&disabled)
    }

    fn start_with(disabled: &[&str]) -> Self {
        super::require_tools("containerd", INSTALL_HINT, &["containerd", "ctr"]);
        // Under /tmp, not $TMPDIR: a unix socket path must fit in 108 bytes.
        let dir = tempfile::Builder::new()
            .prefix("wicp-containerd-")
            .tempdir_in("/tmp")
            .expect("create containerd tempdir");
        let root = dir.path();
        let socket = root.join("containerd.sock");
        let config = config_toml(root, &socket, disabled);
        let config_path = root.join("config.toml");
        fs::write(&config_path, config).expect("write containerd config");
        let log = root.join("containerd.log");
        let log_file = fs::File::create(&log).expect("create containerd log");
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&config_path)
            .args(["--log-level", "info"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TMPDIR", root.join("tmp"))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone log handle"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run containerd ({e}); {INSTALL_HINT}"));
        // From here on, Drop stops it whatever happens.
        let mut containerd = Self {
            child,
            socket,
            log,
            dir: Some(dir),
        };
        if let Err(why) = containerd.wait_until_serving() {
            panic!(
                "containerd did not come up: {why}\n--- containerd log ---\n{}",
                containerd.log()
            );
        }
        containerd
    }

    /// `ctr images pull --user USERNAME:PASSWORD --plain-http IMAGE` (the registry serves plain
    /// HTTP on 127.0.0.1), then the image's digest as containerd recorded it. `Err` carries
    /// ctr's output.
    ///
    /// ctr splits `--user` at the first `:`, so `username` must not contain one (no plugin
    /// username does: `serviceaccount`, `AWS`, the null GUID, `oauth2accesstoken`).
    pub fn pull(&self, image: &str, username: &str, password: &str) -> Result<String, String> {
        self.pull_with(image, username, password, &[])
    }

    /// Asserts that containerd refuses `wrong` (a 401 from the registry,
    /// tried first so that nothing is in containerd's store yet), then
    /// pulls `image` as `username` with `password` and gets `digest`.
    pub fn assert_pulls_only_with(
        &self,
        image: &str,
        username: &str,
        (password, wrong): (&str, &str),
        digest: &str,
    ) {
        let err = self
            .pull(image, username, wrong)
            .expect_err("a wrong password must not pull");
        assert!(err.contains("401 Unauthorized"), "{err}");
        let pulled = self
            .pull(image, username, password)
            .unwrap_or_else(|e| panic!("containerd refused the plugin's credentials:\n{e}"));
        assert_eq!(pulled, digest);
    }

    /// [`Containerd::pull`] with the registry hosts configured by
    /// `hosts_dir` (`<dir>/<registry host>/hosts.toml`, containerd's
    /// `config_path` layout): mirrors, and the upstream fallback. ctr offers
    /// the login to every host that challenges, as the CRI plugin does with
    /// the kubelet's (server-less) credential.
    pub fn pull_via_hosts(
        &self,
        image: &str,
        username: &str,
        password: &str,
        hosts_dir: &Path,
    ) -> Result<String, String> {
        let dir = hosts_dir.to_str().expect("a UTF-8 hosts dir");
        self.pull_with(image, username, password, &["--hosts-dir", dir])
    }

    fn pull_with(
        &self,
        image: &str,
        username: &str,
        password: &str,
        extra: &[&str],
    ) -> Result<String, String> {
        assert!(!username.contains(':'), "ctr cannot pass {username:?}");
        let user = format!("{username}:{password}");
        let mut args = vec![
            "images",
            "pull",
            "--plain-http",
            "--snapshotter",
            "native",
            "--user",
            &user,
        ];
        args.extend_from_slice(extra);
        args.push(image);
        let out = self.ctr(&args);
        if !out.status.success() {
            return Err(output_text(&out));
        }
        let listed = self.ctr(&["images", "ls"]);
        let table = output_text(&listed);
        // REF TYPE DIGEST SIZE PLATFORMS LABELS
        table
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|cols| cols.first() == Some(&image))
            .and_then(|cols| cols.get(2).map(|d| (*d).to_owned()))
            .ok_or_else(|| format!("ctr pulled, but {image} is not listed:\n{table}"))
    }

    /// The root directory, for tests of this harness.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), TempDir::path)
    }

    /// containerd's process id, for tests of this harness.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// containerd's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `ctr images import --base-name NAME ARCHIVE` (an OCI archive), then
    /// the imported reference (`NAME:TAG`) and its digest as containerd
    /// recorded them, with the platforms it lists.
    pub fn import(&self, archive: &Path, name: &str) -> (String, String, String) {
        let out = self.ctr(&[
            "images",
            "import",
            "--snapshotter",
            "native",
            "--base-name",
            name,
            archive.to_str().expect("UTF-8 path"),
        ]);
        assert!(
            out.status.success(),
            "ctr images import: {}",
            output_text(&out)
        );
        let listed = output_text(&self.ctr(&["images", "ls"]));
        // REF TYPE DIGEST SIZE PLATFORMS LABELS, SIZE in two words ("4.6 MiB").
        listed
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|cols| {
                cols.first()
                    .is_some_and(|r| r.starts_with(&format!("{name}:")))
            })
            .map(|cols| (cols[0].to_owned(), cols[2].to_owned(), cols[5].to_owned()))
            .unwrap_or_else(|| panic!("ctr imported, but no {name} is listed:\n{listed}"))
    }

    /// ctr with this containerd's socket and namespace, bounded in time.
    pub fn ctr(&self, args: &[&str]) -> Output {
        Command::new("ctr")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", NAMESPACE, "--timeout", CTR_TIMEOUT])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run ctr ({e}); {INSTALL_HINT}"))
    }

    fn wait_until_serving(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("it exited with {status}"));
            }
            if self.socket.exists() && self.ctr(&["version"]).status.success() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no answer on {} within {STARTUP_TIMEOUT:?}",
                    self.socket.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then SIGKILL if it lingers; always reaped.
    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // procps' kill(1): the crate forbids unsafe code, so no kill(2) here. The child is
            // not reaped yet, so its pid cannot have been reused.
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + STOP_TIMEOUT;
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop();
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_owned();
            if let Err(e) = dir.close() {
                // Not a panic: Drop may run during a panic already. Say it loudly instead.
                eprintln!(
                    "warning: cannot remove containerd's directory {}: {e}",
                    path.display()
                );
            }
        }
    }
}

/// containerd's config: everything under `root`, nothing shared with a host containerd.
fn config_toml(root: &Path, socket: &Path, disabled: &[&str]) -> String {
    let quote = |p: &Path| {
        let s = p.to_str().expect("UTF-8 temp path");
        assert!(!s.contains(['"', '\\']), "unexpected temp path {s}");
        format!("\"{s}\"")
    };
    let disabled: Vec<String> = disabled.iter().map(|p| format!("\"{p}\"")).collect();
    let ttrpc = root.join("containerd.sock.ttrpc");
    fs::create_dir_all(root.join("tmp")).expect("create containerd temp dir");
    format!(
        "version = 2\n\
         root = {root}\n\
         state = {state}\n\
         temp = {temp}\n\
         disabled_plugins = [{disabled}]\n\
         [grpc]\n  address = {socket}\n\
         [ttrpc]\n  address = {ttrpc}\n\
         [debug]\n  address = \"\"\n\
         [metrics]\n  address = \"\"\n",
        root = quote(&root.join("root")),
        state = quote(&root.join("state")),
        temp = quote(&root.join("tmp")),
        disabled = disabled.join(", "),
        socket = quote(socket),
        ttrpc = quote(&ttrpc),
    )
}

fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
