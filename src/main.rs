use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::FromArgMatches;

fn main() -> ExitCode {
    let parsed = throng::cli::command()
        .try_get_matches()
        .and_then(|m| throng::cli::Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let hint = match (e.kind(), e.get(ContextKind::InvalidArg)) {
                (ErrorKind::UnknownArgument, Some(ContextValue::String(flag))) => {
                    throng::cli::peer_flag(flag)
                }
                _ => None,
            };
            let Some(hint) = hint else { e.exit() };
            throng::errln!(
                "error: unexpected argument '{}'\n\n  tip: {hint}",
                flag_of(&e)
            );
            return ExitCode::from(throng::exit::USAGE);
        }
    };
    match throng::run(cli) {
        Ok(code) => code,
        Err(err) => {
            throng::errln!("throng: {err:#}");
            throng::exit_code(&err)
        }
    }
}

/// The flag clap did not know, as given.
fn flag_of(e: &clap::Error) -> String {
    match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => String::new(),
    }
}
