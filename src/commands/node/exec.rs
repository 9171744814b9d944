//! Running another program from the installer: always with a deadline, no
//! standard input, an environment reduced to `PATH`, and bounded output.
//! A program that does not finish in time is killed. `systemctl` runs in
//! the node's namespaces when the installer is in a pod's.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use wicp_base::error::{Error, Result};
use wicp_base::platform::Host;

/// Most bytes kept of a child's stdout or stderr.
const MAX_OUTPUT: u64 = 64 * 1024;

/// What a finished child said.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

/// Runs `program ARGS`, killed after `timeout`. The error is a sentence.
pub(crate) fn run(program: &Path, args: &[&str], timeout: Duration) -> Result<Finished, String> {
    let shown = program.display().to_string();
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    // Each pipe is read on its own thread and handed back over a channel,
    // so that a grandchild still holding a pipe open cannot hold us past
    // the deadline.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(p) = pipe {
                let _ = p.take(MAX_OUTPUT).read_to_end(&mut out);
            }
            let _ = tx.send(out);
        });
        rx
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{shown} did not finish within {}s and was killed",
                    timeout.as_secs()
                ));
            }
            Err(e) => return Err(format!("cannot wait for {shown}: {e}")),
        }
    };
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100))
    };
    Ok(Finished {
        status,
        stdout: stdout.recv_timeout(left()).unwrap_or_default(),
        stderr: stderr.recv_timeout(left()).unwrap_or_default(),
    })
}

/// Whether `systemctl` must run in PID 1's namespaces: the root is a
/// mounted host root and PID 1 is in another mount namespace.
fn from_another_mount_namespace(host: &Host, proc: &Path) -> bool {
    if host.is_local() {
        return false;
    }
    match (
        std::fs::read_link(proc.join("1/ns/mnt")),
        std::fs::read_link("/proc/self/ns/mnt"),
    ) {
        (Ok(one), Ok(me)) => one != me,
        // Cannot tell (no hostPID, or not allowed to look): entering would
        // fail the same way, so run systemctl here and let it say why.
        _ => false,
    }
}

/// Runs `systemctl ARGS` on the node and returns its stdout.
pub(crate) fn systemctl_output(
    host: &Host,
    proc: &Path,
    args: &[&str],
    timeout: Duration,
) -> Result<String> {
    let shown = format!("systemctl {}", args.join(" "));
    // From a pod: this binary again, as `node host-exec`, enters PID 1's
    // namespaces and runs the host's systemctl there (what `nsenter
    // --target 1 ...` did, which the installer image does not have). A
    // process of its own, since entering a mount namespace needs a
    // single-threaded one.
    let proc_arg;
    let (program, full): (PathBuf, Vec<&str>) = if from_another_mount_namespace(host, proc) {
        let exe = std::env::current_exe().map_err(|e| {
            Error::config(format!("cannot find this executable to run {shown}: {e}"))
        })?;
        proc_arg = proc.to_string_lossy().into_owned();
        let mut a = vec![
            "node",
            "host-exec",
            "--proc",
            proc_arg.as_str(),
            "--",
            "systemctl",
        ];
        a.extend_from_slice(args);
        (exe, a)
    } else {
        (PathBuf::from("systemctl"), args.to_vec())
    };
    let out = run(&program, &full, timeout).map_err(|e| {
        Error::config(format!("cannot run {shown}: {e}"))
            .fix("run on a systemd node (or from a privileged pod with hostPID)")
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Error::config(format!(
            "{shown} failed ({}): {}",
            out.status,
            stderr.trim().lines().last().unwrap_or("")
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_killed_at_the_deadline_and_a_grandchild_cannot_hold_us() {
        let started = Instant::now();
        let err = run(Path::new("sleep"), &["30"], Duration::from_millis(300)).unwrap_err();
        assert!(err.contains("killed"), "{err}");
        // The child exits at once; the grandchild keeps stdout open.
        let out = run(
            Path::new("sh"),
            &["-c", "sleep 30 & echo hi"],
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(out.status.success());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
