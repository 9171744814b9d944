//! Restarting the kubelet and waiting, bounded, for it to be healthy.
//!
//! `systemctl` runs in PID 1's namespaces (`node host-exec`, this binary
//! again) when this process sees the node through a mounted host root (a
//! privileged `hostPID` pod): there, `systemctl` must talk to the host's
//! systemd.
//!
//! Health is the kubelet's own `GET /healthz` (plain HTTP, `ok`, on
//! `healthzBindAddress:healthzPort`, 127.0.0.1:10248 by default), and the
//! kubelet listens in the *host's* network namespace. A DaemonSet pod has
//! its own, where that address answers nothing, so the probe runs on a
//! thread that has entered PID 1's network namespace (`setns`), found in
//! the host's `/proc` that `hostPID` gives us. We chose this over running
//! the pod with `hostNetwork`: only the probe needs the host's network,
//! and the pod then stays off it for everything else (its sleeping
//! container, DNS). A bad credential config shows as a crash loop, so the
//! endpoint must answer `ok` several times in a row, not once.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::commands::node::discover::Discovery;
use crate::commands::node::exec;
use wicp_base::error::{Error, Result};
use wicp_base::platform::Host;

/// Consecutive `ok` answers, one second apart, that count as healthy.
const HEALTHY_IN_A_ROW: u32 = 3;

/// How long `systemctl restart` may take (it waits for the start job: a
/// k3s server starts its control plane).
const RESTART_TIMEOUT: Duration = Duration::from_secs(180);

/// Runs `systemctl ARGS` on the node.
pub(crate) fn systemctl(host: &Host, proc: &Path, args: &[&str]) -> Result<()> {
    exec::systemctl_output(host, proc, args, RESTART_TIMEOUT).map(|_| ())
}

/// Restarts the kubelet the way its distribution runs it, and says what
/// was restarted: a Windows node's kubelet service through the Service
/// Control Manager, else its systemd unit.
pub(crate) fn restart_kubelet(host: &Host, d: &Discovery, proc: &Path) -> Result<String> {
    if let Some(service) = d.distro.windows_service() {
        wicp_base::platform::restart_service(service, RESTART_TIMEOUT).map_err(|e| {
            Error::config(format!("cannot restart the Windows service {service}: {e}"))
                .fix("run node install as SYSTEM (the HostProcess DaemonSet in node-install/windows/) or as an administrator; check the service with sc.exe query kubelet")
        })?;
        return Ok(format!("the Windows service {service}"));
    }
    if wicp_base::platform::WINDOWS {
        return Err(Error::config(format!(
            "install does not know which Windows service runs the kubelet on {}",
            d.distro
        ))
        .fix("restart the kubelet yourself (Restart-Service kubelet) and run node doctor"));
    }
    let unit = unit_to_restart(host, d.distro.units());
    systemctl(host, proc, &["restart", unit])?;
    Ok(unit.to_string())
}

/// One `GET /healthz`: `Ok(())` on `200` with body `ok`.
pub(crate) fn probe(address: &str, port: u16) -> std::result::Result<(), String> {
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

/// One probe from the host's network namespace.
pub(crate) fn probe_on_host(
    proc: Option<&Path>,
    address: &str,
    port: u16,
) -> std::result::Result<(), String> {
    match proc {
        Some(p) => wicp_base::platform::enter_host_network(p, || probe(address, port))?,
        None => probe(address, port),
    }
}

/// Polls until healthy (several `ok` in a row) or `timeout`, from the
/// host's network namespace.
pub(crate) fn wait_healthy(
    proc: Option<&Path>,
    address: &str,
    port: u16,
    timeout: Duration,
) -> std::result::Result<(), String> {
    let poll = || {
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
    };
    match proc {
        Some(p) => wicp_base::platform::enter_host_network(p, poll)?,
        None => poll(),
    }
}

/// The unit that runs the kubelet on this node: the first of `units` that
/// has a unit file.
pub(crate) fn unit_to_restart(host: &Host, units: &[&'static str]) -> &'static str {
    units
        .iter()
        .copied()
        .find(|u| {
            crate::commands::node::discover::systemd::UNIT_DIRS
                .iter()
                .any(|d| host.is_file(&Path::new(d).join(u)))
        })
        .or_else(|| units.first().copied())
        .unwrap_or("kubelet.service")
}
