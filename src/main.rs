//! The `loopguard` binary: parse the command line, set up logging, hand over to the command.

mod cli;
mod server;

fn main() -> std::process::ExitCode {
    cli::main()
}
