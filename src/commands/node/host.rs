//! The node's file system as seen from here: `/` on the node itself, or a
//! mounted host root (`--root /host` in a DaemonSet, an image being built,
//! a test directory). Paths are kept as the kubelet sees them (absolute,
//! host-side) and joined to the root only to read or write.

use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct Host {
    root: PathBuf,
}

impl Host {
    pub fn new(root: &Path) -> Self {
        Host {
            root: root.to_path_buf(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the root is this machine's own `/`.
    pub fn is_local(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The local path of host path `p`.
    pub fn path(&self, p: &Path) -> PathBuf {
        let relative = p.strip_prefix("/").unwrap_or(p);
        self.root.join(relative)
    }
}
