//! `arraybridge devices`.

/// Arguments of `arraybridge devices`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Print the device table.
pub fn run(_args: Args) -> bridge_core::Result<()> {
    println!("(device listing not yet implemented)");
    Ok(())
}
