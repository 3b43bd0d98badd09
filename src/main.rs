//! Command line of `mcp-state-guard`; everything else lives in the library.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "mcp-state-guard", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print one new key line (64 random hex characters) for `state.keys_file`.
    Keygen,
}

fn main() {
    match Cli::parse().command {
        Command::Keygen => println!("{}", *mcp_state_guard::token::generate_secret()),
    }
}
