//! What a walk of the node's file system finds, in the words of both
//! systems: what a path names ([`Kind`]), a file's identity, and a file
//! opened for reading. [`Host`](super::Host) (`host.rs`) answers with
//! these, over the primitives of `unix/host.rs` and `windows/host.rs`,
//! which produce them; this leaf keeps the two sides from importing each
//! other.

use std::fs::File;

/// A file's identity: device and inode (on Windows, volume serial number
/// and file index).
pub(crate) type Identity = (u64, u64);

/// What a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device: never read or written here.
    Other,
}

/// What a write does when something is already at its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Replace it, atomically (a link is replaced, never followed).
    Replace,
    /// Leave it and write nothing: the write answers `Ok(false)`.
    Keep,
}

/// A regular file read through [`Host::read_file`](super::Host::read_file).
#[derive(Clone, Debug)]
pub struct FileData {
    pub bytes: Vec<u8>,
    /// Its mode; on Windows 0600 for a private file and 0644 for any
    /// other, the mode a Linux install would record, so that a restore
    /// writes the same DACL kind.
    pub mode: u32,
}

/// A regular file a primitive opened for reading, with what the facade
/// needs to read it within a bound.
pub(crate) struct Opened {
    pub(crate) file: File,
    pub(crate) len: u64,
    pub(crate) mode: u32,
}
