//! The `loopguard` binary: parse the command line, set up logging, hand over to the command.

mod cli;
mod server;

/// glibc's malloc serialises the service's threads on its arena locks and spends a quarter of
/// an exact-path request in malloc and free (docs/PERFORMANCE.md#the-exact-path); mimalloc's
/// per-thread heaps do not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
