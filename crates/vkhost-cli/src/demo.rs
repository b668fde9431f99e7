//! `vkhost demo pipeline`: the pipeline example (crates/vkhost/examples/pipeline), run from the
//! CLI. The work lives in the example's `demo.rs`, included here, so the CLI runs exactly what
//! the example shows: a registered host array in chunks, h2d → an affine kernel → d2h, serial,
//! double-buffered on two streams and zero-copy, each checked against the CPU.

#[path = "../../vkhost/examples/pipeline/demo.rs"]
mod pipeline;

use crate::devices::anyhow_free::Result;
use std::process::ExitCode;
use vkhost::Device;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    demo: Demo,
}

#[derive(clap::Subcommand)]
enum Demo {
    /// A registered host array in chunks through h2d → kernel (y = a·x + b) → d2h: serial,
    /// double-buffered on two streams, and zero-copy; each output checked against the CPU
    /// (exit 2 on a mismatch).
    Pipeline(PipelineArgs),
}

#[derive(clap::Args)]
struct PipelineArgs {
    /// The host array's size in MiB (at most 8192: the demo indexes u32 words with u32).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=pipeline::MAX_MIB as i64))]
    mib: u32,
    /// How many chunks the array is cut into.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1 << 16))]
    chunks: u32,
    /// Device index (default: the preferred device; VKHOST_DEVICE overrides).
    #[arg(long)]
    device: Option<usize>,
    /// Test hook: compare with a wrong CPU result, so every variant must fail (exit 2).
    #[arg(long, hide = true)]
    plant_mismatch: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    match a.demo {
        Demo::Pipeline(p) => {
            let dev = match p.device {
                Some(i) => {
                    crate::devices::check_index("--device", i, &vkhost::devices()?)?;
                    Device::open(i)?
                }
                None => Device::open_default()?,
            };
            let o = pipeline::Options { mib: p.mib as usize, chunks: p.chunks as usize, plant_mismatch: p.plant_mismatch };
            if pipeline::run(dev, &o)? {
                println!("all outputs match the CPU");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("FAIL: an output differs from the CPU's (or the validation layer reported errors)");
                Ok(ExitCode::from(2))
            }
        }
    }
}
