//! What a node system that `node install` does not write to takes
//! instead, printed for its own tooling: a Talos machine-config patch
//! ([`talos`]), an OpenShift MachineConfig and MachineOSConfig
//! ([`openshift`]), and the RBAC the providers' audiences need ([`rbac`]).

pub(crate) mod openshift;
pub(crate) mod rbac;
pub(crate) mod talos;
