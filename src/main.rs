//! The kubelet execs this binary once per image pull; everything lives in
//! the library so it can be tested without a process.

fn main() -> std::process::ExitCode {
    wi_credential_provider::cli::main()
}
