//! The PACO back-end trait and its CPU implementation.
//!
//! A backend implements the two passes of the algorithm on its device: full-grid maps and the
//! `phi0s` subset. The CPU backend is always present; the device backend is
//! `GpuPaco<E>` (`paco/gpu/`, one portable kernel source in [`super::gpu_kernels`]), and
//! [`super::backend_for`] maps a device to one of them.
//!
//! The CPU data flow, which a device backend mirrors kernel by kernel (everything it needs is on
//! [`PacoJob`]: `cube()`, `angles()`, `geometry()`, `disk()`, `centred_template()`,
//! `template_table(q)`):
//!
//! 1. centre the cube per pixel (`c_t[p] = r_t[p] − μ[p]`, pixel-major `[p][t]`);
//! 2. per band of rows, the lag table `G_δ[p] = Σ_t c_t[p]·c_t[p+δ]` (|Δ| = 113 lags for R = 4);
//! 3. per pixel θ: gather `S_ij = G_{d_j−d_i}[θ+d_i]/T`, shrinkage ρ, `C = (1−ρ)S + ρ·diag S`
//!    (×½ for `Vip`), Cholesky (batched K×K, one work-group per pixel);
//! 4. without sub-pixel templates: `w = C⁻¹h0`, `q = h0·w`, `z_t = w·c_t` (a whitened
//!    matched-filter cube), then `a(φ0) = Σ_ℓ q[θ_ℓ]`, `b(φ0) = Σ_ℓ z_ℓ[θ_ℓ]`;
//! 5. with sub-pixel templates: pairs (φ0, ℓ) bucketed by θ_ℓ; per θ one forward substitution
//!    with 2P right-hand sides `[h_ℓ … | c_ℓ(θ) …]`, `a_c = |L⁻¹h|²`, `b_c = (L⁻¹h)·(L⁻¹c)`;
//!    contributions reduced per φ0 in a fixed order (no float atomics).
//!
//! Devices should use `bridge_core::oom::run_batched` with `SplitBatch` over bands/batches of
//! `batch_size` φ0 so an out-of-memory error splits the work instead of failing.

use bridge_core::Result;
use ndarray::Array2;

use super::cpu;
use super::job::PacoJob;
use super::settings::{Strategy, SubPixel};

/// One implementation of the PACO passes. Both compute on the job's working cube
/// ([`PacoJob::cube`], the caller's cube times a power of two when its scale is extreme) and
/// return a and b in the caller's units ([`PacoJob::ab_in_cube_units`]).
pub trait PacoBackend: Send + Sync {
    /// Backend name (`cpu`, `opencl`, `cuda`).
    fn name(&self) -> &'static str;
    /// a and b on the full output grid.
    fn ab_maps(&self, job: &PacoJob<'_>) -> Result<(Array2<f64>, Array2<f64>)>;
    /// a and b at explicit (y, x) positions.
    fn ab_at(&self, job: &PacoJob<'_>, phi0s: &[(usize, usize)]) -> Result<(Vec<f64>, Vec<f64>)>;
}

/// The rayon CPU backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuBackend;

impl PacoBackend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn ab_maps(&self, job: &PacoJob<'_>) -> Result<(Array2<f64>, Array2<f64>)> {
        let (mut a, mut b) =
            if job.params.subpixel == SubPixel::Off && job.params.strategy == Strategy::Fast {
                cpu::fast_maps(job)?
            } else {
                cpu::bucket_maps(job)?
            };
        job.ab_in_cube_units(&mut a, &mut b);
        Ok((a, b))
    }

    fn ab_at(&self, job: &PacoJob<'_>, phi0s: &[(usize, usize)]) -> Result<(Vec<f64>, Vec<f64>)> {
        let (mut a, mut b) = cpu::bucket_ab(job, &super::simd::Trajectories::Grid(phi0s))?;
        job.ab_in_cube_units(&mut a, &mut b);
        Ok((a, b))
    }
}
