//! `vkhost`: list Vulkan devices, measure host↔device bandwidth, self-check the driver, run the
//! demos.

#![deny(unsafe_op_in_unsafe_fn)]

/// `println!` and `print!` (and `eprintln!`, `eprint!` below) for this crate: an output that
/// went away (`vkhost bench | head`) is not an error. std's macros panic there (Rust ignores SIGPIPE), which lost the run:
/// a backtrace, exit 101, and `--json`/`--csv`/`--plot`, written after the table, never written.
/// These drop what cannot be written and go on. (Defined before the modules: macro_rules are
/// scoped by text, so these shadow std's everywhere below.)
macro_rules! println {
    () => {
        $crate::stdout_write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout_write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

macro_rules! print {
    ($($arg:tt)*) => {
        $crate::stdout_write(format_args!($($arg)*))
    };
}

/// As `println!` above, for standard error (`vkhost bench 2>&1 | head` closes both).
macro_rules! eprintln {
    () => {
        $crate::stderr_write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stderr_write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

#[allow(unused_macros)] // none yet: here so that a first use does not get std's
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::stderr_write(format_args!($($arg)*))
    };
}

/// Writes to standard output, ignoring errors (a closed pipe): see `println!` above.
fn stdout_write(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_fmt(args);
}

/// Writes to standard error, ignoring errors: see `eprintln!` above.
fn stderr_write(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_fmt(args);
}

mod bench;
mod check;
mod cuda;
mod demo;
mod devices;
mod pages;
mod plot;
mod stats;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "vkhost", version, about = "Pinned and registered host memory for Vulkan: devices, bandwidth, self-check")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List Vulkan devices: memory, queues, host registration, memory-type choices.
    Devices(devices::Args),
    /// Measure host↔device bandwidth and latency by path (pinned, registered, pageable, bar).
    Bench(Box<bench::Args>),
    /// Self-test vkhost on this driver: every copy path, refusals, teardown; exit 1 on failure.
    Check(check::Args),
    /// Re-plot a saved `vkhost bench --json` file as SVG or PNG.
    Plot(plot::Args),
    /// Run a demo: `pipeline` (chunks of registered memory through copies and a kernel).
    Demo(demo::Args),
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // A usage error exits 1, as every other refused input does: clap's own code, 2, is what a
    // failed round-trip check exits with (`bench`, `--devices`), and a script must tell them apart.
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // --help and --version print to stdout and succeed; an output that went away is not
            // an error (as `println!` here).
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    let r = match cli.cmd {
        Cmd::Devices(a) => devices::run(a),
        Cmd::Bench(a) => bench::run(*a),
        Cmd::Check(a) => check::run(a),
        Cmd::Plot(a) => plot::run(a),
        Cmd::Demo(a) => demo::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vkhost: {e}");
            ExitCode::from(1)
        }
    }
}
