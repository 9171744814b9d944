//! The last phase: is the node's set-up what it should be? [`doctor`] is
//! the command; [`checks`] is how a finding is recorded, [`observed`]
//! what the running kubelet and its files say, and [`mirrors`] where a
//! mirror's credential would be sent.

mod checks;
pub(crate) mod doctor;
mod mirrors;
mod observed;
