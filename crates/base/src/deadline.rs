//! One deadline per invocation.
//!
//! The kubelet kills the plugin after one minute, with no way to configure
//! it. Every upstream call, retry and lock wait takes its time from the same
//! deadline, so the plugin fails with a message naming the call in flight
//! instead of being killed silently with a half-finished exchange.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    start: Instant,
    at: Instant,
}

impl Deadline {
    pub fn after(budget: Duration) -> Self {
        let start = Instant::now();
        Deadline {
            start,
            at: start.checked_add(budget).unwrap_or(start),
        }
    }

    pub fn instant(&self) -> Instant {
        self.at
    }

    /// Time left, zero once passed.
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    pub fn expired(&self) -> bool {
        self.remaining().is_zero()
    }

    /// The whole budget, for messages ("deadline of 45s exceeded").
    pub fn budget(&self) -> Duration {
        self.at.saturating_duration_since(self.start)
    }
}
