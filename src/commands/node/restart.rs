//! Restarting the kubelet and waiting, bounded, for it to be healthy.
//!
//! `systemctl restart UNIT`, run through `nsenter` into PID 1's namespaces
//! when this process sees the node through a mounted host root (a
//! privileged `hostPID` pod): there, `systemctl` must talk to the host's
//! systemd. Health is the kubelet's own `GET /healthz` (plain HTTP, `ok`,
//! on `healthzBindAddress:healthzPort`, 127.0.0.1:10248 by default). A bad
//! credential config shows as a crash loop, so the endpoint must answer
//! `ok` several times in a row, not once.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::host::Host;
use crate::error::{Error, Result};

/// Consecutive `ok` answers, one second apart, that count as healthy.
const HEALTHY_IN_A_ROW: u32 = 3;

/// Whether `systemctl` must run in PID 1's namespaces: the root is a
/// mounted host root and PID 1 is in another mount namespace.
fn through_nsenter(host: &Host) -> bool {
    if host.is_local() {
        return false;
    }
    match (
        std::fs::read_link("/proc/1/ns/mnt"),
        std::fs::read_link("/proc/self/ns/mnt"),
    ) {
        (Ok(one), Ok(me)) => one != me,
        // Cannot tell (no hostPID, or not allowed to look): nsenter would
        // fail the same way, so run systemctl here and let it say why.
        _ => false,
    }
}

/// Runs `systemctl ARGS` on the node.
pub fn systemctl(host: &Host, args: &[&str]) -> Result<()> {
    let mut command = if through_nsenter(host) {
        let mut c = Command::new("nsenter");
        c.args([
            "--target",
            "1",
            "--mount",
            "--uts",
            "--ipc",
            "--net",
            "--pid",
            "--",
            "systemctl",
        ]);
        c
    } else {
        Command::new("systemctl")
    };
    command.args(args);
    let shown = format!("systemctl {}", args.join(" "));
    let out = command.output().map_err(|e| {
        Error::config(format!("cannot run {shown}: {e}"))
            .fix("run on a systemd node (or from a privileged pod with hostPID and nsenter)")
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Error::config(format!(
            "{shown} failed ({}): {}",
            out.status,
            stderr.trim().lines().last().unwrap_or("")
        )));
    }
    Ok(())
}

/// One `GET /healthz`: `Ok(())` on `200` with body `ok`.
pub fn probe(address: &str, port: u16) -> std::result::Result<(), String> {
    let target = if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    };
    let addr = target
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no address")?;
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    // One write: a server that answers after the first bytes must not see
    // the rest of the request arrive on a closed connection.
    let request = format!("GET /healthz HTTP/1.0\r\nHost: {target}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .take(64 * 1024)
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let status = response.lines().next().unwrap_or("");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").trim();
    if status.split_whitespace().nth(1) == Some("200") && body == "ok" {
        Ok(())
    } else {
        Err(format!(
            "{} {}",
            status.trim(),
            body.chars().take(80).collect::<String>()
        ))
    }
}

/// Polls until healthy (several `ok` in a row) or `timeout`.
pub fn wait_healthy(
    address: &str,
    port: u16,
    timeout: Duration,
) -> std::result::Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut in_a_row = 0;
    let mut last = String::from("no answer yet");
    loop {
        match probe(address, port) {
            Ok(()) => {
                in_a_row += 1;
                if in_a_row >= HEALTHY_IN_A_ROW {
                    return Ok(());
                }
            }
            Err(e) => {
                in_a_row = 0;
                last = e;
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "http://{address}:{port}/healthz not healthy within {}s (last: {last})",
                timeout.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The unit that runs the kubelet on this node: the first of `units` that
/// has a unit file.
pub fn unit_to_restart(host: &Host, units: &[&'static str]) -> &'static str {
    units
        .iter()
        .copied()
        .find(|u| {
            super::systemd::UNIT_DIRS
                .iter()
                .any(|d| host.path(&Path::new(d).join(u)).is_file())
        })
        .or_else(|| units.first().copied())
        .unwrap_or("kubelet.service")
}
