//! The `loopguard` binary: parse the command line, set up logging, hand over to the command.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
