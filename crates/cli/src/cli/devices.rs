//! `arraybridge devices`: every device of every compiled-in backend, and why a backend is
//! unavailable.

use crate::cli::common::outln;
use arraybridge::core::backend::{BackendReport, DeviceInfo};

use super::common::Global;

/// Arguments of `arraybridge devices` (none of its own; `--json` prints JSON).
#[derive(Debug, clap::Args)]
pub struct Args {}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn caps(d: &DeviceInfo) -> String {
    let c = &d.capabilities;
    let mut v = Vec::new();
    if let Some((ma, mi)) = c.compute_capability {
        v.push(format!("sm_{ma}{mi}"));
    }
    if let Some(cu) = c.compute_units {
        v.push(format!("{cu} CUs"));
    }
    v.push(format!("fp16 {}", if c.fp16 { "yes" } else { "no" }));
    v.push(format!("fp64 {}", if c.fp64 { "yes" } else { "no" }));
    if let Some(m) = c.max_alloc {
        v.push(format!("max alloc {}", gib(m)));
    }
    v.join(", ")
}

/// Print the device table (or JSON).
pub fn run(_args: Args, g: Global) -> bridge_core::Result<()> {
    let reg = arraybridge::registry();
    let reports: &[BackendReport] = reg.reports();
    let budget = bridge_core::host::Budget::current();
    let (total, free) = (budget.total, budget.bytes());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if g.json {
        let v = serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "host": { "device": "cpu", "threads": cpus, "memory_total": total, "memory_free": free },
            "backends": reports,
        });
        return g.print_json(&v);
    }
    outln!(
        "{:<14} {:<34} {:>22}  capabilities",
        "DEVICE",
        "NAME",
        "MEMORY (free/total)"
    )?;
    let mem = |t: Option<u64>, f: Option<u64>| match (f, t) {
        (Some(f), Some(t)) => format!("{} / {}", gib(f), gib(t)),
        (None, Some(t)) => format!("? / {}", gib(t)),
        _ => "?".to_owned(),
    };
    outln!(
        "{:<14} {:<34} {:>22}  {cpus} threads, always available",
        "cpu",
        "host CPU (ndarray + rayon)",
        mem(total, free)
    )?;
    for r in reports {
        for d in &r.devices {
            outln!(
                "{:<14} {:<34} {:>22}  {}",
                d.device.to_string(),
                d.name.chars().take(34).collect::<String>(),
                mem(d.total_memory, d.free_memory),
                caps(d)
            )?;
        }
    }
    let unavailable: Vec<&BackendReport> =
        reports.iter().filter(|r| r.unavailable.is_some()).collect();
    if !unavailable.is_empty() {
        outln!()?;
        outln!("unavailable backends:")?;
        for r in unavailable {
            outln!(
                "  {:<8} {}",
                r.name,
                r.unavailable.as_deref().unwrap_or_default()
            )?;
        }
    }
    Ok(())
}
