//! Reads the kubelet's request from stdin, bounded in size and in time.
//!
//! The kubelet writes the request into a pipe and closes it; a writer that
//! never closes must not hang the plugin until the kubelet kills it, so the
//! read has a deadline. A blocking read cannot be given one without unsafe
//! code, and a thread that reads while the main thread waits costs more
//! than the rest of a cache hit (a clone, a stack, a second malloc arena).
//! So what stdin is decides how it is read ([`platform::stdin`]):
//!
//! - a pipe on Linux (the kubelet, `cmd | plugin`): non-blocking reads,
//!   waiting for more in `epoll` until the deadline ([`platform::read_pipe`]);
//! - a regular file (`plugin < request.json`): read straight through; a
//!   file has an end and never waits for a writer;
//! - anything else (a terminal, a socket, a device, and on Windows the
//!   kubelet's anonymous pipe, which cannot be waited on with a timeout): a
//!   reading thread, the way that works for every kind of file.

use std::fs::File;
use std::io::{self, Read};

use wicp_base::deadline::Deadline;
use wicp_base::platform::{self, Stdin};

/// What became of reading stdin.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Everything up to end of file, or the first `limit + 1` bytes when
    /// there is more than `limit` (the caller reports the excess).
    Complete(Vec<u8>),
    /// The deadline passed before end of file.
    TimedOut,
}

/// Reads stdin to its end, at most `limit + 1` bytes, by `deadline`.
pub fn read_within(limit: usize, deadline: &Deadline) -> io::Result<Outcome> {
    read_from(platform::stdin()?, limit, deadline)
}

/// [`read_within`] for any input (stdin in production; a pipe or file of
/// their own in tests).
pub(crate) fn read_from(input: Stdin, limit: usize, deadline: &Deadline) -> io::Result<Outcome> {
    match input {
        Stdin::File(file) => read_to_limit(file, limit).map(Outcome::Complete),
        Stdin::Pipe(pipe) => {
            let mut bytes = request_buffer(limit);
            let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
            Ok(if platform::read_pipe(pipe, &mut bytes, cap, deadline)? {
                Outcome::Complete(bytes)
            } else {
                Outcome::TimedOut
            })
        }
        Stdin::Other(file) => read_on_thread(file, limit, deadline),
    }
}

/// A buffer with room for a typical request from the start: a token and a
/// few annotations take 1 to 4 KiB, and growing from nothing costs a read
/// per doubling. Larger requests still grow it, up to `limit + 1` bytes.
fn request_buffer(limit: usize) -> Vec<u8> {
    Vec::with_capacity(limit.saturating_add(1).min(16 * 1024))
}

/// Reads `input` to its end, at most `limit + 1` bytes.
fn read_to_limit(input: impl Read, limit: usize) -> io::Result<Vec<u8>> {
    let mut bytes = request_buffer(limit);
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    input.take(cap).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads on a thread while this one waits until the deadline. When the
/// deadline passes, the caller returns and the process exits, thread and
/// all.
fn read_on_thread(input: File, limit: usize, deadline: &Deadline) -> io::Result<Outcome> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let _ = sender.send(read_to_limit(input, limit));
        })?;
    match receiver.recv_timeout(deadline.remaining()) {
        Ok(read) => read.map(Outcome::Complete),
        Err(_) => Ok(Outcome::TimedOut),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use std::io::Write;
    use std::os::fd::OwnedFd;
    use std::time::{Duration, Instant};
    use wicp_base::platform::test_support::stdin_of;

    fn pipe() -> (Stdin, File) {
        let (reader, writer) = io::pipe().unwrap();
        (
            stdin_of(OwnedFd::from(reader)),
            File::from(OwnedFd::from(writer)),
        )
    }

    fn deadline(ms: u64) -> Deadline {
        Deadline::after(Duration::from_millis(ms))
    }

    #[test]
    fn a_pipe_is_read_to_its_end_across_writes() {
        let (reader, mut writer) = pipe();
        let feeder = std::thread::spawn(move || {
            writer.write_all(b"{\"a\":").unwrap();
            std::thread::sleep(Duration::from_millis(100));
            writer.write_all(b"1}").unwrap();
        });
        let read = read_from(reader, 100, &deadline(5000)).unwrap();
        feeder.join().unwrap();
        assert_eq!(read, Outcome::Complete(b"{\"a\":1}".to_vec()));
    }

    #[test]
    fn a_pipe_larger_than_a_pipe_buffer_is_read_whole() {
        let (reader, mut writer) = pipe();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let feeder = std::thread::spawn(move || writer.write_all(&sent).unwrap());
        let read = read_from(reader, 1 << 20, &deadline(5000)).unwrap();
        feeder.join().unwrap();
        assert_eq!(read, Outcome::Complete(data));
    }

    #[test]
    fn a_pipe_stops_one_byte_past_the_limit() {
        let (reader, mut writer) = pipe();
        let feeder = std::thread::spawn(move || {
            // The reader stops early and the write then fails: ignore it.
            let _ = writer.write_all(&[b'x'; 200_000]);
        });
        let read = read_from(reader, 1000, &deadline(5000)).unwrap();
        assert_eq!(read, Outcome::Complete(vec![b'x'; 1001]));
        feeder.join().unwrap();
    }

    #[test]
    fn a_pipe_that_never_closes_times_out_at_the_deadline() {
        let (reader, mut writer) = pipe();
        writer.write_all(b"{\"half\":").unwrap();
        let started = Instant::now();
        let read = read_from(reader, 100, &deadline(300)).unwrap();
        let took = started.elapsed();
        assert_eq!(read, Outcome::TimedOut);
        assert!(took >= Duration::from_millis(250), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
        drop(writer);
    }

    #[test]
    fn the_pipe_is_left_blocking() {
        let (reader, writer) = io::pipe().unwrap();
        let mut writer = File::from(OwnedFd::from(writer));
        let reader = OwnedFd::from(reader);
        let kept = File::from(reader.try_clone().unwrap());
        assert_eq!(
            read_from(stdin_of(reader), 100, &deadline(100)).unwrap(),
            Outcome::TimedOut
        );
        // The same open pipe, read again: blocking, it waits for the write
        // below; left non-blocking, it would fail at once with WouldBlock.
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            let _ = sender.send((&kept).read(&mut byte).map_err(|e| e.kind()));
        });
        assert!(
            receiver.recv_timeout(Duration::from_millis(200)).is_err(),
            "the read returned before anything was written"
        );
        writer.write_all(b"x").unwrap();
        assert_eq!(
            receiver.recv_timeout(Duration::from_secs(5)).unwrap(),
            Ok(1)
        );
    }

    #[test]
    fn a_regular_file_is_read_whole_and_bounded() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(b"0123456789").unwrap();
        let open = || stdin_of(OwnedFd::from(File::open(file.path()).unwrap()));
        assert_eq!(
            read_from(open(), 100, &deadline(1000)).unwrap(),
            Outcome::Complete(b"0123456789".to_vec())
        );
        assert_eq!(
            read_from(open(), 4, &deadline(1000)).unwrap(),
            Outcome::Complete(b"01234".to_vec())
        );
    }

    #[test]
    fn a_device_is_read_on_a_thread() {
        let null = stdin_of(OwnedFd::from(File::open("/dev/null").unwrap()));
        assert_eq!(
            read_from(null, 100, &deadline(1000)).unwrap(),
            Outcome::Complete(Vec::new())
        );
        let zero = stdin_of(OwnedFd::from(File::open("/dev/zero").unwrap()));
        assert_eq!(
            read_from(zero, 10, &deadline(1000)).unwrap(),
            Outcome::Complete(vec![0; 11])
        );
    }
}
