use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = throng::cli::Cli::parse();
    match throng::run(cli) {
        Ok(code) => code,
        Err(err) => {
            throng::errln!("throng: {err:#}");
            throng::exit_code(&err)
        }
    }
}
